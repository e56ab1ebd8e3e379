"""A distill run's micro-batch and accumulation (mlminilm/training/batch_size.py): as the options give them, or,
with `--batch-size auto` on CUDA, the largest micro-batch whose real distill step fits in memory on every rank."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm import training
from mlminilm.config import DistillConfig
from mlminilm.distillation.plan import DistillPlan
from mlminilm.distillation.terms import uses_running_text, weighted_loss
from mlminilm.training.batch_size import CPU_AUTO_LIMIT, CUDA_MEMORY_SHARE, BatchPlan, agree_across_ranks, plan_batch

log = mlog.get("mlminilm.distill")  # the command's own logger, as before the split

# The batch when --batch-size is left out (`default_batch`). CPU: 32 sequences per micro-batch, no accumulation, as
# before. CUDA: at least GPU_TOKENS_PER_STEP tokens per GPU per optimizer step. The old default, 32 x 128 = 4k
# tokens, made a step so short on an H100 that fixed costs dominated it (the embedding's AdamW update over 96M rows
# alone a quarter of it: ~21-28 % MFU, issue 28); 32k tokens spreads those costs over 8 times the work, and is the
# usual pretraining-scale batch per GPU (BERT/RoBERTa-style recipes run 0.1-1M tokens per step over all GPUs).
DEFAULT_BATCH = 32
GPU_TOKENS_PER_STEP = 32_768


def default_batch(cfg: DistillConfig, device_type: str, seq_len: int, world: int) -> DistillConfig:
    """The config with --batch-size decided when it was left out (None): DEFAULT_BATCH, except on CUDA, where the
    micro-batch is auto (the largest power of two that fits) and, unless --global-batch or --grad-accum says
    otherwise, the global batch is `world` x the least power of two of sequences holding GPU_TOKENS_PER_STEP
    tokens (256 at 128 tokens a sequence: exactly 32,768). A given --batch-size is kept as it is."""
    if cfg.batch_size is not None:
        return cfg
    if device_type != "cuda" or cfg.grad_accum != 1:
        return replace(cfg, batch_size=DEFAULT_BATCH)
    if cfg.global_batch is not None:
        return replace(cfg, batch_size="auto")
    sequences = 1 << max(0, math.ceil(math.log2(math.ceil(GPU_TOKENS_PER_STEP / max(1, seq_len)))))
    return replace(cfg, batch_size="auto", global_batch=sequences * world)


def resolve_batch(
    plan: DistillPlan, rt: training.Runtime, teacher: nn.Module, forward: nn.Module, distill_terms: Callable
) -> BatchPlan:
    """The run's micro-batch and accumulation (mlminilm/training/batch_size.py); on CUDA `--batch-size auto` tries real
    distill steps (teacher, student forward and backward) at growing micro-batches until one does not fit, on every
    rank, and every rank then takes the smallest any of them found (training.batch_size.agree_across_ranks). A
    --batch-size left out is decided here, with the device (`default_batch`)."""
    cfg = default_batch(plan.cfg, rt.device.type, plan.data.seq_len, rt.world)
    fits = memory_probe(plan, cfg, rt, teacher, forward, distill_terms) if cfg.batch_size == "auto" else None
    found = plan_batch(
        cfg.batch_size,
        cfg.grad_accum,
        cfg.global_batch,
        rt.world,
        fits=fits,
        cap=CPU_AUTO_LIMIT if fits is None else None,
    )
    return agree_across_ranks(found, rt)


def memory_probe(
    plan: DistillPlan, cfg, rt: training.Runtime, teacher: nn.Module, forward: nn.Module, distill_terms: Callable
) -> Callable[[int], bool] | None:
    """On CUDA, `fits(size)`: whether a distill step of `size` sequences, with AdamW's moments beside it, fits in
    this device's memory; None elsewhere (the CPU has no memory limit to find: auto stops at CPU_AUTO_LIMIT)."""
    if rt.device.type != "cuda":
        return None
    trained = sum(p.numel() for p in forward.parameters() if p.requires_grad)
    optimizer_bytes = 2 * 4 * trained  # AdamW's two fp32 moments, allocated at the first step
    total = torch.cuda.get_device_properties(rt.device).total_memory
    generator = torch.Generator(device="cpu").manual_seed(cfg.seed)
    seq_len, vocab_size = plan.data.seq_len, plan.data.tokenizer.get("vocab_size")

    def fits(size: int) -> bool:
        ids = torch.randint(0, vocab_size or 2, (size, seq_len), generator=generator).to(rt.device)
        # each other input's longest batch, beside the running text
        batches = {i.name: i.longest(plan, cfg, size, generator, rt.device) for i in plan.inputs[1:]}
        if not uses_running_text(cfg):
            ids = None
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(rt.device)
        try:
            with rt.autocast():
                parts = distill_terms(teacher, plan.teacher_layer, forward, ids, None, cfg, plan.head, batches)
                loss = weighted_loss(parts, cfg)
            loss.backward()
            peak = torch.cuda.max_memory_allocated(rt.device)
            ok = peak + optimizer_bytes <= CUDA_MEMORY_SHARE * total
            log.debug("--batch-size auto: %d sequences, peak %.2f GiB", size, peak / 2**30)
        except torch.cuda.OutOfMemoryError:
            ok = False
        finally:
            forward.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
        return ok

    return fits
