"""The stages of scripts/gpu_check.py that run the CLI: the plans (real, long, toy shapes), the runner that logs,
times and probes each CLI process, and the distill (killed and resumed), 2-process and 64 x 512 stages."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gpu_check_report as report

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = Path(__file__).resolve().with_name("gpu_check_cli.py")
# Seconds this whole command may take ($MLMINILM_GPU_CHECK_BUDGET_S, set by scripts/gpu_oneshot.sh from its step's
# `timeout`): a CLI process is stopped in time for the summaries to be written, where a `timeout` that killed this
# script would leave none. Unset: each process has its plan's timeout only.
BUDGET_S = float(os.environ.get("MLMINILM_GPU_CHECK_BUDGET_S") or "inf")
STARTED = time.monotonic()
SUMMARY_S = 20  # kept for the figures, the GEMM and the summaries after the last process


def seconds_left(cap: float, clock=time.monotonic) -> float:
    """`cap`, or less when the command's budget ends sooner (at least 1 s: a stage still starts and fails). `clock`
    is the one STARTED was read from (a parameter so that tests pass a fake one)."""
    return max(1.0, min(cap, BUDGET_S - (clock() - STARTED) - SUMMARY_S))


@dataclass(frozen=True)
class Plan:
    teacher: tuple[int, int, int, int]  # layers, hidden, heads, FFN
    student: tuple[int, int, int, int]
    seq: int
    batch: int | None  # None: the device's default (CUDA: --batch-size auto, >= 32,768 tokens a step)
    steps: int
    save_every: int
    kill_at: int  # the first run is killed once this step's checkpoint is whole; --resume goes on from it
    log_every: int
    text_bytes: int
    device: str
    ddp_steps: int
    ddp_batch: int  # the global batch of the 1- and 2-process runs
    timeout_s: int  # per CLI stage


REAL = Plan((12, 768, 12, 3072), (6, 384, 12, 1536), 128, None, 300, 100, 200, 10, 4_000_000, "cuda", 40, 64, 300)
# --stage long: the relation share at long sequences (MiniLM's relations grow with seq^2, the layers with seq).
LONG = Plan((12, 768, 12, 3072), (6, 384, 12, 1536), 512, 64, 60, 60, 0, 10, 4_000_000, "cuda", 0, 0, 240)
TOY = Plan((2, 64, 4, 128), (2, 32, 4, 64), 32, 4, 12, 4, 8, 2, 40_000, "cpu", 6, 8, 240)


def toy() -> bool:
    return os.environ.get("MLMINILM_GPU_CHECK_TOY") == "1"


class Stages:
    """Runs the CLI stages, logging each to WORK/logs/NAME.log, timing them."""

    def __init__(self, work: Path, plan: Plan):
        self.work, self.plan = work, plan
        self.seconds: dict[str, float] = {}
        self.recompiles: set[str] = set()  # what recompiled, and why (dynamo's first failed guard)
        for folder in ("work", "logs", "probes"):  # a fresh run every time (recompiles are appended to probes/)
            shutil.rmtree(work / folder, ignore_errors=True)
            (work / folder).mkdir(parents=True)

    def env(self, name: str) -> dict:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "MLMINILM_NO_PROGRESS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "MLMINILM_GPU_CHECK_PROBE": str(self.work / "probes" / name),
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
        with open(self.work / "logs" / f"{name}.log", "w", encoding="utf-8") as log:
            env = {**self.env(name), **({"MLMINILM_GPU_CHECK_KILL_AT": kill} if kill else {})}
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            code = self._wait(proc)
        self.seconds[name] = time.perf_counter() - t0
        print(f"gpu-check: {name}: exit {code} in {self.seconds[name]:.0f} s", flush=True)
        if code not in (0, -9):
            print(report.log_tail(self.work / "logs" / f"{name}.log"), flush=True)
        return code

    def _wait(self, proc: subprocess.Popen) -> int:
        try:
            return proc.wait(timeout=seconds_left(self.plan.timeout_s))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole session: torchrun, its workers, loader processes
            proc.wait()
            return 124

    def probes(self, name: str) -> tuple[list[dict], int]:
        """The launcher's per-process records of stage `name` and its most recompiles in one process (their
        reasons collected in self.recompiles)."""
        folder = self.work / "probes"
        records = [json.loads(p.read_text()) for p in sorted(folder.glob(f"{name}-rank*.json"))]
        logs = [p.read_text().splitlines() for p in sorted(folder.glob(f"{name}-rank*.recompiles"))]
        for lines in logs:
            self.recompiles.update(lines)
        return records, max(map(len, logs), default=0)


def distill_args(teacher: Path, data: Path, run: Path, plan: Plan, batch: int | None, steps: int) -> list[str]:
    """`distill` at `plan`'s shape; `batch` None leaves --batch-size to the device's default (what users run)."""
    layers, hidden, heads, ffn = plan.student
    return [
        "distill", "--teacher", str(teacher), "--data", str(data), "--out", str(run),
        "--layers", str(layers), "--hidden", str(hidden), "--heads", str(heads), "--intermediate", str(ffn),
        "--max-steps", str(steps), "--save-every", str(plan.save_every),
        "--log-every", str(plan.log_every), "--lr", "5e-4", "--warmup", "0.1", "--compile", "on",
        "--device", plan.device, *(["--batch-size", str(batch)] if batch else []),
    ]  # fmt: skip


def run_record(run: Path) -> dict:
    return json.loads((run / "run.json").read_text()) if (run / "run.json").is_file() else {}


def distill_stage(st: Stages, teacher: Path, data: Path) -> tuple[list[report.Check], dict]:
    """The killed run and its resume: checks, and what the figures need."""
    plan, run = st.plan, st.work / "work" / "run"
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
    checkpoint = run / "checkpoints" / f"step-{plan.steps}" / "state.json"
    export = run / "student" / "config.json"
    written = f"step-{plan.steps} checkpoint: {checkpoint.exists()}, student/config.json: {export.exists()}"
    checks.append(report.Check("checkpoint + export written", checkpoint.exists() and export.exists(), written))
    probes, recompiles = st.probes("distill")
    probes_resume, recompiles_resume = st.probes("distill-resume")
    checks.append(report.compiled_check(probes, probes_resume))
    most = max(recompiles, recompiles_resume)
    checks.append(report.Check("at most 2 recompiles", most <= 2, f"run {recompiles}, resume {recompiles_resume}"))
    memory = [p["peak_memory_bytes"] for p in probes + probes_resume if p.get("peak_memory_bytes")]
    seen = {
        "tokens_per_s": report.steady_rate(records, {plan.log_every, plan.kill_at + plan.log_every}),
        "peak_memory_gib": max(memory) / 2**30 if memory else None,
        "recompiles": most,
        "batch": run_record(run).get("batch"),  # the auto batch's pick (micro-batch, accumulation, tokens a step)
    }
    return checks, seen


def ddp_stage(st: Stages, teacher: Path, data: Path) -> list[report.Check]:
    """torchrun 2 processes x half the batch against 1 process x the whole batch, dropout off (the same draws)."""
    plan, runs = st.plan, {}
    for procs in (1, 2):
        run = st.work / "work" / f"ddp-{procs}"
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


def long_stage(st: Stages, teacher: Path, text: Path) -> dict:
    """The student at LONG's batch x seq (64 x 512), no kill: how fast, how much memory, and the relations' share
    of the step's FLOPs (MiniLM's relation matmuls grow with seq^2, the layers with seq)."""
    plan, data, run = st.plan, st.work / "work" / "data-long", st.work / "work" / "long"
    prepare = ["prepare", "--teacher", str(teacher), "--input", str(text), "--out", str(data)]
    code = st.run("prepare-long", [*prepare, "--seq-len", str(plan.seq), "--workers", "0"])
    if code == 0:
        code = st.run("distill-long", distill_args(teacher, data, run, plan, plan.batch, plan.steps))
    probes, recompiles = st.probes("distill-long")
    memory = [p["peak_memory_bytes"] for p in probes if p.get("peak_memory_bytes")]
    return {
        "exit": code,
        "tokens_per_s": report.steady_rate(report.read_metrics(run), {plan.log_every}),
        "peak_memory_gib": max(memory) / 2**30 if memory else None,
        "recompiles": recompiles,
    }


def flops_per_token(plan: Plan, vocab: int) -> dict:
    """Model FLOPs per token of the distill step and its parts (benchmarks/step_configs.py, the formula of
    distill_step.py), in MFLOP."""
    from step_configs import Bench, Shape, flops_per_token

    bench = Bench("gpu-check", Shape(*plan.teacher), Shape(*plan.student), vocab, plan.batch or 256, plan.seq)
    return flops_per_token(bench)
