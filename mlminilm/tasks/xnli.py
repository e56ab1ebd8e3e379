"""NLI data: reading XNLI / MultiNLI files and finding the per-language XNLI test sets.

Formats, detected from the first line of the file (plain or `.gz`):

- XTREME TSV (`test-de.tsv`): `premise<TAB>hypothesis<TAB>label`, no header (XTREME's `train-en.tsv` has a
  `premise hypo label` header, which is skipped);
- header TSV: official XNLI-1.0 (`xnli.test.tsv`, with a `language` column) and MultiNLI `.txt`: columns found by
  name (`gold_label`, `sentence1`, `sentence2`, optional `language`);
- JSON lines (MultiNLI / XNLI-1.0 `.jsonl`): the same keys.

Fields are split on tabs, never parsed as CSV: XNLI sentences contain unbalanced quotes. Rows whose gold label is
"-" (no annotator majority, in MultiNLI) or empty are skipped and counted, per language (`NLIFile.skipped_by_language`,
`read_xnli_split`). Labels are names, mapped to `NLI_LABELS` order; "contradictory" (XNLI-1.0 / XTREME spelling)
means contradiction.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from mlminilm.errors import DataError
from mlminilm.io import user_json
from mlminilm.langs import accept_codes, benchmark_languages
from mlminilm.tasks.textfile import read_text

__all__ = [
    "NLI_LABELS",
    "NLIExample",
    "NLIFile",
    "XnliSource",
    "XnliSplit",
    "label_id",
    "read_nli",
    "read_nli_file",
    "split_file_languages",
    "find_xnli_files",
    "load_xnli_split",
    "read_xnli_split",
]

# Index order of every classification head in this project (and of the Hub's `xnli` ClassLabel).
NLI_LABELS = ("entailment", "neutral", "contradiction")
_LABEL_IDS = {name: index for index, name in enumerate(NLI_LABELS)} | {"contradictory": 2}
NO_GOLD_LABEL = "-"
XTREME_HEADERS = (("premise", "hypo", "label"), ("premise", "hypothesis", "label"))
HUB_PREFIX = "hf:"


@dataclass(frozen=True)
class NLIExample:
    premise: str
    hypothesis: str
    label: int  # index into NLI_LABELS
    lang: str | None = None  # from the file's language column, or the `lang` the file was read as


@dataclass(frozen=True)
class NLIFile:
    """One parsed file: its examples, which format it was read as, and how many unlabelled rows were skipped."""

    path: Path
    format: str  # "xtreme-tsv", "header-tsv" or "jsonl"
    examples: list[NLIExample]
    skipped_no_gold: int  # rows whose gold label is "-" or empty
    skipped_by_language: dict[str | None, int] = field(default_factory=dict)  # the same rows by language


class XnliSource(NamedTuple):
    """Where one language's XNLI examples are: a per-language file, or a shared file filtered by language."""

    path: Path
    lang: str
    filter_by_language: bool  # True for XNLI-1.0's all-languages file


class XnliSplit(NamedTuple):
    """Every requested language's examples, and how many of its rows were skipped (gold label "-" or empty)."""

    examples: dict[str, list[NLIExample]]
    skipped: dict[str, int]


def label_id(name: str, where: str = "") -> int:
    """The NLI_LABELS index of a label name; a DataError naming `where` (file:line) and the valid names otherwise."""
    try:
        return _LABEL_IDS[name.strip().lower()]
    except KeyError:
        prefix = f"{where}: " if where else ""
        raise DataError(
            f"{prefix}label {name!r} is not an NLI class; valid: {', '.join(NLI_LABELS)} (or 'contradictory')"
        ) from None


def read_nli(path: str | Path, lang: str | None = None) -> list[NLIExample]:
    """The examples of one NLI file in any supported format (see `read_nli_file`)."""
    return read_nli_file(path, lang).examples


def read_nli_file(path: str | Path, lang: str | None = None) -> NLIFile:
    """Parse one NLI file, detecting its format.

    `lang`: with a language column (XNLI-1.0), keep only that language's rows; without one, the file is taken to
    be in `lang` and every example is tagged with it."""
    path = Path(path)
    lines = read_text(path).split("\n")
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        raise DataError(f"{path}: empty file, expected NLI examples")
    if first.lstrip().startswith("{"):
        fmt, rows = "jsonl", _jsonl_rows(path, lines)
    else:
        header = tuple(column.strip().lower() for column in first.rstrip("\r").split("\t"))
        if "gold_label" in header:
            fmt, rows = "header-tsv", _header_tsv_rows(path, lines, header)
        else:
            fmt, rows = "xtreme-tsv", _xtreme_rows(path, lines, skip_header=header in XTREME_HEADERS)
    examples, skipped = _to_examples(rows, lang)
    if not examples:
        raise DataError(_nothing_read(path, lang, sum(skipped.values())))
    return NLIFile(
        path=path,
        format=fmt,
        examples=examples,
        skipped_no_gold=sum(skipped.values()),
        skipped_by_language=dict(skipped),
    )


