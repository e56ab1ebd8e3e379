#!/usr/bin/env python
"""Where a distill step's time goes: each part of the project and the naive step timed separately, plus
torch.profiler's top operators. Companion of distill_step.py (same models, batches and paths).

    python benchmarks/distill_profile.py --precision fp32 --threads 1                 # `cpu` configuration
    python benchmarks/distill_profile.py --precision fp32 --threads 1 --emulate-avx2  # as an AVX2-only CPU
    python benchmarks/distill_profile.py --config cpu-probe --precision fp32 --threads 1 --steps 3

Parts of the project step (the body of `step_paths.ProjectPath.step`, i.e. of `distill.distill_terms` and
`training.run_steps`, cut where a timer can go): zero_grad; teacher forward (`capture.layer_qkv` under no_grad);
student forward (`objective.StudentForward`); the relation loss forward (`losses.minilm_v1_terms` / v2);
backward; the host sync on the loss; optimizer + schedule step. The naive step is cut the same way (teacher,
student, loss = value relations + KLs). Steps alternate project / naive; the figures are medians.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from step_configs import CONFIGS  # (also puts the repository on sys.path)
from step_hardware import reexec_emulating_avx2
from step_paths import build_paths, make_batches
from step_timing import environment

_now = time.perf_counter


def project_parts(p, ids, mask) -> tuple[dict, float]:
    from mlminilm.distillation.capture import layer_qkv
    from mlminilm.distillation.losses import minilm_v1_terms, minilm_v2_terms

    mask = p.loader_mask(mask)
    t = {}
    t0 = _now()
    p.optimizer.zero_grad(set_to_none=True)
    t1 = _now()
    t["zero_grad"] = t1 - t0
    with p.rt.autocast():
        with torch.no_grad(), torch.autocast(ids.device.type, enabled=False):  # as distill.distill_terms
            t_qkv = layer_qkv(p.teacher, ids, mask, p.layer)
        t2 = _now()
        t["teacher"] = t2 - t1
        s_qkv = p.forward(ids, mask).qkv
        t3 = _now()
        t["student"] = t3 - t2
        if p.cfg.objective == "minilm":
            parts = minilm_v1_terms(t_qkv, s_qkv, mask, p.cfg.heads)
        else:
            parts = minilm_v2_terms(t_qkv, s_qkv, mask, p.cfg.relation_heads)
        loss = sum(parts.values())
    return finish_parts(p, loss, lambda x: x.detach().float().item(), t, t0, t3)  # as ProjectPath.step reads it


def naive_parts(p, ids, mask) -> tuple[dict, float]:
    t = {}
    t0 = _now()
    p.optimizer.zero_grad(set_to_none=True)
    t1 = _now()
    t["zero_grad"] = t1 - t0
    with p.autocast():
        with torch.no_grad():
            t_out = p.teacher(input_ids=ids, attention_mask=mask, output_attentions=True)
        t2 = _now()
        t["teacher"] = t2 - t1
        s_out = p.student(input_ids=ids, attention_mask=mask, output_attentions=True)
        t3 = _now()
        t["student"] = t3 - t2
        loss = p.loss(t_out, s_out, mask)
    return finish_parts(p, loss, lambda x: x.item(), t, t0, t3)  # as NaivePath.step reads it


def finish_parts(p, loss, read, t: dict, t0: float, t3: float) -> tuple[dict, float]:
    """The end both steps share, timed part by part from t3 (the student forward's end): the relation loss,
    backward, the host sync on the loss (`read`, as that path's own step reads it), optimizer + schedule step.
    Returns the parts and the whole step's seconds since t0."""
    t4 = _now()
    t["relations"] = t4 - t3
    loss.backward()
    t5 = _now()
    t["backward"] = t5 - t4
    value = read(loss)
    t6 = _now()
    t["sync"] = t6 - t5
    p.optimizer.step()
    p.scheduler.step()
    t7 = _now()
    t["optimizer"] = t7 - t6
    assert math.isfinite(value)
    return t, t7 - t0


PARTS = {"project": project_parts, "naive": naive_parts}


def profile_ops(name, path, batches, top: int) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for ids, mask in batches:
            PARTS[name](path, ids, mask)
    rows = []
    for e in sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:top]:
        rows.append(
            {
                "op": e.key,
                "calls": e.count,
                "self_ms_per_step": e.self_cpu_time_total / 1e3 / len(batches),
                "total_ms_per_step": e.cpu_time_total / 1e3 / len(batches),
            }
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="cpu", choices=[n for n in CONFIGS if not n.startswith("gpu")])
    ap.add_argument("--precision", default="fp32", choices=("auto", "fp32", "bf16"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=8, help="timed steps per path (default 8)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile-steps", type=int, default=2, help="steps per path under torch.profiler (0: none)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--emulate-avx2", action="store_true", help="re-run as an AVX2-only CPU (step_hardware.AVX2_ENV)")
    ap.add_argument("--only", choices=("project", "naive"), help="time one path only")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.emulate_avx2:  # does not return unless the environment is already set
        reexec_emulating_avx2(str(Path(__file__).resolve()), list(sys.argv[1:] if argv is None else argv))
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    b = replace(CONFIGS[args.config], steps=args.steps, warmup=args.warmup)
    device = torch.device("cpu")
    which = (args.only,) if args.only else ("project", "naive")
    with tempfile.TemporaryDirectory(prefix="mlminilm-prof-") as tmp:
        paths = build_paths(b, Path(tmp), device, args.precision, which=which)
        batches = make_batches(b, 3, device)
        parts = {n: [] for n in paths}
        totals = {n: [] for n in paths}
        order = list(paths)
        for i in range(b.warmup + b.steps):
            ids, mask = batches[i % len(batches)]
            for n in order if i % 2 == 0 else order[::-1]:
                t, total = PARTS[n](paths[n], ids, mask)
                if i >= b.warmup:
                    parts[n].append(t)
                    totals[n].append(total)
        ops = (
            {n: profile_ops(n, paths[n], batches[: args.profile_steps], args.top) for n in paths}
            if args.profile_steps
            else {}
        )
    env = environment(device, {})
    result = {
        "config": b.name,
        "precision": args.precision,
        "threads": torch.get_num_threads(),
        "cpu_capability": env["cpu_capability"],
        "load_average": env.get("load_average"),
        "paths": {},
    }
    for n in paths:
        med = {k: statistics.median(t[k] for t in parts[n]) * 1e3 for k in parts[n][0]}
        result["paths"][n] = {"parts_ms": med, "step_ms": statistics.median(totals[n]) * 1e3, "ops": ops.get(n, [])}
    print(
        f"# {b.name}, precision {args.precision}, {result['threads']} thread(s), capability "
        f"{result['cpu_capability']}, load {result['load_average']}"
    )
    keys = list(parts[order[0]][0])
    print(f"{'part (median ms)':<18}" + "".join(f"{n:>10}" for n in paths))
    for k in keys:
        print(f"{k:<18}" + "".join(f"{result['paths'][n]['parts_ms'][k]:>10.1f}" for n in paths))
    print(f"{'step':<18}" + "".join(f"{result['paths'][n]['step_ms']:>10.1f}" for n in paths))
    for n in paths:
        if ops.get(n):
            print(f"\n## {n}: top operators by self CPU time (ms per step, under the profiler)")
            for r in ops[n]:
                print(
                    f"  {r['self_ms_per_step']:8.1f} self {r['total_ms_per_step']:8.1f} total  "
                    f"{r['calls']:5d}x  {r['op']}"
                )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
