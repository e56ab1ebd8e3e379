"""DDP's gradient all-reduce with the word embedding's gradient reduced row-sparse: only the rows some rank used.

A word embedding's gradient is dense, [vocabulary, hidden], but zero in every row no token of the step looked up:
for a 250,002 x 384 student at 32 x 128 tokens per GPU, a few thousand rows of 250,002. DDP all-reduces all of it
(384 MB in fp32) in the last bucket of the backward (the embedding is the first layer), where no computation is
left to hide it behind. This hook reduces the other gradients as DDP does, and the embedding's as:

1. each rank marks its rows that are not all zero ([vocabulary] int32, 1 MB), and the marks are all-reduced (MAX):
   the union U of the rows any rank has a non-zero gradient in;
2. only the rows of U are gathered, all-reduced and put back: [|U|, hidden] instead of [vocabulary, hidden].

Exact: a row outside U is zero on every rank, so the dense sum there is zero too (the row is left as it is: a
zero, +0 or -0, which AdamW treats alike); the rows of U are divided by the world size and summed as DDP's own
hook does (`default_hooks.allreduce_hook`). Where U covers more than half the rows (a trimmed vocabulary, a very
large batch) the row-sparse form saves nothing and the embedding is reduced whole. AdamW still updates every row
(its moments decay in untouched rows too): only the communication is sparse, never the optimizer.

Costs: one read of the embedding's gradient to mark rows, one [vocabulary] all-reduce, and on CUDA one host
synchronisation to size U (`nonzero`), at the end of the backward, where the step waits for this bucket anyway.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

# Where the row-sparse form pays. On CUDA marking the rows is one pass over the gradient at device bandwidth
# (~0.1 ms for 384 MB on an H100) against a wire volume cut from the whole table to the step's rows. On the CPU
# (gloo, 2 ranks on one machine) marking costs about what it saves: 491 ms against 479 ms for the whole all-reduce
# of a 250,002 x 384 gradient with 8,067 rows used (benchmarks/row_sparse_reduce.py, a busy 2-core machine), so
# the CPU keeps DDP's own hook; the tests turn it on there to prove it exact.
ON_DEVICES = ("cuda",)


def embedding_weights(module: nn.Module) -> set[int]:
    """The ids of `module`'s trained word-embedding weights (Hugging Face encoders name them `word_embeddings`).
    Position and token-type tables are left to the dense reduce: a few hundred rows, where the extra collectives
    would cost more latency than their rows cost bandwidth."""
    found = (
        m
        for name, m in module.named_modules()
        if name.rsplit(".", 1)[-1] == "word_embeddings" and isinstance(m, nn.Embedding) and not m.sparse
    )
    return {id(m.weight) for m in found if m.weight.requires_grad}


def register(ddp: nn.parallel.DistributedDataParallel, module: nn.Module, device: torch.device) -> bool:
    """Make `ddp` reduce `module`'s word-embedding gradient row-sparse (`reduce_bucket`) on the devices of
    ON_DEVICES; elsewhere, or without a trained word embedding (--freeze-embeddings), DDP keeps its own hook.
    Returns whether the hook was registered."""
    rows_of = embedding_weights(module) if device.type in ON_DEVICES else set()
    if rows_of:
        ddp.register_comm_hook(rows_of, hook)
    return bool(rows_of)


def hook(rows_of, bucket):  # unannotated: DDP refuses any return annotation but the exact Future[Tensor] object
    """A bucket without the embedding: DDP's own asynchronous all-reduce (it overlaps the rest of the backward).
    The embedding's bucket (the last of the backward: nothing is left to overlap) reduced in place, synchronously
    (its collectives are ordered on the current stream), as a completed future; on CUDA one that knows the device,
    so DDP's use of the buffer waits for this stream."""
    if not any(id(param) in rows_of for param in bucket.parameters()):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        return default_hooks.allreduce_hook(None, bucket)
    reduce_bucket(rows_of, bucket)
    buffer = bucket.buffer()
    done: torch.futures.Future = torch.futures.Future(devices=[buffer.device] if buffer.is_cuda else None)
    done.set_result(buffer)
    return done


def reduce_bucket(rows_of: set[int], bucket) -> None:
    """All-reduce (mean) one DDP bucket in place: its embedding gradients by rows (`reduce_rows`), the spans of
    the flat buffer between them whole."""
    buffer = bucket.buffer()
    buffer.div_(dist.get_world_size())
    size = buffer.element_size()
    embeddings = sorted(
        ((grad.data_ptr() - buffer.data_ptr()) // size, grad)
        for param, grad in zip(bucket.parameters(), bucket.gradients())
        if id(param) in rows_of and grad.dim() == 2
    )
    start = 0
    for offset, grad in embeddings:
        if offset > start:
            dist.all_reduce(buffer[start:offset])
        reduce_rows(grad)
        start = offset + grad.numel()
    if start < buffer.numel():
        dist.all_reduce(buffer[start:])


def reduce_rows(grad: torch.Tensor) -> int:
    """Sum `grad` ([rows, width], a view in DDP's bucket) over the ranks, in place, row-sparse; returns how many
    rows went over the wire."""
    used = grad.ne(0).any(dim=1).to(torch.int32)
    dist.all_reduce(used, op=dist.ReduceOp.MAX)
    rows = used.nonzero().squeeze(1)
    if 2 * rows.numel() > grad.shape[0]:
        dist.all_reduce(grad)
        return grad.shape[0]
    block = grad.index_select(0, rows)
    dist.all_reduce(block)
    grad.index_copy_(0, rows, block)
    return rows.numel()
