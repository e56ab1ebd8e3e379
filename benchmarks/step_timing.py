"""The harness of benchmarks/distill_step.py: time the paths step by step, alternating; summarise each into
ms/step, tokens/s, MFU and peak memory (on the CPU from a child process that runs one path alone); on CUDA, find
the largest batch that fits; and record the environment of a run."""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import step_paths
import torch
from step_configs import Bench, flops_per_token, run_child
from step_hardware import cpu_info, emulating_avx2, peak_rss_bytes, reset_rss_peak, status_kb, sync
from step_paths import build_paths, make_batches


def time_paths(b: Bench, paths: dict, batches, device: torch.device) -> dict:
    """Alternate the paths step by step (warm-up first); per-path lists of step times and losses."""
    times = {name: [] for name in paths}
    losses = {name: [] for name in paths}
    peak_extra = {name: 0 for name in paths}
    order = list(paths)
    for i in range(b.warmup + b.steps):
        ids, mask = batches[i % len(batches)]
        # Alternate which path goes first, so neither always runs on a cache the other warmed.
        for name in order if i % 2 == 0 else order[::-1]:
            path = paths[name]
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                before = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.perf_counter()
            loss = path.step(ids, mask)
            sync(device)
            dt = time.perf_counter() - t0
            if device.type == "cuda":
                peak_extra[name] = max(peak_extra[name], torch.cuda.max_memory_allocated(device) - before)
            if i >= b.warmup:
                times[name].append(dt)
            losses[name].append(loss)
    return {"times": times, "losses": losses, "peak_extra": peak_extra}


def summarise(
    b: Bench,
    name: str,
    times: list[float],
    peak_bytes: int | None,
    peak_kind: str,
    flops: dict,
    peak_flops: dict,
    matmul_dtype: torch.dtype,
) -> dict:
    med = statistics.median(times)
    tokens = b.batch * b.seq
    tps = tokens / med
    dtype = "bf16" if matmul_dtype == torch.bfloat16 else "fp32"
    achieved = flops["total_mflop"] * 1e6 * tps
    row = {
        "path": name,
        "ms_per_step": med * 1e3,
        "ms_min": min(times) * 1e3,
        "ms_max": max(times) * 1e3,
        "steps_timed": len(times),
        "tokens_per_s": tps,
        "matmul_dtype": dtype,
        "achieved_tflops": achieved / 1e12,
        "mfu": achieved / peak_flops["hardware"] if peak_flops.get("hardware") else None,
        "of_measured_gemm": achieved / peak_flops["gemm"][dtype] if peak_flops["gemm"].get(dtype) else None,
        "peak_memory_bytes": peak_bytes,
        "peak_memory_kind": peak_kind,
    }
    return row


def memory_child(b: Bench, path_name: str, precision: str, workdir: Path) -> dict:
    """CPU: run one path alone in a child process and read its resident-set high-water mark."""
    options = ["--_memory-child", path_name, "--config", b.name, "--precision", precision, "--workdir", str(workdir)]
    proc = run_child(options)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_memory_child(b: Bench, path_name: str, precision: str, workdir: Path) -> None:
    device = torch.device("cpu")
    paths = build_paths(b, workdir, device, precision, which=(path_name,))
    path = paths[path_name]
    batches = make_batches(b, 2, device)
    gc.collect()
    rss_setup = (status_kb("VmRSS") or 0) * 1024
    reset = reset_rss_peak()
    for ids, mask in batches + batches[:1]:
        path.step(ids, mask)
    peak, kind = peak_rss_bytes()
    print(
        json.dumps(
            {
                "peak_rss_bytes": peak,
                "kind": kind if reset else f"{kind} (not reset after set-up)",
                "rss_after_setup_bytes": rss_setup,
                "resident_tensor_bytes": path.resident_bytes(),
            }
        )
    )


