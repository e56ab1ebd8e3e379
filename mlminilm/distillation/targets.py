"""The teacher's embeddings of the parallel term's source sentences, computed once (`distill --target-cache`).

The teacher does not change during a run, so its embedding of a source sentence is the same every time the
sentence is drawn. Before training, the sources the run will draw (the stateless sampler says which) are
embedded once, in length-sorted batches, and kept on disk; each step then reads its targets instead of running
the teacher. The store is keyed by what decides a target:

- a fingerprint of the teacher as it computes (a digest of every tensor of the loaded module, in the run's
  dtype), the pooling head, the prefix and the maximum length: one subdirectory per fingerprint, so a changed
  teacher, dtype, prefix or length never meets another's vectors;
- the digest of each sentence's text inside it.

Each part file (`part-NNNNN.safetensors`: `keys` uint8 [n, 16], `vectors` float32 [n, H]) records a digest of
its own tensors; a part that does not load or whose digest differs is removed with a warning and its sentences
are recomputed, never used. Parts are written whole (temporary name, then rename), so a run killed while
filling the cache leaves the parts finished before it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm.distillation.losses import sentence_embedding

log = mlog.get(__name__)

KEY_BYTES = 16
# Sentences embedded per teacher forward while filling the cache (sorted by length, so padding is small).
FILL_BATCH = 64
# Sentences per part file: a killed fill keeps what it finished, in steps of this many.
PART_SIZE = 4096
FORMAT = 1


def text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=KEY_BYTES).digest()


def module_digest(module: nn.Module) -> str:
    """A digest of every parameter and buffer of `module` (names, dtypes, shapes and bytes), as it computes."""
    h = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted({**dict(module.named_parameters()), **dict(module.named_buffers())}.items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def fingerprint(teacher_digest: str, modes: tuple[str, ...], normalize: bool, prefix: str, max_length: int) -> dict:
    """What decides a target besides its text; `id` names the cache subdirectory."""
    facts = {
        "format": FORMAT,
        "teacher": teacher_digest,
        "pooling": list(modes),
        "normalize": normalize,
        "prefix": prefix,
        "max_length": max_length,
    }
    facts["id"] = hashlib.blake2b(json.dumps(facts, sort_keys=True).encode(), digest_size=12).hexdigest()
    return facts


def _part_digest(keys: np.ndarray, vectors: np.ndarray) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(keys.tobytes())
    h.update(vectors.tobytes())
    return h.hexdigest()


class TargetStore:
    """One fingerprint's vectors: what is on disk, checked, and what this run adds."""

    def __init__(self, root: Path, facts: dict):
        self.dir = Path(root) / facts["id"]
        self.facts = facts
        self.index: dict[bytes, int] = {}
        self.rows: list[np.ndarray] = []
        self.dim: int | None = None

    def load(self) -> int:
        """Read every intact part; remove damaged ones (warned). Returns the number of vectors read."""
        from safetensors import safe_open

        if not self.dir.is_dir():
            return 0
        for part in sorted(self.dir.glob("part-*.safetensors")):
            try:
                with safe_open(str(part), framework="np") as f:
                    digest = (f.metadata() or {}).get("digest")
                    keys, vectors = f.get_tensor("keys"), f.get_tensor("vectors")
                ok = (
                    digest == _part_digest(keys, vectors)
                    and keys.ndim == 2
                    and keys.shape[1] == KEY_BYTES
                    and vectors.ndim == 2
                    and len(keys) == len(vectors)
                    and vectors.dtype == np.float32
                    and (self.dim is None or vectors.shape[1] == self.dim)
                )
            except Exception:  # safetensors raises its own error types for a truncated or garbled file
                ok = False
            if not ok:
                log.warning("teacher-target cache: %s is damaged; removed, its sentences are recomputed", part)
                part.unlink(missing_ok=True)
                continue
            self.dim = vectors.shape[1]
            self._add(keys, vectors)
        return len(self.index)

    def _add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        base = sum(len(r) for r in self.rows)
        self.rows.append(vectors)
        for i, key in enumerate(keys):
            self.index.setdefault(bytes(key), base + i)

    def missing(self, texts: list[str]) -> list[str]:
        """The distinct texts of `texts` with no vector yet, in first-seen order."""
        return [t for t in dict.fromkeys(texts) if text_key(t) not in self.index]

    def write(self, texts: list[str], vectors: np.ndarray) -> None:
        """Add `vectors` (float32 [n, H]) for `texts` as one new part file, written whole."""
        from safetensors.numpy import save_file

        keys = np.frombuffer(b"".join(text_key(t) for t in texts), dtype=np.uint8).reshape(len(texts), KEY_BYTES)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.dir.mkdir(parents=True, exist_ok=True)
        facts = self.dir / "fingerprint.json"
        if not facts.exists():
            facts.write_text(json.dumps(self.facts, indent=2) + "\n", encoding="utf-8")
        n = len(list(self.dir.glob("part-*.safetensors")))
        while (self.dir / f"part-{n:05d}.safetensors").exists():
            n += 1
        final = self.dir / f"part-{n:05d}.safetensors"
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        try:
            save_file({"keys": keys, "vectors": vectors}, str(tmp), metadata={"digest": _part_digest(keys, vectors)})
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        self.dim = vectors.shape[1]
        self._add(keys, vectors)

    def table(self) -> TargetTable:
        return TargetTable(self.index, torch.from_numpy(np.concatenate(self.rows)) if self.rows else None)


class TargetTable:
    """The vectors in memory, looked up by text: what a step's ParallelBatch carries instead of the sources."""

    def __init__(self, index: dict[bytes, int], vectors: torch.Tensor | None):
        self.index, self.vectors = index, vectors

    def __call__(self, texts: list[str]) -> torch.Tensor:
        rows = [self.index[text_key(t)] for t in texts]  # KeyError: a text the fill did not embed (a bug)
        return self.vectors[rows]


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
) -> TargetTable:
    """The table of the teacher's embeddings of `texts` under `root`: what the store lacks is computed by the main
    process (logged, with progress), the others wait at `barrier` and read what it wrote."""
    store = TargetStore(root, fingerprint(module_digest(teacher), modes, normalize, prefix, max_length))
    if is_main:
        store.load()
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
        store.load()
    return store.table()
