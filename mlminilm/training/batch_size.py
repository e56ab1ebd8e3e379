"""The micro-batch and the accumulation of a distillation run: given, or found (`--batch-size auto`).

A run's global batch (sequences per optimizer step over all processes) decides what is learned; how it is cut
into micro-batches only decides memory and speed. The stateless sampler draws the same global batch for a step
however it is cut (mlminilm/corpus/sampling.py), so `--batch-size auto` may pick any micro-batch that divides the
per-process share: on CUDA the largest power of two whose distill step fits in memory, on CPU the largest up to
CPU_AUTO_LIMIT (there is no memory limit to find, and larger batches stop paying for themselves).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable

from mlminilm.config import AUTO
from mlminilm.errors import ConfigError

if TYPE_CHECKING:  # this module's arithmetic imports no torch
    from mlminilm.training.runtime import Runtime

CPU_AUTO_LIMIT = 32  # the default --batch-size
# A CUDA micro-batch fits when its step's peak memory plus AdamW's two moments of every trained parameter stay
# within this share of the device's memory: the probe runs before the optimizer has state, and the allocator
# needs some room to fragment.
CUDA_MEMORY_SHARE = 0.9


@dataclass(frozen=True)
class BatchPlan:
    micro_batch: int  # sequences per process per micro-batch
    grad_accum: int  # micro-batches per optimizer step
    global_batch: int  # sequences per optimizer step over all processes
    how: str  # "given", "global" (accumulation from --global-batch), "auto" (micro-batch found)

    def to_dict(self) -> dict:
        return asdict(self)


def plan_batch(
    batch_size: int | str,
    grad_accum: int,
    global_batch: int | None,
    world: int,
    fits: Callable[[int], bool] | None = None,
    cap: int | None = None,
) -> BatchPlan:
    """The micro-batch and accumulation for these options on `world` processes.

    `fits(b)` says whether a micro-batch of b sequences fits (CUDA: a trial step); `cap` bounds auto's choice."""
    if global_batch is None:
        if batch_size == AUTO:
            raise ConfigError("--batch-size auto needs --global-batch N (the sequences per optimizer step it keeps)")
        return BatchPlan(batch_size, grad_accum, batch_size * grad_accum * world, "given")
    if global_batch % world:
        raise ConfigError(f"--global-batch {global_batch} must be a multiple of the {world} processes")
    per_process = global_batch // world
    if batch_size == AUTO:
        micro = largest_fitting(per_process, fits or (lambda b: True), cap)
        return BatchPlan(micro, per_process // micro, global_batch, "auto")
    if per_process % batch_size:
        raise ConfigError(
            f"--global-batch {global_batch} over {world} process(es) is {per_process} sequences each, not a multiple "
            f"of --batch-size {batch_size}"
        )
    return BatchPlan(batch_size, per_process // batch_size, global_batch, "global")


def largest_fitting(per_process: int, fits: Callable[[int], bool], cap: int | None = None) -> int:
    """The largest power of two dividing `per_process` (and at most `cap`) that fits, trying 1, 2, 4, ... upwards
    and stopping at the first that does not fit (memory grows with the batch, so no larger one would)."""
    best = None
    size = 1
    while size <= per_process and (cap is None or size <= cap):
        if per_process % size == 0:
            if not fits(size):
                break
            best = size
        size *= 2
    if best is None:
        raise ConfigError(
            "--batch-size auto: not even one sequence per micro-batch fits in the device's memory; "
            "use a smaller student, shorter sequences (prepare --seq-len) or --precision bf16"
        )
    return best


def agree_across_ranks(found: BatchPlan, rt: Runtime) -> BatchPlan:
    """Under torchrun, `--batch-size auto` as every rank can run it: the smallest micro-batch any rank found.

    Each rank probes its own device, and devices differ (another process's memory, a smaller card). Ranks that
    kept their own micro-batch would slice each step's global batch by different sizes (the sampler's slices
    assume one), training on some sequences twice and others never, silently (tests/test_ddp.py). Every candidate
    is a power of two dividing the per-process share, so the smallest divides it too. One all-reduce (MIN),
    before training; the other modes need none (the options alone decide them, alike on every rank)."""
    if not rt.distributed or found.how != "auto":
        return found
    import torch
    import torch.distributed as dist

    micro = torch.tensor([found.micro_batch], dtype=torch.long, device=rt.device)
    dist.all_reduce(micro, op=dist.ReduceOp.MIN)
    smallest = int(micro.item())
    per_process = found.global_batch // rt.world
    return BatchPlan(smallest, per_process // smallest, found.global_batch, found.how)
