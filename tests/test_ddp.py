"""Data parallelism: 2 gloo processes with batch B train exactly like 1 process with batch 2B, and only rank 0 writes.

Both runs go through a small launcher that records every checkpoint, JSON file and export each rank writes,
then hands over to the real CLI (`torchrun ... launcher.py distill ...` is `torchrun -m mlminilm distill ...`
with the recording added).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import REPO, prepare_data, save_tiny_teacher

LAUNCHER = """
import json, os, sys
from mlminilm.training import checkpoint_writer
from mlminilm import distill, training

rank = os.environ.get("RANK", "0")
log_path = os.path.join(os.environ["MLMINILM_WRITES_LOG"], f"rank{rank}.jsonl")

def record(kind, what):
    with open(log_path, "a", encoding="utf-8") as f:
        f.write(json.dumps([kind, str(what)]) + "\\n")

real_save, real_json, real_export = checkpoint_writer.write_snapshot, training.write_json_atomic, distill.export_model

def write_snapshot(out, snap, keep):
    record("checkpoint", snap.step)
    return real_save(out, snap, keep)

def write_json_atomic(path, obj):
    record("json", os.path.basename(path))
    return real_json(path, obj)

def export_model(model, tokenizer, out, *args, **kwargs):
    record("export", os.path.basename(out))
    return real_export(model, tokenizer, out, *args, **kwargs)

checkpoint_writer.write_snapshot, training.write_json_atomic = write_snapshot, write_json_atomic
distill.export_model = export_model

# MLMINILM_KILL_AT=N:DIR: every rank kills itself (SIGKILL, no cleanup) as step N starts, once DIR/state.json exists
# (the checkpoint before it is whole), the way a preempted job dies.
if os.environ.get("MLMINILM_KILL_AT"):
    import signal, time
    kill_step, kill_wait = os.environ["MLMINILM_KILL_AT"].split(":", 1)
    from mlminilm.training import loop

    real_seed = loop.step_seed

    def step_seed(seed, step, rank_):
        if step == int(kill_step):
            while not os.path.exists(os.path.join(kill_wait, "state.json")):
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)
        return real_seed(seed, step, rank_)

    loop.step_seed = step_seed