def largest_batch(b: Bench, workdir: Path, device: torch.device, precision: str, start: int) -> dict:
    """CUDA, project path: double the batch until out of memory, then bisect; memory per token from the slope."""
    paths = build_paths(b, workdir, device, precision, which=("project",))
    path = paths["project"]
    # Eager: with static shapes every batch size tried would compile its own graph (a minute each); the
    # compiled step's memory is at most the eager one's.
    from mlminilm.distillation.objective import distill_terms

    path.terms = distill_terms
    results: dict[int, int | None] = {}

    def fits(batch: int) -> bool:
        if batch in results:
            return results[batch] is not None
        trial = replace(b, batch=batch)
        ids, mask = make_batches(trial, 1, device, seed=batch)[0]
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        try:
            path.step(ids, mask)
            torch.cuda.synchronize(device)
            results[batch] = torch.cuda.max_memory_allocated(device)
        except torch.OutOfMemoryError:
            results[batch] = None
        finally:
            del ids, mask
            path.optimizer.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()
        return results[batch] is not None

    ok, bad = 0, None
    batch = start
    while bad is None and batch <= 1 << 20:
        if fits(batch):
            ok, batch = batch, batch * 2
        else:
            bad = batch
    if ok == 0:
        return {"largest_batch": 0, "note": f"batch {start} does not fit"}
    step = max(8, ok // 16)  # bisect to within ~6 %
    while bad is not None and bad - ok > step:
        mid = (ok + bad) // 2 // 8 * 8 or ok + 1
        if mid <= ok:
            break
        if fits(mid):
            ok = mid
        else:
            bad = mid
    sizes = sorted(k for k, v in results.items() if v is not None)
    per_token = None
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        per_token = (results[hi] - results[lo]) / ((hi - lo) * b.seq)
    path.free()
    paths = path = None  # the last references: their memory is back before the caller's next model
    gc.collect()
    torch.cuda.empty_cache()
    return {
        "largest_batch": ok,
        "largest_tokens": ok * b.seq,
        "first_oom_batch": bad,
        "peak_bytes_at_largest": results.get(ok),
        "memory_per_token_bytes": per_token,
        "trials": {str(k): v for k, v in sorted(results.items())},
    }


def bench_one(b: Bench, workdir: Path, precision: str, peak_flops: dict, search: bool) -> dict:
    device = torch.device(b.device)
    flops = flops_per_token(b)
    print(f"[{b.name}] building models ...", file=sys.stderr, flush=True)
    batch = b.batch
    while True:
        trial = replace(b, batch=batch)
        paths, batches, out_of_memory = {}, None, False
        try:
            paths.update(build_paths(trial, workdir, device, precision))
            batches = make_batches(trial, 3, device)
            print(
                f"[{b.name}] timing {trial.warmup} warm-up + {trial.steps} steps per path, batch {batch} x {b.seq}",
                file=sys.stderr,
                flush=True,
            )
            timed = time_paths(trial, paths, batches, device)
        except torch.OutOfMemoryError:
            if device.type != "cuda" or batch <= 1:
                raise
            out_of_memory = True
        if not out_of_memory:
            break
        # Outside the except block, so the traceback no longer holds the failed step's tensors.
        print(f"[{b.name}] out of memory at batch {batch}; halving it for both paths", file=sys.stderr)
        for p in paths.values():
            p.free()
        paths = batches = None
        gc.collect()
        torch.cuda.empty_cache()
        batch //= 2
    b = trial
    memory = {}  # per path: peak bytes, how they were measured, what else the row records
    if device.type == "cuda":
        kind = "resident tensors + step peak (torch.cuda.max_memory_allocated)"
        memory = {name: (p.resident_bytes() + timed["peak_extra"][name], kind, {}) for name, p in paths.items()}
    dtypes = {name: p.matmul_dtype for name, p in paths.items()}
    project_precision = "bf16" if paths["project"].matmul_dtype == torch.bfloat16 else "fp32"
    for p in paths.values():
        p.free()
    del paths
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    else:
        for name in ("project", "naive"):
            mem = memory_child(b, name, precision, workdir)
            memory[name] = (mem.get("peak_rss_bytes"), mem.get("kind", mem.get("error", "")), {"memory_detail": mem})
    rows = {
        name: {**summarise(b, name, timed["times"][name], peak, kind, flops, peak_flops, dtypes[name]), **extra}
        for name, (peak, kind, extra) in memory.items()
    }
    result = {
        "config": asdict(b),
        "project_precision": project_precision,
        "flops_per_token": flops,
        "project": rows["project"],
        "naive": rows["naive"],
        "speedup": rows["naive"]["ms_per_step"] / rows["project"]["ms_per_step"],
        "losses": timed["losses"],
        "memory_ratio": (
            rows["naive"]["peak_memory_bytes"] / rows["project"]["peak_memory_bytes"]
            if rows["naive"]["peak_memory_bytes"] and rows["project"]["peak_memory_bytes"]
            else None
        ),
    }
    if search and device.type == "cuda":
        print(f"[{b.name}] searching the largest batch (project path) ...", file=sys.stderr, flush=True)
        result["largest_batch"] = largest_batch(b, workdir, device, precision, start=b.batch)
    return result


def environment(device: torch.device, peaks: dict) -> dict:
    import transformers

    info = cpu_info()
    env = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu": info["model"],
        "cpu_threads": info["threads"],
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "avx512_bf16": "avx512_bf16" in info["flags"],
        "peaks": peaks,
        "emulated_avx2": emulating_avx2(),
        "compile": step_paths.COMPILE,
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    try:
        env["load_average"] = os.getloadavg()
    except OSError:
        pass
    return env
