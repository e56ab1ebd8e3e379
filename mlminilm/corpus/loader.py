"""`distill`'s micro-batches built ahead of the training step, in DataLoader workers when asked.

Item `i` of `MicroBatches` is micro-batch (step, micro) = divmod(i, accum) of one process: a pure function of
the index (the sampler is stateless), so a loader started at any step yields exactly the batches the
uninterrupted run would have, whatever the number of workers. Everything a step needs to know about its batch
(padding, real-token count, language counts) is computed here on the host, so the step never reads back from
the device for it.

Whether a micro-batch is padded (goes to the model with an attention mask) is decided for all processes at once,
from the global draw every rank computes alike: under torch.compile the masked and the unmasked step are two
graphs, and a rank deciding alone would compile the second one while every other rank waited for it in the
gradient all-reduce (minutes on CUDA), at a different step on each rank.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from mlminilm.corpus.dataset import PreparedData
from mlminilm.corpus.sampling import BatchSampler

CUDA_WORKERS = 4  # enough to hide a micro-batch's read behind a GPU step; more only takes cores from the ranks


@dataclass
class MicroBatch:
    """One process's micro-batch `micro` of optimizer step `step`.

    `padded`: some process's slice of this micro-batch holds padding; `attention_mask` is then exactly
    (input_ids != pad_id) as long (all ones when the padding is another rank's), otherwise None (pass
    attention_mask=None to the model then). `tokens` counts the real (non-pad) tokens of this process's slice.
    """

    step: int
    micro: int
    input_ids: torch.Tensor  # long [batch, seq_len]
    attention_mask: torch.Tensor | None  # long [batch, seq_len], or None when not padded
    padded: bool
    tokens: int
    langs: dict[str, int]

    def pin_memory(self) -> MicroBatch:
        """Called by the DataLoader's pinning thread (pin_memory=True): page-locked copies for async copies."""
        return self._map_tensors(lambda t: t.pin_memory())

    def to(self, device, non_blocking: bool = False) -> MicroBatch:
        return self._map_tensors(lambda t: t.to(device, non_blocking=non_blocking))

    def _map_tensors(self, fn) -> MicroBatch:
        mask = None if self.attention_mask is None else fn(self.attention_mask)
        return replace(self, input_ids=fn(self.input_ids), attention_mask=mask)


class MicroBatches(Dataset):
    """Map-style: item i is micro-batch divmod(i, accum) of process `rank` of `world`; CPU tensors only, so
    workers never touch CUDA (safe under fork after CUDA is initialised, and under spawn)."""

    def __init__(
        self,
        data: PreparedData,
        sampler: BatchSampler,
        *,
        batch_size: int,
        accum: int,
        rank: int,
        world: int,
        pad_id: int | None,
        max_steps: int,
    ):
        self.data, self.sampler = data, sampler
        self.batch_size, self.accum, self.rank, self.world = batch_size, accum, rank, world
        self.pad_id, self.max_steps = pad_id, max_steps
        self.padded_last = self._padded_last_sequences()

    def _padded_last_sequences(self) -> np.ndarray:
        """Per sampler language: whether its last sequence holds padding. `prepare` packs a language's text into
        full sequences and pads only its last one (corpus/packing.py), so a draw is padded exactly when it takes
        a padded last sequence: known from the indices alone, for every rank's slice, without reading them."""
        if self.pad_id is None:
            return np.zeros(len(self.sampler.langs), bool)
        return np.array(
            [
                bool((self.data.get(lang, int(count) - 1) == self.pad_id).any()) if count else False
                for lang, count in zip(self.sampler.langs, self.sampler.counts)
            ]
        )

    def _any_rank_padded(self, step: int, micro: int) -> bool:
        lang, index = self.sampler.all_ranks(step, micro, self.batch_size, self.accum, self.world)
        return bool((self.padded_last[lang] & (index == self.sampler.counts[lang] - 1)).any())

    def __len__(self) -> int:
        return self.max_steps * self.accum

    def __getitem__(self, index: int) -> MicroBatch:
        if not 0 <= index < len(self):
            raise IndexError(f"micro-batch {index} out of range ({self.max_steps} steps x {self.accum})")
        step, micro = divmod(int(index), self.accum)
        lang_idx, seq_idx = self.sampler.micro_batch(step, micro, self.batch_size, self.accum, self.rank, self.world)
        langs = self.sampler.langs
        ids = self.data.batch([(langs[l], int(i)) for l, i in zip(lang_idx, seq_idx)])
        real = ids != self.pad_id if self.pad_id is not None else None
        tokens = int(real.sum()) if real is not None else ids.size
        # Its own padding always counts (data packed otherwise than by `prepare` stays correct on this rank).
        padded = tokens < ids.size or self._any_rank_padded(step, micro)
        return MicroBatch(
            step=step,
            micro=micro,
            input_ids=torch.from_numpy(ids.astype(np.int64)),
            attention_mask=torch.from_numpy(real.astype(np.int64)) if padded else None,
            padded=padded,
            tokens=tokens,
            langs={langs[l]: n for l, n in sorted(Counter(lang_idx.tolist()).items())},
        )


