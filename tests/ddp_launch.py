"""Running `distill` under torchrun (2 gloo processes on the CPU) from tests, and reading what each rank did.

Every run goes through a small launcher that records every checkpoint, JSON file and export each rank writes,
then hands over to the real CLI (`torchrun ... launcher.py distill ...` is `torchrun -m mlminilm distill ...`
with the recording added). Environment variables make it stand in for what a CPU box cannot show:

- MLMINILM_KILL_AT=N:DIR: every rank kills itself (SIGKILL) as step N starts, once DIR/state.json exists;
- MLMINILM_TEST_COMPILE_BACKEND=B: torch.compile with backend B (`aot_eager`: dynamo and AOT autograd trace the
  graphs as on CUDA, which then run eagerly, without inductor's minute of C++ code generation);
- MLMINILM_TEST_FITS=A,B,...: rank r's `--batch-size auto` probe says a micro-batch of b sequences fits when
  b <= the r-th number (ranks whose GPUs have different free memory);
- MLMINILM_TEST_ROWS=1: the word embedding's gradient all-reduced row-sparse on the CPU too, as on CUDA
  (mlminilm/training/row_sparse_reduce.py), the other gradients through the same hook;
- MLMINILM_TEST_OUT_RANK1=DIR: rank 1 reads and writes DIR as its --out (a node that does not see the others'
  filesystem: the same path names another directory there).

Besides the writes, each rank records the micro-batch it trains with (`micro_batch`), for every micro-batch
whether the running text reached the loss with an attention mask (`variant`: masked / packed), DDP's
`broadcast_buffers`, with MLMINILM_TEST_ROWS each gradient bucket's all-reduce as it starts (`allreduce`, the
bucket's index) and the rows of the word embedding's gradient that went over the wire (`rows`: "sent/total"),
and under
MLMINILM_TEST_COMPILE_BACKEND the frames dynamo compiled (`compiled_frames`, at exit).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from helpers import REPO

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

from mlminilm.distillation import step as step_module

real_init = step_module.DistillStep.__init__

def init(self, run, model, terms_fn):
    record("micro_batch", run.batch.micro_batch)

    def terms(teacher, layer, model, ids, mask, *args):
        record("variant", "packed" if mask is None else "masked")
        return terms_fn(teacher, layer, model, ids, mask, *args)

    real_init(self, run, model, terms)

step_module.DistillStep.__init__ = init

real_setup = training.setup_training

def setup_training(*args, **kwargs):
    state = real_setup(*args, **kwargs)
    if hasattr(state.model, "broadcast_buffers"):
        record("broadcast_buffers", state.model.broadcast_buffers)
    return state

training.setup_training = setup_training

from mlminilm.training import row_sparse_reduce

real_bucket, real_rows = row_sparse_reduce.reduce_bucket, row_sparse_reduce.reduce_rows

def reduce_bucket(rows_of, bucket):
    record("allreduce", bucket.index())
    return real_bucket(rows_of, bucket)

def reduce_rows(grad, *args):
    sent = real_rows(grad, *args)
    record("rows", f"{sent}/{grad.shape[0]}")
    return sent

row_sparse_reduce.reduce_bucket, row_sparse_reduce.reduce_rows = reduce_bucket, reduce_rows
if os.environ.get("MLMINILM_TEST_ROWS"):  # the row-sparse reduce on the CPU too (by default CUDA only)
    row_sparse_reduce.ON_DEVICES = ("cuda", "cpu")

if os.environ.get("MLMINILM_TEST_COMPILE_BACKEND"):
    import torch
    real_compile = torch.compile
    backend = os.environ["MLMINILM_TEST_COMPILE_BACKEND"]
    torch.compile = lambda fn=None, **kw: real_compile(fn, **{**kw, "backend": backend})
    import atexit
    from torch._dynamo.utils import counters
    atexit.register(lambda: record("compiled_frames", counters["frames"]["ok"]))

if os.environ.get("MLMINILM_TEST_FITS"):
    from mlminilm.distillation import batch as batch_module
    limit = int(os.environ["MLMINILM_TEST_FITS"].split(",")[int(rank)])
    batch_module.memory_probe = lambda *args: (lambda size: size <= limit)

if os.environ.get("MLMINILM_TEST_OUT_RANK1") and rank == "1":
    argv = sys.argv
    argv[argv.index("--out") + 1] = os.environ["MLMINILM_TEST_OUT_RANK1"]

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


def write_launcher(root: Path) -> Path:
    launcher = root / "launcher.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
    return launcher


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
    batch: int | str,
    nproc: int,
    extra: tuple = (),
    env_extra: dict | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess:
    """`distill` of a 2-layer, 32-wide student for 4 steps, checkpoints every 2, on `nproc` processes of the
    CPU; `extra` options are added after the defaults (a repeated option takes the last value)."""
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
    inherited = os.environ.get("PYTHONPATH")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "MLMINILM_NO_PROGRESS": "1",
        "MLMINILM_WRITES_LOG": str(logs),
        "PYTHONPATH": os.pathsep.join([str(REPO), *([inherited] if inherited else [])]),
        **(env_extra or {}),
    }
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # A run that hangs (the failure some of these tests look for) is ended whole: SIGTERM makes torchrun stop
        # the ranks it started (each in a session of its own), then whatever is left of its own group is killed.
        proc.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        raise AssertionError(f"distill did not end within {timeout} s (hung?): {stderr[-3000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


WRITES = ("checkpoint", "json", "export")


def _records(out: Path) -> dict[str, list[tuple[str, str]]]:
    logs = out.parent / f"{out.name}-writes"
    return {p.stem: [tuple(json.loads(l)) for l in p.read_text().splitlines()] for p in sorted(logs.glob("*.jsonl"))}


def writes(out: Path) -> dict[str, list]:
    """What each rank that wrote anything wrote, in order: ("checkpoint", step), ("json", name), ("export", name)."""
    found = {rank: [row for row in rows if row[0] in WRITES] for rank, rows in _records(out).items()}
    return {rank: rows for rank, rows in found.items() if rows}


def rows(out: Path) -> dict[str, list[tuple[str, str]]]:
    """Everything each rank recorded, in order, by rank name."""
    return _records(out)


def recorded(out: Path, kind: str) -> dict[str, list[str]]:
    """What each rank recorded of one kind (e.g. "variant", "micro_batch"), by rank name."""
    return {rank: [what for k, what in rows if k == kind] for rank, rows in _records(out).items()}


def losses(out: Path) -> list[tuple[int, float]]:
    records = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if "loss" in r]
