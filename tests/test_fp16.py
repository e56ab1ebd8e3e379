"""`--precision fp16` (GPUs without bf16: V100, T4) trains through a gradient scaler; proven here on CPU, where
torch's autocast and GradScaler run the same code."""

from __future__ import annotations

import json
from dataclasses import replace

import torch
from torch import nn

from helpers import prepare_data, run_killed_after_checkpoint, save_tiny_teacher
from mlminilm import training
from mlminilm.config import DistillConfig, TrainConfig


class Scaled(nn.Module):
    """One weight whose fp16 gradient overflows while the loss scale is large: loss = sum(w * 1000) in fp16."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self):
        return (self.w.half() * 1000.0).float().sum() / 4000.0


def test_scaler_skips_an_overflowing_step_on_the_device(tmp_path):
    cfg = TrainConfig(out=tmp_path, max_steps=6, lr=0.1, warmup=0, log_every=1, save_every=100, weight_decay=0.0)
    rt = training.Runtime(torch.device("cpu"), torch.float16)
    model = Scaled()
    state = training.setup_training(cfg, rt, model, model, tmp_path)
    state.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)  # 2^20 x 0.25 = 262,144 > fp16's 65,504
    seen = []

    def compute(step, micro):
        seen.append(model.w.detach().clone())
        return training.StepOutput(model(), {}, 1)

    result = training.run_steps(
        training.Steps(cfg, rt, model, model, state.optimizer, state.scheduler, compute, scaler=state.scaler),
        training.Reporting(tmp_path, state.metrics),
    )
    scales = [r["loss_scale"] for r in result.history]
    # The fp16 gradient of w is 0.25 x the scale: it overflows (fp16 max 65,504) for scales 2^20, 2^19 and 2^18
    # (65,536). Each of those steps leaves w as it was and halves the scale; 2^17 fits and keeps it.
    assert scales[:4] == [2.0**19, 2.0**18, 2.0**17, 2.0**17]
    assert torch.equal(seen[1], seen[0]) and torch.equal(seen[2], seen[0]) and torch.equal(seen[3], seen[0])
    assert not torch.equal(seen[4], seen[3])  # the first step that fits updates the weight
    assert all(torch.isfinite(w).all() for w in seen)


def test_distill_in_fp16_resumes_exactly_with_its_scaler_state(
    tiny_wordpiece_dir, tiny_corpus_dir, tmp_path, monkeypatch
):
    from safetensors.torch import load_file

    from mlminilm import distill

    teacher = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "teacher")
    data = prepare_data(teacher, tiny_corpus_dir, tmp_path / "data")
    cfg = DistillConfig(
        out=tmp_path / "full",
        teacher=str(teacher),
        data=data,
        layers=2,
        hidden=32,
        heads=4,
        intermediate=64,
        max_steps=6,
        batch_size=4,
        save_every=3,
        log_every=1,
        lr=1e-3,
        warmup=0.0,
        precision="fp16",
        device="cpu",
        quiet=True,
    )
    full = distill.run(cfg)
    records = [json.loads(l) for l in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    assert all("loss_scale" in r and r["loss"] == r["loss"] for r in records)
    state = json.loads((tmp_path / "full" / "checkpoints" / "step-3" / "state.json").read_text())
    assert state["grad_scaler"]["scale"] > 0
    assert json.loads((tmp_path / "full" / "run.json").read_text())["precision"] == "float16"

    cut = replace(cfg, out=tmp_path / "cut")
    run_killed_after_checkpoint(monkeypatch, 3, distill.run, cut)
    resumed = distill.run(replace(cut, resume=True))
    a = load_file(full.student / "model.safetensors")
    b = load_file(resumed.student / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
