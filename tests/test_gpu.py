"""The GPU path: what distill, finetune and eval-xnli must do on a CUDA device, proven there when a GPU is lent.

Run on a machine with a GPU, in one command:

    .venv/bin/python -m pytest -q -m gpu tests/test_gpu.py

What it proves on the device: a bf16 distill step is finite and its relation logits and loss terms are float32;
the chunked relation KL has the value and the gradients of autograd through the materialised form; 19 of 20
training steps make no host sync (`torch.cuda.set_sync_debug_mode("error")`); the teacher's attention below the
distilled layer runs a fused SDPA kernel (flash / memory-efficient), never the math fallback; distill -> kill ->
resume ends where the uninterrupted run ends; finetune and eval-xnli run; the peak memory of a distill step per
token (printed); `--precision fp16` trains through its gradient scaler; `--batch-size auto` records the plan it
chose; `--compile on` matches eager.

Every test body is written once for a device, `DEVICE`, so that it can be exercised without a GPU:

    MLMINILM_TEST_GPU_DEVICE=cpu .venv/bin/python -m pytest -q tests/test_gpu.py

runs the same bodies on the CPU (without the `gpu` marker; in about 20 s). What only CUDA can check (the sync
debug mode, CUDA kernels in the profile, CUDA memory statistics, inductor's code generation) is guarded by `CUDA`
inside the tests.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from taskdata import LABELS, write_nli_tsv, write_xnli_dir
from torch.overrides import TorchFunctionMode

from helpers import prepare_data, run_killed_after_checkpoint, run_main, save_tiny_teacher

DEVICE = os.environ.get("MLMINILM_TEST_GPU_DEVICE", "cuda")
assert DEVICE in ("cuda", "cpu"), f"MLMINILM_TEST_GPU_DEVICE must be cuda or cpu, got {DEVICE!r}"
CUDA = DEVICE == "cuda"

# On CUDA every test needs the GPU (conftest skips `gpu` tests without one); on the CPU they run as plain tests,
# one intra-op thread (tiny models, 2 busy cores).
pytestmark = [pytest.mark.gpu] if CUDA else [pytest.mark.usefixtures("one_torch_thread")]

KINDS = ("bert", "xlm-roberta")


def distill_fields() -> set[str]:
    from mlminilm.config import DistillConfig

    return set(DistillConfig.__dataclass_fields__)


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def teachers(tiny_wordpiece_dir, tiny_sentencepiece_dir, tmp_path_factory) -> dict[str, Path]:
    """A tiny BERT (WordPiece) and a tiny XLM-R (SentencePiece) teacher: 4 layers, hidden 64, 4 heads."""
    root = tmp_path_factory.mktemp("gpu-teachers")
    return {
        "bert": save_tiny_teacher(tiny_wordpiece_dir, root / "bert"),
        "xlm-roberta": save_tiny_teacher(tiny_sentencepiece_dir, root / "xlmr", kind="xlm-roberta"),
    }


@pytest.fixture(scope="module")
def datasets(teachers, tiny_corpus_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gpu-data")
    return {kind: prepare_data(path, tiny_corpus_dir, root / kind) for kind, path in teachers.items()}


def distill_config(teacher: Path, data: Path, out: Path, **kw):
    """A tiny 2x32 student run on DEVICE. `compile` off unless asked: a compiled graph autotunes (synchronizing) on
    first use and costs compile time in every run; the compile test covers it."""
    from mlminilm.config import DistillConfig

    base = dict(
        teacher=str(teacher),
        data=data,
        out=out,
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
        device=DEVICE,
        quiet=True,
    )
    if "compile" in distill_fields():
        base["compile"] = "off"
    base.update(kw)
    missing = set(base) - distill_fields()
    assert not missing, f"DistillConfig has no field(s) {sorted(missing)}"
    return DistillConfig(**base)


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def random_ids(vocab: int, batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    """Token ids past the specials (both tiny tokenizers keep their specials below 5), on DEVICE."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, vocab, (batch, seq), generator=g).to(DEVICE)


