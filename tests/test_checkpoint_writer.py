"""Asynchronous checkpoints (mlminilm.training.checkpoint_writer): the same files as a synchronous save, taken at save
time, one write at a time, failures reported, and a kill mid-write leaves the previous checkpoint to resume from."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from helpers import REPO, cli, distill_args, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------------- set-up


def tiny_model(kind: str, seed: int = 0):
    """A plain BertModel, or a BertForMaskedLM whose output embeddings are tied to its input embeddings."""
    from transformers import BertConfig, BertForMaskedLM, BertModel

    config = BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = BertForMaskedLM(config) if kind == "tied" else BertModel(config)
    if kind == "tied":  # the case this is about: one tensor under two names
        assert (
            model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()
        )
    return model


def trainer(model, tmp_path: Path):
    from mlminilm import training
    from mlminilm.config import TrainConfig

    optimizer = training.make_optimizer(model, TrainConfig(out=tmp_path, lr=1e-2), torch.device("cpu"))
    return optimizer, training.linear_schedule(optimizer, 2, 20)


def train_step(model, optimizer, scheduler) -> None:
    ids = torch.randint(0, 40, (2, 6))
    out = model(input_ids=ids)
    logits = out.logits if hasattr(out, "logits") else out.last_hidden_state
    logits.float().pow(2).mean().backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def frozen(model, optimizer, scheduler) -> dict:
    """Independent copies of the live state (torch's own deepcopy, nothing of checkpoint_writer)."""
    return {
        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "scheduler": copy.deepcopy(scheduler.state_dict()),
        "cpu_rng": torch.get_rng_state(),
    }


def assert_same(a, b, where: str = "") -> None:
    """Nested dicts/lists with tensors: equal keys, exactly equal tensors (dtype and shape included)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a.cpu(), b.cpu()), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, set(a) ^ set(b))
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def load_fresh(path: Path, kind: str, tmp_path: Path) -> tuple[dict, dict]:
    """Load checkpoint `path` with training.load_checkpoint into a differently initialised model; (its state,
    state.json)."""
    from mlminilm import training

    model = tiny_model(kind, seed=99)
    optimizer, scheduler = trainer(model, tmp_path)
    state = training.load_checkpoint(path, model, optimizer, scheduler)
    return with_saved_rng(frozen(model, optimizer, scheduler), path), state


def with_saved_rng(loaded: dict, path: Path) -> dict:
    """load_checkpoint does not restore the RNG state (the loop reseeds every step), but the checkpoint holds it."""
    return {**loaded, "cpu_rng": torch.load(path / "trainer.pt", weights_only=True)["cpu_rng"]}


def trained(kind: str, tmp_path: Path, steps: int = 2):
    model = tiny_model(kind)
    optimizer, scheduler = trainer(model, tmp_path)
    for _ in range(steps):
        train_step(model, optimizer, scheduler)
    return model, optimizer, scheduler


# ----------------------------------------------------------------------------------- the same files


@pytest.mark.parametrize("kind", ["plain", "tied"])
def test_async_save_equals_sync_save_and_the_live_state(kind, tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_model

    from mlminilm import training
    from mlminilm.training.checkpoint_writer import AsyncCheckpointer

    model, optimizer, scheduler = trained(kind, tmp_path)
    expected = frozen(model, optimizer, scheduler)
    sync = training.save_checkpoint(tmp_path / "sync", 2, model, optimizer, scheduler, {"seed": 7}, 3)
    with AsyncCheckpointer(tmp_path / "async", keep=3) as checkpointer:
        checkpointer.save(2, model, optimizer, scheduler, {"seed": 7})
    written = tmp_path / "async" / "checkpoints" / "step-2"
    assert checkpointer.last_written == 2 and training.checkpoint_dirs(tmp_path / "async") == [(2, written)]

    # model.safetensors as safetensors' own save_model writes it: the same names (a tied tensor once) and metadata.
    save_model(model, str(tmp_path / "reference.safetensors"))
    with (
        safe_open(tmp_path / "reference.safetensors", "pt") as ref,
        safe_open(written / "model.safetensors", "pt") as f,
    ):
        assert set(f.keys()) == set(ref.keys()) and f.metadata() == ref.metadata()
        if kind == "tied":
            assert "cls.predictions.decoder.weight" not in f.keys() and f.metadata()
    assert_same(load_file(written / "model.safetensors"), load_file(tmp_path / "reference.safetensors"))
    assert_same(load_file(written / "model.safetensors"), load_file(sync / "model.safetensors"))

    for path in (sync, written):
        loaded, state = load_fresh(path, kind, tmp_path)
        assert_same(loaded, expected, str(path))
        assert state == {"step": 2, "seed": 7}


@pytest.mark.gpu
def test_cuda_snapshot_is_pinned_host_copies(tmp_path):
    from mlminilm import training
    from mlminilm.training.checkpoint_writer import AsyncCheckpointer, snapshot

    model = tiny_model("tied").cuda()
    optimizer, scheduler = trainer(model, tmp_path)
    for _ in range(2):
        ids = torch.randint(0, 40, (2, 6), device="cuda")
        model(input_ids=ids).logits.pow(2).mean().backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    expected = frozen(model, optimizer, scheduler)
    sync = training.save_checkpoint(tmp_path / "sync", 2, model, optimizer, scheduler, {}, 3)
    with AsyncCheckpointer(tmp_path / "async", keep=3) as checkpointer:
        checkpointer.save(2, model, optimizer, scheduler, {})
    for path in (sync, tmp_path / "async" / "checkpoints" / "step-2"):
        loaded, _ = load_fresh(path, "tied", tmp_path)
        assert_same(
            {k: v for k, v in loaded.items() if k != "cpu_rng"},
            {k: v for k, v in expected.items() if k != "cpu_rng"},
            str(path),
        )

    snap = snapshot(model, optimizer, scheduler, {}, 2)
    tensors = list(snap.model.values()) + [t for s in snap.optimizer["state"].values() for t in s.values()]
    assert all(t.device.type == "cpu" and t.is_pinned() for t in tensors)
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight.add_(1)  # on the device, after the snapshot
    assert torch.equal(
        snap.model["bert.embeddings.word_embeddings.weight"],
        expected["model"]["bert.embeddings.word_embeddings.weight"].cpu(),
    )


# --------------------------------------------------------------------------------- snapshot semantics


def test_checkpoint_holds_the_values_at_save_time(tmp_path, monkeypatch):
    from mlminilm import training
    from mlminilm.training import checkpoint_writer
    from mlminilm.training.checkpoint_writer import AsyncCheckpointer

    model, optimizer, scheduler = trained("tied", tmp_path)
    expected = frozen(model, optimizer, scheduler)
    started, release = threading.Event(), threading.Event()
    real_save_file = checkpoint_writer.save_file

    def held_save_file(*args, **kwargs):  # the write starts, then waits until the test has changed everything
        started.set()
        assert release.wait(30)
        return real_save_file(*args, **kwargs)

    monkeypatch.setattr(checkpoint_writer, "save_file", held_save_file)
    checkpointer = AsyncCheckpointer(tmp_path / "run", keep=3)
    state = {"seed": 7}
    checkpointer.save(2, model, optimizer, scheduler, state)
    assert started.wait(30) and checkpointer.in_flight == 2 and checkpointer.last_written is None
    train_step(model, optimizer, scheduler)  # an optimizer step: parameters and moments change in place
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1)
    state["seed"] = 8
    torch.rand(3)
    changed = frozen(model, optimizer, scheduler)
    assert not torch.equal(
        changed["model"]["bert.embeddings.word_embeddings.weight"],
        expected["model"]["bert.embeddings.word_embeddings.weight"],
    )
    release.set()
    checkpointer.close()
    loaded, saved_state = load_fresh(tmp_path / "run" / "checkpoints" / "step-2", "tied", tmp_path)
    assert_same(loaded, expected)
    assert saved_state == {"step": 2, "seed": 7}
    assert checkpointer.last_written == 2 and training.checkpoint_dirs(tmp_path / "run")[0][0] == 2


# ------------------------------------------------------------------------------ one write at a time


def test_one_write_at_a_time_and_keep(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from mlminilm import training
    from mlminilm.training import checkpoint_writer
    from mlminilm.training.checkpoint_writer import AsyncCheckpointer

    lock = threading.Lock()
    writing, most, intervals = [0], [0], []
    real_write = checkpoint_writer.write_snapshot

    def slow_write(*args, **kwargs):  # the whole write, as the checkpointer calls it
        with lock:
            writing[0] += 1
            most[0] = max(most[0], writing[0])
        start = time.monotonic()
        time.sleep(0.2)
        try:
            return real_write(*args, **kwargs)
        finally:
            with lock:
                writing[0] -= 1
                intervals.append((start, time.monotonic()))

    monkeypatch.setattr(checkpoint_writer, "write_snapshot", slow_write)
    model, optimizer, scheduler = trained("plain", tmp_path, steps=0)
    checkpointer = AsyncCheckpointer(tmp_path / "run", keep=2)
    returned, weights = [], {}
    for step in range(1, 6):
        train_step(model, optimizer, scheduler)
        weights[step] = model.pooler.dense.weight.detach().clone()
        checkpointer.save(step, model, optimizer, scheduler, {})
        returned.append(time.monotonic())
    assert checkpointer.in_flight == 5
    checkpointer.close()
    assert most[0] == 1 and len(intervals) == 5
    intervals.sort()
    assert all(end <= next_start for (_, end), (next_start, _) in zip(intervals, intervals[1:])), intervals
    assert returned[-1] < intervals[-1][1]  # save returned while its write was still running
    root = tmp_path / "run" / "checkpoints"
    assert sorted(os.listdir(root)) == ["step-4", "step-5"]  # pruned to keep=2, no temporaries left
    assert [s for s, _ in training.checkpoint_dirs(tmp_path / "run")] == [4, 5]
    for step in (4, 5):
        assert torch.equal(load_file(root / f"step-{step}" / "model.safetensors")["pooler.dense.weight"], weights[step])
    assert checkpointer.last_written == 5
    with pytest.raises(RuntimeError):
        checkpointer.save(6, model, optimizer, scheduler, {})


# ------------------------------------------------------------------------------------------- failures


def test_a_failed_background_write_is_reported_and_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    from mlminilm import training
    from mlminilm.errors import CheckpointError
    from mlminilm.training import checkpoint_writer
    from mlminilm.training.checkpoint_writer import AsyncCheckpointer

    real_json = training.write_json_atomic

    def disk_full(*args, **kwargs):  # after model.safetensors, optimizer.pt and trainer.pt are in the temporary
        raise OSError(28, "No space left on device")

    model, optimizer, scheduler = trained("plain", tmp_path, steps=1)
    out = tmp_path / "run"
    root = out / "checkpoints"
    checkpointer = AsyncCheckpointer(out, keep=3)
    checkpointer.save(1, model, optimizer, scheduler, {})
    checkpointer.wait()
    expected = frozen(model, optimizer, scheduler)
    before = {p.name: p.read_bytes() for p in (root / "step-1").iterdir()}

    # Reported by wait().
    monkeypatch.setattr(checkpoint_writer, "write_json_atomic", disk_full)
    train_step(model, optimizer, scheduler)
    checkpointer.save(2, model, optimizer, scheduler, {})  # returns: the failure happens in the background
    with pytest.raises(CheckpointError) as info:
        checkpointer.wait()
    message = str(info.value)
    assert "\n" not in message and str(root / "step-2") in message and "No space left on device" in message
    assert isinstance(info.value.__cause__, OSError)
    checkpointer.wait()  # reported once, not again
    assert sorted(os.listdir(root)) == ["step-1"]  # no step-2, no temporary
    assert {p.name: p.read_bytes() for p in (root / "step-1").iterdir()} == before
    assert training.checkpoint_dirs(out) == [(1, root / "step-1")] and checkpointer.last_written == 1

    # Reported by the next save(), which then takes nothing.
    checkpointer.save(3, model, optimizer, scheduler, {})
    with pytest.raises(CheckpointError, match="step-3"):
        checkpointer.save(4, model, optimizer, scheduler, {})
    assert checkpointer.in_flight is None and sorted(os.listdir(root)) == ["step-1"]

    # The cause fixed, checkpoints are written again; in the foreground a failure is raised by save itself.
    monkeypatch.setattr(checkpoint_writer, "write_json_atomic", real_json)
    checkpointer.save(5, model, optimizer, scheduler, {})
    checkpointer.close()
    assert sorted(os.listdir(root)) == ["step-1", "step-5"]
    loaded, _ = load_fresh(root / "step-1", "plain", tmp_path)
    assert_same(loaded, expected)

    foreground = AsyncCheckpointer(out, keep=3, background=False)
    monkeypatch.setattr(checkpoint_writer, "write_json_atomic", disk_full)
    with pytest.raises(CheckpointError, match="step-6"):
        foreground.save(6, model, optimizer, scheduler, {})
    assert sorted(os.listdir(root)) == ["step-1", "step-5"]


EXITING = r"""
import sys, time
from pathlib import Path

import torch

torch.set_num_threads(1)
from mlminilm.training import checkpoint_writer

real_save_file = checkpoint_writer.save_file


def slow_save_file(*args, **kwargs):
    time.sleep(1.0)
    return real_save_file(*args, **kwargs)


checkpoint_writer.save_file = slow_save_file
model = torch.nn.Linear(3, 2)
optimizer = torch.optim.AdamW(model.parameters())
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
checkpoint_writer.AsyncCheckpointer(Path(sys.argv[1]), keep=3).save(1, model, optimizer, scheduler, {})
raise SystemExit("the loop failed right after the save")
"""


def test_a_write_in_flight_is_finished_when_the_process_exits(tmp_path):
    from mlminilm import training

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", EXITING, str(tmp_path / "run")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "the loop failed" in proc.stderr, proc.stderr[-3000:]
    # Not a daemon thread: the interpreter waited for the write instead of cutting it off.
    assert training.checkpoint_dirs(tmp_path / "run") == [(1, tmp_path / "run" / "checkpoints" / "step-1")]
    assert os.listdir(tmp_path / "run" / "checkpoints") == ["step-1"]


# -------------------------------------------------------------------------------- kill -9 mid-write


CHILD = r"""
import copy, os, sys, time
from pathlib import Path

import torch

torch.set_num_threads(1)
from mlminilm.training import checkpoint_writer
from mlminilm import training

expected_path, marker, args = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
real_write = checkpoint_writer.write_snapshot
real_save_file = checkpoint_writer.save_file


def blocked_save_file(tensors, filename, metadata=None):
    real_save_file(tensors, filename, metadata=metadata)  # model.safetensors is in the temporary directory
    marker.write_text(str(Path(filename).parent))
    time.sleep(300)


def write_snapshot(out, snap, keep):
    # The training loop's own AsyncCheckpointer calls this in its writer thread.
    if snap.step == 2:  # written whole: the checkpoint to resume from; what it was given is dumped beside it
        path = real_write(out, snap, keep)
        torch.save({"model": snap.model, "optimizer": snap.optimizer, "scheduler": snap.trainer["scheduler"],
                    "cpu_rng": snap.trainer["cpu_rng"]}, expected_path)
        return path
    checkpoint_writer.save_file = blocked_save_file  # step 4 blocks midway; step 6's save then waits for it
    return real_write(out, snap, keep)


checkpoint_writer.write_snapshot = write_snapshot
sys.argv = ["mlminilm", *args]
from mlminilm.commands.app import main

main()
"""


# The distill run this test kills and resumes: 6 steps of 4 sequences, a checkpoint every 2, every step logged.
RUN = ("--batch-size", "4", "--save-every", "2", "--log-every", "1", "--lr", "1e-3", "--warmup", "0", "--quiet")


def test_kill_during_a_background_write_then_resume(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    from safetensors.torch import load_file

    from mlminilm import training
    from mlminilm.config import DistillConfig
    from mlminilm.io.stale import clean_stale
    from mlminilm.models.loading import load_config
    from mlminilm.models.student import build_student, freeze_unused, student_config

    out, marker, expected_path = tmp_path / "cut", tmp_path / "marker", tmp_path / "expected.pt"
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "MLMINILM_NO_PROGRESS": "1",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("MLMINILM_DEBUG", None)
    child_log = tmp_path / "child.log"
    with child_log.open("w") as sink:
        child = subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(expected_path),
                str(marker),
                *distill_args(wp_teacher, wp_data, out, *RUN, steps=6),
            ],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, child_log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the child never reached its step-4 write"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)  # reaped: a zombie would still count as a live process for stale.py
    assert child.returncode == -signal.SIGKILL

    root = out / "checkpoints"
    tmp = root / f".tmp-step-4-{child.pid}"
    assert Path(marker.read_text()) == tmp
    assert (tmp / "model.safetensors").exists() and not (tmp / "state.json").exists()
    assert training.checkpoint_dirs(out) == [(2, root / "step-2")]

    # step-2 loads with training.load_checkpoint into a student built as distill builds it, and holds the snapshot the
    # loop handed to the writer.
    cfg = DistillConfig(
        teacher=str(wp_teacher),
        data=wp_data,
        out=out,
        layers=2,
        hidden=32,
        heads=4,
        intermediate=64,
        max_steps=6,
        batch_size=4,
        lr=1e-3,
        warmup=0.0,
    )
    student = build_student(student_config(load_config(str(wp_teacher)), cfg.shape, cfg.dropout), seed=99)
    freeze_unused(student, -1)
    optimizer = training.make_optimizer(student, cfg, torch.device("cpu"))
    scheduler = training.linear_schedule(optimizer, cfg.warmup_steps(), cfg.max_steps)
    state = training.load_checkpoint(root / "step-2", student, optimizer, scheduler)
    assert state["step"] == 2
    assert_same(
        with_saved_rng(frozen(student, optimizer, scheduler), root / "step-2"),
        torch.load(expected_path, weights_only=True),
    )

    assert clean_stale(root) == [tmp] and not tmp.exists()
    assert sorted(os.listdir(root)) == ["step-2"]

    # The real CLI, in a new process as after a crash, resumes from step-2 and ends where an uninterrupted run ends.
    resumed = cli(*distill_args(wp_teacher, wp_data, out, *RUN, steps=6), "--resume", env={"OMP_NUM_THREADS": "1"})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    full = tmp_path / "full"
    code, _, err = run_main(monkeypatch, capsys, *distill_args(wp_teacher, wp_data, full, *RUN, steps=6))
    assert code == 0, err
    a = load_file(full / "student" / "model.safetensors")
    b = load_file(out / "student" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key

    def losses(run: Path) -> list[tuple[int, float]]:
        return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]

    assert losses(out) == losses(full) and [s for s, _ in losses(out)] == list(range(1, 7))
    assert sorted(os.listdir(root)) == ["step-2", "step-4", "step-6"]
