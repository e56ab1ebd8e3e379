"""Token counts of a corpus in a tokenizer's ids, and the choice of ids to keep."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import numpy as np

from mlminilm import logging as mlog
from mlminilm.corpus.manifest import MANIFEST, TOKEN_COUNTS, tokenizer_identity
from mlminilm.errors import ConfigError, DataError

log = mlog.get(__name__)

BATCH_DOCUMENTS = 1000  # documents per tokenizer call when counting a corpus


@dataclass
class TokenCounts:
    """How often each tokenizer id occurs (`counts[id]`), and where the counts come from."""

    counts: np.ndarray  # int64 [len(tokenizer)]
    source: str  # "data" (a prepare output) or "corpus" (counted here)
    path: str
    languages: dict[str, int] = field(default_factory=dict)  # language -> tokens (0 when not known per language)


def counts_from_data(data: Path, tokenizer, model: str) -> TokenCounts:
    """The token counts of a `prepare` output, checked to be in the ids of `tokenizer`."""
    root = Path(data)
    path = root / MANIFEST
    if not path.is_file():
        raise DataError(f"--data {root} has no {MANIFEST}: not a `mlminilm prepare` output "
                        f"(run `mlminilm prepare --teacher {model}`, or count a corpus with --corpus)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"--data {root}: cannot read {MANIFEST} ({exc}); run `mlminilm prepare` again") from None
    name = manifest.get("token_counts") or TOKEN_COUNTS
    if not (root / name).is_file():
        raise DataError(f"--data {root} has no token counts ({name}); run `mlminilm prepare --teacher {model}` "
                        "again, or count a corpus with --corpus")
    theirs, mine = manifest.get("tokenizer") or {}, tokenizer_identity(tokenizer)
    if theirs.get("vocab_sha256") != mine["vocab_sha256"]:
        raise DataError(
            f"--data {root} was prepared with tokenizer '{theirs.get('name_or_path')}' ({theirs.get('vocab_size')} "
            f"ids), not the tokenizer of --model {model} ({mine['vocab_size']} ids); run `mlminilm prepare "
            f"--teacher {model}` on the corpus, or pass --corpus"
        )
    try:
        counts = np.load(root / name, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"--data {root}: cannot read {name} ({exc}); run `mlminilm prepare` again") from None
    if counts.ndim != 1 or len(counts) != len(tokenizer) or not np.issubdtype(counts.dtype, np.integer):
        raise DataError(f"--data {root}: {name} holds {counts.shape} {counts.dtype} values, expected one integer "
                        f"count per id of the tokenizer ({len(tokenizer)}); run `mlminilm prepare` again")
    languages = {lang: int(info.get("tokens", 0)) for lang, info in sorted((manifest.get("languages") or {}).items())}
    return TokenCounts(counts.astype(np.int64), "data", str(root), languages)


def counts_from_corpus(corpus: Path, langs: tuple[str, ...], tokenizer, workers: int) -> TokenCounts:
    """Count every id `tokenizer` produces on the <lang>.txt (.gz, .jsonl) files of `corpus` (only `langs`)."""
    from mlminilm.corpus import readers
    from mlminilm.corpus.workers import TokenizerPool

    sources = readers.resolve_inputs((str(corpus),), tuple(langs), "text")
    counts = np.zeros(len(tokenizer), np.int64)
    per_lang = dict.fromkeys(sources, 0)

    def batches():
        for lang, lang_sources in sources.items():
            documents = readers.documents(lang_sources, "text")
            while batch := list(islice(documents, BATCH_DOCUMENTS)):
                yield lang, batch

    # The stream holds each document's ids and one separator (a special token, so not counted in coverage).
    with TokenizerPool(tokenizer, workers or _cores()) as pool:
        for lang, _, stream in pool.tokenize(batches()):
            counts += np.bincount(stream, minlength=len(counts))[: len(counts)]
            per_lang[lang] += len(stream)
    for lang, tokens in per_lang.items():
        log.info("%s: %s tokens counted", lang, f"{tokens:,}")
    return TokenCounts(counts, "corpus", str(corpus), per_lang)


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class Selection:
    """The kept ids in ascending order (new id i is old id `old_ids[i]`) and what they cover."""

    old_ids: np.ndarray  # int64
    forced: np.ndarray  # the ids kept whatever their count (specials, added tokens)
    corpus_tokens: int  # occurrences of the other ids in the counts
    covered_tokens: int  # ... of those that are kept
    seen: int  # other ids that occur at least once

    @property
    def coverage(self) -> float:
        return self.covered_tokens / self.corpus_tokens if self.corpus_tokens else 1.0


def select_ids(counts: np.ndarray, forced, min_count: int = 1, coverage: float = 1.0,
               max_vocab: int | None = None) -> Selection:
    """The ids to keep: `forced`, then the other ids by falling count (ties: lower id first) that occur at least
    `min_count` times, until they cover `coverage` of the other ids' occurrences, `max_vocab` ids in all."""
    counts = np.asarray(counts, dtype=np.int64)
    forced = np.unique(np.asarray(sorted(forced), dtype=np.int64))
    other = np.ones(len(counts), bool)
    other[forced] = False
    total = int(counts[other].sum())
    if total == 0:
        raise DataError("the token counts hold no tokens besides special tokens: nothing to keep "
                        "(is the corpus empty?)")
    candidates = np.flatnonzero(other & (counts >= min_count))
    candidates = candidates[np.lexsort((candidates, -counts[candidates]))]  # by count, falling; then by id
    room = len(candidates)
    if coverage < 1.0:
        need = math.ceil(coverage * total - 1e-9 * total)
        room = min(room, int(np.searchsorted(np.cumsum(counts[candidates]), need)) + 1)
    if max_vocab is not None:
        if max_vocab <= len(forced):
            raise ConfigError(f"--max-vocab {max_vocab} leaves no room: the model has {len(forced)} special and "
                              "added tokens, which are always kept; raise --max-vocab")
        room = min(room, max_vocab - len(forced))
    if room <= 0:
        raise ConfigError(f"nothing left to keep: no id besides the special tokens occurs at least --min-count "
                          f"{min_count} times (the most frequent occurs {int(counts[other].max())} times)")
    kept = candidates[:room]
    return Selection(np.union1d(forced, kept), forced, total, int(counts[kept].sum()),
                     int(np.count_nonzero(counts[other])))
