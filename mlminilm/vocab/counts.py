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
SHARD_CHUNK = 1 << 24  # ids counted at a time when reading a prepare output's shards (128 MiB of int64 at most)


@dataclass
class TokenCounts:
    """How often each tokenizer id occurs (`counts[id]`), per language when known, and where the counts come from."""

    counts: np.ndarray  # int64 [len(tokenizer)], all languages pooled
    source: str  # "data" (a prepare output) or "corpus" (counted here)
    path: str
    languages: dict[str, int] = field(default_factory=dict)  # language -> tokens (0 when not known per language)
    # language -> int64 [len(tokenizer)]; None when only the pooled counts are known (`pooled_only` says why)
    per_language: dict[str, np.ndarray] | None = None
    pooled_only: str = ""


def counts_from_data(data: Path, tokenizer, model: str) -> TokenCounts:
    """The token counts of a `prepare` output, checked to be in the ids of `tokenizer`."""
    root = Path(data)
    path = root / MANIFEST
    if not path.is_file():
        raise DataError(
            f"--data {root} has no {MANIFEST}: not a `mlminilm prepare` output "
            f"(run `mlminilm prepare --teacher {model}`, or count a corpus with --corpus)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"--data {root}: cannot read {MANIFEST} ({exc}); run `mlminilm prepare` again") from None
    name = manifest.get("token_counts") or TOKEN_COUNTS
    if not (root / name).is_file():
        raise DataError(
            f"--data {root} has no token counts ({name}); run `mlminilm prepare --teacher {model}` "
            "again, or count a corpus with --corpus"
        )
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
        raise DataError(
            f"--data {root}: {name} holds {counts.shape} {counts.dtype} values, expected one integer "
            f"count per id of the tokenizer ({len(tokenizer)}); run `mlminilm prepare` again"
        )
    languages = {lang: int(info.get("tokens", 0)) for lang, info in sorted((manifest.get("languages") or {}).items())}
    found = TokenCounts(counts.astype(np.int64), "data", str(root), languages)
    found.per_language, found.pooled_only = _shard_counts(root, manifest, found.counts)
    return found


def _shard_counts(root: Path, manifest: dict, pooled: np.ndarray) -> tuple[dict[str, np.ndarray] | None, str]:
    """Per-language counts of a prepare output, read from its per-language shards (token_counts.npy pools every
    language). (None, why) when the directory holds no complete shards: only its pooled counts are known."""
    from mlminilm.corpus.dataset import PreparedData
    from mlminilm.corpus.packing import DTYPE

    seq_len = manifest.get("seq_len")
    shards = {lang: (info or {}).get("shards") or [] for lang, info in (manifest.get("languages") or {}).items()}
    base = root.resolve()
    for lang, files in shards.items():
        for shard in files:
            if not isinstance(shard, dict) or not isinstance(shard.get("sequences"), int):
                return None, f"its manifest's shards of {lang} are not readable"
            file = (root / str(shard.get("file", ""))).resolve()
            if not file.is_relative_to(base) or not file.is_file():
                return None, f"its shard {shard.get('file')} is missing"
            if isinstance(seq_len, int) and file.stat().st_size != shard["sequences"] * seq_len * DTYPE.itemsize:
                return None, f"its shard {shard.get('file')} is incomplete"
    if not shards:
        return None, "its manifest names no language"
    try:
        PreparedData.open(root)  # sizes and digests: a changed shard gives no per-language counts, not wrong ones
    except DataError as exc:
        return None, f"its shards cannot be read ({exc})"
    per_language = {}
    for lang, files in sorted(shards.items()):
        counts = np.zeros(len(pooled), np.int64)
        for shard in files:
            ids = np.memmap(root / shard["file"], dtype=DTYPE, mode="r")
            for start in range(0, len(ids), SHARD_CHUNK):
                chunk = np.bincount(ids[start : start + SHARD_CHUNK], minlength=len(counts))
                if len(chunk) > len(counts):
                    raise DataError(
                        f"--data {root}: shard {shard['file']} holds id {len(chunk) - 1}, beyond the "
                        f"tokenizer's {len(counts)} ids; run `mlminilm prepare` again"
                    )
                counts += chunk
            del ids
        per_language[lang] = counts
    if not np.array_equal(sum(per_language.values()), pooled):
        return None, (
            f"its shards and {manifest.get('token_counts') or TOKEN_COUNTS} do not hold the same tokens "
            "(changed since prepare?)"
        )
    return per_language, ""


def counts_from_corpus(corpus: Path, langs: tuple[str, ...], tokenizer, workers: int) -> TokenCounts:
    """Count every id `tokenizer` produces on the <lang>.txt (.gz, .jsonl) files of `corpus` (only `langs`)."""
    from mlminilm.corpus import readers
    from mlminilm.corpus.workers import TokenizerPool

    sources = readers.resolve_inputs((str(corpus),), tuple(langs), "text")
    per_lang = dict.fromkeys(sources, 0)
    by_lang = {lang: np.zeros(len(tokenizer), np.int64) for lang in sources}

    def batches():
        for lang, lang_sources in sources.items():
            documents = readers.documents(lang_sources, "text")
            while batch := list(islice(documents, BATCH_DOCUMENTS)):
                yield lang, batch

    # The stream holds each document's ids and one separator (a special token, so not counted in coverage).
    with TokenizerPool(tokenizer, workers or _cores()) as pool:
        for lang, _, stream in pool.tokenize(batches()):
            counts = by_lang[lang]
            counts += np.bincount(stream, minlength=len(counts))[: len(counts)]
            per_lang[lang] += len(stream)
    for lang, tokens in per_lang.items():
        log.info("%s: %s tokens counted", lang, f"{tokens:,}")
    pooled = sum(by_lang.values()) if by_lang else np.zeros(len(tokenizer), np.int64)
    return TokenCounts(pooled, "corpus", str(corpus), per_lang, by_lang)


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class Selection:
    """The kept ids in ascending order (new id i is old id `old_ids[i]`), why each was kept, and what they cover."""

    old_ids: np.ndarray  # int64
    forced: np.ndarray  # the ids kept whatever their count (specials, added tokens)
    corpus_tokens: int  # occurrences of the other ids in the counts
    covered_tokens: int  # ... of those that are kept
    seen: int  # other ids that occur at least once
    # rule -> ids it adds beyond the rules before it, in this order: specials, per_lang_top_k, pooled, then the
    # `always` rules in their order (prompt pieces, script characters, script fill)
    added: dict[str, int] = field(default_factory=dict)
    per_lang_top_k: dict[str, int] = field(default_factory=dict)  # language -> ids in its top k

    @property
    def coverage(self) -> float:
        return self.covered_tokens / self.corpus_tokens if self.corpus_tokens else 1.0


def select_ids(
    counts: np.ndarray,
    forced,
    min_count: int = 1,
    coverage: float | None = 1.0,
    max_vocab: int | None = None,
    per_language: dict[str, np.ndarray] | None = None,
    per_lang_top_k: int | None = None,
    always: dict[str, np.ndarray] | None = None,
    fill: int = 0,
    fill_rankings: dict[str, np.ndarray] | None = None,
    fill_to: dict[str, int] | None = None,
) -> Selection:
    """The ids to keep, the union of:

    - `forced` (specials), and every id of `always` (rule name -> ids: prompt pieces, script characters);
    - with `per_lang_top_k` k: for each language of `per_language`, its k most frequent other ids that occur at
      least `min_count` times in that language (ties: lower id first);
    - with `coverage` (None: none of these): the other ids by falling pooled count (ties: lower id first) that
      occur at least `min_count` times, until the kept ids cover `coverage` of the other ids' pooled occurrences;
    - with `fill` n: for each language, the first n ids that the rules above do not keep of its list: its counted
      ids by falling count, then `fill_rankings[lang]` (ids its counts do not show, likeliest first);
    - with `fill_to` (language -> n; the default --script-fill): for each of those languages, the first n ids of
      that list, those the rules above keep included (an id kept for another language serves this one too);

    at most `max_vocab` ids in all: the pooled ids fill what room the others leave, which must fit."""
    counts, forced, other = _forced_and_other(counts, forced)
    size, total = len(counts), int(counts[other].sum())
    _check_something_to_keep(counts, other, total, len(forced), min_count, max_vocab)
    per_language = {lang: np.asarray(c, dtype=np.int64) for lang, c in sorted((per_language or {}).items())}

    stages: list[tuple[str, np.ndarray]] = [("specials", forced)]
    top: dict[str, int] = {}
    if per_lang_top_k is not None:
        chosen, top = _top_k_per_language(per_language, other, min_count, per_lang_top_k)
        stages.append(("per_lang_top_k", chosen))
    extra = [(name, _valid(ids, size)) for name, ids in (always or {}).items()]
    kept = _mask(stages + extra, size)
    pooled = np.empty(0, np.int64)
    if coverage is not None:
        eligible = other & ~_mask(stages, size) & (counts >= min_count)
        pooled = _pooled_to_coverage(counts, eligible, kept, other, coverage, total)
    if fill or fill_to:
        counted = kept.copy()
        counted[pooled] = True
        filled = _script_fill(per_language, other, counted, fill, fill_rankings or {}, size, fill_to)
        extra.append(("script_fill", filled))
        kept = _mask(stages + extra, size)
    if max_vocab is not None:
        pooled = _pooled_within(max_vocab, pooled, kept, stages + extra, size)
    kept[pooled] = True
    old_ids = np.flatnonzero(kept).astype(np.int64)
    return Selection(
        old_ids,
        forced,
        total,
        int(counts[kept & other].sum()),
        int(np.count_nonzero(counts[other])),
        _added(stages + [("pooled", pooled)] + extra, size),
        top,
    )


def _forced_and_other(counts, forced) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The counts as int64, the forced ids sorted without repeats, and the mask of the other ids."""
    counts = np.asarray(counts, dtype=np.int64)
    forced = np.unique(np.asarray(sorted(forced), dtype=np.int64))
    other = np.ones(len(counts), bool)
    other[forced] = False
    return counts, forced, other


def _check_something_to_keep(
    counts: np.ndarray, other: np.ndarray, total: int, n_forced: int, min_count: int, max_vocab: int | None
) -> None:
    """Refuse counts without ordinary tokens, a --max-vocab the forced ids fill, a --min-count no id reaches."""
    if total == 0:
        raise DataError(
            "the token counts hold no tokens besides special tokens: nothing to keep (is the corpus empty?)"
        )
    if max_vocab is not None and max_vocab <= n_forced:
        raise ConfigError(
            f"--max-vocab {max_vocab} leaves no room: the model has {n_forced} special and "
            "added tokens, which are always kept; raise --max-vocab"
        )
    if not np.any(other & (counts >= min_count)):
        raise ConfigError(
            f"nothing left to keep: no id besides the special tokens occurs at least --min-count "
            f"{min_count} times (the most frequent occurs {int(counts[other].max())} times)"
        )


def _top_k_per_language(
    per_language: dict[str, np.ndarray], other: np.ndarray, min_count: int, k: int
) -> tuple[np.ndarray, dict[str, int]]:
    """Each language's k most frequent other ids with at least `min_count` occurrences there (all languages' ids
    together), and how many each language gave."""
    chosen, top = [], {}
    for lang, lang_counts in per_language.items():
        best = _by_count(np.flatnonzero(other & (lang_counts >= min_count)), lang_counts)[:k]
        top[lang] = len(best)
        chosen.append(best)
    return (np.concatenate(chosen) if chosen else np.empty(0, np.int64)), top


def _pooled_to_coverage(
    counts: np.ndarray, eligible: np.ndarray, kept: np.ndarray, other: np.ndarray, coverage: float, total: int
) -> np.ndarray:
    """The pooled rule, before --max-vocab: the `eligible` ids by falling pooled count, as many as it takes, with
    the other ids already `kept`, to cover `coverage` of the other ids' `total` occurrences (all of them at
    coverage 1). An id another rule keeps already still counts as the pooled rule's (for the record) but adds no
    coverage."""
    candidates = _by_count(np.flatnonzero(eligible), counts)
    room = len(candidates)
    if coverage < 1.0:
        need = math.ceil(coverage * total - 1e-9 * total) - int(counts[kept & other].sum())
        gained = np.cumsum(np.where(kept[candidates], 0, counts[candidates]))
        room = 0 if need <= 0 else min(room, int(np.searchsorted(gained, need)) + 1)
    return candidates[:room]


def _script_fill(
    per_language: dict[str, np.ndarray],
    other: np.ndarray,
    counted: np.ndarray,
    fill: int,
    fill_rankings: dict[str, np.ndarray],
    size: int,
    fill_to: dict[str, int] | None = None,
) -> np.ndarray:
    """For each language, the first `fill` ids of its list that `counted` does not hold (with `fill_to`: of the
    languages it names, the first `fill_to[lang]` ids of its list that `counted` does not hold): its counted ids by
    falling count, then its `fill_rankings` ids."""
    added = []
    for lang, lang_counts in per_language.items():
        if fill_to is not None and lang not in fill_to:
            continue
        queue = np.concatenate(
            [
                _by_count(np.flatnonzero(other & (lang_counts > 0)), lang_counts),
                _valid(fill_rankings.get(lang, ()), size),
            ]
        )
        if fill_to is None:
            added.append(queue[~counted[queue]][:fill])
        else:
            head = queue[: fill_to[lang]]
            added.append(head[~counted[head]])
    return np.concatenate(added) if added else np.empty(0, np.int64)


def _pooled_within(
    max_vocab: int, pooled: np.ndarray, kept: np.ndarray, stages: list[tuple[str, np.ndarray]], size: int
) -> np.ndarray:
    """The pooled ids cut to the room --max-vocab leaves beside the ids the rules keep (`kept`); refused when those
    alone pass it."""
    rule_kept = int(kept.sum())
    if rule_kept > max_vocab:
        parts = ", ".join(f"{name.replace('_', ' ')} {n:,}" for name, n in _added(stages, size).items())
        raise ConfigError(
            f"--max-vocab {max_vocab} leaves no room: the ids kept by rule already number "
            f"{rule_kept:,} ({parts}); raise --max-vocab, or lower --per-lang-top-k / --script-fill"
        )
    new = ~kept[pooled]
    return pooled[: int(np.searchsorted(np.cumsum(new), max_vocab - rule_kept, side="right"))]


def _by_count(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """`ids` by falling count, ties by id."""
    return ids[np.lexsort((ids, -counts[ids]))]


def _valid(ids, size: int) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64).ravel()
    return ids[(ids >= 0) & (ids < size)]


def _mask(stages: list[tuple[str, np.ndarray]], size: int) -> np.ndarray:
    mask = np.zeros(size, bool)
    for _, ids in stages:
        mask[ids] = True
    return mask


def _added(stages: list[tuple[str, np.ndarray]], size: int) -> dict[str, int]:
    """Ids each stage adds beyond the stages before it."""
    seen = np.zeros(size, bool)
    added = {}
    for name, ids in stages:
        ids = ids[(ids >= 0) & (ids < size)]
        added[name] = int(np.count_nonzero(~seen[np.unique(ids)]))
        seen[ids] = True
    return added