class MicroBatchLoader:
    """The DataLoader over steps start_step..max_steps-1, step-major, and a way to stop its workers at once
    (`close`, or leaving a `with` block) instead of whenever the garbage collector finds the iterator."""

    def __init__(self, loader: DataLoader):
        self.loader = loader
        self._iter = None

    def __iter__(self):
        self.close()  # one pass at a time: a second iter() must not leave the first one's workers running
        self._iter = iter(self.loader)
        return self._iter

    def __len__(self) -> int:
        return len(self.loader)

    def close(self) -> None:
        it, self._iter = self._iter, None
        shutdown = getattr(it, "_shutdown_workers", None)  # what the iterator's __del__ calls; absent with 0 workers
        if shutdown is not None:
            shutdown()

    def __enter__(self) -> MicroBatchLoader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_loader(
    data: PreparedData,
    sampler: BatchSampler,
    *,
    batch_size: int,
    accum: int,
    rank: int,
    world: int,
    pad_id: int | None,
    start_step: int,
    max_steps: int,
    workers: int,
    pin_memory: bool,
    prefetch_factor: int = 2,
    multiprocessing_context: str | None = None,
) -> MicroBatchLoader:
    """Micro-batches of steps start_step..max_steps-1 in order. `workers` = 0 builds them in this process at
    `next()`; > 0 builds up to workers x prefetch_factor ahead. `multiprocessing_context` (e.g. "spawn")
    overrides the platform's default start method."""
    dataset = MicroBatches(
        data, sampler, batch_size=batch_size, accum=accum, rank=rank, world=world, pad_id=pad_id, max_steps=max_steps
    )
    order = range(min(start_step, max_steps) * accum, max_steps * accum)
    loader = DataLoader(
        dataset,
        batch_size=None,
        sampler=order,
        num_workers=workers,
        pin_memory=pin_memory,
        prefetch_factor=prefetch_factor if workers > 0 else None,
        persistent_workers=False,  # one pass per run: workers end with it
        multiprocessing_context=multiprocessing_context if workers > 0 else None,
    )
    return MicroBatchLoader(loader)


def default_workers(device_type: str, local_world: int = 1) -> int:
    """Loader workers per process. CPU: 0, the cores run the model and a worker only takes time slices from it
    (experiments/data_loader.py). CUDA: a few, leaving each rank's main process a core of its own. The node's cores
    are shared by its own `local_world` processes only (on 2 nodes of 8 GPUs, 8, not the 16 of WORLD_SIZE)."""
    if device_type != "cuda":
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(CUDA_WORKERS, cores // max(local_world, 1) - 1))


def default_pin_memory(device_type: str) -> bool:
    """Pinned host memory only pays with a CUDA copy to overlap."""
    return device_type == "cuda"
