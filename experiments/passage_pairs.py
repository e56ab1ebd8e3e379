#!/usr/bin/env python
"""docs/benchmarks/retrieval.md sections 18-18d (the pairs of issue 34's runs): an answered experiment.

`distill --parallel` pairs for issue 34's retrieval experiment (docs/BENCHMARKS.md section 18), with the prompts
written into the text so that one run mixes both prompts (run it with `--parallel-prefix ""`):

    python experiments/passage_pairs.py OUT_DIR [--queries 900] [--passages 350] [--plain 1250]

Per language of XNLI test's row-parallel files (never an evaluated split here; MLQA is not read at all):
- query pairs: an English sentence and its translation, both under "query: " (the recipe's pairs);
- passage pairs: 3, 4 or 5 consecutive distinct premises joined (starting at every second premise, so passages
  overlap), English and its translation, both under "passage: ";
OUT_DIR/qp/en-XX.tsv holds `--queries` query pairs and `--passages` passage pairs drawn with a fixed seed;
OUT_DIR/q/en-XX.tsv the baseline: `--plain` query pairs without a prompt in the text (the first `--queries` of them
the same as qp's), for the recipe's own prefix.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from running_text import SHARED, XNLI_LANGS, _xnli_sentences  # noqa: E402

SEED = 34
SIZES = (3, 4, 5)  # premises per passage
STRIDE = 2  # premises between the starts of two passages of one size


def pairs(lang: str) -> tuple[list[str], list[str]]:
    """(sentence pair lines, passage pair lines) of English and `lang`, prompts in the text, in file order."""
    en = _xnli_sentences(SHARED / "xnli" / "test-en.tsv")
    xx = _xnli_sentences(SHARED / "xnli" / f"test-{lang}.tsv")
    sentences = dict.fromkeys((a, b) for a, b in zip(en, xx) if a and b and "\t" not in a + b)
    premises, seen = [], set()
    for a, b in zip(en[::2], xx[::2]):  # premise, hypothesis alternate; a premise repeats for its 3 hypotheses
        if a and b and a not in seen:
            seen.add(a)
            premises.append((a, b))
    passages = []
    for n in SIZES:
        for j in range(0, len(premises) - n + 1, STRIDE):
            a, b = (" ".join(p[side] for p in premises[j : j + n]) for side in (0, 1))
            if "\t" not in a + b:
                passages.append(f"passage: {a}\tpassage: {b}")
    return [f"query: {a}\tquery: {b}" for a, b in sentences], passages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--queries", type=int, default=900)
    parser.add_argument("--passages", type=int, default=350)
    parser.add_argument("--plain", type=int, default=1250)
    args = parser.parse_args()
    if not (SHARED / "xnli").is_dir():
        print(f"Error: {SHARED} not found", file=sys.stderr)
        return 1
    rng = random.Random(SEED)
    counts = {}
    for folder in ("qp", "q"):
        (args.out / folder).mkdir(parents=True, exist_ok=True)
    for lang in XNLI_LANGS:
        if lang == "en":
            continue
        sentences, passages = pairs(lang)
        rng.shuffle(sentences)
        rng.shuffle(passages)
        mixed = sentences[: args.queries] + passages[: args.passages]
        (args.out / "qp" / f"en-{lang}.tsv").write_text("\n".join(mixed) + "\n", encoding="utf-8")
        plain = [line.replace("query: ", "") for line in sentences[: args.plain]]
        (args.out / "q" / f"en-{lang}.tsv").write_text("\n".join(plain) + "\n", encoding="utf-8")
        counts[lang] = {"queries": min(args.queries, len(sentences)), "passages": min(args.passages, len(passages))}
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
