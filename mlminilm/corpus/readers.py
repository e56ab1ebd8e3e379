"""Where documents come from: `--input` specs resolved to per-language sources that stream documents lazily.

A document is one non-blank line of a `.txt` file, or the text field of one JSON line / Hub dataset row.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mlminilm import langs
from mlminilm.errors import DataError
from mlminilm.io import user_json

SUFFIXES = (".txt", ".txt.gz", ".jsonl", ".jsonl.gz")
HUB_PREFIX = "hf:"
_LANG_PATH = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)=(.+)$")


@dataclass(frozen=True)
class FileSource:
    lang: str
    path: Path

    @property
    def name(self) -> str:
        return str(self.path.resolve())  # absolute: the manifest records where the text came from

    def documents(self, text_field: str) -> Iterator[str]:
        json_lines = self.path.name.endswith((".jsonl", ".jsonl.gz"))
        opener = gzip.open if self.path.name.endswith(".gz") else open
        try:
            with opener(self.path, "rt", encoding="utf-8") as lines:
                for number, line in enumerate(lines, 1):
                    if not line.strip():
                        continue
                    text = _json_text(line, text_field, self.path, number) if json_lines else line.rstrip("\r\n")
                    if text.strip():
                        yield text
        except (OSError, EOFError, zlib.error) as exc:
            if self.path.name.endswith(".gz") and not isinstance(exc, FileNotFoundError | PermissionError):
                raise DataError(
                    f"cannot read {self.path}: it is not a whole gzip file ({exc}); download or compress it again"
                ) from None
            raise DataError(f"cannot read {self.path}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise DataError(f"cannot read {self.path}: not UTF-8 text ({exc.reason}); convert it to UTF-8") from None

    def check(self, text_field: str) -> None:
        """Fail unless the file holds at least one document (reads only up to the first one)."""
        for _ in self.documents(text_field):
            return
        raise DataError(f"{self.path} holds no documents (no non-blank lines); remove it or fill it")


def _json_text(line: str, text_field: str, path: Path, number: int) -> str:
    row = user_json.loads(line, path, line=number)
    text = row.get(text_field) if isinstance(row, dict) else None
    if not isinstance(text, str):
        raise DataError(
            f"{path}:{number}: no string field {text_field!r} in this JSON line; name the field with --text-field"
        )
    return text


@dataclass(frozen=True)
class HubSource:
    """One language of a Hugging Face dataset, streamed (`load_dataset(..., streaming=True)`)."""

    lang: str
    dataset: str
    config: str | None

    @property
    def name(self) -> str:
        return f"{HUB_PREFIX}{self.dataset}" + (f":{self.config}" if self.config else "")

    def _rows(self):
        from mlminilm.io import hub

        instead = "download the text and pass it as --input LANG=PATH"
        datasets = hub.import_datasets()
        if datasets is None:
            raise DataError(
                f"cannot stream Hub dataset {self.name} ({hub.MISSING_DATASETS}): {hub.HUB_EXTRA}, or {instead}"
            )
        if hub.offline():  # streaming always asks the Hub: fail before any request is tried
            raise DataError(
                f"cannot stream Hub dataset {self.name} (HF_HUB_OFFLINE=1 is set and streaming needs the network); "
                f"unset it, or {instead}"
            )
        try:
            return iter(datasets.load_dataset(self.dataset, self.config, split="train", streaming=True))
        except Exception as exc:  # noqa: BLE001 - any failure (offline, unknown name, auth) has one remedy
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DataError(
                f"cannot stream Hub dataset {self.name} ({reason}); check the network and the dataset name "
                f"({hub.unreachable_hint()}), or {instead}"
            ) from None

    def documents(self, text_field: str) -> Iterator[str]:
        for number, row in enumerate(self._rows(), 1):
            text = row.get(text_field)
            if not isinstance(text, str):
                raise DataError(
                    f"{self.name} row {number}: no string field {text_field!r} (fields: {', '.join(row)}); "
                    "name the field with --text-field"
                )
            if text.strip():
                yield text

    def check(self, text_field: str) -> None:
        self._rows()


Source = FileSource | HubSource


def _file_lang(path: Path) -> str | None:
    for suffix in SUFFIXES:
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return None


def _directory_sources(directory: Path) -> list[FileSource]:
    found = []
    for path in sorted(directory.iterdir()):
        lang = _file_lang(path)
        if lang and path.is_file():
            found.append(FileSource(lang, path))
    return found


def _hub_sources(spec: str, wanted: tuple[str, ...], problems: list[str]) -> list[HubSource]:
    dataset, _, template = spec[len(HUB_PREFIX) :].partition(":")
    if not dataset:
        problems.append(f"--input {spec}: name a dataset, e.g. hf:wikimedia/wikipedia:20231101.{{lang}}")
        return []
    if not wanted:
        problems.append(f"--input {spec} needs --langs to say which languages to stream")
        return []
    if "{lang}" not in template and len(wanted) > 1:
        problems.append(f"--input {spec}: put {{lang}} in the config to stream several languages")
        return []
    return [HubSource(lang, dataset, template.format(lang=lang) or None) for lang in wanted]


def _spec_sources(spec: str, wanted: tuple[str, ...], problems: list[str]) -> list[Source]:
    if spec.startswith(HUB_PREFIX):
        return _hub_sources(spec, wanted, problems)
    explicit = _LANG_PATH.match(spec)
    lang, path = (explicit[1], Path(explicit[2])) if explicit else (None, Path(spec))
    if not path.exists():
        problems.append(f"--input {spec}: {path} does not exist")
        return []
    if path.is_dir():
        if lang:
            problems.append(f"--input {spec}: LANG=PATH needs a file, not a directory")
            return []
        found = _directory_sources(path)
        if not found:
            problems.append(f"--input {spec}: no <lang>{{{','.join(SUFFIXES)}}} files in {path}")
        return found
    lang = lang or _file_lang(path)
    if not lang:
        problems.append(f"--input {spec}: name the language (LANG=PATH) or use a {'|'.join(SUFFIXES)} file")
        return []
    return [FileSource(lang, path)]


def resolve_inputs(specs: tuple[str, ...], wanted: tuple[str, ...], text_field: str) -> dict[str, list[Source]]:
    """Per-language sources (sorted by language, each in the order given), all problems reported at once.

    `wanted` (--langs) keeps only those languages and must name only languages some input has.
    """
    problems: list[str] = []
    by_lang: dict[str, list[Source]] = {}
    found: set[str] = set()  # every language the inputs hold, wanted or not (for the message below)
    for spec in specs:
        for source in _spec_sources(spec, wanted, problems):
            found.add(source.lang)
            if not wanted or source.lang in wanted:
                by_lang.setdefault(source.lang, []).append(source)
    unregistered: list[str] = []
    try:
        # Tokenising does not depend on the language: a code the registry does not know is taken (one warning).
        unregistered = langs.accept_codes([*wanted, *by_lang])
    except DataError as exc:
        problems.append(str(exc))
    missing = sorted(set(wanted) - set(by_lang))
    if missing and not problems:
        problems.append(
            f"--langs {','.join(missing)}: no input holds these languages "
            f"(the inputs hold: {', '.join(sorted(found)) or 'no language files'})"
        )
    if not problems:
        for sources in by_lang.values():
            for source in sources:
                try:
                    source.check(text_field)
                except DataError as exc:
                    problems.append(str(exc))
    if problems:
        raise DataError("; ".join(problems))
    langs.warn_unregistered(unregistered)
    return dict(sorted(by_lang.items()))


def documents(sources: list[Source], text_field: str) -> Iterator[str]:
    """Every document of one language's sources, in order."""
    for source in sources:
        yield from source.documents(text_field)
