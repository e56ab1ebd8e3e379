"""The language registry (`mlminilm.langs`): one TOML file per language, next to this module.

Each file says which benchmarks cover the language and how the MLQA scorer normalises answers in it
(article pattern, segmentation), so adding a language is adding a data file, not code. The reader lives in
the data package itself: a `mlminilm/langs.py` module and a `mlminilm/langs/` data package cannot share a
name (in an installed wheel the package would shadow the module).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from importlib import resources

from mlminilm.errors import DataError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

BENCHMARKS = ("xnli", "mlqa", "xquad", "tydiqa")
SEGMENTATIONS = ("whitespace", "mixed")


@dataclass(frozen=True)
class Language:
    code: str
    name: str
    script: str  # ISO 15924 name, e.g. "Latin", "Han"
    benchmarks: tuple[str, ...]
    article_pattern: str | None  # MLQA `remove_articles` regex; None: the scorer removes nothing
    segmentation: str  # MLQA `white_space_fix`: "whitespace" or "mixed" (CJK characters split apart)
    iso639_3: str | None = None  # the ISO 639-3 code Tatoeba (LASER / XTREME) files use: "deu", "cmn", "swh"


def _parse(data: dict) -> Language:
    mlqa = data.get("mlqa", {})
    return Language(
        code=data["code"],
        name=data["name"],
        script=data["script"],
        benchmarks=tuple(data["benchmarks"]),
        article_pattern=mlqa.get("article_pattern"),
        segmentation=mlqa.get("segmentation", "whitespace"),
        iso639_3=data.get("iso639_3"),
    )


@functools.cache
def all_languages() -> dict[str, Language]:
    """Every registered language by code, in code order."""
    files = resources.files(__name__)
    found = {}
    for entry in sorted(files.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            language = _parse(tomllib.loads(entry.read_text(encoding="utf-8")))
            found[language.code] = language
    return found


def _known() -> str:
    return ", ".join(all_languages())


def get_language(code: str) -> Language:
    try:
        return all_languages()[code]
    except KeyError:
        raise DataError(f"unknown language {code!r}; known: {_known()}") from None


def benchmark_languages(name: str) -> list[str]:
    """Sorted codes of the languages a benchmark ("xnli", "mlqa", "xquad", "tydiqa") covers."""
    if name not in BENCHMARKS:
        raise DataError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    return sorted(code for code, lang in all_languages().items() if name in lang.benchmarks)


def validate_codes(codes) -> None:
    """Raise one DataError naming every unknown code at once."""
    unknown = sorted({code for code in codes if code not in all_languages()})
    if unknown:
        names = ", ".join(repr(code) for code in unknown)
        noun = "language" if len(unknown) == 1 else "languages"
        raise DataError(f"unknown {noun} {names}; known: {_known()}")


def to_iso639_3(code: str) -> str:
    """The ISO 639-3 code of a registered language, as Tatoeba file names spell it ("zh" -> "cmn")."""
    iso = get_language(code).iso639_3
    if iso is None:
        having = ", ".join(c for c, lang in all_languages().items() if lang.iso639_3)
        raise DataError(f"language {code!r} has no ISO 639-3 code in langs/{code}.toml; languages with one: {having}")
    return iso


def from_iso639_3(iso: str) -> str | None:
    """The registered language whose ISO 639-3 code is `iso` ("cmn" -> "zh"), or None."""
    return _by_iso639_3().get(iso)


@functools.cache
def _by_iso639_3() -> dict[str, str]:
    return {lang.iso639_3: code for code, lang in all_languages().items() if lang.iso639_3}
