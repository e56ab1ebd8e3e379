"""Calibration text for static int8 (`export --quantize int8 --int8 static`): a few hundred sentences per language.

Static quantisation fixes each activation's int8 scale ahead of time from the ranges the float32 graph shows on
real input, so the input must cover every language the model serves: a range measured on English alone clips the
activations of a script it never saw. Where the text comes from (`--calibration PATH`, else the model's own):
- a `prepare` output (its manifest.json): each language's sequences split back into the documents they were packed
  from (at the separator token) and decoded with the model's tokenizer, which must be the one that prepared them;
- a folder of `<lang>.txt`, `.txt.gz`, `.jsonl` or `.jsonl.gz` files, as `prepare` reads them (one document a line;
  the file names are language codes, checked as `prepare` checks them), every line cut at --parallel's
  MAX_SENTENCE_CHARS as it is read (a line of hundreds of megabytes is never held whole nor tokenised);
- neither given: the prepared data the model was distilled from, as its mlminilm.json records it (`data`).

From each language, `per_language` documents are drawn at random (seeded: the same export twice calibrates on
the same text); each is one model input, the model's query prefix before it, cut at `max_length` tokens.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.config.export import CALIBRATION_SENTENCES
from mlminilm.errors import DataError

log = mlog.get(__name__)

CALIBRATION_SEED = 0
CALIBRATION_MAX_LENGTH = 128  # tokens: sentences, as served; longer documents are cut
_READ_LIMIT = 50  # documents read per language for each one drawn: a sample of a huge file without reading it all


@dataclass(frozen=True)
class CalibrationText:
    """Sentences per language and where they came from."""

    source: str  # the folder
    kind: str  # "prepared data" or "text files"
    sentences: dict[str, list[str]] = field(default_factory=dict)

    def record(self) -> dict:
        return {
            "source": self.source,
            "kind": self.kind,
            "languages": {lang: len(s) for lang, s in self.sentences.items()},
            "seed": CALIBRATION_SEED,
        }


def default_source(model_dir: str | Path | None) -> str | None:
    """The prepared data the model was distilled from (its mlminilm.json's `data`), when that folder still exists."""
    if model_dir is None:
        return None
    card = Path(model_dir) / "mlminilm.json"
    try:
        data = json.loads(card.read_text(encoding="utf-8")).get("data") if card.is_file() else None
    except (OSError, ValueError):
        return None
    return str(data) if isinstance(data, str) and (Path(data) / "manifest.json").is_file() else None


def read_calibration(
    path: str | Path, tokenizer, per_language: int = CALIBRATION_SENTENCES, flag: str = "--calibration"
) -> CalibrationText:
    """`per_language` sentences of every language at `path` (a `prepare` output or a folder of text files);
    DataError when the folder is missing, holds no language, or a language has no sentence."""
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{flag} {path} is not a folder (give a `prepare` output or a folder of <lang>.txt files)")
    cut = 0
    if (root / "manifest.json").is_file():
        sentences, kind = _from_prepared(root, tokenizer, per_language, flag), "prepared data"
    else:
        (sentences, cut), kind = _from_text(root, per_language, flag), "text files"
    if not sentences:
        raise DataError(
            f"{flag} {path} holds no language: expected a `prepare` output (manifest.json) or "
            "<lang>.txt / .txt.gz / .jsonl / .jsonl.gz files"
        )
    empty = sorted(lang for lang, s in sentences.items() if not s)
    if empty:
        raise DataError(f"{flag} {path}: no sentences for {', '.join(empty)} (every language needs some)")
    if cut:
        from mlminilm.corpus.parallel_files import MAX_SENTENCE_CHARS

        log.warning(
            "%s %s: %d line(s) longer than %d characters cut to that length as they were read (a JSON line that "
            "long: skipped)",
            flag,
            path,
            cut,
            MAX_SENTENCE_CHARS,
        )
    return CalibrationText(str(root), kind, dict(sorted(sentences.items())))


def _draw(documents, per_language: int) -> list[str]:
    """`per_language` documents drawn at random (seeded) from the first `per_language * _READ_LIMIT`."""
    pool = []
    for text in documents:
        if text.strip():
            pool.append(text.strip())
        if len(pool) >= per_language * _READ_LIMIT:
            break
    if len(pool) <= per_language:
        return pool
    return random.Random(CALIBRATION_SEED).sample(pool, per_language)


def _from_text(root: Path, per_language: int, flag: str) -> tuple[dict[str, list[str]], int]:
    """Each language's drawn sentences and how many lines were cut (or, for JSON lines, skipped) as too long. The
    file names are language codes, checked as `prepare` checks its inputs' before a line is read."""
    from mlminilm.corpus.readers import _directory_sources
    from mlminilm.langs import accept_codes, warn_unregistered

    by_lang: dict[str, list] = {}
    for source in _directory_sources(root):
        by_lang.setdefault(source.lang, []).append(source)
    try:
        unregistered = accept_codes(by_lang)
    except DataError as exc:
        raise DataError(f"{flag} {root}: its <lang> file names are language codes: {exc}") from None
    warn_unregistered(unregistered, f"taken as {flag} languages")
    cut = [0]

    def documents(sources):
        for source in sources:
            yield from _documents(source.path, cut)

    return {lang: _draw(documents(sources), per_language) for lang, sources in by_lang.items()}, cut[0]


def _documents(path: Path, cut: list[int]):
    """The documents of one `<lang>.txt` / `.jsonl` file (gzipped or not), as `prepare` reads them, but with
    every line cut at MAX_SENTENCE_CHARS as it is read (--parallel's rule): `cut[0]` counts the lines cut. A JSON
    line that long cannot be parsed from its start, so it is skipped (and counted)."""
    import zlib

    from mlminilm.corpus.parallel_files import MAX_SENTENCE_CHARS
    from mlminilm.corpus.readers import _json_text
    from mlminilm.io.lines import bounded_lines, open_lines

    json_lines = path.name.endswith((".jsonl", ".jsonl.gz"))
    try:
        with open_lines(path) as handle:
            for number, (line, was_cut) in enumerate(bounded_lines(handle, MAX_SENTENCE_CHARS), 1):
                cut[0] += was_cut
                if not line.strip() or (json_lines and was_cut):
                    continue
                text = _json_text(line, "text", path, number) if json_lines else line
                if text.strip():
                    yield text
    except UnicodeDecodeError as exc:
        raise DataError(f"cannot read {path}: not UTF-8 text ({exc.reason}); convert it to UTF-8") from None
    except (OSError, EOFError, zlib.error) as exc:
        gz = path.name.endswith(".gz") and not isinstance(exc, FileNotFoundError | PermissionError)
        raise DataError(
            f"cannot read {path}: "
            + (f"it is not a whole gzip file ({exc}); download or compress it again" if gz else str(exc))
        ) from None


def _from_prepared(root: Path, tokenizer, per_language: int, flag: str) -> dict[str, list[str]]:
    from mlminilm.corpus.dataset import PreparedData
    from mlminilm.corpus.manifest import tokenizer_identity

    data = PreparedData.open(root)
    theirs, ours = data.tokenizer.get("vocab_sha256"), tokenizer_identity(tokenizer)["vocab_sha256"]
    if theirs != ours:
        raise DataError(
            f"{flag} {root} was prepared with another vocabulary than the model's (a trimmed model, or "
            "another teacher): its token ids cannot be read back as text; give a folder of <lang>.txt files"
        )
    ids = {name: data.tokenizer.get(f"{name}_token_id") for name in ("cls", "sep", "pad")}

    def documents(lang: str, whole: bool):
        """The documents of `lang`'s sequences; `whole`: only those the packing did not cut (the pieces between
        two separators of one sequence, and the first piece of the language's first sequence)."""
        for index in range(data.num_sequences(lang)):
            row = data.get(lang, index).tolist()
            while row and row[-1] == ids["pad"]:
                row.pop()
            chunk = row[1:-1]  # inside the wrapper: cls chunk sep
            pieces, piece = [], []
            for token in chunk:
                if token == ids["sep"]:
                    pieces.append(piece)
                    piece = []
                else:
                    piece.append(token)
            pieces.append(piece)  # after the last separator: cut by the sequence's end (empty when it was not)
            keep = pieces if not whole else ([pieces[0]] if index == 0 else []) + pieces[1:-1]
            yield from (tokenizer.decode(p) for p in keep if p)

    def sample(lang: str) -> list[str]:
        drawn = _draw(documents(lang, whole=True), per_language)
        return drawn or _draw(documents(lang, whole=False), per_language)  # every document longer than a sequence

    return {lang: sample(lang) for lang in data.languages}
