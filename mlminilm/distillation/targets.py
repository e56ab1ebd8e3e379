"""The teacher's embeddings of the parallel term's source sentences, computed once (`distill --target-cache`).

The teacher does not change during a run, so its embedding of a source sentence is the same every time the
sentence is drawn. Before training, the sources the run will draw (the stateless sampler says which) are
embedded once, in length-sorted batches, and kept on disk; each step then reads its targets instead of running
the teacher. The store is keyed by what decides a target:

- a fingerprint of the teacher as it computes (a digest of every tensor of the loaded module, in the run's
  dtype), the pooling head, the prefix and the maximum length: one subdirectory per fingerprint, so a changed
  teacher, dtype, prefix or length never meets another's vectors;
- the digest of each sentence's text inside it.

How the folder is kept on disk (parts that prove their fingerprint, the lock, failed writes) is
mlminilm/distillation/target_store.py. Parts are written whole (temporary name, then rename), so a run killed
while filling the cache leaves the parts finished before it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm.distillation.losses import sentence_embedding
from mlminilm.distillation.target_store import TargetStore, TargetTable, text_key  # noqa: F401 (the store's home)
from mlminilm.errors import CheckpointError

log = mlog.get(__name__)

# Sentences embedded per teacher forward while filling the cache (sorted by length, so padding is small).
FILL_BATCH = 64
# Sentences per part file: a killed fill keeps what it finished, in steps of this many.
PART_SIZE = 4096
# 2: parts name their fingerprint and the facts hold the vectors' width (format 1's folders are never read again).
FORMAT = 2


def module_digest(module: nn.Module) -> str:
    """A digest of every parameter and buffer of `module` (names, dtypes, shapes and bytes), as it computes."""
    h = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted({**dict(module.named_parameters()), **dict(module.named_buffers())}.items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def fingerprint(
    teacher_digest: str, modes: tuple[str, ...], normalize: bool, prefix: str, max_length: int, *, width: int
) -> dict:
    """What decides a target besides its text, and the targets' `width`; `id` names the cache subdirectory."""
    facts = {
        "format": FORMAT,
        "teacher": teacher_digest,
        "pooling": list(modes),
        "normalize": normalize,
        "prefix": prefix,
        "max_length": max_length,
        "width": width,
    }
    facts["id"] = hashlib.blake2b(json.dumps(facts, sort_keys=True).encode(), digest_size=12).hexdigest()
    return facts


@torch.no_grad()
def embed_sources(
    teacher: nn.Module,
    tokenizer,
    texts: list[str],
    *,
    prefix: str,
    max_length: int,
    modes: tuple[str, ...],
    normalize: bool,
    device,
) -> np.ndarray:
    """The teacher's sentence embedding of each text, float32 [n, H], in batches of similar length, autocast off
    (as the training step computes it)."""
    from mlminilm.distillation.capture import last_hidden

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: np.ndarray | None = None
    with torch.autocast(torch.device(device).type, enabled=False):
        for start in range(0, len(order), FILL_BATCH):
            picked = order[start : start + FILL_BATCH]
            enc = tokenizer(
                [prefix + texts[i] for i in picked],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
                return_token_type_ids=False,
            )
            ids, mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
            vectors = sentence_embedding(last_hidden(teacher, ids, mask), mask, modes, normalize).float().cpu().numpy()
            if out is None:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[picked] = vectors
    return out if out is not None else np.empty((0, 0), dtype=np.float32)


def fill(store: TargetStore, texts: list[str], embed, progress=None) -> int:
    """Embed (`embed(texts) -> float32 [n, H]`) and store every text of `texts` the store lacks, PART_SIZE at a
    time. Returns how many were computed.

    Under DDP (a store of rank r of `world` ranks) rank r embeds and writes every world-th of those parts from the
    r-th on, and `progress` counts its own share; the returned count is still that of all ranks. The parts are the
    ones a single process cuts, each embedded in the same batches, so every vector is bit for bit the one a single
    process computes, whatever the number of ranks (a finer split would change the batches, hence the padding and
    the sums' order)."""
    todo = store.missing(texts)
    starts = range(store.rank * PART_SIZE, len(todo), store.world * PART_SIZE)
    share, done = sum(min(PART_SIZE, len(todo) - start) for start in starts), 0
    for start in starts:
        chunk = todo[start : start + PART_SIZE]
        store.write(chunk, embed(chunk))
        done += len(chunk)
        if progress is not None:
            progress(done, share)
    return len(todo)


