"""Calibration text for static int8 (`export --quantize int8 --int8 static`): a few hundred sentences per language.

Static quantisation fixes each activation's int8 scale ahead of time from the ranges the float32 graph shows on
real input, so the input must cover every language the model serves: a range measured on English alone clips the
activations of a script it never saw. Where the text comes from (`--calibration PATH`, else the model's own):
- a `prepare` output (its manifest.json): each language's sequences split back into the documents they were packed
  from (at the separator token) and decoded with the model's tokenizer, which must be the one that prepared them;
- a folder of `<lang>.txt`, `.txt.gz`, `.jsonl` or `.jsonl.gz` files, as `prepare` reads them (one document a line;
  the file names are language codes, checked as `prepare` checks them), every line cut at --parallel's
  MAX_SENTENCE_CHARS as it is read (a line of hundreds of megabytes is never held whole nor tokenised);
- a `--parallel` / `--passages` file of tab-separated pairs (`.tsv` / `.txt`, optionally gzipped; an OPUS file
  pair), or a folder of them that holds no `<lang>.txt` file: every sentence of a pair is calibration text, read
  as `distill --parallel` reads it (the translations under their language, the source sentences under
  parallel_files.SOURCE_LANG, English in sentence-transformers' parallel-sentences files);
- neither given: the text the model was distilled on, as its mlminilm.json records it (`recorded_text`): the
  prepared data (`data`), the parallel pairs (`parallel`) and the question-passage pairs (`passages`) that still
  exist, all of them (each language's draws pooled and drawn again); for a model made from another (trimmed,
  fine-tuned: its `base_model`), that model's.

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
from mlminilm.errors import ConfigError, DataError

log = mlog.get(__name__)

CALIBRATION_SEED = 0
CALIBRATION_MAX_LENGTH = 128  # tokens: sentences, as served; longer documents are cut
_READ_LIMIT = 50  # documents read per language for each one drawn: a sample of a huge file without reading it all


@dataclass(frozen=True)
class CalibrationText:
    """Sentences per language and where they came from."""

    source: str  # the --calibration path, or the recorded texts ("--parallel PATH; --passages PATH")
    kind: str  # "prepared data", "text files", "parallel pairs", "question-passage pairs" (" + " between several)
    sentences: dict[str, list[str]] = field(default_factory=dict)

    def record(self) -> dict:
        return {
            "source": self.source,
            "kind": self.kind,
            "languages": {lang: len(s) for lang, s in self.sentences.items()},
            "seed": CALIBRATION_SEED,
        }


# What --calibration takes: every error that asks for it says so.
ACCEPTS = (
    "a `prepare` output, a folder of <lang>.txt / .txt.gz / .jsonl / .jsonl.gz files (one document a line), or "
    "tab-separated pairs as --parallel and --passages read them (a .tsv file, or a folder of them)"
)
_RECORDED = (("data", "--data"), ("parallel", "--parallel"), ("passages", "--passages"))
_BASE_HOPS = 3  # a fine-tuned model of a trimmed student: its record, then its base's, ... this many times at most


@dataclass(frozen=True)
class RecordedText:
    """One text a model was distilled on, as the mlminilm.json of `model` names it."""

    model: str  # the directory whose record names it
    option: str  # --data, --parallel or --passages
    path: str  # as distill was given it (a relative path: to the directory distill ran in)

    @property
    def exists(self) -> bool:
        if self.path.startswith("hf:"):  # a Hub dataset: calibration does not stream one
            return False
        found = Path(self.path)
        return (found / "manifest.json").is_file() if self.option == "--data" else found.exists()

    def __str__(self) -> str:
        return f"{self.option} {self.path}"


def recorded_text(model_dir: str | Path | None) -> list[RecordedText]:
    """The text `model_dir` was distilled on, as its mlminilm.json records it (`data`, `parallel`, `passages`):
    every one named, there or not; for a model whose record names none but a `base_model` directory (trimmed,
    fine-tuned), that model's. [] when no record names any."""
    current, seen = model_dir, set()
    for _ in range(_BASE_HOPS + 1):
        if current is None or not Path(current).is_dir() or Path(current).resolve() in seen:
            return []
        seen.add(Path(current).resolve())
        record = _read_record(Path(current) / "mlminilm.json")
        found = [
            RecordedText(str(current), option, record[key])
            for key, option in _RECORDED
            # distill records `data` as "none (...)" when it read no running text (distillation.plan.card_info)
            if isinstance(record.get(key), str) and record[key] and not record[key].startswith("none (")
        ]
        if found:
            return found
        current = record.get("base_model") if isinstance(record.get("base_model"), str) else None
    return []


