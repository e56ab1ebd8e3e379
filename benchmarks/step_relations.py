"""The relation loss alone (`distill_step.py --relation-memory`): MiniLM v1's attention and value relations,
forward + backward, materialised against chunked and blockwise; peak memory from a child process per mode, time
in this one. distill_step.py's docstring says what is measured and how."""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import time

import torch
from step_configs import run_child
from step_hardware import peak_rss_bytes, reset_rss_peak, status_kb

# The loss of MiniLM v1 alone at a long sequence: an XLM-R-base teacher's Q/K/V (hidden 768) against a 384-wide
# student's, 12 heads, both relations (attention and value), forward + backward.
RELATION_HEADS, RELATION_TEACHER_HIDDEN, RELATION_STUDENT_HIDDEN = 12, 768, 384
BLOCK = 128  # keys per block of the blockwise mode (the fused kernel's reference)
RELATION_MODES = {
    "materialised": "relation_kl(relation_logits(...)) per relation: whole [batch, heads, seq, seq] logits",
    "chunked": "losses.minilm_v1_loss -> relations.relation_loss: chunks of heads, recomputed in the backward",
    "blockwise": f"relation_blocks.blockwise_relation_loss: online softmax over {BLOCK} keys at a time, no seq^2",
}


def relation_inputs(batch: int, seq: int, dtype: torch.dtype, seed: int = 0):
    """Random teacher (q, k, v), student (q, k, v) leaves that need gradients, and an all-real mask."""
    g = torch.Generator().manual_seed(seed)
    teacher = tuple(torch.randn(batch, seq, RELATION_TEACHER_HIDDEN, generator=g).to(dtype) for _ in range(3))
    student = tuple(
        torch.randn(batch, seq, RELATION_STUDENT_HIDDEN, generator=g).to(dtype).requires_grad_(True) for _ in range(3)
    )
    return teacher, student, torch.ones(batch, seq, dtype=torch.long)