def prepare(
    root: Path,
    teacher: nn.Module,
    tokenizer,
    texts: list[str],
    modes: tuple[str, ...],
    normalize: bool,
    *,
    prefix: str,
    max_length: int,
    device,
    rank: int = 0,
    world: int = 1,
    barrier=lambda: None,
    advice: str = "give --target-cache a writable directory of its own",
    teacher_digest: str | None = None,
    what: str = "source sentences",
) -> TargetTable:
    """The table of the teacher's embeddings of `texts` under `root`. What the store lacks is computed while rank 0
    holds the fingerprint's folder (another run filling it is waited for; the main process logs, with progress).
    Under DDP every rank computes and writes its share of it (`fill`) and all meet at `barrier` before reading the
    whole table. `advice`: how an error says to move the cache. `teacher_digest`: `module_digest(teacher)` when
    the caller has it (the run computes it once, for its record), else computed here. `what`: what `texts` are,
    for the log (what an input's texts are: source sentences, questions, ...).

    Why rank 0 holds the lock for all the ranks, and they write into the folder it holds, rather than each writing
    temporaries for rank 0 to move in: the lock keeps other runs out, and the ranks of this run only add parts
    under numbers of their own (target_store.TargetStore.write), each written whole as a single process writes it,
    so a rank that dies leaves only finished parts and its temporary (cleaned by the next holder), and nothing has
    to be handed from rank to rank."""
    width = teacher.config.hidden_size * len(modes)  # pooling concatenates one vector per mode
    digest = teacher_digest if teacher_digest is not None else module_digest(teacher)
    facts = fingerprint(digest, modes, normalize, prefix, max_length, width=width)
    store = TargetStore(root, facts, advice, rank=rank, world=world)
    embed = functools.partial(
        embed_sources,
        teacher,
        tokenizer,
        prefix=prefix,
        max_length=max_length,
        modes=modes,
        normalize=normalize,
        device=device,
    )
    if rank == 0:
        t0 = time.perf_counter()

        def progress(done: int, total: int) -> None:
            log.info("teacher targets: %d of %d %s embedded (%.0f s)", done, total, what, time.perf_counter() - t0)

        def waiting(holder: str) -> None:
            log.info("teacher-target cache %s is being filled by another run%s: waiting for it", store.dir, holder)

        with store.locked(wait=waiting):
            store.load()
            if world > 1 and store.missing(texts):
                store.require_writable()  # a read-only cache stops rank 0 before the others start embedding
            barrier()  # the others read the folder once rank 0 has checked it (what does not prove itself is gone)
            barrier()  # and every rank has found what is missing before any writes: all cut the same parts
            computed = fill(store, texts, embed, progress)
            barrier()  # every rank's parts are written before the lock is given back
        distinct = len(set(texts))
        log.info(
            "teacher targets for %s distinct %s: %s from the cache, %s computed, in %s",
            f"{distinct:,}",
            what,
            f"{distinct - computed:,}",
            f"{computed:,}",
            store.dir,
        )
    else:
        barrier()
        store.load(repair=False)
        barrier()
        fill(store, texts, embed)
        barrier()
    return store.table() if world == 1 else _read_whole(store, texts)


def _read_whole(store: TargetStore, texts: list[str]) -> TargetTable:
    """After a fill under DDP: the table of every rank's parts, read afresh (what this rank held is let go first,
    so the cache is in memory once); a rank that does not find them all (a cache on a disk of its own node, which
    the other nodes do not see) stops with one line."""
    store.index, store.rows = {}, []
    store.load(repair=False)
    lacking = store.missing(texts)
    if lacking:
        raise CheckpointError(
            f"rank {store.rank} does not find {len(lacking):,} of the teacher targets the ranks wrote to the cache "
            f"{store.root}: every node must see the same cache directory (a shared filesystem); {store.advice}"
        )
    return store.table()
