"""The GPU path, whole runs: what distill, finetune and eval-xnli must do on a CUDA device, proven there when a GPU is
lent.

Run on a machine with a GPU, in one command (with tests/test_gpu_numerics.py, a single step's numbers and kernels):

    .venv/bin/python -m pytest -q -m gpu tests/test_gpu_numerics.py tests/test_gpu_runs.py

What it proves on the device: 19 of 20 training steps make no host sync (`torch.cuda.set_sync_debug_mode("error")`);
distill -> kill -> resume ends where the uninterrupted run ends; finetune and eval-xnli run; `--precision fp16` trains
through its gradient scaler; `--batch-size auto` records the plan it chose; `--compile on` matches eager.

Every test body is written once for a device, `DEVICE` (tests/helpers.py), so that it can be exercised without a GPU:

    MLMINILM_TEST_GPU_DEVICE=cpu .venv/bin/python -m pytest -q tests/test_gpu_runs.py

runs the same bodies on the CPU (without the `gpu` marker). What only CUDA can check (the sync debug mode,
inductor's code generation, the nondeterminism of CUDA kernels) is guarded by `CUDA` inside the tests.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from taskdata import LABELS, write_nli_tsv, write_xnli_dir

from helpers import GPU_TEST_CUDA as CUDA
from helpers import GPU_TEST_DEVICE as DEVICE
from helpers import device_distill_config, distill_fields, run_killed_after_checkpoint, run_main, save_tiny_teacher

# On CUDA every test needs the GPU (conftest skips `gpu` tests without one); on the CPU they run as plain tests,
# one intra-op thread (tiny models, 2 busy cores). Every file of GPU tests says `pytest.mark.gpu`:
# scripts/gpu_check.py finds them by it.
pytestmark = [pytest.mark.gpu] if CUDA else [pytest.mark.usefixtures("one_torch_thread")]


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------------------------- no host syncs in steps


@pytest.mark.parametrize("kind,precision", [("bert", "auto"), ("xlm-roberta", "auto"), ("bert", "fp16")])
def test_distill_steps_make_no_host_sync(gpu_teachers, gpu_data, kind, precision, tmp_path, monkeypatch):
    """20 real steps (log and checkpoint only at step 20): with the sync debug mode at "error" from the start of
    step 0 until step 19 starts, any device->host read or synchronize in a step raises inside the run.

    The reads that end the log interval and the checkpoint happen in step 19's iteration (after `done` = 20), which
    runs with the mode off: they are allowed. Eager (`compile` off): a compiled graph autotunes on first use,
    which synchronizes by design."""
    from mlminilm import distill, training

    def arm(on: bool) -> None:
        if CUDA:
            torch.cuda.set_sync_debug_mode("error" if on else "default")

    if CUDA:  # the mode really raises on a read (else this test could not fail)
        arm(True)
        try:
            with pytest.raises(RuntimeError):
                torch.ones(1, device="cuda").item()
        finally:
            arm(False)

    starts: list[int] = []
    armed_steps: list[int] = []
    state = {"on": False}
    real_seed = training.step_seed

    def step_seed(seed, step, rank):
        starts.append(step)
        if step == 0:
            arm(True)
            state["on"] = True
        elif step == 19:
            arm(False)
            state["on"] = False
        if state["on"]:
            armed_steps.append(step)
        return real_seed(seed, step, rank)

    padded_steps: set[int] = set()
    real_terms = distill.distill_terms

    def distill_terms(teacher, layer, forward, input_ids, mask, cfg, *rest):
        if mask is not None and starts:
            padded_steps.add(starts[-1])
        return real_terms(teacher, layer, forward, input_ids, mask, cfg, *rest)

    monkeypatch.setattr("mlminilm.training.loop.step_seed", step_seed)
    monkeypatch.setattr(distill, "distill_terms", distill_terms)
    extra = {"data_workers": 0} if "data_workers" in distill_fields() else {}
    cfg = device_distill_config(
        gpu_teachers[kind],
        gpu_data[kind],
        tmp_path / "run",
        max_steps=20,
        log_every=20,
        save_every=20,
        batch_size=8,
        warmup=2,
        max_grad_norm=1.0,
        precision=precision,
        **extra,
    )
    try:
        result = distill.run(cfg)
    finally:
        arm(False)
    assert starts == list(range(20))
    assert armed_steps == list(range(19))
    assert result.last_loss is not None and math.isfinite(result.last_loss)
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [20]
    # The masked path ran inside the armed window too (a language's last sequence is padded).
    assert padded_steps & set(armed_steps), padded_steps


# ------------------------------------------------------------------------------ distill -> kill -> resume


# On CUDA two runs differ from their first step (flash attention's and the embedding's backward add with atomics in
# a varying order), and AdamW turns a last-bit difference of a near-zero gradient into a difference of up to lr in
# its update: an element-wise relative 1e-5 fails without a fault. What a faulty resume (lost optimizer state, a
# wrong data position or dropout seed) changes is the whole of the steps after the checkpoint; the noise changes a
# small part of them. So each tensor of the resumed run must be within RESUMED_MOVE_SHARE of the distance the
# uninterrupted run moved it after the checkpoint, and the losses within bf16's precision.
RESUMED_MOVE_SHARE = 0.1
RESUMED_LOSS_RTOL = 2e-2


def assert_resumed_close(full: torch.Tensor, resumed: torch.Tensor, at_cut: torch.Tensor, key: str) -> None:
    full, resumed, at_cut = full.double(), resumed.double(), at_cut.double()
    moved = float((full - at_cut).norm())
    apart = float((resumed - full).norm())
    assert apart <= RESUMED_MOVE_SHARE * moved + 1e-6 * float(full.norm()) + 1e-12, (key, apart, moved)


def test_distill_killed_and_resumed_ends_close_to_the_uninterrupted_run(gpu_teachers, gpu_data, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from mlminilm import distill

    if CUDA:  # deterministic kernels where torch has them (embedding / attention backward), restored after
        was = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        cfg = device_distill_config(
            gpu_teachers["bert"], gpu_data["bert"], tmp_path / "full", max_steps=6, save_every=3
        )
        full = distill.run(cfg)

        cut = replace(cfg, out=tmp_path / "cut")
        run_killed_after_checkpoint(monkeypatch, 3, distill.run, cut)  # dies right after the checkpoint at 3
        assert not (tmp_path / "cut" / "student").exists()
        assert sorted(p.name for p in (tmp_path / "cut" / "checkpoints").iterdir()) == ["step-3"]
        resumed = distill.run(replace(cut, resume=True))
    finally:
        if CUDA:
            torch.use_deterministic_algorithms(was[0], warn_only=was[1])

    a = load_file(full.student / "model.safetensors")
    b = load_file(resumed.student / "model.safetensors")
    at_cut = load_file(tmp_path / "cut" / "checkpoints" / "step-3" / "model.safetensors")
    assert a.keys() == b.keys() and set(a) & set(at_cut)
    for key in a:
        if not CUDA:  # the CPU is deterministic: the same weights to the last bits
            torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-6, msg=key)
        elif key in at_cut:
            assert_resumed_close(a[key], b[key], at_cut[key], key)
    full_losses = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "full")]
    cut_losses = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "cut")]
    assert [s for s, _ in cut_losses] == [s for s, _ in full_losses] == list(range(1, 7))
    for (step, x), (_, y) in zip(full_losses, cut_losses):
        assert y == pytest.approx(x, rel=RESUMED_LOSS_RTOL if CUDA else 1e-5), step
    assert full_losses[-1][1] != full_losses[0][1]  # it trained


# ------------------------------------------------------------------------------ finetune and eval-xnli


def test_finetune_and_eval_xnli_run_on_the_device(tiny_wordpiece_dir, tmp_path, monkeypatch, capsys):
    encoder = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "encoder", layers=2, hidden=32, heads=4, intermediate=64)
    train_file = write_nli_tsv(tmp_path / "train.tsv", "en", 24)
    dev_file = write_nli_tsv(tmp_path / "dev.tsv", "en", 9, seed=5)
    model = tmp_path / "ft"
    code, out, err = run_main(
        monkeypatch,
        capsys,
        "finetune",
        "--task",
        "xnli",
        "--model",
        str(encoder),
        "--train",
        str(train_file),
        "--dev",
        str(dev_file),
        "--out",
        str(model),
        "--max-steps",
        "4",
        "--save-every",
        "2",
        "--batch-size",
        "8",
        "--max-seq-len",
        "48",
        "--log-every",
        "1",
        "--lr",
        "1e-3",
        "--device",
        DEVICE,
        "--quiet",
    )
    assert code == 0, err
    run = json.loads((model / "run.json").read_text())
    assert (run["device"] == "cpu") is (not CUDA), run["device"]
    records = read_metrics(model)
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    assert [r["step"] for r in records if "dev_accuracy" in r] == [2, 4]

    data = write_xnli_dir(tmp_path / "xnli", ("en", "de"), count=6)
    report_dir = tmp_path / "report"
    code, out, err = run_main(
        monkeypatch,
        capsys,
        "eval-xnli",
        "--model",
        str(model),
        "--data",
        str(data),
        "--langs",
        "en,de",
        "--out",
        str(report_dir),
        "--device",
        DEVICE,
        "--json",
        "--quiet",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["average"]["examples"] == 12
    assert doc["throughput"]["device"].startswith("cpu") is (not CUDA), doc["throughput"]
    for lang in ("en", "de"):
        predictions = (report_dir / "predictions" / f"test-{lang}.tsv").read_text().split()
        assert len(predictions) == 6 and set(predictions) <= set(LABELS)


# ---------------------------------------------------------------------------------- fp16 with the scaler


def test_fp16_distill_trains_through_the_gradient_scaler(gpu_teachers, gpu_data, tmp_path):
    from mlminilm import distill

    out = tmp_path / "fp16"
    result = distill.run(
        device_distill_config(gpu_teachers["bert"], gpu_data["bert"], out, precision="fp16", max_steps=4, save_every=4)
    )
    records = read_metrics(out)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(math.isfinite(r["loss"]) and r["loss_scale"] > 0 for r in records), records
    assert result.last_loss is not None and math.isfinite(result.last_loss)
    assert json.loads((out / "run.json").read_text())["precision"] == "float16"
    state = json.loads((out / "checkpoints" / "step-4" / "state.json").read_text())
    assert state["grad_scaler"]["scale"] > 0


# ---------------------------------------------------------------------------------------- --batch-size auto


def find_batch_plan(record: dict) -> dict | None:
    """The micro-batch / accumulation / global-batch plan in a run record, wherever it is kept (not "config",
    which holds the options as given)."""
    stack = [v for k, v in record.items() if k != "config"]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if {"micro_batch", "grad_accum", "global_batch"} <= item.keys():
                return item
            stack.extend(item.values())
    return None


@pytest.mark.skipif(not {"global_batch"} <= distill_fields(), reason="DistillConfig has no global_batch yet")
def test_batch_size_auto_records_the_plan_it_chose(gpu_teachers, gpu_data, tmp_path):
    from mlminilm import distill

    out = tmp_path / "auto"
    global_batch = 64  # CPU: auto stops at 32 sequences, so 32 x 2; CUDA: the largest power of two that fits
    result = distill.run(
        device_distill_config(
            gpu_teachers["bert"],
            gpu_data["bert"],
            out,
            batch_size="auto",
            global_batch=global_batch,
            max_steps=2,
            save_every=2,
        )
    )
    record = json.loads((out / "run.json").read_text())
    assert record["config"]["batch_size"] == "auto" and record["config"]["global_batch"] == global_batch
    plan = find_batch_plan(record)
    assert plan is not None, record
    micro, accum, world = plan["micro_batch"], plan["grad_accum"], record["world_size"]
    assert micro * accum * world == plan["global_batch"] == global_batch, plan
    assert micro >= 1 and micro & (micro - 1) == 0, plan  # a power of two
    assert plan.get("how", "auto") == "auto", plan
    if not CUDA:
        assert (micro, accum) == (32, 2), plan
    assert result.last_loss is not None and math.isfinite(result.last_loss)


# --------------------------------------------------------------------------------------------- --compile on


@pytest.mark.skipif(not {"compile"} <= distill_fields(), reason="DistillConfig has no compile field yet")
def test_compile_on_matches_eager(gpu_teachers, gpu_data, tmp_path, monkeypatch):
    """3 steps compiled and eager from the same seed, fp32 (bf16 rounding would differ between a fused graph and
    eager kernels by far more than 1e-4) and without dropout: the same loss at every step, within 1e-4. Something
    must really have been compiled (dynamo's counters), and the run record says so."""
    from torch._dynamo.utils import counters

    from mlminilm import distill

    if not CUDA:
        # Inductor's C++ code generation takes ~50 s for these graphs on a 2-core CPU: the CPU run traces the same
        # graphs (dynamo, AOT autograd) and runs them eagerly; CUDA compiles them as distill does.
        real_compile = torch.compile
        monkeypatch.setattr(torch, "compile", lambda fn=None, **kw: real_compile(fn, **{**kw, "backend": "aot_eager"}))
    # No dropout: a compiled graph draws its dropout masks with inductor's own generator, never eager's masks.
    base = dict(max_steps=3, save_every=3, precision="fp32", warmup=0.0, dropout=0.0)
    torch._dynamo.reset()
    counters.clear()
    t0 = time.perf_counter()
    compiled = distill.run(
        device_distill_config(gpu_teachers["bert"], gpu_data["bert"], tmp_path / "on", compile="on", **base)
    )
    seconds = time.perf_counter() - t0
    graphs = sum(counters["stats"].values()) if "stats" in counters else 0
    frames = dict(counters.get("frames", {}))
    torch._dynamo.reset()
    eager = distill.run(
        device_distill_config(gpu_teachers["bert"], gpu_data["bert"], tmp_path / "off", compile="off", **base)
    )
    print(f"[compile] 3 compiled steps took {seconds:.1f} s")
    record = json.loads((tmp_path / "on" / "run.json").read_text())
    assert record.get("compile", True) is True, record.get("compile")
    assert graphs > 0 or frames.get("ok", 0) > 0, (dict(counters.get("stats", {})), frames)
    on = [r["loss"] for r in read_metrics(tmp_path / "on")]
    off = [r["loss"] for r in read_metrics(tmp_path / "off")]
    assert len(on) == len(off) == 3
    for step, (a, b) in enumerate(zip(on, off), 1):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-9), (step, on, off)
    assert compiled.last_loss == pytest.approx(eager.last_loss, rel=1e-4)