def pad_tail(ids: torch.Tensor, pad_id: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The last sequence's last `count` positions padded: (ids, mask)."""
    ids = ids.clone()
    ids[-1, -count:] = pad_id
    return ids, (ids != pad_id).long()


def student_for(teacher_dir: Path, seed: int = 0):
    """The 2x32 student distill builds for `teacher_dir` (unused top-layer parts frozen), train mode, on DEVICE."""
    from mlminilm.config import StudentShape
    from mlminilm.distillation.objective import StudentQKV
    from mlminilm.models.loading import load_config
    from mlminilm.models.student import build_student, freeze_unused, student_config

    student = build_student(student_config(load_config(str(teacher_dir)), StudentShape(2, 32, 4, 64)), seed)
    freeze_unused(student, -1)
    return StudentQKV(student.to(DEVICE).train())


class RelationSpy(TorchFunctionMode):
    """Records the dtype of every [.., seq, seq] matmul / softmax called from mlminilm code: the relation logits
    and their softmaxes (the models' own attention runs in SDPA and never shows up here)."""

    NAMES = {"matmul", "__matmul__", "bmm", "baddbmm", "einsum", "softmax", "log_softmax", "_softmax"}

    def __init__(self, seq: int):
        super().__init__()
        self.seq = seq
        self.seen: list[tuple[str, str, torch.dtype]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if (
            name in self.NAMES
            and isinstance(out, torch.Tensor)
            and out.dim() == 4
            and tuple(out.shape[-2:]) == (self.seq, self.seq)
        ):
            frame = sys._getframe(1)
            while frame is not None and frame.f_globals.get("__name__", "").startswith("torch"):
                frame = frame.f_back
            caller = frame.f_globals.get("__name__", "") if frame is not None else ""
            if caller.startswith("mlminilm"):
                self.seen.append((caller, name, out.dtype))
        return out


# --------------------------------------------------------------------- 1. a bf16 step: finite, fp32 relations


@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
@pytest.mark.parametrize("objective", ["minilm", "minilm-v2"])
@pytest.mark.parametrize("kind", KINDS)
def test_bf16_distill_step_is_finite_and_its_relations_are_float32(
    teachers, datasets, kind, objective, padded, tmp_path
):
    from mlminilm.distillation.capture import layer_qkv
    from mlminilm.distillation.objective import distill_terms
    from mlminilm.models.loading import load_teacher, load_tokenizer

    path = teachers[kind]
    tok = load_tokenizer(str(path))
    cfg = distill_config(path, datasets[kind], tmp_path / "unused", objective=objective, relation_heads=8)
    teacher, layer = load_teacher(str(path), -1, torch.bfloat16, torch.device(DEVICE))
    assert {p.dtype for p in teacher.parameters()} == {torch.bfloat16}
    forward = student_for(path)
    seq = 24  # differs from every hidden size and head size here, so only relations are [.., seq, seq]
    ids = random_ids(len(tok), 3, seq)
    mask = None
    if padded:
        ids, mask = pad_tail(ids, tok.pad_token_id, 7)

    with torch.autocast(DEVICE, torch.bfloat16):
        # The regime under test: both sides' Q/K/V come out of the models in bf16.
        with torch.no_grad():
            assert layer_qkv(teacher, ids, mask, layer)[0].dtype == torch.bfloat16
            assert forward(ids, mask)[0].dtype == torch.bfloat16
        spy = RelationSpy(seq)
        with spy:
            terms = distill_terms(teacher, layer, forward, ids, mask, cfg)
        loss = sum(terms.values())
    assert set(terms) == ({"attention", "value"} if objective == "minilm" else {"qq", "kk", "vv"})
    for name, value in terms.items():
        assert value.dim() == 0 and value.dtype == torch.float32, (name, value.dtype)
        assert torch.isfinite(value).item() and value.item() > 0, (name, value)
    matmuls = [s for s in spy.seen if s[1] in ("matmul", "__matmul__", "bmm", "baddbmm", "einsum")]
    assert len(matmuls) >= 2 * len(terms), spy.seen  # teacher and student logits of every term
    assert all(dtype == torch.float32 for _, _, dtype in spy.seen), spy.seen
    loss.backward()
    grads = [p.grad for p in forward.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    assert all(p.grad is None for p in teacher.parameters())


# ------------------------------------------------------------- 2. chunked KL: autograd's value and gradients


def autograd_kl(tx, ty, sx, sy, mask, heads):
    """The batch-mean relation KL written with plain differentiable ops (autograd does the backward)."""

    def logits(x, y):
        b, s, h = x.shape
        d = h // heads
        xh = x.view(b, s, heads, d).transpose(1, 2)
        yh = y.view(b, s, heads, d).transpose(1, 2)
        return xh @ yh.transpose(-1, -2) / math.sqrt(d)

    t, s = logits(tx, ty), logits(sx, sy)
    if mask is not None:
        keys = ~mask.bool()[:, None, None, :]
        t, s = t.masked_fill(keys, -1e9), s.masked_fill(keys, -1e9)
    log_p, log_q = t.log_softmax(-1), s.log_softmax(-1)
    per_row = (log_p.exp() * (log_p - log_q)).sum(-1)  # [batch, heads, seq]
    if mask is None:
        return per_row.mean()
    real = mask.bool()
    per_row = per_row * real[:, None, :]
    return (per_row.sum((1, 2)) / (heads * real.sum(-1))).mean()


def value_and_grads(fn, sx, sy, same):
    sx = sx.clone().requires_grad_(True)
    sy = sx if same else sy.clone().requires_grad_(True)
    loss = fn(sx, sy)
    loss.backward()
    return [loss.detach(), sx.grad.clone()] + ([] if same else [sy.grad.clone()])


def close(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Relative 1e-5, with an absolute floor of 1e-5 of the tensor's largest entry (gradients cancel to ~0)."""
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()) + 1e-12, msg=what)


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "mask-none"])
@pytest.mark.parametrize("chunk", [1, 2, 4, 6, None])  # 4 does not divide 6 heads; None: the device's auto chunk
@pytest.mark.parametrize("same", [False, True], ids=["qk", "vv"])
def test_chunked_relation_kl_has_autograds_value_and_gradients(chunk, same, padded, monkeypatch):
    from mlminilm.distillation.relations import relation_kl, relation_logits, relation_loss

    if CUDA:  # true fp32 matmuls for this comparison, whatever an earlier test left set (TF32 rounds to 10 bits)
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    g = torch.Generator().manual_seed(3)
    batch, seq, heads = 3, 40, 6
    tx, ty = (torch.randn(batch, seq, 48, generator=g).to(DEVICE) for _ in range(2))
    sx, sy = (torch.randn(batch, seq, 24, generator=g).to(DEVICE) for _ in range(2))
    if same:
        ty = tx
    mask = None
    if padded:
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[1, -9:] = 0
        mask[2, -1:] = 0
        mask = mask.to(DEVICE)

    got = value_and_grads(lambda x, y: relation_loss(tx, ty, x, y, mask, heads, chunk), sx, sy, same)
    plain = value_and_grads(lambda x, y: autograd_kl(tx, ty, x, y, mask, heads), sx, sy, same)
    materialised = value_and_grads(
        lambda x, y: relation_kl(relation_logits(tx, ty, heads), relation_logits(x, y, heads), mask), sx, sy, same
    )
    assert got[0].dtype == torch.float32 and got[0].device.type == DEVICE
    assert got[0].item() > 0
    for label, ref in (("autograd", plain), ("materialised", materialised)):
        for what, a, b in zip(("value", "grad x", "grad y"), got, ref):
            close(a, b, f"{what} vs {label} (chunk {chunk})")
    if padded:
        assert torch.all(got[1][1, -9:] == 0)  # padded positions get no gradient


