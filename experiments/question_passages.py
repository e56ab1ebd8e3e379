#!/usr/bin/env python
"""Question-passage pairs for `distill --passages` (issue 34), from text that is never evaluated here:

    python experiments/question_passages.py OUT_DIR [--per-source 250] [--seed 2]

OUT_DIR/<lang>.tsv holds `question<TAB>passage` lines (no prompts: distill adds the teacher's own):
- TyDiQA-GoldP: each question with its own context, from the English training file and the dev files of its
  9 languages (ar bn en fi id ko ru sw te). Only questions and contexts are read; the answers never are, so the
  dev files' missing answers do not matter. MLQA, the retrieval benchmark, is not read at all.
- XNLI test, the 15 languages: 3, 4 or 5 consecutive distinct premises joined into a passage, one hypothesis of one
  of them as its question (XNLI's zero-shot scores are on dev; test is the recipe's parallel text already).

Each source gives at most `--per-source` pairs a language, drawn with a fixed seed: the teacher embeds every
question and passage once before training (`--target-cache`), and passages of up to 256 tokens are the costly part
of that.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from running_text import SHARED, XNLI_LANGS

SIZES = (3, 4, 5)  # premises per XNLI passage


def tydiqa(shared: Path = SHARED) -> dict[str, list[tuple[str, str]]]:
    """Per language, every (question, its context) of TyDiQA-GoldP's English train and its dev files."""
    folder = shared / "tydiqa"
    found: dict[str, list[tuple[str, str]]] = {}
    for path in [folder / "tydiqa.goldp.en.train.json", *sorted(folder.glob("tydiqa.goldp.*.dev.json"))]:
        lang = path.name.split(".")[2]
        for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
            for paragraph in article["paragraphs"]:
                context = " ".join(paragraph["context"].split())
                for qa in paragraph["qas"]:
                    found.setdefault(lang, []).append((" ".join(qa["question"].split()), context))
    return found


def xnli(seed: int, shared: Path = SHARED) -> dict[str, list[tuple[str, str]]]:
    """Per XNLI language, consecutive premises of test joined into passages, each with one of their hypotheses."""
    found: dict[str, list[tuple[str, str]]] = {}
    for lang in XNLI_LANGS:
        hypotheses: dict[str, list[str]] = {}
        for line in (shared / "xnli" / f"test-{lang}.tsv").read_text(encoding="utf-8").splitlines():
            fields = line.split("\t")
            if len(fields) >= 2 and fields[0].strip() and fields[1].strip():
                hypotheses.setdefault(fields[0].strip(), []).append(fields[1].strip())
        premises, rng, start = list(hypotheses), random.Random(seed), 0
        while start < len(premises):
            chunk = premises[start : start + rng.choice(SIZES)]
            start += len(chunk)
            question = rng.choice(hypotheses[rng.choice(chunk)])
            found.setdefault(lang, []).append((question, " ".join(chunk)))
    return found


def write(out: Path, per_source: int, seed: int, shared: Path = SHARED) -> dict[str, int]:
    """Write OUT/<lang>.tsv; the pairs per language."""
    by_lang: dict[str, list[tuple[str, str]]] = {}
    for source in (tydiqa(shared), xnli(seed, shared)):
        for lang, rows in sorted(source.items()):
            clean = [(q, p) for q, p in rows if q and p and "\t" not in q + p]
            by_lang.setdefault(lang, []).extend(random.Random(seed).sample(clean, min(per_source, len(clean))))
    out.mkdir(parents=True, exist_ok=True)
    for lang, rows in by_lang.items():
        (out / f"{lang}.tsv").write_text("".join(f"{q}\t{p}\n" for q, p in rows), encoding="utf-8")
    return {lang: len(rows) for lang, rows in sorted(by_lang.items())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-source", type=int, default=250, help="pairs per source and language (250)")
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    counts = write(args.out, args.per_source, args.seed)
    print(f"{sum(counts.values()):,} pairs in {len(counts)} languages: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