def relation_step(mode: str, teacher, student, mask, precision: str, chunk: int | None) -> float:
    """One forward + backward of both v1 relations as `mode` computes them; the loss as a float."""
    from mlminilm.distillation.losses import minilm_v1_loss
    from mlminilm.distillation.relations import relation_kl, relation_logits

    for x in student:
        x.grad = None
    bf16 = torch.autocast("cpu", torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    with bf16:
        if mode == "materialised":  # how losses.minilm_v1_terms composed the relations before chunking
            (tq, tk, tv), (sq, sk, sv), h = teacher, student, RELATION_HEADS
            loss = relation_kl(relation_logits(tq, tk, h), relation_logits(sq, sk, h), mask) + relation_kl(
                relation_logits(tv, tv, h), relation_logits(sv, sv, h), mask
            )
        elif mode == "blockwise":
            from mlminilm.distillation.relation_blocks import blockwise_relation_loss

            (tq, tk, tv), (sq, sk, sv), h = teacher, student, RELATION_HEADS
            loss = blockwise_relation_loss(tq, tk, sq, sk, mask, h, BLOCK) + blockwise_relation_loss(
                tv, tv, sv, sv, mask, h, BLOCK
            )
        else:
            loss = minilm_v1_loss(teacher, student, mask, RELATION_HEADS, chunk)
    loss.backward()
    return loss.item()


def run_relation_child(mode: str, batch: int, seq: int, precision: str, chunk: int | None) -> None:
    """Peak resident memory of one loss step over what was resident before it (inputs included in the latter)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    small = relation_inputs(2, 32, dtype, seed=1)
    relation_step(mode, *small, precision, chunk)  # library set-up (thread pools, kernels) is not the loss's
    inputs = relation_inputs(batch, seq, dtype)
    gc.collect()
    rss_before = (status_kb("VmRSS") or 0) * 1024
    reset = reset_rss_peak()
    loss = relation_step(mode, *inputs, precision, chunk)
    peak, kind = peak_rss_bytes()
    print(
        json.dumps(
            {
                "mode": mode,
                "loss": loss,
                "peak_over_before_bytes": peak - rss_before,
                "rss_before_bytes": rss_before,
                "peak_kind": kind if reset else f"{kind} (not reset)",
            }
        )
    )


def relation_child(mode: str, batch: int, seq: int, precision: str, chunk: int | None) -> dict:
    """One mode's memory in a child process of its own. malloc returns freed blocks >= 64 KiB to the system
    at once there (MALLOC_MMAP_THRESHOLD_), so the resident-set high-water mark follows the live tensors."""
    options = ["--_relation-child", mode, "--relation-batch", str(batch), "--relation-seq", str(seq)]
    options += ["--precision", precision, *(["--relation-chunk", str(chunk)] if chunk is not None else [])]
    proc = run_child(options, MALLOC_MMAP_THRESHOLD_="65536")
    if proc.returncode != 0:
        raise RuntimeError(f"{mode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def relation_times(batch: int, seq: int, precision: str, chunk: int | None, repeats: int) -> dict:
    """Seconds per loss step of each mode, in this process (normal malloc), alternating, after one warm-up."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    inputs = relation_inputs(batch, seq, dtype)
    times = {mode: [] for mode in RELATION_MODES}
    for i in range(repeats + 1):
        for mode in RELATION_MODES if i % 2 == 0 else list(RELATION_MODES)[::-1]:
            t0 = time.perf_counter()
            relation_step(mode, *inputs, precision, chunk)
            if i:
                times[mode].append(time.perf_counter() - t0)
    return times


def relation_memory(batch: int, seq: int, precision: str, chunk: int | None, repeats: int) -> dict:
    """Both modes: peak memory (child processes) and time (this process), with their ratios."""
    from mlminilm.distillation.relations import auto_chunk

    rows = {mode: relation_child(mode, batch, seq, precision, chunk) for mode in RELATION_MODES}
    for mode, times in relation_times(batch, seq, precision, chunk, repeats).items():
        rows[mode].update(ms_median=statistics.median(times) * 1e3, ms_all=[t * 1e3 for t in times])
    before, after = rows["materialised"], rows["chunked"]
    auto = f"auto ({auto_chunk(batch, seq, RELATION_HEADS, 'cpu')} heads)"
    return {
        "shape": {
            "batch": batch,
            "seq": seq,
            "heads": RELATION_HEADS,
            "teacher_hidden": RELATION_TEACHER_HIDDEN,
            "student_hidden": RELATION_STUDENT_HIDDEN,
            "precision": precision,
            "chunk": chunk if chunk is not None else auto,
        },
        "modes": rows,
        "memory_ratio": before["peak_over_before_bytes"] / after["peak_over_before_bytes"],
        "time_ratio": after["ms_median"] / before["ms_median"],
        "loss_difference": abs(before["loss"] - after["loss"]),
        "blockwise_memory_ratio": before["peak_over_before_bytes"] / rows["blockwise"]["peak_over_before_bytes"],
        "blockwise_loss_difference": abs(before["loss"] - rows["blockwise"]["loss"]),
    }


def print_relation_memory(result: dict) -> None:
    shape = result["shape"]
    print(
        f"# MiniLM v1 loss (attention + value relation), forward + backward: batch {shape['batch']} x seq "
        f"{shape['seq']}, {shape['heads']} heads, teacher hidden {shape['teacher_hidden']}, student hidden "
        f"{shape['student_hidden']}, {shape['precision']}, chunk {shape['chunk']}"
    )
    for mode, row in result["modes"].items():
        print(
            f"{mode:<13} peak {row['peak_over_before_bytes'] / 2**20:8.1f} MiB over the inputs   "
            f"{row['ms_median']:8.1f} ms (median of {len(row['ms_all'])})   {RELATION_MODES[mode]}"
        )
    print(
        f"memory ratio (materialised / chunked): {result['memory_ratio']:.2f}x; time ratio (chunked / "
        f"materialised): {result['time_ratio']:.2f}; loss difference {result['loss_difference']:.2e}; blockwise "
        f"memory ratio {result['blockwise_memory_ratio']:.2f}x, loss difference "
        f"{result['blockwise_loss_difference']:.2e}"
    )
