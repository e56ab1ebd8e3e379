"""The GPU path, one step at a time: what a distill step computes on a CUDA device, proven there when a GPU is lent.

Run on a machine with a GPU, in one command (with tests/test_gpu_runs.py, the whole runs):

    .venv/bin/python -m pytest -q -m gpu tests/test_gpu_numerics.py tests/test_gpu_runs.py

What it proves on the device: a bf16 distill step is finite and its relation logits and loss terms are float32;
the chunked relation KL has the value and the gradients of autograd through the materialised form; the teacher's
attention below the distilled layer runs a fused SDPA kernel (flash / memory-efficient), never the math fallback;
the peak memory of a distill step per token (printed).

Every test body is written once for a device, `DEVICE` (tests/helpers.py), so that it can be exercised without a GPU:

    MLMINILM_TEST_GPU_DEVICE=cpu .venv/bin/python -m pytest -q tests/test_gpu_numerics.py

runs the same bodies on the CPU (without the `gpu` marker). What only CUDA can check (CUDA kernels in the profile,
CUDA memory statistics) is guarded by `CUDA` inside the tests.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from helpers import GPU_TEST_CUDA as CUDA
from helpers import GPU_TEST_DEVICE as DEVICE
from helpers import device_distill_config, save_tiny_teacher

# On CUDA every test needs the GPU (conftest skips `gpu` tests without one); on the CPU they run as plain tests,
# one intra-op thread (tiny models, 2 busy cores). Every file of GPU tests says `pytest.mark.gpu`:
# scripts/gpu_check.py finds them by it.
pytestmark = [pytest.mark.gpu] if CUDA else [pytest.mark.usefixtures("one_torch_thread")]


KINDS = ("bert", "xlm-roberta")


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
    from mlminilm.distillation.objective import StudentForward
    from mlminilm.models.loading import load_config
    from mlminilm.models.student import build_student, freeze_unused, student_config

    student = build_student(student_config(load_config(str(teacher_dir)), StudentShape(2, 32, 4, 64)), seed)
    freeze_unused(student, -1)
    return StudentForward(student.to(DEVICE).train())


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


# ------------------------------------------------------------------------ a bf16 step: finite, fp32 relations


@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
@pytest.mark.parametrize("objective", ["minilm", "minilm-v2"])
@pytest.mark.parametrize("kind", KINDS)
def test_bf16_distill_step_is_finite_and_its_relations_are_float32(
    gpu_teachers, gpu_data, kind, objective, padded, tmp_path
):
    from mlminilm.distillation.capture import layer_qkv
    from mlminilm.distillation.objective import distill_terms
    from mlminilm.models.loading import load_teacher, load_tokenizer

    path = gpu_teachers[kind]
    tok = load_tokenizer(str(path))
    cfg = device_distill_config(path, gpu_data[kind], tmp_path / "unused", objective=objective, relation_heads=8)
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
            assert forward(ids, mask).qkv[0].dtype == torch.bfloat16
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


# ---------------------------------------------------------------- chunked KL: autograd's value and gradients


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


# --------------------------------------------------------------------- fused SDPA below the distilled layer

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


# ------------------------------------------------------------------------------- peak memory per token


def test_distill_step_peak_memory_per_token_is_printed(gpu_teachers, gpu_data, tmp_path, capsys):
    """One bf16 distill step (forward and backward) at two batch sizes; CUDA: its peak allocated memory (absolute,
    and above what was resident before the step), per token, printed (shown without -s); the larger batch needs
    more. The steps run on the CPU too, unmeasured."""
    from mlminilm.distillation.objective import distill_terms
    from mlminilm.models.loading import load_teacher, load_tokenizer

    path = gpu_teachers["xlm-roberta"]
    cfg = device_distill_config(path, gpu_data["xlm-roberta"], tmp_path / "unused")
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
