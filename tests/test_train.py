"""The shared training loop: the learning-rate schedule against transformers' own, gradient clipping against
hand-worked updates, and the clipping defaults of each command."""

from __future__ import annotations

import pytest
import torch

from mlminilm import training


def _factors(make_scheduler, steps: int) -> list[float]:
    """The lr factor of steps 0 .. steps (the lr each optimizer step uses, over a peak of 1.0)."""
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = make_scheduler(optimizer)
    factors = []
    for _ in range(steps + 1):
        factors.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return factors


def _hand_factor(step: int, warmup: int, total: int) -> float:
    """The schedule mlminilm wrote by hand before it took transformers' (kept as the guard): warmup from 0, then
    linear decay to 0 at `total`, never below 0."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


@pytest.mark.parametrize(("warmup", "total"), [(4, 10), (0, 5), (3, 3), (1, 2), (10, 4)])
def test_linear_schedule_is_the_hand_written_one(warmup, total):
    # training.linear_schedule is transformers.get_linear_schedule_with_warmup: a change in it shows here.
    got = _factors(lambda opt: training.linear_schedule(opt, warmup, total), total + 2)
    assert got == pytest.approx([_hand_factor(s, warmup, total) for s in range(total + 3)], abs=1e-12)


def test_linear_schedule_hand_worked_values():
    # Warmup 4 of 10: 0, 1/4, 2/4, 3/4 during warmup; then (10 - s) / 6 from step 4 down to 0 at step 10.
    expected = [0, 0.25, 0.5, 0.75, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0.0]
    assert _factors(lambda opt: training.linear_schedule(opt, 4, 10), 10) == pytest.approx(expected)
    # No warmup: the peak at step 0, then (5 - s) / 5.
    assert _factors(lambda opt: training.linear_schedule(opt, 0, 5), 5) == pytest.approx([1, 0.8, 0.6, 0.4, 0.2, 0])


class _Linear(torch.nn.Module):
    """loss = w . c: the gradient of w is c, whatever w is."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))


def _one_step(tmp_path, max_grad_norm: float, grads: list[tuple[float, float]]) -> list[float]:
    """w after one SGD step (lr 1) whose micro-batches have the gradients `grads` (averaged over accumulation)."""
    from mlminilm.config import TrainConfig

    tmp_path.mkdir()
    cfg = TrainConfig(
        out=tmp_path,
        max_steps=1,
        grad_accum=len(grads),
        save_every=1,
        log_every=1,
        lr=1.0,
        warmup=0,
        max_grad_norm=max_grad_norm,
        device="cpu",
        precision="fp32",
        quiet=True,
    )
    rt = training.setup_runtime("cpu", "fp32")
    model = _Linear()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

    def compute(step, micro):
        return training.StepOutput(loss=(model.w * torch.tensor(grads[micro])).sum(), tokens=1)

    training.run_steps(
        training.Steps(cfg, rt, model, model, optimizer, scheduler, compute),
        training.Reporting(tmp_path, training.MetricsLog(tmp_path / "metrics.jsonl")),
    )
    return model.w.detach().tolist()


def test_gradient_clipping_scales_the_update_to_the_max_norm(tmp_path):
    # Gradient (3, 4) has norm 5. Clipped at 1: (0.6, 0.8), so SGD at lr 1 moves w to (-0.6, -0.8).
    assert _one_step(tmp_path / "a", 1.0, [(3.0, 4.0)]) == pytest.approx([-0.6, -0.8])
    # Off (0) or above the norm: the full gradient.
    assert _one_step(tmp_path / "b", 0.0, [(3.0, 4.0)]) == pytest.approx([-3.0, -4.0])
    assert _one_step(tmp_path / "c", 10.0, [(3.0, 4.0)]) == pytest.approx([-3.0, -4.0])
    # Clipping applies to the accumulated gradient: micro-batches (6, 0) and (0, 8) average to (3, 4), norm 5;
    # clipped at 2.5 that is (1.5, 2.0). (Clipping each micro-batch instead would give (-1.25, -1.25).)
    assert _one_step(tmp_path / "d", 2.5, [(6.0, 0.0), (0.0, 8.0)]) == pytest.approx([-1.5, -2.0])


def test_clipping_defaults_per_command():
    from mlminilm.config import AssistConfig, DistillConfig, FinetuneConfig, TrainConfig
    from mlminilm.errors import ConfigError

    assert TrainConfig(out="o").max_grad_norm == 0.0
    assert DistillConfig(teacher="t", out="o").max_grad_norm == 0.0  # the distillation recipes do not clip
    assert AssistConfig(teacher="t", out="o").max_grad_norm == 0.0
    assert FinetuneConfig(model="m", train="t", out="o").max_grad_norm == 1.0  # XTREME fine-tuning clips at 1.0
    with pytest.raises(ConfigError, match="'--max-grad-norm': -1.0 is not a non-negative finite number"):
        FinetuneConfig(model="m", train="t", out="o", max_grad_norm=-1.0)
    with pytest.raises(ConfigError, match="--max-grad-norm"):
        DistillConfig(teacher="t", out="o", max_grad_norm=float("nan"))


def test_the_progress_bar_moves_every_step_with_an_eta_from_the_second(tmp_path, monkeypatch):
    """Issue 55, item 7: the bar (a real rich Progress on a fake clock, steps a minute apart, log every 3 steps)
    counts every step as it ends, and its ETA is known from the second step on: the speed of the steps after the
    first (1 per 60 s) times what remains, also when steps come further apart than rich's default 30 s window."""
    import io

    from rich.console import Console
    from rich.progress import Progress

    from mlminilm import logging as mlog
    from mlminilm.config import TrainConfig

    clock, bars = [0.0], []

    class OnTheFakeClock(Progress):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, get_time=lambda: clock[0], **kwargs)
            bars.append(self)

    monkeypatch.setattr(mlog, "progress_enabled", lambda: True)
    monkeypatch.setattr(mlog, "stderr_console", Console(file=io.StringIO(), force_terminal=True))
    monkeypatch.setattr(mlog, "Progress", OnTheFakeClock)
    cfg = TrainConfig(
        out=tmp_path, max_steps=6, save_every=6, log_every=3, lr=0.1, warmup=0, device="cpu", precision="fp32"
    )
    rt = training.setup_runtime("cpu", "fp32")
    model = _Linear()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    seen = []  # (step, the bar's count, its ETA in s) as each step starts

    def compute(step, micro):
        task = bars[-1].tasks[-1]
        seen.append((step, task.completed, task.time_remaining))
        clock[0] += 60.0
        return training.StepOutput(loss=(model.w * torch.tensor([1.0, 2.0])).sum(), tokens=1)

    training.run_steps(
        training.Steps(cfg, rt, model, model, optimizer, scheduler, compute),
        training.Reporting(tmp_path, training.MetricsLog(tmp_path / "metrics.jsonl")),
    )
    assert [(step, completed) for step, completed, _ in seen] == [(s, s) for s in range(6)]
    # ETA = the 6 - s steps left at 60 s each, from the second step's end on (one sample measures no speed).
    assert [eta for *_, eta in seen] == [None, None, 240, 180, 120, 60]
    assert bars[-1].tasks[-1].completed == 6 and bars[-1].tasks[-1].total == 6
