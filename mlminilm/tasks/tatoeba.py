"""Tatoeba test sets as LASER and XTREME distribute them: one directory, two files per language.

`tatoeba.XXX-eng.XXX` holds sentences in the language with ISO 639-3 code XXX, `tatoeba.XXX-eng.eng` their
English translations: line i of one translates line i of the other (1,000 pairs for most languages). Files are
UTF-8, one sentence per line. Project language codes (`de`, `zh`) map to the file codes (`deu`, `cmn`) through
the `iso639_3` field of `langs/*.toml`; a file code no registered language has is its own project code (`qya` for
`tatoeba.qya-eng.qya`): the file name says which language it is, and retrieval does not depend on the language.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.errors import DataError
from mlminilm.langs import accept_codes, all_languages, from_iso639_3, to_iso639_3
from mlminilm.tasks.textfile import read_text

__all__ = [
    "TatoebaFiles",
    "TatoebaSet",
    "file_names",
    "project_code",
    "find_tatoeba_files",
    "read_sentences",
    "load_tatoeba",
]

log = mlog.get(__name__)

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


def project_code(iso: str) -> str:
    """The project code of a Tatoeba file code: the registered language's ("cmn" -> "zh"), else the file code."""
    return from_iso639_3(iso) or iso


def _file_code(lang: str, problems: list[str]) -> str | None:
    """The Tatoeba file code of project code `lang`, or None with the reason in `problems`."""
    language = all_languages().get(lang)
    if language is None:
        if len(lang) == 3:
            return lang  # not in langs/: a file code is its own project code
        problems.append(
            f"{lang}: not in langs/, so its Tatoeba file code is unknown; give the ISO 639-3 code of "
            f"its files (--langs XXX for tatoeba.XXX-eng.XXX), or add langs/{lang}.toml with iso639_3"
        )
        return None
    if language.variant_of:
        problems.append(
            f"{lang} is CC-100's {language.name}, a variant of {language.variant_of}; Tatoeba's "
            f"{language.iso639_3} files are {language.variant_of}: use {language.variant_of}"
        )
        return None
    return to_iso639_3(lang)


def find_tatoeba_files(
    data: str | Path,
    langs: list[str] | None = None,
) -> tuple[dict[str, TatoebaFiles], list[str]]:
    """The files of each language (project code -> files), in `langs` order or sorted by code, and the codes among
    them that no language in langs/ has (evaluated under their file code). A DataError names every problem (a
    missing file, a code that cannot be a file code) at once."""
    folder = Path(data)
    if not folder.is_dir():
        raise DataError(
            f"--data {data}: no such directory (expected tatoeba.XXX-eng.XXX and tatoeba.XXX-eng.eng files)"
        )
    present = _codes_in(folder)
    if langs is None:
        wanted = sorted(project_code(iso) for iso in present if iso != "eng")
        if not wanted:
            raise DataError(
                f"{folder}: no Tatoeba files (tatoeba.XXX-eng.XXX and tatoeba.XXX-eng.eng, ISO 639-3 codes)"
            )
    else:
        wanted = list(dict.fromkeys(langs))
        accept_codes(wanted)
    found: dict[str, TatoebaFiles] = {}
    problems: list[str] = []
    for lang in wanted:
        iso = _file_code(lang, problems)
        if iso is None:
            continue
        if iso == "eng":
            problems.append(
                f"{lang}: English is the other side of every Tatoeba pair; name the languages paired with it"
            )
            continue
        source, english = (folder / name for name in file_names(iso))
        missing = [p.name for p in (source, english) if not p.is_file()]
        if missing:
            there = ", ".join(f"{from_iso639_3(c)} ({c})" if from_iso639_3(c) else c for c in present) or "none"
            problems.append(f"{lang}: no {' and no '.join(missing)} in {folder} (languages there: {there})")
            continue
        found[lang] = TatoebaFiles(lang, iso, source, english)
    if problems:
        raise DataError("; ".join(problems))
    return found, [lang for lang in found if lang not in all_languages()]


def read_sentences(path: Path, max_chars: int | None = None) -> list[str]:
    """The lines of `path` (a final newline ends the last line; "\\r\\n" is accepted), whitespace-stripped.
    An empty file, or an empty line, is a DataError naming the file (and the line). `max_chars`: each line cut to
    that many characters as it is read (one warning says how many were), never held whole."""
    if max_chars is None:
        text = read_text(path)
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
    else:
        lines = _bounded(path, max_chars)
    sentences = [line.strip() for line in lines]
    if not any(sentences):
        raise DataError(f"{path}: the file is empty (expected one sentence per line)")
    blank = [i + 1 for i, s in enumerate(sentences) if not s]
    if blank:
        where = ", ".join(map(str, blank[:5])) + (f" and {len(blank) - 5} more" if len(blank) > 5 else "")
        raise DataError(f"{path}: empty line at line {where} (every line must hold one sentence)")
    return sentences


def _bounded(path: Path, max_chars: int) -> list[str]:
    import zlib

    from mlminilm.io.lines import bounded_lines, open_lines

    if not path.is_file():
        raise DataError(f"{path}: no such file")
    lines, cut = [], 0
    try:
        with open_lines(path, encoding="utf-8-sig") as handle:
            for line, was_cut in bounded_lines(handle, max_chars):
                lines.append(line)
                cut += was_cut
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None
    if cut:
        log.warning(
            "%s: %d line(s) longer than %d characters cut to that length as they were read", path, cut, max_chars
        )
    return lines


def load_tatoeba(
    data: str | Path, langs: list[str] | None = None, max_chars: int | None = None
) -> tuple[dict[str, TatoebaSet], list[str]]:
    """Every requested language's sentence pairs, read and checked whole (each line cut to `max_chars` as it is
    read, when given), and the codes among them that langs/ does not have (see `find_tatoeba_files`). All problems
    (missing, empty or mismatched files) are reported in one DataError."""
    files, unregistered = find_tatoeba_files(data, langs)
    sets: dict[str, TatoebaSet] = {}
    problems: list[str] = []
    for lang, pair in files.items():
        sides = []
        for path in (pair.source, pair.english):
            try:
                sides.append(read_sentences(path, max_chars))
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
    return sets, unregistered
