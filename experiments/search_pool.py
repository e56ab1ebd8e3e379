#!/usr/bin/env python
"""The offline document pool of docs/benchmarks/retrieval.md section 18h (issue 51): what `distill --passages`
reads when no question-passage pairs are at hand, from ../shared/data and never from MLQA, XQuAD or Tatoeba.

    python experiments/search_pool.py OUT [--ud-lines 8]

OUT/<lang>.txt, one document per line (distill cuts them into passages and takes one sentence of each out as its
question):
- UD treebank sentences (corpus/ud, 15 languages), every `--ud-lines` consecutive lines one document;
- TyDiQA-GoldP contexts (English train and the dev files of 9 languages), each one document;
- XNLI test premises (15 languages), every 5 consecutive distinct premises one document.
OUT/tydiqa.goldp.<lang>.<split>.json: TyDiQA-GoldP's own questions with their contexts, linked (SQuAD format).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ud-lines", type=int, default=8)
    args = parser.parse_args()
    docs: dict[str, list[str]] = {}
    for path in sorted((SHARED / "corpus" / "ud").glob("*.txt")):
        lines = [" ".join(line.split()) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        step = args.ud_lines
        docs.setdefault(path.stem, []).extend(" ".join(lines[i : i + step]) for i in range(0, len(lines), step))
    for path in sorted((SHARED / "tydiqa").glob("tydiqa.goldp.*.json")):
        lang = path.name.split(".")[2]
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        contexts = dict.fromkeys(" ".join(p["context"].split()) for a in data for p in a["paragraphs"])
        docs.setdefault(lang, []).extend(contexts)
    for path in sorted((SHARED / "xnli").glob("test-*.tsv")):
        lang = path.stem.split("-")[1]
        premises = list(dict.fromkeys(row.split("\t")[0].strip() for row in path.read_text("utf-8").split("\n")))
        premises = [p for p in premises if p]
        docs.setdefault(lang, []).extend(" ".join(premises[i : i + 5]) for i in range(0, len(premises), 5))
    args.out.mkdir(parents=True, exist_ok=True)
    for lang, found in sorted(docs.items()):
        (args.out / f"{lang}.txt").write_text("\n".join(d.replace("\t", " ") for d in found) + "\n", encoding="utf-8")
    for path in sorted((SHARED / "tydiqa").glob("tydiqa.goldp.*.json")):
        shutil.copyfile(path, args.out / path.name)
    print(json.dumps({lang: len(found) for lang, found in sorted(docs.items())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
