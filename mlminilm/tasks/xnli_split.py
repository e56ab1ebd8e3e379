"""Premise groups of an XNLI file, and splits / subsets that keep every group whole.

XNLI pairs each premise with three hypotheses (one per label), so rows of one premise are not independent: a
probe trained on one of them and scored on another has seen the premise. Splitting by premise group keeps the
selection (or test) side free of premises seen in training, and the cluster bootstrap
(`mlminilm.metrics.retention`) resamples the same groups.

Measured on ../shared/data/xnli (XTREME layout): test-en.tsv has 5,010 rows in 1,670 premises and dev-en.tsv
2,490 rows in 830, each premise on exactly 3 consecutive rows (rows 3k..3k+2) holding one entailment, one neutral
and one contradiction. The 15 languages are row-parallel (row i is the same item, same label, in every file).
Translation merges a few premises: two different English premises get one text in test-es, -fr, -sw and -vi
(1 pair each) and test-ur (6 pairs; dev-ur 1), on rows far apart. `merge_groups` joins such groupings so that a
row split holds for every language at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlminilm.errors import ConfigError, DataError

__all__ = ["premise_groups", "merge_groups", "split_by_groups", "subsample_groups"]


def _first_appearance_ids(keys: np.ndarray) -> np.ndarray:
    """Ids 0..G-1 numbered in the order each key first appears (stable across runs and platforms)."""
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def premise_groups(premises: Sequence[str]) -> np.ndarray:
    """One int64 group id per row: rows with the same premise text (exactly equal) share it. Ids count from 0 in
    order of first appearance, so the same file always gives the same ids."""
    if len(premises) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = np.empty(len(premises), dtype=object)
    keys[:] = list(premises)
    return _first_appearance_ids(keys)


def _as_groups(groups, name: str = "groups") -> np.ndarray:
    array = np.asarray(groups)
    if array.ndim != 1:
        raise DataError(f"{name} must be one id per row (1-d), got shape {array.shape}")
    return array


def merge_groups(*groupings) -> np.ndarray:
    """The finest grouping that every given grouping refines: rows end in one group when any grouping puts them
    together, directly or through a chain (connected components). For row-parallel files, e.g.
    `merge_groups(*(premise_groups(p) for p in premises_by_language))`, ids numbered by first appearance."""
    if not groupings:
        raise ConfigError("merge_groups needs at least one grouping")
    arrays = [_first_appearance_ids(_as_groups(g)) for g in groupings]
    if len({len(a) for a in arrays}) != 1:
        raise DataError(f"groupings of different lengths: {sorted({len(a) for a in arrays})}; rows must be parallel")
    label = np.arange(len(arrays[0]), dtype=np.int64)
    while True:  # min-label propagation: each pass gives every group its smallest member label; stops when stable
        before = label.copy()
        for ids in arrays:
            smallest = np.full(ids.max(initial=-1) + 1, len(label), dtype=np.int64)
            np.minimum.at(smallest, ids, label)
            label = smallest[ids]
        if np.array_equal(label, before):
            return _first_appearance_ids(label)


def split_by_groups(groups, selection_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train_idx, selection_idx): sorted row indices, whole groups on each side, none on both.

    The distinct group ids (sorted) are shuffled by `np.random.default_rng(seed).permutation`; the selection takes
    the shortest prefix of that order that holds at least `selection_size` rows, or one group less when that comes
    closer (ties: at least). With groups of 3 and `selection_size` 510 of 5,010 rows: exactly 510 / 4,500."""
    array = _as_groups(groups)
    rows = len(array)
    if not 0 <= selection_size <= rows:
        raise ConfigError(f"selection_size {selection_size} must be between 0 and the {rows} rows")
    ids, inverse, sizes = np.unique(array, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    order = np.random.default_rng(seed).permutation(len(ids))
    cumulative = np.cumsum(sizes[order])
    take = int(np.searchsorted(cumulative, selection_size, side="left")) + 1  # first prefix reaching the size
    if selection_size == 0:
        take = 0
    elif take > 1 and selection_size - cumulative[take - 2] < cumulative[take - 1] - selection_size:
        take -= 1
    chosen = np.zeros(len(ids), dtype=bool)
    chosen[order[:take]] = True
    in_selection = chosen[inverse]
    return np.flatnonzero(~in_selection), np.flatnonzero(in_selection)


def subsample_groups(groups, every: int, offset: int = 0) -> np.ndarray:
    """Sorted row indices of every `every`-th group (groups numbered by first appearance; those with number %
    every == offset), all rows of each: fewer pairs, same group structure, no randomness. To thin one side of a
    split: `train_idx[subsample_groups(groups[train_idx], k)]`."""
    if every < 1 or not 0 <= offset < every:
        raise ConfigError(f"every must be >= 1 and 0 <= offset < every; got every={every}, offset={offset}")
    ids = _first_appearance_ids(_as_groups(groups)) if len(groups) else np.zeros(0, dtype=np.int64)
    return np.flatnonzero(ids % every == offset)
