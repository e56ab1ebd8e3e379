#!/usr/bin/env python
"""Time one full distill step: mlminilm's path against a naive baseline, same models, same batches, one process.

    python benchmarks/distill_step.py                      # the small CPU configuration (under a minute)
    python benchmarks/distill_step.py --config cpu-probe   # METHOD.md section 6's probe shape (XLM-R-base teacher)
    python benchmarks/distill_step.py --gpu --out gpu.json # every GPU configuration, plus the largest batch
    python benchmarks/distill_step.py --config gpu-base-6x384-s128 --config gpu-large-6x384-s128 --out part.json
                                                           # a subset (each --config adds one), e.g. to stay
                                                           # under a per-call time limit
    python benchmarks/distill_step.py --relation-memory    # the relation loss alone at batch 8 x seq 512:
                                                           # peak memory and time, materialised vs chunked
    python benchmarks/distill_step.py --precision fp32 --threads 1 --emulate-avx2
                                                           # fp32, with the kernels of an AVX2-only CPU
                                                           # (a laptop, a CI runner): see step_hardware.AVX2_ENV

benchmarks/distill_profile.py times each part of both steps (teacher, student, relations, backward, optimizer)
with torch.profiler's top operators (experiments/distill_variants.py, an answered experiment, set variants of the
project's step against each other on the same pieces).

This file is the command line; the pieces stand beside it: step_configs.py (the configurations and their model
FLOPs), step_paths.py (the project and the naive step), step_timing.py (timing, peak memory, the largest batch),
step_hardware.py (peak FLOP/s, resident memory, AVX2 emulation) and step_relations.py (--relation-memory).

A step is: teacher forward, student forward and backward, the relation loss, the optimizer and schedule
step, and one host sync on the loss (the training loop checks it is finite). Data loading is not timed:
both paths get the same pre-built token batches.

mlminilm's path (`project`) uses the project's own functions: `models.load_teacher` (the teacher saved to a
temporary directory and loaded as `distill` loads it: sdpa attention, truncated at the distilled layer, in the
compute dtype), `models.build_student` (whose word embedding writes its gradient into the previous step's tensor on
CPU, mlminilm/models/embedding_grad.py) / `freeze_unused`, `objective.StudentForward` and `distill.distill_terms`
(capture.layer_qkv + the MiniLM losses) with attention_mask=None as distill's loader passes it for a batch without
padding, `training.make_optimizer`, `training.linear_schedule`, and `training.setup_runtime`'s precision under
`Runtime.autocast`.

The naive baseline (`naive`) is written here the way public distillation code usually does it: the whole
teacher and the whole student run with eager attention and `output_attentions=True`, the teacher's and the
student's value vectors are taken from a forward hook on the last layer's `value` Linear, and the losses are
KL divergences of materialised probabilities (the returned attention probabilities, and softmaxed value
relations). It runs in fp32 on CPU and under bf16 autocast with fp32 weights on CUDA; its optimizer is
`torch.optim.AdamW` with its defaults (foreach on CUDA, the for-loop on CPU) over all student parameters. Its
student is a plain Hugging Face model (torch's own embedding gradient) and gets the all-ones mask.

Both paths start from the same teacher and student weights (the naive student is a copy of the project's
student at the start) and see the same batches; steps alternate project / naive after warm-up, and the
reported figures are medians.

Model FLOPs (matmul multiply-adds x 2, per token, sequence length s; embeddings, softmax, layer norm and
the optimizer are not counted). For a layer of width h and FFN width f:

    layer(h, f, s) = 2 * (4 h^2 + 2 h f) + 4 s h      # Q, K, V, O projections + FFN + QK^T and AV
    qkv(h)         = 2 * 3 h^2                         # the distilled layer: its Q, K, V projections only

    teacher    = k_T * layer(h_T, f_T, s) + qkv(h_T)   # k_T layers below the distilled layer
    student    = 3 * [(M - 1) * layer(h_S, f_S, s) + qkv(h_S)]      # forward + backward ~ 3 x forward
    relations  = R * 2 s h_T + 3 * R * 2 s h_S        # R = 2 relations (v1: QK^T, VV^T), 3 (v2: QQ, KK, VV)
    per token  = teacher + student + relations

This is the work distillation needs, so it is the same number for both paths (what the naive path computes
on top of it, the teacher's unused top layer and the student's, counts as waste, not as model FLOPs); model
FLOPs utilisation (MFU) = per-token FLOPs x tokens/s / peak. The issue's arithmetic (all teacher and student
layers, 175 + 67 MFLOP/token at seq 128 for XLM-R base -> 6x384) is printed alongside as `issue_mflop`.

Peaks. MFU is against one hardware peak for both paths (what the machine can do, whatever dtype a path chose).
CUDA: the part's dense bf16 peak from its data sheet (step_hardware.GPU_PARTS: H100 SXM and H200 989 TFLOP/s, H100
NVL 835, H100 PCIe 756, A100 312; a name that says no part has none, and MFU is then against the measured GEMM); a
bf16 8192^3 GEMM is also measured at start. CPU: the larger of an estimate (threads x the clock /proc/cpuinfo
reports x FLOP/cycle, assuming two 512-bit FMA pipes per core: 64 fp32 FLOP/cycle with AVX-512, 128 bf16 FLOP/cycle
with AVX512-BF16 dot products) and a measured 2048^3 GEMM, in bf16 where the CPU has native bf16 (the reported
clock is the nominal one; a boosting CPU's GEMM beats the estimate). `GEMM%` is the achieved
model FLOP/s against the measured GEMM of the dtype the path's matmuls run in.

Relation memory (`--relation-memory`): the MiniLM v1 loss alone (attention and value relation, forward +
backward) on random Q/K/V of an XLM-R-base-wide teacher (hidden 768) and a 384-wide student, 12 heads, batch 8 x
seq 512 by default (`--relation-batch`, `--relation-seq`), fp32 or, with `--precision bf16`, bf16 inputs under
bf16 autocast. `materialised` composes `relation_kl(relation_logits(...))` as the losses did before chunking;
`chunked` is `losses.minilm_v1_loss` (chunks of heads, recomputed in the backward; `--relation-chunk` overrides
the automatic chunk); `blockwise` is `relation_blocks.blockwise_relation_loss` (online softmax over 128 keys at a
time, nothing of size seq^2: the fused relation-KL kernel's plain-torch reference). Memory: the resident-set
high-water mark of a child process per mode, over its RSS just before the step (inputs, library set-up and a
warm-up at seq 32 excluded), with `MALLOC_MMAP_THRESHOLD_=65536`
so freed tensors leave the RSS at once. Time: the median of `--steps` (default 3) alternating steps in this
process, after one warm-up each.

Peak memory. CUDA: `torch.cuda.max_memory_allocated`, separated per path in one process as
(that path's resident tensors: teacher and student weights, optimizer state) + (the step's peak over what
was allocated before it). CPU: the resident-set high-water mark (VmHWM from /proc/self/status, reset through
/proc/self/clear_refs after set-up) of a child process that builds the models and runs only that path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import step_paths
import torch
from step_configs import CONFIGS, GPU_CONFIGS  # the step_* modules put the repository on sys.path
from step_hardware import cpu_info, cpu_peaks, emulating_avx2, gpu_part, measured_gemm, reexec_emulating_avx2
from step_relations import print_relation_memory, relation_memory, run_relation_child
from step_timing import bench_one, environment, run_memory_child

# -------------------------------------------------------------------------------------------- reporting


def fmt_bytes(n) -> str:
    if not n:
        return "-"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def print_table(results: list[dict]) -> None:
    head = (
        f"{'config':<24} {'path':<8} {'dtype':<5} {'ms/step':>9} {'tokens/s':>10} {'MFLOP/tok':>9} "
        f"{'TFLOP/s':>8} {'MFU':>6} {'GEMM%':>6} {'peak mem':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        for name in ("project", "naive"):
            row = r[name]
            mfu = f"{row['mfu'] * 100:.1f}%" if row["mfu"] is not None else "-"
            gemm = f"{row['of_measured_gemm'] * 100:.0f}%" if row["of_measured_gemm"] is not None else "-"
            print(
                f"{r['config']['name']:<24} {name:<8} {row['matmul_dtype']:<5} {row['ms_per_step']:>9.1f} "
                f"{row['tokens_per_s']:>10,.0f} {r['flops_per_token']['total_mflop']:>9.1f} "
                f"{row['achieved_tflops']:>8.3f} {mfu:>6} {gemm:>6} {fmt_bytes(row['peak_memory_bytes']):>10}"
            )
        extra = ""
        if "largest_batch" in r:
            lb = r["largest_batch"]
            per = lb.get("memory_per_token_bytes")
            extra = f"; largest batch {lb.get('largest_batch')} x {r['config']['seq']}" + (
                f", {per / 1024:.1f} KiB/token" if per else ""
            )
        print(f"{'':<24} speedup {r['speedup']:.2f}x{extra}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", action="append", choices=sorted(CONFIGS), help="configuration(s) to run (default: cpu)")
    ap.add_argument("--gpu", action="store_true", help="run every GPU configuration and the largest-batch search")
    ap.add_argument("--no-search", action="store_true", help="GPU: skip the largest-batch search")
    ap.add_argument(
        "--precision",
        default="auto",
        choices=("auto", "fp32", "bf16"),
        help="the project path's precision, as `distill --precision` (default auto)",
    )
    ap.add_argument("--steps", type=int, help="timed steps per path (overrides the configuration)")
    ap.add_argument("--warmup", type=int, help="warm-up steps per path (overrides the configuration)")
    ap.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's, one per core)")
    ap.add_argument(
        "--compile",
        default="auto",
        choices=("auto", "on", "off"),
        help="torch.compile the project path, as `distill --compile` (auto: on for CUDA, off on CPU)",
    )
    ap.add_argument(
        "--emulate-avx2",
        action="store_true",
        help="run again in a fresh process with the kernels of an AVX2-only CPU "
        "(step_hardware.AVX2_ENV); pair it with --precision fp32, what `auto` picks on such a CPU",
    )
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--workdir", type=Path, help="where the random teachers are saved (default: a temporary dir)")
    ap.add_argument(
        "--relation-memory",
        action="store_true",
        help="instead: peak memory and time of the relation loss alone, materialised against chunked",
    )
    ap.add_argument("--relation-batch", type=int, default=8, help="--relation-memory: batch (default 8)")
    ap.add_argument("--relation-seq", type=int, default=512, help="--relation-memory: sequence length (default 512)")
    ap.add_argument("--relation-chunk", type=int, help="--relation-memory: heads per chunk (default: automatic)")
    ap.add_argument("--_memory-child", dest="memory_child", help=argparse.SUPPRESS)
    ap.add_argument("--_relation-child", dest="relation_child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    step_paths.COMPILE = args.compile

    if args.emulate_avx2:  # does not return unless the environment is already set
        reexec_emulating_avx2(str(Path(__file__).resolve()), list(sys.argv[1:] if argv is None else argv))
    if emulating_avx2() and args.precision == "auto":
        # train.cpu_has_native_bf16 reads the CPU's flags, which the emulation cannot hide: it would pick bf16,
        # emulated at AVX2 and very slow. An AVX2-only CPU's `auto` is fp32.
        print("note: emulating an AVX2-only CPU: --precision auto resolves to fp32 there", file=sys.stderr)
        args.precision = "fp32"
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if args.memory_child:
        run_memory_child(CONFIGS[args.config[0]], args.memory_child, args.precision, args.workdir)
        return 0
    if args.relation_child:
        run_relation_child(
            args.relation_child,
            args.relation_batch,
            args.relation_seq,
            "bf16" if args.precision == "bf16" else "fp32",
            args.relation_chunk,
        )
        return 0
    if args.relation_memory:
        precision = "bf16" if args.precision == "bf16" else "fp32"
        result = relation_memory(
            args.relation_batch, args.relation_seq, precision, args.relation_chunk, args.steps or 3
        )
        result["environment"] = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "cpu": cpu_info()["model"],
            "cpu_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        }
        if args.out:
            args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print_relation_memory(result)
        return 0

    names = args.config or (GPU_CONFIGS if args.gpu else ["cpu"])
    benches = [CONFIGS[n] for n in names]
    if args.steps or args.warmup is not None:
        benches = [
            replace(b, steps=args.steps or b.steps, warmup=b.warmup if args.warmup is None else args.warmup)
            for b in benches
        ]
    device = torch.device("cuda" if any(b.device == "cuda" for b in benches) else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("Error: the GPU configurations need a CUDA device; run without --gpu for the CPU one", file=sys.stderr)
        return 1

    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        part = gpu_part(gpu)
        spec = part[1] if part else None
        peaks = {
            "spec": {"bf16": spec},
            "gemm": {"bf16": measured_gemm(device, torch.bfloat16, 8192, 20)},
            "assumption": f"{gpu}: " + (f"{part[0]} data-sheet dense bf16 peak" if part else "unknown part, no peak"),
        }
        peaks["hardware"] = spec or peaks["gemm"]["bf16"]
    else:
        est = cpu_peaks(cpu_info())
        emulated = emulating_avx2()  # bf16 is then emulated (~0.4 GFLOP/s here): a 2048^3 GEMM would take minutes
        peaks = {
            "spec": {"fp32": est["fp32"], "bf16": None if emulated else est["bf16"]},
            "gemm": {
                "fp32": measured_gemm(device, torch.float32, 2048, 4),
                "bf16": None if emulated else measured_gemm(device, torch.bfloat16, 2048, 4),
            },
            "assumption": est["assumption"] + (" (AVX2 emulated: fp32 only)" if emulated else ""),
        }
        # The clock /proc/cpuinfo reports is the nominal one, not the boost clock, so a measured GEMM can beat
        # the estimate: the hardware peak is the larger of the two, in the fastest dtype the CPU multiplies.
        best = "bf16" if est["native_bf16"] and not emulated else "fp32"
        peaks["hardware"] = max(peaks["spec"][best], peaks["gemm"][best])
    env = environment(device, peaks)
    load, cores = env.get("load_average", (0.0,))[0], len(os.sched_getaffinity(0))
    if device.type == "cpu" and load > cores - 0.5:
        print(
            f"warning: load average {load:.1f} on {cores} cores: other processes compete for the CPU, and "
            f"{torch.get_num_threads()} torch threads waiting on each other make the timings unreliable; rerun "
            "when the machine is quiet, or with --threads 1",
            file=sys.stderr,
        )
    tflops = {k: {d: (f"{v / 1e12:.2f}" if v else None) for d, v in peaks[k].items()} for k in ("spec", "gemm")}
    print(
        f"# {env.get('gpu', env['cpu'])}, {env['cpu_threads']} threads, torch {env['torch']}, "
        f"transformers {env['transformers']}; peak TFLOP/s: estimate {tflops['spec']} ({peaks['assumption']}), "
        f"measured GEMM {tflops['gemm']}; MFU is against {peaks['hardware'] / 1e12:.2f}",
        file=sys.stderr,
    )

    results = []
    with tempfile.TemporaryDirectory(prefix="mlminilm-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        for b in benches:
            search = device.type == "cuda" and not args.no_search
            results.append(bench_one(b, workdir, args.precision, peaks, search=search))
            if args.out:  # write as we go: a long GPU run that dies still leaves what it measured
                args.out.write_text(json.dumps({"environment": env, "results": results}, indent=2, default=str) + "\n")
    try:
        env["load_average_end"] = os.getloadavg()
    except OSError:
        pass
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "results": results}, indent=2, default=str) + "\n")
    print_table(results)
    # The last line: the speedup of the first configuration (the CPU one when run without arguments).
    print(f"speedup: {results[0]['speedup']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