# A row as the format readers yield it: (where, premise, hypothesis, label name, language or None).
_Row = tuple[str, str, str, str, str | None]


def _numbered_lines(path: Path, lines: list[str]) -> Iterable[tuple[str, str]]:
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if line.strip():
            yield f"{path.name}:{number}", line


def _xtreme_rows(path: Path, lines: list[str], skip_header: bool) -> Iterable[_Row]:
    rows = _numbered_lines(path, lines)
    if skip_header:
        next(rows)
    for where, line in rows:
        fields = line.split("\t")
        if len(fields) != 3:
            raise DataError(
                f"{where}: expected 3 tab-separated fields (premise, hypothesis, label), found {len(fields)}"
            )
        yield where, fields[0], fields[1], fields[2], None


def _header_tsv_rows(path: Path, lines: list[str], header: tuple[str, ...]) -> Iterable[_Row]:
    missing = [name for name in ("sentence1", "sentence2") if name not in header]
    if missing:
        raise DataError(f"{path.name}:1: header has no {', '.join(missing)} column; found: {', '.join(header)}")
    columns = {name: header.index(name) for name in ("gold_label", "sentence1", "sentence2")}
    language = header.index("language") if "language" in header else None
    rows = _numbered_lines(path, lines)
    next(rows)
    for where, line in rows:
        fields = line.split("\t")
        if len(fields) != len(header):
            raise DataError(
                f"{where}: expected {len(header)} tab-separated fields as in the header, found {len(fields)}"
            )
        yield (
            where,
            fields[columns["sentence1"]],
            fields[columns["sentence2"]],
            fields[columns["gold_label"]],
            fields[language] if language is not None else None,
        )


def _jsonl_rows(path: Path, lines: list[str]) -> Iterable[_Row]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where, record = f"{path.name}:{number}", user_json.loads(line, path.name, line=number)
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected a JSON object per line")
        missing = [key for key in ("gold_label", "sentence1", "sentence2") if key not in record]
        if missing:
            raise DataError(f"{where}: missing {', '.join(missing)}")
        # Text, not whatever str() makes of it: a null premise is no sentence "None", a label of 1 no class name.
        wrong = [key for key in ("sentence1", "sentence2", "gold_label") if not isinstance(record[key], str)]
        language = record.get("language")
        if language is not None and not isinstance(language, str):
            wrong.append("language")
        if wrong:
            raise DataError(f"{where}: {', '.join(wrong)} should be text (a JSON string)")
        yield where, record["sentence1"], record["sentence2"], record["gold_label"], language


def _to_examples(rows: Iterable[_Row], lang: str | None) -> tuple[list[NLIExample], Counter]:
    """The labelled examples, and the rows without a gold label ("-" or empty) counted by language."""
    examples: list[NLIExample] = []
    skipped: Counter = Counter()
    for where, premise, hypothesis, label, row_lang in rows:
        if row_lang is not None and lang is not None and row_lang != lang:
            continue
        if label.strip() in (NO_GOLD_LABEL, ""):
            skipped[row_lang or lang] += 1
            continue
        examples.append(NLIExample(premise, hypothesis, label_id(label, where), row_lang or lang))
    return examples, skipped


def _nothing_read(path: Path, lang: str | None, skipped: int) -> str:
    if skipped:
        return f"{path}: all {skipped} rows have gold label '-' (no majority) or none; nothing to use"
    return f"{path}: no rows for language {lang!r}" if lang else f"{path}: no NLI examples"


# A per-language file of the XTREME layout: `test-de.tsv`, `dev-sw.tsv.gz`; the code as langs.accept_codes reads it.
_SPLIT_FILE = re.compile(r"^(?P<split>[a-z]+)-(?P<lang>[a-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*)\.tsv(?:\.gz)?$")


def split_file_languages(data_dir: Path, split: str) -> list[str]:
    """The languages of the `{split}-XX.tsv[.gz]` files in `data_dir`, sorted."""
    found = set()
    for path in data_dir.iterdir():
        match = _SPLIT_FILE.match(path.name)
        if match and match["split"] == split and path.is_file():
            found.add(match["lang"])
    return sorted(found)


def find_xnli_files(
    data_dir: str | Path, split: str = "test", langs: Sequence[str] | None = None
) -> dict[str, XnliSource]:
    """Where each language's XNLI `split` is under `data_dir`, by language (default: every language with a
    `{split}-XX.tsv[.gz]` file there, else the 15 XNLI languages of XNLI-1.0's all-languages file).

    Looks for the XTREME layout (`{split}-{lang}.tsv[.gz]`) first, then XNLI-1.0's all-languages file
    (`xnli.{split}.tsv[.gz]` or `.jsonl`), which is then filtered by its language column. Every language that
    has neither is named in one DataError. A language the registry does not know is taken as it is (the caller
    warns): accuracy does not depend on the language."""
    data_dir = Path(data_dir)
    if langs is None and data_dir.is_dir():
        langs = split_file_languages(data_dir, split) or None
    langs = _resolve_langs(langs)
    if not data_dir.is_dir():
        raise DataError(f"XNLI data directory {data_dir} does not exist")
    shared_suffixes = (".tsv", ".tsv.gz", ".jsonl", ".jsonl.gz")
    shared = _first_existing(data_dir / f"xnli.{split}{suffix}" for suffix in shared_suffixes)
    found: dict[str, XnliSource] = {}
    missing = []
    for lang in langs:
        own = _first_existing(data_dir / f"{split}-{lang}{suffix}" for suffix in (".tsv", ".tsv.gz"))
        if own is not None:
            found[lang] = XnliSource(own, lang, filter_by_language=False)
        elif shared is not None:
            found[lang] = XnliSource(shared, lang, filter_by_language=True)
        else:
            missing.append(lang)
    if missing:
        present = sorted(p.name for p in data_dir.glob(f"{split}-*.tsv*"))
        raise DataError(
            f"no XNLI {split} file for {', '.join(missing)} in {data_dir} (looked for {split}-XX.tsv[.gz] and "
            f"xnli.{split}.tsv); present: {', '.join(present) or 'none'}"
        )
    return found