# ------------------------------------------------------------------------------- 3. no host syncs in steps


@pytest.mark.parametrize("kind,precision", [("bert", "auto"), ("xlm-roberta", "auto"), ("bert", "fp16")])
def test_distill_steps_make_no_host_sync(teachers, datasets, kind, precision, tmp_path, monkeypatch):
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
    cfg = distill_config(
        teachers[kind],
        datasets[kind],
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


# ------------------------------------------------------------------ 4. fused SDPA below the distilled layer

FUSED_OPS = ("flash", "efficient", "cudnn")  # aten::_scaled_dot_product_{flash,efficient,cudnn}_attention...
FUSED_KERNELS = ("flash", "fmha", "efficient", "cudnn", "sdpa")  # flash_fwd_kernel, fmha_cutlassF_* (mem-efficient)
MATH_OP = "aten::_scaled_dot_product_attention_math"


@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
def test_teacher_attention_runs_a_fused_sdpa_kernel_not_math(tiny_wordpiece_dir, tmp_path, padded):
    """A flash-eligible shape (head dim 64, bf16): layer_qkv's layers below the distilled one call SDPA, and SDPA
    picks flash (packed) or memory-efficient (padded, with a mask), never the math fallback. On the CPU the same
    body sees `_scaled_dot_product_flash_attention_for_cpu`; on CUDA the device kernels are checked too."""
    from torch.profiler import ProfilerActivity, profile

    from mlminilm.distillation.capture import layer_qkv
    from mlminilm.models.loading import load_teacher, load_tokenizer

    path = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "teacher", layers=3, hidden=256, heads=4, intermediate=512)
    teacher, _ = load_teacher(str(path), -1, torch.bfloat16, torch.device(DEVICE))
    tok = load_tokenizer(str(path))
    ids = random_ids(len(tok), 2, 64)
    mask = None
    if padded:
        ids, mask = pad_tail(ids, tok.pad_token_id, 16)
    with torch.no_grad(), torch.autocast(DEVICE, torch.bfloat16):
        layer_qkv(teacher, ids, mask, -1)  # warm-up: lazy initialisation outside the profile
        if CUDA:
            torch.cuda.synchronize()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
        with profile(activities=activities) as prof:
            q, k, v = layer_qkv(teacher, ids, mask, -1)
            if CUDA:
                torch.cuda.synchronize()
    assert q.shape == (2, 64, 256) and torch.isfinite(q.float()).all()
    names = {event.name for event in prof.events()}
    sdpa_ops = sorted(n for n in names if "scaled_dot_product" in n)
    assert any("scaled_dot_product_attention" in n for n in sdpa_ops), sorted(names)[:50]  # SDPA did run
    fused = [n for n in sdpa_ops if any(word in n.lower() for word in FUSED_OPS)]
    assert fused, f"no fused SDPA backend: {sdpa_ops}"
    assert MATH_OP not in names, f"the math fallback ran: {sdpa_ops}"
    if CUDA:
        kernels = {event.name for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA}
        assert any(any(word in n.lower() for word in FUSED_KERNELS) for n in kernels), sorted(kernels)


