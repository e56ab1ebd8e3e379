"""Where a run computes: the device, the precision (autocast dtype, fp16's loss scaler) and the torchrun process
group."""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from mlminilm import logging as mlog

log = mlog.get(__name__)

# How long a collective may wait for the slowest rank before the process group gives up with an error (instead of
# waiting forever, or NCCL's 10-minute default). Generous, because ranks legitimately wait for each other: rank 0
# alone fills the parallel term's teacher-target cache, and the first step compiles on every rank (minutes on CUDA).
# A run whose target cache takes longer raises it with this variable, in minutes.
TIMEOUT_ENV = "MLMINILM_DIST_TIMEOUT_MIN"
DEFAULT_TIMEOUT = timedelta(minutes=30)


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    dtype: torch.dtype  # compute dtype of autocast (float32 = no autocast)
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1  # processes on this node (per-node resources, such as loader workers, divide by it)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX), so `--precision auto` uses bf16 on it.

    There a distill step under bf16 autocast (teacher weights in bf16, relation logits still fp32) takes about
    half the time of fp32 (benchmarks/distill_step.py, docs/BENCHMARKS.md); without it bf16 is emulated and slower.
    """
    import torch.cpu

    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a torch without these probes: read the CPU flags
        try:
            flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split()
        except OSError:
            return False
        return "avx512_bf16" in flags or "amx_bf16" in flags


def local_world_size(world: int) -> int:
    """The processes on this node: torchrun's LOCAL_WORLD_SIZE; `world` (one node) when a launcher sets only
    WORLD_SIZE."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", world))


def process_group_timeout() -> timedelta:
    """DEFAULT_TIMEOUT, or MLMINILM_DIST_TIMEOUT_MIN minutes."""
    value = os.environ.get(TIMEOUT_ENV)
    if value is None:
        return DEFAULT_TIMEOUT
    try:
        minutes = float(value)
    except ValueError:
        minutes = -1.0
    if not (math.isfinite(minutes) and minutes > 0):
        from mlminilm.errors import ConfigError

        raise ConfigError(f"{TIMEOUT_ENV}={value!r}: give the process group's timeout as a positive number of minutes")
    return timedelta(minutes=minutes)


def setup_runtime(device: str = "auto", precision: str = "auto") -> Runtime:
    """Pick the device and precision, and join the torchrun process group when launched by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = local_world_size(world)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        from mlminilm.errors import ConfigError

        raise ConfigError("--device cuda was asked for but no CUDA device is available; use --device cpu")
    dev = torch.device(device, local_rank) if device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        timeout = process_group_timeout()
        if dev.type == "cuda":
            # Bound to this process's GPU from the start: NCCL then creates its communicators eagerly on the right
            # device instead of guessing it at the first collective.
            dist.init_process_group(backend="nccl", device_id=dev, timeout=timeout)
        else:
            dist.init_process_group(backend="gloo", timeout=timeout)
    if precision == "auto":
        precision = (
            "bf16"
            if (dev.type == "cuda" and torch.cuda.is_bf16_supported()) or (dev.type == "cpu" and cpu_has_native_bf16())
            else ("fp16" if dev.type == "cuda" else "fp32")
        )
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    return Runtime(dev, dtype, rank, world, local_rank, local_world)


def teardown_runtime(rt: Runtime) -> None:
    if rt.distributed and dist.is_initialized():
        dist.destroy_process_group()


def make_grad_scaler(rt: Runtime):
    """fp16 needs loss scaling (its range is too small for small gradients); bf16 and fp32 do not. With the fused
    AdamW, GradScaler hands the optimizer its inf flag as a tensor, so a step with scaling reads nothing on the host.
    """
    if rt.dtype != torch.float16:
        return None
    return torch.amp.GradScaler(rt.device.type)
