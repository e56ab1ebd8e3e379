"""Reading `distill --parallel`: sentence pairs (a sentence in the teacher's language, its translation) from the
three layouts users have, one reader per layout:

- tab-separated files (sentence-transformers' parallel-sentences files): one source sentence per line, a tab, one or
  more tab-separated translations; `.tsv` / `.txt`, optionally gzipped. `<src>-<lang>.tsv` (`en-de.tsv`) or
  `<lang>.tsv` names the translations' language; other names count as `?`;
- line-aligned file pairs as OPUS distributes them (`NAME.de-en.de` + `NAME.de-en.en`, optionally gzipped): line i
  of one translates line i of the other. The source side is `en` when the pair has it, else the pair name's first
  language; the other side is the translation's language;
- Hugging Face datasets in sentence-transformers' parallel-sentences layout (columns `english`, `non_english`):
  `hf:DATASET[:CONFIG[,CONFIG...]]`, streamed (needs `mlminilm[hub]` and the network); a config named `en-de`
  gives the language `de`.

`--parallel` names a file, a directory (its TSV files and file pairs), or an `hf:` dataset. Every sentence is
cleaned the same way: a byte-order mark, NUL and other control characters removed, whitespace stripped, and cut to
MAX_SENTENCE_CHARS characters (a line of megabytes is never handed to a tokenizer). Lines without a source and a
non-empty translation are skipped and counted. Language names are checked like every other language option
(mlminilm/langs): a name that cannot be a language code, or a registered language's second code (`deu`), is
refused; a code the registry does not know is taken with one warning.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from mlminilm import logging as mlog
from mlminilm.errors import DataError

log = mlog.get(__name__)

SUFFIXES = (".tsv", ".txt", ".tsv.gz", ".txt.gz")
HUB_PREFIX = "hf:"
HUB_COLUMNS = ("english", "non_english")
# Longer sentences are cut to this many characters before anything tokenises them: far beyond the most tokens any
# --parallel-max-length keeps (a token is at least one character), so nothing a model can read is lost.
MAX_SENTENCE_CHARS = 10_000
SOURCE_LANG = "en"
# An OPUS file of a pair: NAME.<a>-<b>.<side>[.gz]
_OPUS = re.compile(
    r"^(?P<stem>.+)\.(?P<a>[a-z]{2,3}(?:_[A-Za-z]+)?)-(?P<b>[a-z]{2,3}(?:_[A-Za-z]+)?)"
    r"\.(?P<side>[a-z]{2,3}(?:_[A-Za-z]+)?)(?P<gz>\.gz)?$"
)
# Control characters (C0 and C1 but tab and newline, which the formats use) never belong in a sentence.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff]")


@dataclass(frozen=True)
class ParallelPairs:
    sources: tuple[str, ...]
    targets: tuple[str, ...]
    langs: tuple[str, ...]  # the target's language per pair ("?" when nothing says)
    skipped: int  # lines without a source and a non-empty translation
    cut: int = 0  # sentences cut to MAX_SENTENCE_CHARS

    def __len__(self) -> int:
        return len(self.sources)

    def lang_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(self.langs).items()))


def clean(text: str, limit: int | None = MAX_SENTENCE_CHARS) -> tuple[str, bool]:
    """A sentence without control characters or surrounding whitespace, cut to `limit` characters (and whether
    it was cut); a document is cut later, into passages (limit None)."""
    text = _CONTROL.sub("", text).strip()
    return (text[:limit], True) if limit is not None and len(text) > limit else (text, False)


def file_lang(path: Path) -> str:
    """The translations' language a TSV file name states (`en-de.tsv`, `de.tsv.gz` -> de), else "?"."""
    stem = path.name
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    match = re.fullmatch(r"(?:[a-z]{2,3}[-_])?([a-z]{2,3}(?:_[a-z]+|-Hant)?)", stem)
    return match.group(1) if match else "?"


