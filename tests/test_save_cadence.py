"""distill / assist checkpoint by time (`--save-every-minutes`, default 30) and, when asked, every N steps: under a
fake clock the saves fall where the elapsed time says, never twice at one step, always at the end; only rank 0's
clock counts; the options' defaults and refusals."""

from __future__ import annotations

import pytest
import torch

from helpers import assert_usage_error, run_main
from mlminilm import training
from mlminilm.training import save_clock

SECONDS_PER_STEP = 20.0  # the fake clock: each optimizer step takes 20 s


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))


def saved_steps(tmp_path, monkeypatch, **kw) -> list[int]:
    """The steps a 12-step loop checkpoints at, with each step taking SECONDS_PER_STEP on a fake clock."""
    from mlminilm.config import DistillConfig

    clock = [1000.0]
    monkeypatch.setattr(save_clock, "now", lambda: clock[0])
    base = dict(max_steps=12, log_every=2, lr=1e-3, warmup=0, device="cpu", precision="fp32", quiet=True)
    tmp_path.mkdir()
    cfg = DistillConfig(teacher="t", out=tmp_path, **{**base, **kw})
    rt = training.setup_runtime("cpu", "fp32")
    model = _Linear()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    saves: list[int] = []

    def compute(step, micro):
        clock[0] += SECONDS_PER_STEP
        return training.StepOutput(loss=(model.w * torch.tensor([1.0, 2.0])).sum(), tokens=1)

    training.run_steps(
        training.Steps(cfg, rt, model, model, optimizer, scheduler, compute),
        training.Reporting(
            tmp_path, training.MetricsLog(tmp_path / "metrics.jsonl"), after_save=lambda step: saves.append(step)
        ),
    )
    return saves


def test_saves_follow_the_clock(tmp_path, monkeypatch):
    # One minute = 3 steps, checked at each log step (every 2): 80 s at step 4 (due), then 80 s after it at step
    # 8, then the end, 12 (80 s after 8, due by time and the end at once: one save).
    assert saved_steps(tmp_path / "a", monkeypatch, save_every_minutes=1.0) == [4, 8, 12]
    # Half a minute: log steps are 40 s apart, so every one of them is due.
    assert saved_steps(tmp_path / "b", monkeypatch, save_every_minutes=0.5) == [2, 4, 6, 8, 10, 12]
    # Longer than the run: the end only.
    assert saved_steps(tmp_path / "c", monkeypatch, save_every_minutes=30.0) == [12]


def test_steps_and_time_together_save_once_per_step(tmp_path, monkeypatch):
    # Steps every 4 (4, 8, 12) and time every minute (4 and 8 by the clock too): each of those steps saved once.
    assert saved_steps(tmp_path / "a", monkeypatch, save_every=4, save_every_minutes=1.0) == [4, 8, 12]
    # Steps every 5 with the clock off: 5, 10 and the end.
    assert saved_steps(tmp_path / "b", monkeypatch, save_every=5, save_every_minutes=0.0) == [5, 10, 12]
    # Steps every 5 and a 1-minute clock: 4 by time (80 s), 5 by steps (which restarts the clock), 8 by time (60 s
    # after 5), 10 by steps, 12 the end.
    assert saved_steps(tmp_path / "c", monkeypatch, save_every=5, save_every_minutes=1.0) == [4, 5, 8, 10, 12]


def test_only_rank_zero_reads_the_clock(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(save_clock, "now", lambda: clock[0])
    main, other = save_clock.SaveClock(1.0, is_main=True), save_clock.SaveClock(1.0, is_main=False)
    clock[0] = 61.0
    assert main.due() and not other.due()  # the loop shares rank 0's answer with every rank (one all-reduce)
    main.saved()
    assert not main.due()
    assert not save_clock.SaveClock(0.0, is_main=True).due() and not save_clock.SaveClock(None, True).due()


def test_defaults_and_refusals(monkeypatch, capsys):
    from mlminilm.config import AssistConfig, DistillConfig, FinetuneConfig
    from mlminilm.errors import ConfigError

    cfg = DistillConfig(teacher="t", out="o")
    assert cfg.save_every is None and cfg.save_every_minutes == 30.0
    assert AssistConfig(teacher="t", out="o").save_every_minutes == 30.0
    assert not hasattr(FinetuneConfig(model="m", train="t", out="o"), "save_every_minutes")  # selection by steps
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="'--save-every-minutes': .* is not a non-negative finite number"):
            DistillConfig(teacher="t", out="o", save_every_minutes=bad)
    with pytest.raises(ConfigError, match=r"'--save-every': 0 is not in 1\.\."):
        DistillConfig(teacher="t", out="o", save_every=0)
    base = ("distill", "--teacher", "t", "--out", "o")
    assert_usage_error(run_main(monkeypatch, capsys, *base, "--save-every-minutes", "-5"), "--save-every-minutes")
    assert_usage_error(run_main(monkeypatch, capsys, *base, "--save-every-minutes", "nan"), "--save-every-minutes")
    assert_usage_error(run_main(monkeypatch, capsys, *base, "--save-every", "30m"), "--save-every")
    ft = ("finetune", "--model", "m", "--train", "t", "--out", "o")
    assert_usage_error(run_main(monkeypatch, capsys, *ft, "--save-every-minutes", "5"), "--save-every-minutes")


# Each rank runs the 12-step loop of `saved_steps` with its own fake clock: rank 1's runs 10 times faster than
# rank 0's, so by its own clock it would save at every log step. Both must save where rank 0's clock says.
RANK_SCRIPT = """
import json, sys
import torch
import torch.distributed as dist
from mlminilm import training
from mlminilm.config import DistillConfig
from mlminilm.training import save_clock

dist.init_process_group("gloo")
rank = dist.get_rank()
clock = [1000.0]
save_clock.now = lambda: clock[0]
from pathlib import Path
out = Path(sys.argv[1])
cfg = DistillConfig(teacher="t", out=out, max_steps=12, log_every=2, lr=1e-3, warmup=0, device="cpu",
                    precision="fp32", quiet=True, save_every_minutes=1.0)
rt = training.Runtime(torch.device("cpu"), torch.float32, rank, 2, rank)
w = torch.nn.Parameter(torch.zeros(2))
model = torch.nn.ParameterList([w])
optimizer = torch.optim.SGD([w], lr=1e-3)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
saves = []

def compute(step, micro):
    clock[0] += 20.0 if rank == 0 else 200.0
    return training.StepOutput(loss=(w * torch.tensor([1.0, 2.0])).sum(), tokens=1)

metrics = training.MetricsLog(cfg.out / f"m{rank}.jsonl")
training.run_steps(training.Steps(cfg, rt, model, model, optimizer, scheduler, compute),
                   training.Reporting(cfg.out, metrics, after_save=saves.append))
(cfg.out / f"saves-{rank}.json").write_text(json.dumps(saves))
dist.destroy_process_group()
"""


def test_two_ranks_save_at_rank_zeros_steps(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from ddp_launch import free_port

    repo = Path(__file__).resolve().parents[1]
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLMINILM_NO_PROGRESS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")])
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(script),
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=repo, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [json.loads((out / f"saves-{r}.json").read_text()) for r in (0, 1)] == [[4, 8, 12], [4, 8, 12]]
