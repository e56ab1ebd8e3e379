"""What a run over several processes (and nodes) needs beyond the step: the node's own process count for its
loader workers, a process group that times out, every rank resuming the same run, DDP without buffer broadcasts."""

from __future__ import annotations

import os
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ddp_launch import run, write_launcher, writes

import mlminilm
from helpers import prepare_data, save_tiny_teacher


@pytest.fixture
def torchrun_env(monkeypatch):
    """Rank 5 of 16 on a node that runs 2 of them (two processes per node, eight nodes), and a process group
    that records how it was asked to start instead of starting."""
    for name, value in {"WORLD_SIZE": "16", "RANK": "5", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MLMINILM_DIST_TIMEOUT_MIN", raising=False)
    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: calls.append(kw))
    return calls


def test_loader_workers_are_sized_by_the_processes_of_this_node(torchrun_env, monkeypatch):
    from mlminilm.corpus.loader import CUDA_WORKERS, default_workers
    from mlminilm.training.runtime import setup_runtime

    rt = setup_runtime("cpu", "fp32")
    assert (rt.rank, rt.world, rt.local_rank, rt.local_world) == (5, 16, 1, 2)
    # A 16-core node: its 2 processes get 4 workers each (16 // 2 - 1 = 7, capped at 4), not 16 // 16 - 1 = 0.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert default_workers("cuda", rt.local_world) == CUDA_WORKERS == 4
    # torchrun always sets LOCAL_WORLD_SIZE; a launcher that sets only WORLD_SIZE runs one node.
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert setup_runtime("cpu", "fp32").local_world == 16


def test_the_process_group_times_out_after_30_minutes_or_as_asked(torchrun_env, monkeypatch, capsys):
    from mlminilm.errors import ConfigError
    from mlminilm.training.runtime import setup_runtime

    setup_runtime("cpu", "fp32")
    assert torchrun_env[-1] == {"backend": "gloo", "timeout": timedelta(minutes=30)}
    monkeypatch.setenv("MLMINILM_DIST_TIMEOUT_MIN", "90")
    setup_runtime("cpu", "fp32")
    assert torchrun_env[-1]["timeout"] == timedelta(minutes=90)
    for bad in ("soon", "0", "-5", "inf", "nan"):
        monkeypatch.setenv("MLMINILM_DIST_TIMEOUT_MIN", bad)
        with pytest.raises(ConfigError, match="MLMINILM_DIST_TIMEOUT_MIN"):
            setup_runtime("cpu", "fp32")


@pytest.fixture(scope="module")
def trained(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path_factory):
    """A finished 6-step run on 2 processes (checkpoints step-2, step-4, step-6)."""
    root = tmp_path_factory.mktemp("ddp-setup")
    teacher = save_tiny_teacher(tiny_wordpiece_dir, root / "teacher", dropout=0.0)
    data = prepare_data(teacher, tiny_corpus_dir, root / "data")
    launcher = write_launcher(root)
    out = root / "run"
    proc = run(launcher, out, teacher, data, batch=2, nproc=2, extra=("--max-steps", "6"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return teacher, data, launcher, out


def interrupted_copy(run_dir, to, newest: int):
    """`run_dir` as a run stopped after checkpoint `newest` left it: the later checkpoints and the export gone."""
    shutil.copytree(run_dir, to)
    shutil.rmtree(to / "student")
    for step in (2, 4, 6):
        if step > newest:
            shutil.rmtree(to / "checkpoints" / f"step-{step}")


@pytest.mark.parametrize("rank1_sees", ["an older copy", pytest.param("nothing", marks=pytest.mark.slow)])
def test_resume_stops_every_rank_when_they_see_different_runs(trained, tmp_path, rank1_sees):
    """--resume of a run stopped after checkpoint step-4, with --out on a filesystem rank 1's node does not
    share: there the same path holds an older copy of the run (newest checkpoint step-2) or nothing at all. Rank 0
    would continue from step 4, rank 1 from step 2 or 0, with unpaired collectives. Both ranks stop with one
    `Error:` line each, naming what each sees, before training: no hang, nothing written."""
    teacher, data, launcher, finished = trained
    out = tmp_path / "run"
    interrupted_copy(finished, out, newest=4)
    elsewhere = tmp_path / "node2-run"
    if rank1_sees == "an older copy":
        interrupted_copy(finished, elsewhere, newest=2)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    t0 = time.perf_counter()
    proc = run(
        launcher,
        out,
        teacher,
        data,
        2,
        2,
        ("--resume", "--max-steps", "6"),
        {"MLMINILM_TEST_OUT_RANK1": str(elsewhere)},
        timeout=120,
    )
    seconds = time.perf_counter() - t0
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 2, proc.stderr[-3000:]  # one per rank
    for line in errors:
        assert "the ranks do not see the same run" in line and "every node sees" in line, line
        assert "rank 0 on " in line and "checkpoint step-4, run.json" in line, line
        older = "checkpoint step-2, run.json" if rank1_sees == "an older copy" else "no checkpoint, no run.json"
        assert "rank 1 on " in line and older in line, line
    # No rank's traceback (torchrun itself reports the failed ranks with its own, from torch/distributed): no frame
    # in the launcher or the package's own files. Matched by path, not by the word "mlminilm", which a checkout's
    # directory (and so its .venv's torch frames) may hold.
    frames = [line for line in proc.stderr.splitlines() if line.strip().startswith('File "')]
    ours = (str(Path(mlminilm.__file__).resolve().parent) + os.sep, str(launcher))
    assert not [f for f in frames if any(path in f for path in ours)], proc.stderr[-3000:]
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # nothing written, nothing moved
    assert not writes(out)
    print(f"[resume check] both ranks stopped in {seconds:.1f} s (interpreter and torch start included)")


@pytest.mark.parametrize("kind", ["bert", "xlmr"])
def test_the_students_buffers_never_change_in_training(kind, tiny_wordpiece_dir, tmp_path):
    """Why DDP may skip broadcasting buffers (broadcast_buffers=False, one collective less per forward): the
    student's buffers are constants (position and token-type ids), never written by a training step."""
    from transformers import AutoConfig

    from mlminilm.config import StudentShape
    from mlminilm.distillation.objective import StudentForward
    from mlminilm.models.student import build_student, student_config

    teacher = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "teacher", kind=kind)
    config = student_config(AutoConfig.from_pretrained(teacher), StudentShape(2, 32, 4, 64), dropout=0.1)
    student = build_student(config, seed=0)
    before = {name: b.clone() for name, b in student.named_buffers()}
    assert before and set(before) <= {"embeddings.position_ids", "embeddings.token_type_ids"}, set(before)
    forward = StudentForward(student).train()
    optimizer = torch.optim.AdamW([p for p in student.parameters() if p.requires_grad], lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    for step in range(3):
        ids = torch.randint(5, config.vocab_size, (4, 16), generator=generator)
        mask = torch.ones_like(ids)
        mask[0, 10:] = 0  # a padded row too
        q, k, v = forward(ids, mask if step else None).qkv
        (q.float().square().mean() + k.float().square().mean() + v.float().square().mean()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    after = dict(student.named_buffers())
    assert all(torch.equal(before[n], after[n]) for n in before), [
        n for n in before if not torch.equal(before[n], after[n])
    ]
