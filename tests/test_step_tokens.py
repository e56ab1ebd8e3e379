"""The batch a distill run gets when --batch-size is left out: on a CPU exactly what it always was (32 sequences, no
accumulation), on CUDA at least 32k tokens per GPU per optimizer step; recorded in run.json."""

from __future__ import annotations

import json

import pytest

from mlminilm.config import DistillConfig
from mlminilm.distillation.batch import default_batch
from mlminilm.training.batch_size import BatchPlan, plan_batch


def resolved(device: str, seq_len: int = 128, world: int = 1, fits=None, **kw) -> BatchPlan:
    """What distillation/batch.py resolves: the default decided with the device, then the batch planned (`fits`:
    the CUDA probe's answer per micro-batch)."""
    cfg = default_batch(DistillConfig(teacher="t", out="o", **kw), device, seq_len, world)
    return plan_batch(cfg.batch_size, cfg.grad_accum, cfg.global_batch, world, fits=fits)


@pytest.mark.parametrize("world", [1, 2])
def test_cpu_defaults_are_todays(world):
    # Before: --batch-size 32, --grad-accum 1, no --global-batch: 32 per process, no accumulation, "given".
    assert resolved("cpu", world=world) == BatchPlan(32, 1, 32 * world, "given")
    assert resolved("cpu", world=world, grad_accum=3) == BatchPlan(32, 3, 96 * world, "given")
    assert resolved("cpu", world=world, global_batch=64 * world) == BatchPlan(32, 2, 64 * world, "global")
    assert resolved("cpu", seq_len=512, world=world) == BatchPlan(32, 1, 32 * world, "given")
    # A given batch size is kept on every device.
    for device in ("cpu", "cuda"):
        assert resolved(device, world=world, batch_size=8) == BatchPlan(8, 1, 8 * world, "given")


@pytest.mark.parametrize("seq_len", [128, 512, 100, 32])
@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("fits_up_to", [1024, 64, 4])
def test_cuda_default_reaches_32k_tokens_per_gpu(seq_len, world, fits_up_to):
    plan = resolved("cuda", seq_len=seq_len, world=world, fits=lambda b: b <= fits_up_to)
    tokens = plan.micro_batch * plan.grad_accum * seq_len  # per GPU per optimizer step
    assert plan.how == "auto" and plan.global_batch == plan.micro_batch * plan.grad_accum * world
    assert 32_768 <= tokens < 2 * 32_768, plan
    assert plan.micro_batch <= fits_up_to
    if seq_len == 128:
        assert tokens == 32_768  # 256 sequences, by hand


def test_cuda_default_yields_to_the_options_given():
    # --global-batch: kept, the micro-batch auto; --grad-accum: the old default micro-batch with that accumulation.
    assert resolved("cuda", global_batch=48, fits=lambda b: True) == BatchPlan(16, 3, 48, "auto")
    assert resolved("cuda", grad_accum=2) == BatchPlan(32, 2, 64, "given")


def test_distill_on_cpu_records_the_default_batch_and_its_tokens(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    from helpers import prepare_data, save_tiny_teacher
    from mlminilm import distill

    teacher = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "teacher")
    data = prepare_data(teacher, tiny_corpus_dir, tmp_path / "data")
    out = tmp_path / "run"
    cfg = DistillConfig(
        out=out, teacher=str(teacher), data=data, layers=1, hidden=32, heads=4, intermediate=64, max_steps=1,
        device="cpu", precision="fp32", quiet=True,
    )  # fmt: skip
    assert cfg.batch_size is None
    distill.run(cfg)
    record = json.loads((out / "run.json").read_text())
    batch = record["batch"]
    assert (batch["micro_batch"], batch["grad_accum"], batch["global_batch"], batch["how"]) == (32, 1, 32, "given")
    assert batch["tokens_per_process_step"] == 32 * 32  # prepare_data's sequences are 32 tokens long
