"""The demo's bundled data (a 12-language corpus, English NLI pairs with translated test sets, parallel sentences
held out from the corpus) and the layouts the commands read it in."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DEMO_DIR = Path(str(resources.files("mlminilm.demo")))
CORPUS = DEMO_DIR / "corpus"
NLI = DEMO_DIR / "nli"
PARALLEL = DEMO_DIR / "parallel"


def languages(folder: Path, pattern: str) -> tuple[str, ...]:
    """The language codes of the files in `folder` matching `pattern` (the `*` part), sorted."""
    return tuple(sorted(p.name[len(pattern.split("*")[0]) : -len(pattern.split("*")[1])] for p in folder.glob(pattern)))


def count_rows(path: Path) -> int:
    """Non-empty lines of a text file."""
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def write_tatoeba_layout(parallel: Path, out: Path) -> Path:
    """The bundled parallel sentences (`XX.txt`, line-aligned with `en.txt`) as Tatoeba files, so that
    `eval-tatoeba` reads them: `tatoeba.XXX-eng.XXX` and `tatoeba.XXX-eng.eng`."""
    from mlminilm.langs import to_iso639_3

    out.mkdir(parents=True, exist_ok=True)
    english = (parallel / "en.txt").read_text(encoding="utf-8")
    for path in sorted(parallel.glob("*.txt")):
        if path.stem == "en":
            continue
        iso = to_iso639_3(path.stem)
        (out / f"tatoeba.{iso}-eng.{iso}").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        (out / f"tatoeba.{iso}-eng.eng").write_text(english, encoding="utf-8")
    return out


def write_pairs(corpus: Path, out: Path, source: str = "en") -> int:
    """`distill --parallel` files from the bundled corpus, whose files are line-by-line translations of each
    other: OUT/en-<lang>.tsv. Returns the number of pairs."""
    from mlminilm.corpus.parallel import write_pair_files

    def lines(lang: str) -> list[str]:
        return (corpus / f"{lang}.txt").read_text(encoding="utf-8").rstrip("\n").split("\n")

    others = {p.stem: lines(p.stem) for p in sorted(corpus.glob("*.txt")) if p.stem != source}
    return sum(write_pair_files(lines(source), others, out, source).values())