sys.argv = ["mlminilm", *sys.argv[1:]]
from mlminilm.commands.app import main
main()
"""


@pytest.fixture(scope="module")
def setup(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    # Dropout 0 (the student takes the teacher's): no random numbers differ between the two layouts.
    teacher = save_tiny_teacher(tiny_wordpiece_dir, root / "teacher", dropout=0.0)
    data = prepare_data(teacher, tiny_corpus_dir, root / "data")
    launcher = root / "launcher.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
    return teacher, data, launcher


def free_port() -> int:
    # Other test sessions may run torchrun on this machine at the same time: never assume a port is free.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(
    launcher: Path,
    out: Path,
    teacher: Path,
    data: Path,
    batch: int,
    nproc: int,
    extra: tuple = (),
    env_extra: dict | None = None,
) -> subprocess.CompletedProcess:
    logs = out.parent / f"{out.name}-writes"
    logs.mkdir(exist_ok=True)
    args = [
        "distill",
        "--teacher",
        str(teacher),
        "--data",
        str(data),
        "--out",
        str(out),
        "--layers",
        "2",
        "--hidden",
        "32",
        "--heads",
        "4",
        "--intermediate",
        "64",
        "--max-steps",
        "4",
        "--batch-size",
        str(batch),
        "--save-every",
        "2",
        "--log-every",
        "1",
        "--lr",
        "1e-3",
        "--warmup",
        "0",
        "--precision",
        "fp32",
        "--device",
        "cpu",
        "--quiet",
        *extra,
    ]
    if nproc > 1:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={nproc}",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            str(launcher),
            *args,
        ]
    else:
        cmd = [sys.executable, str(launcher), *args]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "MLMINILM_NO_PROGRESS": "1",
        "MLMINILM_WRITES_LOG": str(logs),
        "PYTHONPATH": str(REPO),
        **(env_extra or {}),
    }
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=240, env=env)


def writes(out: Path) -> dict[str, list]:
    logs = out.parent / f"{out.name}-writes"
    return {p.stem: [tuple(json.loads(l)) for l in p.read_text().splitlines()] for p in sorted(logs.glob("*.jsonl"))}


def losses(out: Path) -> list[tuple[int, float]]:
    records = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if "loss" in r]


def test_two_processes_match_one_process_with_the_global_batch(setup, tmp_path):
    teacher, data, launcher = setup
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    proc = run(launcher, ddp, teacher, data, batch=2, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run(launcher, single, teacher, data, batch=4, nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # The same loss trajectory, step by step.
    a, b = losses(ddp), losses(single)
    assert [s for s, _ in a] == [s for s, _ in b] == [1, 2, 3, 4]
    for (step, la), (_, lb) in zip(a, b):
        assert la == pytest.approx(lb, rel=1e-4), (step, la, lb)
    assert a[-1][1] != a[0][1]  # it trained

    # The same student at the end.
    from safetensors.torch import load_file

    wa = load_file(ddp / "student" / "model.safetensors")
    wb = load_file(single / "student" / "model.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=1e-4, atol=1e-5, msg=key)

    # Only rank 0 wrote anything: each checkpoint once, the run record once, one export.
    w = writes(ddp)
    assert set(w) == {"rank0"}, {k: v[:5] for k, v in w.items()}
    rank0 = w["rank0"]
    assert [x for x in rank0 if x[0] == "checkpoint"] == [("checkpoint", "2"), ("checkpoint", "4")]
    assert [x for x in rank0 if x[0] == "export"] == [("export", "student")]
    assert rank0.count(("json", "run.json")) == 1
    assert sorted(p.name for p in (ddp / "checkpoints").iterdir()) == ["step-2", "step-4"]
    leftovers = [p for p in ddp.rglob("*") if p.name.startswith(".tmp") or ".tmp-" in p.name]
    assert not leftovers, leftovers
    assert json.loads((ddp / "run.json").read_text())["world_size"] == 2
    assert writes(single)["rank0"] == rank0  # and exactly what the single process writes


def test_the_parallel_term_under_two_processes_matches_one_process(setup, tmp_path):
    """The pairs of a step are split over the ranks like the running text, and DDP averages what one process with
    the global batch computes (each rank pads its own pairs: mean pooling leaves padding out)."""
    from conftest import sample_lines

    teacher, data, launcher = setup
    pairs = tmp_path / "en-de.tsv"
    pairs.write_text(
        "".join(f"{a}\t{b}\n" for a, b in zip(sample_lines("en", 30), sample_lines("de", 30, seed=1))), encoding="utf-8"
    )
    extra = ("--hidden", "64", "--intermediate", "128", "--parallel", str(pairs), "--parallel-max-length", "24")
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    proc = run(launcher, ddp, teacher, data, batch=2, nproc=2, extra=extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run(launcher, single, teacher, data, batch=4, nproc=1, extra=extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {
        name: [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
        for name, out in (("ddp", ddp), ("single", single))
    }
    assert all("parallel" in r for r in records["ddp"] if "loss" in r)
    for a, b in zip(records["ddp"], records["single"]):
        assert a["step"] == b["step"]
        for key in ("loss", "parallel", "attention"):
            assert a[key] == pytest.approx(b[key], rel=1e-4), (a["step"], key)


def test_two_processes_killed_and_resumed_equal_the_uninterrupted_run(setup, tmp_path):
    """With dropout on, so each rank draws noise: both ranks are SIGKILLed as step 3 starts (after checkpoint 2),
    then `--resume` continues. Dropout draws from generators seeded by (seed, step, rank) each step, so the resumed
    run's noise, losses and weights are bit-identical to the uninterrupted run's, on every rank."""
    from safetensors.torch import load_file

    teacher, data, launcher = setup
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    extra = ("--dropout", "0.1")
    proc = run(launcher, whole, teacher, data, batch=2, nproc=2, extra=extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kill = {"MLMINILM_KILL_AT": f"2:{broken / 'checkpoints' / 'step-2'}"}
    proc = run(launcher, broken, teacher, data, batch=2, nproc=2, extra=extra, env_extra=kill)
    assert proc.returncode != 0
    assert not (broken / "student").exists()
    assert [p.name for p in (broken / "checkpoints").iterdir() if p.name.startswith("step-")] == ["step-2"]
    proc = run(launcher, broken, teacher, data, batch=2, nproc=2, extra=(*extra, "--resume"))
    assert proc.returncode == 0, proc.stderr[-3000:]

    assert losses(broken) == losses(whole)  # every logged loss, to the last bit
    wa = load_file(whole / "student" / "model.safetensors")
    wb = load_file(broken / "student" / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa), [k for k in wa if not torch.equal(wa[k], wb[k])]
    # Dropout really acted: without it the losses differ (the noise is part of what is being compared).
    plain = tmp_path / "plain"
    proc = run(launcher, plain, teacher, data, batch=2, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert losses(plain) != losses(whole)
