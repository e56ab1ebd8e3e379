"""Parallel text for `distill --parallel`: the stateless draw of each step's sentence pairs, tokenised, and the
files a corpus of line-aligned translations becomes. Reading the formats users have is
mlminilm/corpus/parallel_files.py.

Pairs are tokenised per batch (a few dozen sentences, a millisecond), so a corpus of millions of pairs costs
its text in memory and nothing at start-up.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mlminilm.corpus.parallel_files import ParallelPairs, file_lang, read_parallel  # noqa: F401 (the readers' home)
from mlminilm.errors import CheckpointError

# A batch of pairs is padded to the shortest of a few fixed lengths that holds its longest row: a quarter, half or
# all of --parallel-max-length (32, 64, 128 by default), each rounded up to a multiple of 8 (tensor-core tiles).
# A compiled step (`dynamic=False`) sees at most these three shapes; rounding to multiples of 16 gave up to
# max_length / 16 of them (8 at 128, 36 at 576), each a recompilation of a minute or two on a GPU, then eager
# execution once dynamo's recompile limit was reached. Padding is masked everywhere, so the loss does not depend
# on the bucket (tests/test_parallel_buckets.py); it costs at most twice the longest row's tokens.
PAD_FRACTIONS = (4, 2, 1)
# The draw of parallel pairs uses its own stream, apart from the running-text batches' (seed, step).
STREAM = 7


def write_pair_files(
    sources: list[str], translations: dict[str, list[str]], out: Path, source_lang: str = "en"
) -> dict[str, int]:
    """Write line-aligned texts as `--parallel` files: OUT/<source_lang>-<lang>.tsv, each distinct (sentence,
    translation) pair once, pairs with an empty side (or a tab inside) left out. Returns the pairs per language;
    ValueError when a translation does not have the source's number of lines."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for lang, lines in translations.items():
        if len(lines) != len(sources):
            raise ValueError(f"{lang} has {len(lines)} lines, {source_lang} {len(sources)}: they do not line up")
        pairs = dict.fromkeys(
            f"{a.strip()}\t{b.strip()}" for a, b in zip(sources, lines) if a.strip() and b.strip() and "\t" not in a + b
        )
        (out / f"{source_lang}-{lang}.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
        counts[lang] = len(pairs)
    return counts


@dataclass
class ParallelBatch:
    """One micro-batch of pairs, tokenised: `source_*` the teacher-side sentences [B, S], `both_*` the sources
    then the translations [2B, T], what the student embeds. `not_negative` [B, B] marks the off-diagonal pairs
    that share their source or their translation (not negatives for the contrastive term); `targets` [B, H], when
    the teacher's embeddings of the sources come from the cache (mlminilm/distillation/targets.py), replaces the
    teacher's forward over `source_*`."""

    source_ids: torch.Tensor
    source_mask: torch.Tensor
    both_ids: torch.Tensor
    both_mask: torch.Tensor
    langs: dict[str, int]
    not_negative: torch.Tensor | None = None
    targets: torch.Tensor | None = None

    def to(self, device, non_blocking: bool = False) -> ParallelBatch:
        def move(t):
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return ParallelBatch(
            move(self.source_ids),
            move(self.source_mask),
            move(self.both_ids),
            move(self.both_mask),
            self.langs,
            move(self.not_negative),
            move(self.targets),
        )


def pairs_record(pairs: ParallelPairs) -> dict:
    """What run.json records of the pairs a run reads (`parallel_pairs`): counts, languages and a digest of every
    pair in order, so that --resume can tell when the pairs are no longer those the run started on."""
    h = hashlib.blake2b(digest_size=16)
    for triple in zip(pairs.sources, pairs.targets, pairs.langs):
        h.update("\0".join(triple).encode() + b"\0\0")  # NUL never survives cleaning: no two pairs read alike
    return {
        "pairs": len(pairs),
        "skipped_lines": pairs.skipped,
        "languages": pairs.lang_counts(),
        "digest": h.hexdigest(),
    }


def check_same_pairs(
    recorded: dict | None,
    now: dict,
    spec,
    out,
    option: str = "--parallel",
    resume_with: str = "the pairs as they were",
    new: str = "the new pairs",
) -> None:
    """On --resume: CheckpointError unless the pairs read now are those the run recorded (`parallel_pairs`; a
    record from before the digest is compared by its counts and languages). The stateless draw picks pairs by
    their index, so other pairs would silently train on other text than the run began with, and run.json would
    no longer say what was trained."""
    if recorded is None:
        return
    keys = ("pairs", "skipped_lines", "languages", "digest") if "digest" in recorded else ("pairs", "languages")
    if all(recorded.get(k) == now.get(k) for k in keys):
        return
    what = (
        f"{recorded.get('pairs')!s} pairs when the run started, {now['pairs']} now"
        if recorded.get("pairs") != now["pairs"]
        else f"the same {now['pairs']} pairs in number, but other text or languages"
    )
    raise CheckpointError(
        f"--resume: {option} {spec} changed since the run in {out} started ({what}; run.json records what it "
        f"trained on); resume with {resume_with}, or train on {new} as a new run (another --out, or --overwrite)"
    )


def pad_lengths(max_length: int) -> tuple[int, ...]:
    """The lengths a batch of pairs may be padded to (PAD_FRACTIONS of max_length, multiples of 8 up to it)."""
    return tuple(sorted({min(max_length, (-(-max_length // k) + 7) // 8 * 8) for k in PAD_FRACTIONS}))


def pad_length(longest: int, max_length: int) -> int:
    """The shortest of `pad_lengths(max_length)` that holds `longest` tokens."""
    return next(n for n in pad_lengths(max_length) if n >= longest)


def pad_to(x: torch.Tensor, length: int, value: int, side: str = "right") -> torch.Tensor:
    """[rows, n] -> [rows, length] with `value` added on the tokenizer's padding side."""
    extra = length - x.shape[1]
    if extra <= 0:
        return x
    return torch.nn.functional.pad(x, (extra, 0) if side == "left" else (0, extra), value=value)


def shared_sides(sources: list[str], targets: list[str]) -> torch.Tensor:
    """[B, B] bool: True where pairs i != j have the same source or the same translation."""

    def same(texts: list[str]) -> np.ndarray:
        ids = np.array([{t: k for k, t in enumerate(dict.fromkeys(texts))}[t] for t in texts])
        return ids[:, None] == ids[None, :]

    found = same(sources) | same(targets)
    np.fill_diagonal(found, False)
    return torch.from_numpy(found)


def step_draw(pairs: ParallelPairs, seed: int, step: int, size: int) -> np.ndarray:
    """The pair indices of step `step`'s global batch of `size` rows (micro-batch-major, then process-major)."""
    return np.random.default_rng([seed, STREAM, step]).integers(0, len(pairs), size=size)


class ParallelSampler:
    """Stateless like corpus.sampling.BatchSampler: the pairs of micro-batch (step, micro) on process `rank` are a
    function of (seed, step) alone, so a resumed run draws what the uninterrupted one drew, and N processes
    with batch B draw the global batch one process with batch N*B would."""

    def __init__(self, pairs: ParallelPairs, tokenizer, *, prefix: str, max_length: int, seed: int, target_table=None):
        self.pairs, self.tokenizer = pairs, tokenizer
        self.prefix, self.max_length, self.seed = prefix, max_length, seed
        # A distillation.targets.TargetTable of the teacher's embeddings of the sources it draws (the target cache):
        # then no source forward. None: each batch holds the sources' ids for the teacher.
        self.target_table = target_table
        self._lengths: dict[int, int] = {}  # pair index -> its longer side's token count (`_pair_length`)

    def _drawn(self, step: int, size: int) -> np.ndarray:
        return step_draw(self.pairs, self.seed, step, size)

    def indices(self, step: int, micro: int, batch: int, accum: int, rank: int, world: int) -> np.ndarray:
        drawn = self._drawn(step, batch * accum * world)
        start = (micro * world + rank) * batch
        return drawn[start : start + batch]

    def _encode(self, texts: list[str], length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and mask of the prefixed texts, cut to max_length and padded to `length` (default: the
        bucket of the longest row, `pad_length`)."""
        enc = self.tokenizer(
            [self.prefix + t for t in texts],
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
            return_token_type_ids=False,
        )
        ids, mask = enc["input_ids"], enc["attention_mask"]
        length = pad_length(ids.shape[1], self.max_length) if length is None else length
        return pad_to(ids, length, self.tokenizer.pad_token_id, self.tokenizer.padding_side), pad_to(
            mask, length, 0, self.tokenizer.padding_side
        )

    def _pair_length(self, i: int) -> int:
        if i not in self._lengths:
            texts = [self.prefix + self.pairs.sources[i], self.prefix + self.pairs.targets[i]]
            enc = self.tokenizer(texts, truncation=True, max_length=self.max_length, return_token_type_ids=False)
            self._lengths[i] = max(len(ids) for ids in enc["input_ids"])
        return self._lengths[i]

    def step_length(self, step: int, micro: int, batch: int, accum: int, world: int) -> int:
        """The bucket every process pads micro-batch `micro` of `step` to: that of the longest row any process draws.
        Each process knows every process's draw (`_drawn` depends on the step alone), so they agree with no
        collective and no host sync; a bucket chosen per process gave ranks different shapes, and under
        torch.compile one rank compiled a new graph while the others waited for it at the all-reduce. Lengths are
        cached per pair: a pair is tokenised once for this, whichever process draws it."""
        drawn = self._drawn(step, batch * accum * world)
        rows = drawn[micro * world * batch : (micro + 1) * world * batch]
        return pad_length(max(self._pair_length(int(i)) for i in set(rows.tolist())), self.max_length)

    def batch(self, step: int, micro: int, batch: int, accum: int, rank: int, world: int) -> ParallelBatch:
        picked = self.indices(step, micro, batch, accum, rank, world)
        sources = [self.pairs.sources[i] for i in picked]
        targets = [self.pairs.targets[i] for i in picked]
        length = self.step_length(step, micro, batch, accum, world) if world > 1 else None
        both_ids, both_mask = self._encode(sources + targets, length)
        langs = dict(Counter(self.pairs.langs[i] for i in picked))
        if self.target_table is not None:
            empty = torch.zeros(len(picked), 0, dtype=torch.long)
            return ParallelBatch(
                empty, empty, both_ids, both_mask, langs, shared_sides(sources, targets), self.target_table(sources)
            )
        # The sources padded as the student's batch: one length per batch, so one shape of each.
        source_ids, source_mask = self._encode(sources, both_ids.shape[1])
        return ParallelBatch(source_ids, source_mask, both_ids, both_mask, langs, shared_sides(sources, targets))
