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

Costs: one read of the embedding's gradient to mark rows, one [vocabulary] all-reduce, and no host
synchronisation when the training step says how many ids it looked up (`note_lookups`; distill does): then the
rows are taken by `torch.nonzero_static` into a block of a size fixed on the host, the most rows the step can
have used, |U| <= the world size x this process's lookups (every rank looks up as many: packed sequences of one
length, pair batches padded to one bucket on every rank). A step that looked up more than half the table's rows
so reduces the embedding whole. A caller that does not count (finetune) gets the block sized by `nonzero`, one host
synchronisation at the end of the backward, as before.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
from torch import nn

# Where the row-sparse form pays. On CUDA marking the rows is one pass over the gradient at device bandwidth
# (~0.1 ms for 384 MB on an H100) against a wire volume cut from the whole table to the step's rows. On the CPU
# (gloo, 2 ranks on one machine) marking costs about what it saves: 491 ms against 479 ms for the whole all-reduce
# of a 250,002 x 384 gradient with 8,067 rows used (experiments/row_sparse_reduce.py, a busy 2-core machine), so
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


class RowState:
    """The hook's state: which parameters are word embeddings, and the ids this process looked up since the last
    reduce (0: not counted, the block is sized by `nonzero`)."""

    def __init__(self, rows_of: set[int]):
        self.rows_of, self.lookups = rows_of, 0

    def __contains__(self, param_id: int) -> bool:
        return param_id in self.rows_of


def register(ddp: nn.parallel.DistributedDataParallel, module: nn.Module, device: torch.device) -> bool:
    """Make `ddp` reduce `module`'s word-embedding gradient row-sparse (`reduce_bucket`) on the devices of
    ON_DEVICES; elsewhere, or without a trained word embedding (--freeze-embeddings), DDP keeps its own hook.
    Returns whether the hook was registered."""
    rows_of = embedding_weights(module) if device.type in ON_DEVICES else set()
    if rows_of:
        ddp._mlminilm_rows = RowState(rows_of)
        ddp.register_comm_hook(ddp._mlminilm_rows, hook)
    return bool(rows_of)


def note_lookups(model: nn.Module, ids: int) -> None:
    """Count `ids` word-embedding lookups of this process's current step (a host int: a batch's numel) toward the
    static block size; nothing where the row-sparse hook is not registered."""
    state = getattr(model, "_mlminilm_rows", None)
    if state is not None:
        state.lookups += ids


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


def reduce_bucket(rows_of: RowState | set[int], bucket) -> None:
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
        reduce_rows(grad, getattr(rows_of, "lookups", 0) * dist.get_world_size())
        start = offset + grad.numel()
    if start < buffer.numel():
        dist.all_reduce(buffer[start:])
    if isinstance(rows_of, RowState):
        rows_of.lookups = 0  # the step's gradients are reduced: the next step counts afresh


def reduce_rows(grad: torch.Tensor, most: int = 0) -> int:
    """Sum `grad` ([rows, width], a view in DDP's bucket) over the ranks, in place, row-sparse; returns how many
    rows went over the wire. `most`: the most rows the ranks can have used together (0: unknown), the size of a
    block taken without a host synchronisation (`reduce_rows_static`)."""
    if most and static_rows_work(str(grad.device)):
        return reduce_rows_static(grad, most)
    used = grad.ne(0).any(dim=1).to(torch.int32)
    dist.all_reduce(used, op=dist.ReduceOp.MAX)
    rows = used.nonzero().squeeze(1)  # sized by the device's answer: the host waits for it
    if 2 * rows.numel() > grad.shape[0]:
        dist.all_reduce(grad)
        return grad.shape[0]
    block = grad.index_select(0, rows)
    dist.all_reduce(block)
    grad.index_copy_(0, rows, block)
    return rows.numel()


@functools.lru_cache(maxsize=None)
def static_rows_work(device: str) -> bool:
    """Whether this torch has `nonzero_static` for `device` (the CPU from 2.1, CUDA only in later releases than the
    2.3 mlminilm allows): asked once per device, on a one-element tensor, before any collective depends on it."""
    try:
        torch.nonzero_static(torch.ones(1, dtype=torch.int32, device=device), size=1)
    except (AttributeError, NotImplementedError, RuntimeError):
        return False
    return True


def reduce_rows_static(grad: torch.Tensor, most: int) -> int:
    """`reduce_rows` with a block of `most` rows, a size the host knows: the used rows' indices padded with -1 by
    `nonzero_static`, so no step waits for the device. The padding slots gather zeros and add zeros (to row 0):
    the used rows are cleared and the summed block added back, so whichever rows are used the result is the dense
    sum's, bit for bit in the used rows, and a row that no rank used keeps its zeros."""
    if 2 * most > grad.shape[0]:
        dist.all_reduce(grad)
        return grad.shape[0]
    used = grad.ne(0).any(dim=1).to(torch.int32)
    dist.all_reduce(used, op=dist.ReduceOp.MAX)
    # More used rows than `most` would drop some: the step's count above rules it out, and a device-side assert (no
    # host wait) stops the run loudly rather than let a miscounted step train on a partial gradient.
    torch._assert_async(used.sum() <= most)
    rows = torch.nonzero_static(used, size=most, fill_value=-1).squeeze(1)
    real = rows.ge(0)
    rows = rows.clamp(min=0)
    block = grad.index_select(0, rows).mul_(real.unsqueeze(1))
    dist.all_reduce(block)
    grad.masked_fill_(used.bool().unsqueeze(1), 0)
    grad.index_add_(0, rows, block)
    return most
