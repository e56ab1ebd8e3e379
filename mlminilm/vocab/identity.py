"""What a trim changes, per language: the share of the counted tokens whose piece is kept, and the share of
held-out sentences (`--check DIR`: `DIR/<lang>.txt`, one sentence per line) that the trimmed tokenizer splits into
exactly the pieces the original tokenizer does, compared piece by piece (the same pieces in the same order, by id:
a character that became `<unk>` differs).

A counted token whose piece is kept tokenises as before wherever its word's other pieces are kept too; at 100 %
every counted text tokenises exactly as before. A held-out sentence differs as soon as one of its pieces was
dropped: the trimmed tokenizer then splits that word into kept pieces (or `<unk>`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlminilm import logging as mlog
from mlminilm.errors import ConfigError, DataError

log = mlog.get(__name__)

CHECK_SUFFIX = ".txt"


def corpus_shares(per_language: dict[str, np.ndarray], old_ids: np.ndarray, forced: np.ndarray) -> dict[str, dict]:
    """language -> {tokens, kept_tokens, kept_share}: its counted tokens (special and added tokens left out) and
    those whose piece is kept."""
    shares = {}
    for lang, counts in sorted(per_language.items()):
        other = np.ones(len(counts), bool)
        other[forced[forced < len(counts)]] = False
        kept = np.zeros(len(counts), bool)
        kept[old_ids[old_ids < len(counts)]] = True
        tokens, kept_tokens = int(counts[other].sum()), int(counts[other & kept].sum())
        shares[lang] = {
            "tokens": tokens,
            "kept_tokens": kept_tokens,
            "kept_share": kept_tokens / tokens if tokens else 1.0,
        }
    return shares


def check_files(directory: Path) -> dict[str, Path]:
    """language -> file: every `<lang>.txt` of `directory` (the --check option), sorted by language."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(
            f"--check {directory} {'is a file' if directory.exists() else 'does not exist'}; name a "
            f"directory of held-out text, one <lang>{CHECK_SUFFIX} file per language, one sentence "
            "per line"
        )
    files = {
        p.name[: -len(CHECK_SUFFIX)]: p
        for p in sorted(directory.iterdir())
        if p.name.endswith(CHECK_SUFFIX) and p.is_file() and len(p.name) > len(CHECK_SUFFIX)
    }
    if not files:
        raise ConfigError(
            f"--check {directory} holds no <lang>{CHECK_SUFFIX} file (one sentence per line, e.g. de{CHECK_SUFFIX})"
        )
    from mlminilm import langs
    from mlminilm.errors import DataError

    try:  # each file name is a language code, checked as --langs is (an unregistered valid code: one warning)
        langs.warn_unregistered(langs.accept_codes(files))
    except DataError as exc:
        raise ConfigError(
            f"--check {directory}: its <lang>{CHECK_SUFFIX} file names are language codes: {exc}"
        ) from None
    return files


def held_out(files: dict[str, Path], original, trimmed_doc: dict, old_ids, counted=()) -> dict[str, dict]:
    """language -> {file, counted, sentences, equal, equal_share, tokens, example}: each non-empty line of each
    file tokenized (no special tokens) by `original` (a transformers fast tokenizer) and by the tokenizer.json
    `trimmed_doc` (new id i is old id `old_ids[i]`), compared piece by piece: by id, so that a character that
    became unknown differs even where the tokenizer reports its text as the token. `example` is the first sentence
    that differs, with both splits."""
    from tokenizers import Tokenizer

    before = original.backend_tokenizer
    after = Tokenizer.from_str(json.dumps(trimmed_doc))
    old = np.asarray(old_ids, dtype=np.int64)
    results = {}
    for lang, path in files.items():
        try:
            lines = [line for line in (raw.strip() for raw in path.read_text(encoding="utf-8").splitlines()) if line]
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"--check {path}: cannot be read as UTF-8 text ({exc})") from None
        a = before.encode_batch(lines, add_special_tokens=False)
        b = after.encode_batch(lines, add_special_tokens=False)
        equal, tokens, example = 0, 0, None
        for text, x, y in zip(lines, a, b):
            tokens += len(x.ids)
            if len(x.ids) == len(y.ids) and np.array_equal(old[np.asarray(y.ids, dtype=np.int64)], x.ids):
                equal += 1
            elif example is None:
                example = {
                    "text": text,
                    "original": [before.id_to_token(i) for i in x.ids],
                    "trimmed": [after.id_to_token(i) for i in y.ids],
                }
        results[lang] = {
            "file": str(path),
            "counted": lang in counted,
            "sentences": len(lines),
            "equal": equal,
            "equal_share": equal / len(lines) if lines else 1.0,
            "tokens": tokens,
            "example": example,
        }
    return results


def log_report(languages: dict[str, dict]) -> None:
    """One line per language: kept corpus tokens, held-out sentences tokenised as before."""
    for lang, info in languages.items():
        parts = []
        corpus = info.get("corpus")
        if corpus:
            parts.append(f"{100 * corpus['kept_share']:.2f}% of {corpus['tokens']:,} counted tokens kept")
        check = info.get("held_out")
        if check:
            parts.append(
                f"{check['equal']:,} of {check['sentences']:,} held-out sentences "
                f"({100 * check['equal_share']:.1f}%) tokenise as before"
                + ("" if check["counted"] else " (not counted)")
            )
        if parts:
            log.info("%s: %s", lang, "; ".join(parts))
