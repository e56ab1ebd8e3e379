"""Which sequences each step trains on: languages drawn with q_i proportional to p_i^alpha.

Stateless by design: the draw for a step depends only on (seed, step), so a resumed run sees exactly the
batches the uninterrupted run would have, and N processes with batch B see the same global batch as one
process with batch N*B (each takes its own slice).
"""

from __future__ import annotations

import numpy as np

from mlminilm.corpus.dataset import sampling_probabilities


class BatchSampler:
    def __init__(self, counts: dict[str, int], alpha: float, seed: int):
        self.langs = sorted(lang for lang, c in counts.items() if c > 0)
        probs = sampling_probabilities({lang: counts[lang] for lang in self.langs}, alpha)
        self.probs = np.array([probs[lang] for lang in self.langs], dtype=np.float64)
        self.counts = np.array([counts[lang] for lang in self.langs], dtype=np.int64)
        self.seed = seed

    def global_batch(self, step: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(language index, sequence index) arrays of length `size` for optimizer step `step`."""
        rng = np.random.default_rng([self.seed, step])
        lang = rng.choice(len(self.langs), size=size, p=self.probs)
        index = (rng.random(size) * self.counts[lang]).astype(np.int64)
        return lang, index

    def micro_batch(self, step: int, micro: int, batch: int, accum: int, rank: int, world: int):
        """This process's slice of the global batch for micro-batch `micro` of step `step`."""
        lang, index = self.all_ranks(step, micro, batch, accum, world)
        return lang[rank * batch : (rank + 1) * batch], index[rank * batch : (rank + 1) * batch]

    def all_ranks(self, step: int, micro: int, batch: int, accum: int, world: int):
        """Micro-batch `micro` of step `step` over every process: rank r's slice is rows r*batch .. (r+1)*batch-1."""
        lang, index = self.global_batch(step, batch * accum * world)
        start = micro * world * batch
        return lang[start : start + world * batch], index[start : start + world * batch]