def load_xnli_split(
    data_dir: str | Path, split: str = "test", langs: Sequence[str] | None = None
) -> dict[str, list[NLIExample]]:
    """Every requested language's examples of an XNLI split, by language, in one call.

    `data_dir` is a local directory (see `find_xnli_files`) or "hf:xnli" for the Hugging Face Hub dataset, which
    needs the network (offline it raises a DataError that points at a local directory instead)."""
    return read_xnli_split(data_dir, split, langs).examples


def read_xnli_split(data_dir: str | Path, split: str = "test", langs: Sequence[str] | None = None) -> XnliSplit:
    """As `load_xnli_split`, with the number of rows skipped per language (gold label "-" or empty)."""
    if str(data_dir).startswith(HUB_PREFIX):
        return _load_from_hub(str(data_dir)[len(HUB_PREFIX) :], split, _resolve_langs(langs))
    sources = find_xnli_files(data_dir, split, langs)
    by_lang: dict[str, list[NLIExample]] = {}
    skipped: dict[str, int] = {}
    shared_files: dict[Path, tuple[dict[str | None, list[NLIExample]], dict[str | None, int]]] = {}
    for lang, source in sources.items():
        if not source.filter_by_language:
            nli = read_nli_file(source.path, lang)
            by_lang[lang], skipped[lang] = nli.examples, nli.skipped_no_gold
            continue
        # XNLI-1.0 keeps every language in one file: read it once and share out the rows.
        if source.path not in shared_files:
            nli = read_nli_file(source.path)
            shared_files[source.path] = _group_by_language(nli.examples), nli.skipped_by_language
        groups, skipped_rows = shared_files[source.path]
        if lang not in groups:
            present = ", ".join(sorted(code for code in groups if code))
            raise DataError(f"{source.path}: no rows for language {lang!r}; languages present: {present}")
        by_lang[lang], skipped[lang] = groups[lang], skipped_rows.get(lang, 0)
    return XnliSplit(by_lang, skipped)


def _group_by_language(examples: list[NLIExample]) -> dict[str | None, list[NLIExample]]:
    groups: dict[str | None, list[NLIExample]] = {}
    for example in examples:
        groups.setdefault(example.lang, []).append(example)
    return groups


def _load_from_hub(name: str, split: str, langs: list[str]) -> XnliSplit:
    from mlminilm.io import hub

    hub_split = {"dev": "validation"}.get(split, split)
    instead = "pass a local directory with test-XX.tsv files instead (e.g. ../shared/data/xnli)"
    datasets = hub.import_datasets()
    if datasets is None:
        raise DataError(
            f"cannot load {HUB_PREFIX}{name} ({split}) from the Hugging Face Hub: {hub.MISSING_DATASETS}; "
            f"{hub.HUB_EXTRA}, or {instead}"
        )
    try:
        by_lang, skipped = {}, {}
        for lang in langs:
            rows = datasets.load_dataset(name, lang, split=hub_split)
            names = rows.features["label"].names  # map by name: never trust the Hub's index order blindly
            # A label of -1 means no gold label (names[-1] would silently be the last class).
            by_lang[lang] = [
                NLIExample(row["premise"], row["hypothesis"], label_id(names[row["label"]]), lang)
                for row in rows
                if row["label"] >= 0
            ]
            skipped[lang] = len(rows) - len(by_lang[lang])
        return XnliSplit(by_lang, skipped)
    except DataError:
        raise
    except Exception as exc:  # offline, unknown dataset, or a Hub error: all end the same way for the user
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(
            f"cannot load {HUB_PREFIX}{name} ({split}) from the Hugging Face Hub: {reason} ({hub.unreachable_hint()}); "
            f"{instead}"
        ) from None


def _resolve_langs(langs: Sequence[str] | None) -> list[str]:
    if langs is None:
        return benchmark_languages("xnli")
    langs = list(dict.fromkeys(langs))
    if not langs:
        raise DataError("no languages requested")
    accept_codes(langs)
    return langs


def _first_existing(paths: Iterable[Path]) -> Path | None:
    return next((path for path in paths if path.is_file()), None)
