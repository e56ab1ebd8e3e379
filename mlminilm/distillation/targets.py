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
    from mlminilm.distillation.objective import last_hidden

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
    time. Returns how many were computed."""
    todo = store.missing(texts)
    for start in range(0, len(todo), PART_SIZE):
        chunk = todo[start : start + PART_SIZE]
        store.write(chunk, embed(chunk))
        if progress is not None:
            progress(min(start + PART_SIZE, len(todo)), len(todo))
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
    is_main: bool = True,
    barrier=lambda: None,
    advice: str = "give --target-cache a writable directory of its own",
) -> TargetTable:
    """The table of the teacher's embeddings of `texts` under `root`: what the store lacks is computed by the main
    process (logged, with progress) while it holds the fingerprint's folder (another run filling it is waited
    for); the others wait at `barrier` and read what it wrote. `advice`: how an error says to move the cache."""
    width = teacher.config.hidden_size * len(modes)  # pooling concatenates one vector per mode
    facts = fingerprint(module_digest(teacher), modes, normalize, prefix, max_length, width=width)
    store = TargetStore(root, facts, advice)
    if is_main:
        t0 = time.perf_counter()

        def embed(chunk: list[str]) -> np.ndarray:
            return embed_sources(
                teacher,
                tokenizer,
                chunk,
                prefix=prefix,
                max_length=max_length,
                modes=modes,
                normalize=normalize,
                device=device,
            )

        def progress(done: int, total: int) -> None:
            log.info("teacher targets: %d of %d sentences embedded (%.0f s)", done, total, time.perf_counter() - t0)

        def waiting(holder: str) -> None:
            log.info("teacher-target cache %s is being filled by another run%s: waiting for it", store.dir, holder)

        with store.locked(wait=waiting):
            store.load()
            computed = fill(store, texts, embed, progress)
        distinct = len(set(texts))
        log.info(
            "teacher targets for %s distinct source sentences: %s from the cache, %s computed, in %s",
            f"{distinct:,}",
            f"{distinct - computed:,}",
            f"{computed:,}",
            store.dir,
        )
    barrier()
    if not is_main:
        store.load(repair=False)
    return store.table()
