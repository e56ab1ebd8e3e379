"""Tatoeba test sets as LASER and XTREME distribute them: one directory, two files per language.

`tatoeba.XXX-eng.XXX` holds sentences in the language with ISO 639-3 code XXX, `tatoeba.XXX-eng.eng` their
English translations: line i of one translates line i of the other (1,000 pairs for most languages). Files are
UTF-8, one sentence per line. Project language codes (`de`, `zh`) map to the file codes (`deu`, `cmn`) through
the `iso639_3` field of `langs/*.toml`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mlminilm.errors import DataError
from mlminilm.langs import all_languages, from_iso639_3, to_iso639_3
from mlminilm.tasks.textfile import read_text

__all__ = ["TatoebaFiles", "TatoebaSet", "file_names", "find_tatoeba_files", "read_sentences", "load_tatoeba"]

_FILE = re.compile(r"^tatoeba\.([a-z]{3})-eng\.([a-z]{3})$")


@dataclass(frozen=True)
class TatoebaFiles:
    lang: str  # project code, e.g. "zh"
    iso: str  # the file code, e.g. "cmn"
    source: Path  # tatoeba.cmn-eng.cmn
    english: Path  # tatoeba.cmn-eng.eng


@dataclass(frozen=True)
class TatoebaSet:
    files: TatoebaFiles
    source: list[str]  # sentences in the language; source[i] translates english[i]
    english: list[str]

    def __len__(self) -> int:
        return len(self.source)


def file_names(iso: str) -> tuple[str, str]:
    """The two file names of one language: (`tatoeba.XXX-eng.XXX`, `tatoeba.XXX-eng.eng`)."""
    return f"tatoeba.{iso}-eng.{iso}", f"tatoeba.{iso}-eng.eng"


def _codes_in(folder: Path) -> list[str]:
    """Every ISO code for which `folder` has at least one of the two Tatoeba files."""
    codes = set()
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match and match.group(2) in (match.group(1), "eng"):
            codes.add(match.group(1))
    return sorted(codes)


def find_tatoeba_files(
    data: str | Path, langs: list[str] | None = None,
) -> tuple[dict[str, TatoebaFiles], list[str]]:
    """The files of each language (project code -> files), in `langs` order or sorted by code, and the file codes
    found in `data` that no language in langs/ has (skipped when `langs` is None). A DataError names every
    missing file at once."""
    folder = Path(data)
    if not folder.is_dir():
        raise DataError(
            f"--data {data}: no such directory (expected tatoeba.XXX-eng.XXX and tatoeba.XXX-eng.eng files)")
    present = _codes_in(folder)
    unknown = [iso for iso in present if from_iso639_3(iso) is None]
    if langs is None:
        if not present:
            raise DataError(
                f"{folder}: no Tatoeba files (tatoeba.XXX-eng.XXX and tatoeba.XXX-eng.eng, ISO 639-3 codes)")
        if not set(present) - set(unknown):
            known = ", ".join(f"{lang.iso639_3} ({code})" for code, lang in all_languages().items() if lang.iso639_3)
            raise DataError(
                f"{folder}: none of the Tatoeba languages there ({', '.join(unknown)}) is in langs/; known: {known}")
        wanted = sorted(from_iso639_3(iso) for iso in present if iso not in unknown)
    else:
        wanted = list(dict.fromkeys(langs))
    found: dict[str, TatoebaFiles] = {}
    problems: list[str] = []
    for lang in wanted:
        iso = to_iso639_3(lang)
        if iso == "eng":
            problems.append(
                f"{lang}: English is the other side of every Tatoeba pair; name the languages paired with it")
            continue
        source, english = (folder / name for name in file_names(iso))
        missing = [p.name for p in (source, english) if not p.is_file()]
        if missing:
            there = ", ".join(
                f"{from_iso639_3(c)} ({c})" if from_iso639_3(c) else c for c in present) or "none"
            problems.append(f"{lang}: no {' and no '.join(missing)} in {folder} (languages there: {there})")
            continue
        found[lang] = TatoebaFiles(lang, iso, source, english)
    if problems:
        raise DataError("; ".join(problems))
    return found, (unknown if langs is None else [])


def read_sentences(path: Path) -> list[str]:
    """The lines of `path` (a final newline ends the last line; "\\r\\n" is accepted), whitespace-stripped.
    An empty file, or an empty line, is a DataError naming the file (and the line)."""
    text = read_text(path)
    if not text.strip():
        raise DataError(f"{path}: the file is empty (expected one sentence per line)")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    sentences = [line.strip() for line in lines]
    blank = [i + 1 for i, s in enumerate(sentences) if not s]
    if blank:
        where = ", ".join(map(str, blank[:5])) + (f" and {len(blank) - 5} more" if len(blank) > 5 else "")
        raise DataError(f"{path}: empty line at line {where} (every line must hold one sentence)")
    return sentences


def load_tatoeba(data: str | Path, langs: list[str] | None = None) -> tuple[dict[str, TatoebaSet], list[str]]:
    """Every requested language's sentence pairs, read and checked whole, and the skipped file codes (see
    `find_tatoeba_files`). All problems (missing, empty or mismatched files) are reported in one DataError."""
    files, skipped = find_tatoeba_files(data, langs)
    sets: dict[str, TatoebaSet] = {}
    problems: list[str] = []
    for lang, pair in files.items():
        sides = []
        for path in (pair.source, pair.english):
            try:
                sides.append(read_sentences(path))
            except DataError as exc:
                problems.append(str(exc))
        if len(sides) < 2:
            continue
        source, english = sides
        if len(source) != len(english):
            problems.append(
                f"{pair.source} has {len(source)} lines but {pair.english.name} has {len(english)}: "
                "line i of one must translate line i of the other"
            )
            continue
        sets[lang] = TatoebaSet(pair, source, english)
    if problems:
        raise DataError("; ".join(problems))
    return sets, skipped
