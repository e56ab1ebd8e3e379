"""The order of a fine-tuning run's training examples: a pure function of (seed, position), so that --resume
continues bit for bit."""

from __future__ import annotations

import numpy as np


class StreamOrder:
    """Position p of the training stream -> example index: epoch p // n in a permutation seeded by (seed, epoch).

    Only (seed, step) decide a batch, so a resumed run draws exactly the batches the uninterrupted one would.
    With `lengths` (--group-by-length), each epoch's permutation is regrouped so that a batch holds inputs of
    similar length (less padding, much faster on CPU): shuffled chunks of 50 batches are sorted by length, cut into
    batches, and the batches shuffled."""

    GROUP = 50  # batches per sorted chunk

    def __init__(self, n: int, seed: int, batch: int = 1, lengths=None):
        self.n, self.seed, self.batch = n, seed, batch
        self.lengths = None if lengths is None else np.asarray(lengths)
        self._cache: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._cache:
            if len(self._cache) > 2:
                self._cache.clear()
            rng = np.random.default_rng([self.seed, epoch])
            perm = rng.permutation(self.n)
            if self.lengths is not None:
                size = self.batch * self.GROUP
                chunks = [perm[i : i + size] for i in range(0, self.n, size)]
                perm = np.concatenate([c[np.argsort(-self.lengths[c], kind="stable")] for c in chunks])
                batches = [perm[i : i + self.batch] for i in range(0, self.n, self.batch)]
                perm = np.concatenate([batches[i] for i in rng.permutation(len(batches))])
            self._cache[epoch] = perm
        return self._cache[epoch]

    def indices(self, start: int, count: int) -> np.ndarray:
        positions = np.arange(start, start + count)
        return np.asarray([self._perm(int(p // self.n))[p % self.n] for p in positions])