def opus_sides(path: Path) -> tuple[str, str, Path, Path] | None:
    """For one file of an OPUS pair: (source language, translation language, source file, translation file);
    None for a name that is not `NAME.<a>-<b>.<a|b>[.gz]`."""
    m = _OPUS.match(path.name)
    if m is None or m["side"] not in (m["a"], m["b"]) or m["a"] == m["b"]:
        return None
    source = SOURCE_LANG if SOURCE_LANG in (m["a"], m["b"]) else m["a"]
    target = m["b"] if source == m["a"] else m["a"]
    name = f"{m['stem']}.{m['a']}-{m['b']}.{{}}{m['gz'] or ''}"
    return source, target, path.with_name(name.format(source)), path.with_name(name.format(target))


def text_lines(path: Path, option: str = "--parallel") -> Iterator[str]:
    """The lines of a UTF-8 text file (gzip by its name), line breaks removed; `\\n` alone ends a line, as
    Python's text files read them (a U+001D inside a sentence, as XNLI's Greek has, does not). `option` names the
    file in an error (a damaged gzip, text that is not UTF-8: one line)."""
    gzipped = path.name.endswith(".gz")
    opener = gzip.open if gzipped else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="\n") as handle:
            for line in handle:
                yield line.rstrip("\r\n")
    except (UnicodeDecodeError, OSError, EOFError, zlib.error) as exc:
        # A damaged deflate stream raises zlib.error, a cut one EOFError, a bad header or CRC BadGzipFile (OSError).
        if gzipped and isinstance(exc, (EOFError, zlib.error, gzip.BadGzipFile)):
            raise DataError(
                f"{option} {path} is not a whole gzip file ({exc}); download or compress it again"
            ) from None
        raise DataError(f"{option} {path} cannot be read as UTF-8 text{' (gzip)' if gzipped else ''}: {exc}") from None


class _Collector:
    """The pairs as they are read, with the skipped lines and cut sentences counted."""

    def __init__(self):
        self.sources, self.targets, self.langs = [], [], []
        self.skipped = self.cut = 0

    def add(self, source: str, translations: Iterable[str], lang: str) -> None:
        source, was_cut = clean(source)
        self.cut += was_cut
        kept = []
        for text in translations:
            text, was_cut = clean(text)
            self.cut += was_cut
            if text:
                kept.append(text)
        if not source or not kept:
            self.skipped += 1
            return
        for text in kept:
            self.sources.append(source)
            self.targets.append(text)
            self.langs.append(lang)

    def pairs(self) -> ParallelPairs:
        return ParallelPairs(tuple(self.sources), tuple(self.targets), tuple(self.langs), self.skipped, self.cut)


def _read_tsv(path: Path, into: _Collector) -> None:
    lang = file_lang(path)
    for line in text_lines(path):
        if not line.strip():
            continue
        fields = line.split("\t")
        into.add(fields[0], fields[1:], lang)


def _read_opus(sides: tuple[str, str, Path, Path], into: _Collector) -> None:
    _, lang, source_file, target_file = sides
    for path, partner in ((source_file, target_file), (target_file, source_file)):
        if not path.is_file():  # the file that is there names the one that is missing
            raise DataError(
                f"--parallel: {partner.name} has no partner file: {path} is missing (OPUS file pairs: "
                "NAME.de-en.de and NAME.de-en.en, line i of one translating line i of the other)"
            )
    number = 0
    sources, targets = text_lines(source_file), text_lines(target_file)
    while True:
        source, target = next(sources, None), next(targets, None)
        if source is None or target is None:
            if source is not None or target is not None:
                longer = source_file if source is not None else target_file
                raise DataError(
                    f"--parallel: {source_file.name} and {target_file.name} do not line up: {longer.name} "
                    f"has more than {number} lines; line-aligned files need equal line counts"
                )
            return
        number += 1
        if source.strip() or target.strip():
            into.add(source, [target], lang)