def _read_record(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def calibration_text(
    given: str | Path | None, model_dir: str | None, model: str, tokenizer, per_language: int = CALIBRATION_SENTENCES
) -> CalibrationText:
    """The calibration text of `export --format openvino --quantize int8`: `given` (--calibration), else the text
    the model was distilled on that is still there (`recorded_text`); one log line says which. DataError naming
    the missing path when the recorded text is gone, ConfigError when the model records none; both show
    --calibration and what it takes."""
    if given is not None:
        text, why = read_calibration(given, tokenizer, per_language), "--calibration"
    else:
        recorded = recorded_text(model_dir)
        there = [r for r in recorded if r.exists]
        if not there:
            raise _no_text(recorded, model)
        text = _read_recorded(there, tokenizer, per_language)
        gone = [str(r) for r in recorded if not r.exists]
        why = f"the text --model {model} was distilled on" + (f"; {', '.join(gone)}: no longer there" if gone else "")
    counts = {lang: len(s) for lang, s in text.sentences.items()}
    log.info(
        "calibration text: %s (%s, %s): %d sentences, %s",
        text.source,
        text.kind,
        why,
        sum(counts.values()),
        ", ".join(f"{lang} {n}" for lang, n in counts.items()),
    )
    return text


def _no_text(recorded: list[RecordedText], model: str) -> Exception:
    instead = f"give --calibration PATH ({ACCEPTS}), or use --format onnx (dynamic int8, no calibration)"
    if not recorded:
        return ConfigError(
            f"--format openvino --quantize int8 needs calibration text and --model {model} records no text it was "
            f"distilled on (no data, parallel or passages in its mlminilm.json): {instead}"
        )
    relative = any(not Path(r.path).is_absolute() and not r.path.startswith("hf:") for r in recorded)
    return DataError(
        f"--format openvino --quantize int8 needs calibration text: --model {model} was distilled on "
        f"{', '.join(map(str, recorded))} ({Path(recorded[0].model) / 'mlminilm.json'}), which "
        f"{'is' if len(recorded) == 1 else 'are'} no longer there"
        + (" (a relative path: from the directory distill ran in)" if relative else "")
        + f"; {instead}"
    )


def _read_recorded(recorded: list[RecordedText], tokenizer, per_language: int) -> CalibrationText:
    """The drawn sentences of every recorded text, pooled per language and drawn again (seeded)."""
    parts, kinds = [], []
    for item in recorded:
        if item.option == "--data":
            try:
                parts.append(_from_prepared(Path(item.path), tokenizer, per_language, item.option))
            except DataError as exc:
                if len(recorded) == 1:
                    raise
                log.warning("calibration: %s; left out", exc)  # a trimmed model's: the pairs are still text
                continue
            kinds.append("prepared data")
        elif item.option == "--parallel":
            parts.append(_from_pairs(_read_pairs(item.path, item.option), per_language))
            kinds.append("parallel pairs")
        else:
            parts.append(_from_passages(item.path, tokenizer, per_language))
            kinds.append("question-passage pairs")
    pooled: dict[str, list[str]] = {}
    for part in parts:
        for lang, sentences in part.items():
            pooled.setdefault(lang, []).extend(sentences)
    sentences = {lang: _draw(list(dict.fromkeys(s)), per_language) for lang, s in sorted(pooled.items())}
    return CalibrationText("; ".join(map(str, recorded)), " + ".join(kinds), sentences)


def _read_pairs(path: str | Path, flag: str):
    """--parallel's reader (mlminilm.corpus.parallel_files), its errors naming `flag`."""
    from mlminilm.corpus.parallel_files import read_parallel

    try:
        return read_parallel(path)
    except DataError as exc:
        raise DataError(str(exc).replace("--parallel", flag, 1)) from None


def _from_pairs(pairs, per_language: int) -> dict[str, list[str]]:
    """Both sentences of every pair: the translations under their language, the sources under SOURCE_LANG."""
    from mlminilm.corpus.parallel_files import SOURCE_LANG

    texts: dict[str, dict] = {}
    for source, target, lang in zip(pairs.sources, pairs.targets, pairs.langs):
        texts.setdefault(SOURCE_LANG, {})[source] = None
        texts.setdefault(lang, {})[target] = None
    return {lang: _draw(list(t), per_language) for lang, t in texts.items()}


def _from_passages(path: str, tokenizer, per_language: int) -> dict[str, list[str]]:
    """The questions and the passages of `distill --passages` files, under their file's language (documents cut
    at the passage length's default, without a prompt: calibration needs text of the kind, not the run's pairs)."""
    from mlminilm.config.distill import DistillConfig
    from mlminilm.corpus.documents import DocumentRule
    from mlminilm.corpus.passages import read_passages

    max_length = DistillConfig.__dataclass_fields__["passage_max_length"].default
    pairs = read_passages(path, DocumentRule(tokenizer, max_length))
    texts: dict[str, dict] = {}
    for question, passage, lang in zip(pairs.questions, pairs.passages, pairs.langs):
        texts.setdefault(lang, {}).update(dict.fromkeys((question, passage)))
    return {lang: _draw(list(t), per_language) for lang, t in texts.items()}


def _pairs_only(root: Path) -> bool:
    """A folder of --parallel / --passages files (.tsv, OPUS pairs) and no <lang>.txt / .jsonl file."""
    from mlminilm.corpus.parallel_files import SUFFIXES, opus_sides
    from mlminilm.corpus.readers import _directory_sources

    if _directory_sources(root):
        return False
    return any(p.is_file() and (p.name.endswith(SUFFIXES) or opus_sides(p)) for p in root.iterdir())


def read_calibration(
    path: str | Path, tokenizer, per_language: int = CALIBRATION_SENTENCES, flag: str = "--calibration"
) -> CalibrationText:
    """`per_language` sentences of every language at `path` (a `prepare` output, a folder of text files, or
    tab-separated pairs); DataError when the path is missing, holds no language, or a language has no sentence."""
    root = Path(path)
    if not root.exists():
        raise DataError(f"{flag} {path} does not exist; give {ACCEPTS}")
    cut = 0
    if (root / "manifest.json").is_file():
        sentences, kind = _from_prepared(root, tokenizer, per_language, flag), "prepared data"
    elif root.is_dir() and not _pairs_only(root):
        (sentences, cut), kind = _from_text(root, per_language, flag), "text files"
    else:
        try:
            pairs = _read_pairs(root, flag)
        except DataError as exc:
            if root.is_dir():
                raise
            raise DataError(f"{exc}; a file is read as pairs, text of one language goes in a folder as <lang>.txt")
        sentences, kind = _from_pairs(pairs, per_language), "parallel pairs"
    if not sentences:
        raise DataError(f"{flag} {path} holds no language: expected {ACCEPTS}")
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
            "another teacher): its token ids cannot be read back as text; give "
            + ("" if flag == "--calibration" else "--calibration PATH, ")
            + "a folder of <lang>.txt files or tab-separated pairs"
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
