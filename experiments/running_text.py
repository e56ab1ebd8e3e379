"""Offline running text for distillation, per language, from ../shared/data (never an evaluation split of ours).

    python experiments/running_text.py OUT_DIR [--max-lines N]
    python experiments/running_text.py OUT_DIR --parallel      # XNLI test's translations as en-<lang>.tsv pairs

Writes OUT_DIR/<lang>.txt, one sentence or paragraph per line, for the 15 XNLI languages from:
- XNLI `test-XX.tsv`: the distinct premises and hypotheses (the retention benchmark evaluates XNLI on the `dev`
  files, which share no sentence with `test`; the English fine-tuning set is drawn from `test-en`, so English
  distillation text overlaps it: the student sees those sentences unlabelled, as a pretraining corpus would);
- TyDiQA-GoldP dev contexts (ar ru sw; the answers are not available offline anyway).

MLQA's contexts are left out: the retention benchmark evaluates MLQA (passage retrieval, and QA after English
fine-tuning), so no student distils on them and no trimmed vocabulary is counted on them.

wikiann and UD in ../shared/data/corpus are word-split fragments (`prepare` warns about them), not running text.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
XNLI_LANGS = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")


def _contexts(path: Path) -> list[str]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [p["context"].replace("\n", " ").strip() for article in doc["data"] for p in article["paragraphs"]]


def running_text(lang: str, shared: Path = SHARED) -> list[str]:
    """The distinct lines of every source that has `lang`, XNLI first, in file order."""
    lines: list[str] = []
    xnli = shared / "xnli" / f"test-{lang}.tsv"
    if xnli.is_file():
        for row in xnli.read_text(encoding="utf-8").splitlines():
            lines += row.split("\t")[:2]
    tydi = shared / "tydiqa" / f"tydiqa.goldp.{lang}.dev.json"
    if tydi.is_file() and lang != "en":
        lines += _contexts(tydi)
    seen: set[str] = set()
    return [s for s in (line.strip() for line in lines) if s and not (s in seen or seen.add(s))]


def write_corpus(out: Path, max_lines: int | None = None, langs=XNLI_LANGS, shared: Path = SHARED) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for lang in langs:
        lines = running_text(lang, shared)[:max_lines]
        (out / f"{lang}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        counts[lang] = len(lines)
    return counts


def _xnli_sentences(path: Path) -> list[str]:
    """Premise and hypothesis of each row, in order ("" for a row that is not 3 fields). Split on "\n" only:
    test-el.tsv holds U+001D inside sentences, which str.splitlines() takes for a line break."""
    out: list[str] = []
    for row in path.read_text(encoding="utf-8").rstrip("\n").split("\n"):
        fields = row.split("\t")
        out += [f.strip() for f in fields[:2]] if len(fields) == 3 else ["", ""]
    return out


def write_parallel(out: Path, langs=XNLI_LANGS, shared: Path = SHARED) -> dict:
    """`distill --parallel` text from XNLI test's row-parallel files: OUT/en-<lang>.tsv, each distinct (English
    sentence, translation) pair once. XNLI test is not an evaluated split here (dev is); its English side is the
    fine-tuning text of the retention benchmark, seen here without labels."""
    from mlminilm.corpus.parallel import write_pair_files

    try:
        return write_pair_files(
            _xnli_sentences(shared / "xnli" / "test-en.tsv"),
            {lang: _xnli_sentences(shared / "xnli" / f"test-{lang}.tsv") for lang in langs if lang != "en"},
            out,
        )
    except ValueError as exc:
        raise SystemExit(f"Error: XNLI test files: {exc}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--max-lines", type=int, default=None)
    parser.add_argument("--parallel", action="store_true", help="write distill --parallel pairs instead")
    args = parser.parse_args()
    if not (SHARED / "xnli").is_dir():
        print(f"Error: {SHARED} not found", file=sys.stderr)
        return 1
    try:
        counts = write_parallel(args.out) if args.parallel else write_corpus(args.out, args.max_lines)
    except OSError as exc:
        print(f"Error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