def _read_hub(spec: str, into: _Collector) -> None:
    from mlminilm.io import hub

    dataset, _, configs = spec[len(HUB_PREFIX) :].partition(":")
    instead = "download the pairs and pass a TSV file or OPUS file pair"
    if not dataset:
        raise DataError(
            f"--parallel {spec}: name a dataset, e.g. hf:sentence-transformers/parallel-sentences-talks:en-de"
        )
    datasets = hub.import_datasets()
    if datasets is None:
        raise DataError(
            f"cannot stream Hub dataset {dataset} for --parallel ({hub.MISSING_DATASETS}): "
            f"{hub.HUB_EXTRA}, or {instead}"
        )
    if hub.offline():
        raise DataError(
            f"cannot stream Hub dataset {dataset} for --parallel (HF_HUB_OFFLINE=1 is set and streaming "
            f"needs the network); unset it, or {instead}"
        )
    for config in configs.split(",") if configs else [None]:
        lang = config.split("-", 1)[1] if config and re.fullmatch(r"[a-z]{2,3}-[a-z]{2,3}(?:[-_]\w+)?", config) else "?"
        try:
            rows = iter(datasets.load_dataset(dataset, config, split="train", streaming=True))
            for number, row in enumerate(rows, 1):
                missing = [c for c in HUB_COLUMNS if not isinstance(row.get(c), str)]
                if missing:
                    raise DataError(
                        f"--parallel {spec}: row {number} has no string column {', '.join(missing)} "
                        f"(columns: {', '.join(row)}); the parallel-sentences layout has "
                        f"{' and '.join(HUB_COLUMNS)}"
                    )
                into.add(row["english"], [row["non_english"]], lang)
        except DataError:
            raise
        except Exception as exc:  # noqa: BLE001 - offline, unknown name, auth: one remedy
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DataError(
                f"cannot stream Hub dataset {dataset}{f':{config}' if config else ''} for --parallel "
                f"({reason}); check the network and the name ({hub.unreachable_hint()}), "
                f"or {instead}"
            ) from None


def _sources_of(path: Path) -> list[object]:
    """What a file or directory holds: TSV files (Path) and OPUS pairs (tuples), each pair once."""
    if not path.exists():
        raise DataError(f"--parallel {path} does not exist")
    if path.is_file():
        sides = opus_sides(path)
        if sides is not None:
            return [sides]
        if not path.name.endswith(SUFFIXES):
            raise DataError(
                f"--parallel {path}: not a parallel-text file (TSV: "
                f"{', '.join('*' + s for s in SUFFIXES)}; "
                "OPUS pairs: NAME.de-en.de + NAME.de-en.en)"
            )
        return [path]
    found: list[object] = []
    pairs_seen = set()
    for p in sorted(q for q in path.iterdir() if q.is_file()):
        sides = opus_sides(p)
        if sides is not None:
            if sides[2:] not in pairs_seen:
                pairs_seen.add(sides[2:])
                found.append(sides)
        elif p.name.endswith(SUFFIXES):
            found.append(p)
    if not found:
        raise DataError(
            f"--parallel {path} holds no parallel-text files ({', '.join('*' + s for s in SUFFIXES)}, "
            "or OPUS file pairs NAME.de-en.de + NAME.de-en.en)"
        )
    return found


def _check_langs(langs: Iterable[str], spec: object) -> None:
    from mlminilm.langs import accept_codes, warn_unregistered

    named = sorted(set(langs) - {"?"})
    try:
        unknown = accept_codes(named)
    except DataError as exc:
        raise DataError(f"--parallel {spec}: the file names give languages that cannot be: {exc}") from None
    warn_unregistered(unknown, "taken as --parallel languages")


def read_parallel(spec) -> ParallelPairs:
    """Every (source, translation) pair `spec` (a path or an `hf:` dataset) holds; DataError when there is none."""
    into = _Collector()
    text = str(spec)
    if text.startswith(HUB_PREFIX):
        _read_hub(text, into)
    else:
        for source in _sources_of(Path(spec)):
            if isinstance(source, tuple):
                _read_opus(source, into)
            else:
                _read_tsv(source, into)
    found = into.pairs()
    if not found.sources:
        raise DataError(
            f"--parallel {spec} holds no sentence pairs (each line: a sentence, a tab, its translation"
            f"{f'; {found.skipped} line(s) had no translation' if found.skipped else ''})"
        )
    _check_langs(found.langs, spec)
    if found.cut:
        log.warning(
            "--parallel %s: %d sentence(s) longer than %d characters cut to that length",
            spec,
            found.cut,
            MAX_SENTENCE_CHARS,
        )
    return found