# --------------------------------------------------------------------------- 5. distill -> kill -> resume


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


def test_distill_killed_and_resumed_ends_close_to_the_uninterrupted_run(teachers, datasets, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from mlminilm import distill

    if CUDA:  # deterministic kernels where torch has them (embedding / attention backward), restored after
        was = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        cfg = distill_config(teachers["bert"], datasets["bert"], tmp_path / "full", max_steps=6, save_every=3)
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


# --------------------------------------------------------------------------- 6. finetune and eval-xnli


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


# ---------------------------------------------------------------------------- 7. peak memory per token


def test_distill_step_peak_memory_per_token_is_printed(teachers, datasets, tmp_path, capsys):
    """One bf16 distill step (forward and backward) at two batch sizes; CUDA: its peak allocated memory (absolute,
    and above what was resident before the step), per token, printed (shown without -s); the larger batch needs
    more. The steps run on the CPU too, unmeasured."""
    from mlminilm.distillation.objective import distill_terms
    from mlminilm.models.loading import load_teacher, load_tokenizer

    path = teachers["xlm-roberta"]
    cfg = distill_config(path, datasets["xlm-roberta"], tmp_path / "unused")
    teacher, layer = load_teacher(str(path), -1, torch.bfloat16, torch.device(DEVICE))
    forward = student_for(path)
    vocab, seq = len(load_tokenizer(str(path))), 128
    step_bytes = {}
    # The first step, unmeasured, takes the one-time allocations (cuBLAS workspace, ...); then 4 and 32 sequences.
    for measured, batch in ((False, 4), (True, 4), (True, 32)):
        ids = random_ids(vocab, batch, seq, seed=batch)
        forward.zero_grad(set_to_none=True)
        if CUDA:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        with torch.autocast(DEVICE, torch.bfloat16):
            loss = sum(distill_terms(teacher, layer, forward, ids, None, cfg).values())
        loss.backward()
        assert torch.isfinite(loss).item()
        if CUDA and measured:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            step_bytes[batch] = peak - before
            with capsys.disabled():
                print(
                    f"\n[gpu memory] distill step, batch {batch} x seq {seq}: peak {peak / 2**20:.1f} MiB "
                    f"({peak / (batch * seq):,.0f} B/token), step {step_bytes[batch] / 2**20:.1f} MiB "
                    f"({step_bytes[batch] / (batch * seq):,.0f} B/token)"
                )
    if CUDA:
        assert step_bytes[4] > 0 and step_bytes[32] > step_bytes[4], step_bytes


# ------------------------------------------------------------------------------- 8. fp16 with the scaler


def test_fp16_distill_trains_through_the_gradient_scaler(teachers, datasets, tmp_path):
    from mlminilm import distill

    out = tmp_path / "fp16"
    result = distill.run(
        distill_config(teachers["bert"], datasets["bert"], out, precision="fp16", max_steps=4, save_every=4)
    )
    records = read_metrics(out)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(math.isfinite(r["loss"]) and r["loss_scale"] > 0 for r in records), records
    assert result.last_loss is not None and math.isfinite(result.last_loss)
    assert json.loads((out / "run.json").read_text())["precision"] == "float16"
    state = json.loads((out / "checkpoints" / "step-4" / "state.json").read_text())
    assert state["grad_scaler"]["scale"] > 0


# ------------------------------------------------------------------------------------- 9. --batch-size auto


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
def test_batch_size_auto_records_the_plan_it_chose(teachers, datasets, tmp_path):
    from mlminilm import distill

    out = tmp_path / "auto"
    global_batch = 64  # CPU: auto stops at 32 sequences, so 32 x 2; CUDA: the largest power of two that fits
    result = distill.run(
        distill_config(
            teachers["bert"],
            datasets["bert"],
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


# ----------------------------------------------------------------------------------------- 10. --compile on


@pytest.mark.skipif(not {"compile"} <= distill_fields(), reason="DistillConfig has no compile field yet")
def test_compile_on_matches_eager(teachers, datasets, tmp_path, monkeypatch):
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
    compiled = distill.run(distill_config(teachers["bert"], datasets["bert"], tmp_path / "on", compile="on", **base))
    seconds = time.perf_counter() - t0
    graphs = sum(counters["stats"].values()) if "stats" in counters else 0
    frames = dict(counters.get("frames", {}))
    torch._dynamo.reset()
    eager = distill.run(distill_config(teachers["bert"], datasets["bert"], tmp_path / "off", compile="off", **base))
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
