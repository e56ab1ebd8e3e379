"""relations: float32 under bf16 autocast, and the chunked relation loss against the materialised one."""

import math

import pytest
import torch

from mlminilm.distillation.losses import minilm_v1_loss, minilm_v1_terms, minilm_v2_terms
from mlminilm.distillation.relations import auto_chunk, relation_kl, relation_logits, relation_loss


def reference_logits(x, y, heads):
    """float64 x_a y_a^T / sqrt(d), one head at a time, by explicit column slices."""
    x, y = x.double(), y.double()
    d = x.shape[-1] // heads
    return torch.stack(
        [
            x[..., a * d : (a + 1) * d] @ y[..., a * d : (a + 1) * d].transpose(-1, -2) / math.sqrt(d)
            for a in range(heads)
        ],
        dim=1,
    )


def reference_kl(t_logits, s_logits, mask):
    """float64 mean over batch of 1/(heads |x|) sum KL over real queries, keys restricted to the real tokens."""
    total = 0.0
    for b in range(mask.shape[0]):
        real = mask[b].bool()
        t = t_logits[b][:, real][:, :, real].double()
        s = s_logits[b][:, real][:, :, real].double()
        log_p, log_q = t.log_softmax(-1), s.log_softmax(-1)
        total = total + (log_p.exp() * (log_p - log_q)).sum() / (t.shape[0] * int(real.sum()))
    return total / mask.shape[0]


def make(batch=2, seq=9, t_hidden=24, s_hidden=12, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    t = [torch.randn(batch, seq, t_hidden, generator=g).to(dtype) for _ in range(2)]
    s = [torch.randn(batch, seq, s_hidden, generator=g).to(dtype) for _ in range(2)]
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, seq - 3 :] = 0  # padding in the second sequence
    return t, s, mask


# --------------------------------------------------------------------------------------------- 1. fp32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_relation_logits_and_kl_are_float32_under_bf16_autocast(dtype):
    (tx, ty), (sx, sy), mask = make(dtype=dtype)
    heads = 3
    expected_t, expected_s = reference_logits(tx, ty, heads), reference_logits(sx, sy, heads)
    expected_kl = reference_kl(expected_t, expected_s, mask)
    with torch.autocast("cpu", torch.bfloat16):
        t_logits, s_logits = relation_logits(tx, ty, heads), relation_logits(sx, sy, heads)
        kl = relation_kl(t_logits, s_logits, mask)
        chunked = relation_loss(tx, ty, sx, sy, mask, heads, chunk=1)
        automatic = relation_loss(tx, ty, sx, sy, mask, heads)
    assert t_logits.dtype == s_logits.dtype == torch.float32
    torch.testing.assert_close(t_logits.double(), expected_t, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(s_logits.double(), expected_s, rtol=1e-5, atol=1e-6)
    for value in (kl, chunked, automatic):
        assert value.dtype == torch.float32
        assert value.item() == pytest.approx(expected_kl.item(), rel=1e-5)


def test_losses_are_float32_under_bf16_autocast_and_match_float64():
    (tx, ty), (sx, sy), mask = make()
    tv, sv = tx.flip(-1), sy.flip(-1)
    with torch.autocast("cpu", torch.bfloat16):
        v1 = minilm_v1_terms((tx, ty, tv), (sx, sy, sv), mask, 3)
        v2 = minilm_v2_terms((tx, ty, tv), (sx, sy, sv), mask, 6)
    expected_v1 = {
        "attention": reference_kl(reference_logits(tx, ty, 3), reference_logits(sx, sy, 3), mask),
        "value": reference_kl(reference_logits(tv, tv, 3), reference_logits(sv, sv, 3), mask),
    }
    expected_v2 = {
        name: reference_kl(reference_logits(t, t, 6), reference_logits(s, s, 6), mask)
        for name, t, s in (("qq", tx, sx), ("kk", ty, sy), ("vv", tv, sv))
    }
    for got, expected in ((v1, expected_v1), (v2, expected_v2)):
        for name, value in expected.items():
            assert got[name].dtype == torch.float32
            assert got[name].item() == pytest.approx(value.item(), rel=1e-5), name


# ------------------------------------------------------------------------------------------ 2. chunks


def materialised(tx, ty, sx, sy, mask, heads):
    return relation_kl(relation_logits(tx, ty, heads), relation_logits(sx, sy, heads), mask)


def value_and_grads(fn, sx, sy, same):
    sx = sx.clone().requires_grad_(True)
    sy = sx if same else sy.clone().requires_grad_(True)
    loss = fn(sx, sy)
    loss.backward()
    return loss.detach(), sx.grad.clone(), (None if same else sy.grad.clone())


@pytest.mark.parametrize("chunk", [1, 2, 4, 6, 100, None])  # 4 does not divide 6 heads
@pytest.mark.parametrize("same", [False, True], ids=["qk", "vv"])
def test_chunked_equals_materialised(chunk, same):
    (tx, ty), (sx, sy), mask = make(seq=11, t_hidden=36, s_hidden=18)
    heads = 6
    if same:
        ty = tx
    ref = value_and_grads(lambda x, y: materialised(tx, ty, x, y, mask, heads), sx, sy, same)
    got = value_and_grads(lambda x, y: relation_loss(tx, ty, x, y, mask, heads, chunk), sx, sy, same)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-6, atol=1e-7)
    for g, r in zip(got[1:], ref[1:]):
        if r is not None:
            torch.testing.assert_close(g, r, rtol=1e-6, atol=1e-7)
    assert torch.all(got[1][1, -3:] == 0)  # padded positions get no gradient


@pytest.mark.parametrize("chunk", [2, 3])  # recomputation (2 of 3 heads per chunk), and one chunk kept
def test_chunked_gradcheck_float64(chunk):
    (tx, ty), (sx, sy), mask = make(batch=2, seq=5, t_hidden=6, s_hidden=6, dtype=torch.float64)
    sx.requires_grad_(True)
    sy.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, y: relation_loss(tx, ty, x, y, mask, 3, chunk), (sx, sy), fast_mode=True)


def test_bf16_inputs_get_bf16_gradients_and_the_teacher_none():
    (tx, ty), (sx, sy), mask = make(dtype=torch.bfloat16)
    tx.requires_grad_(True)
    sx.requires_grad_(True)
    with torch.autocast("cpu", torch.bfloat16):
        loss = relation_loss(tx, ty, sx, sx, mask, 3, chunk=1)
    loss.backward()
    assert loss.dtype == torch.float32 and sx.grad.dtype == torch.bfloat16 and torch.isfinite(sx.grad).all()
    assert tx.grad is None


def test_several_chunks_save_only_the_inputs():
    """The multi-chunk path keeps nothing of size [batch, heads, seq, seq] for the backward."""
    (tx, ty), (sx, sy), mask = make(batch=2, seq=32, t_hidden=12, s_hidden=12)
    sx.requires_grad_(True)
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        relation_loss(tx, ty, sx, sy, mask, 4, chunk=1)
    assert max(saved) <= sx.numel() < 2 * 4 * 32 * 32
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        relation_loss(tx, ty, sx, sy, mask, 4, chunk=4)  # one chunk: the softmax difference is kept
    assert max(saved) == 2 * 4 * 32 * 32


def test_auto_chunk_bounds_the_chunk(monkeypatch):
    from mlminilm.distillation import relations

    monkeypatch.setattr(relations, "gpu_memory", lambda index: 0)  # a CUDA build without a GPU: the floor, 1 << 24
    assert auto_chunk(8, 128, 12) == 12  # the CPU benchmark's shape: one chunk, nothing recomputed
    assert auto_chunk(8, 512, 12) == 1
    assert auto_chunk(8, 512, 12, "cuda") == 8
    assert auto_chunk(64, 512, 48, "cuda") == 1
    assert auto_chunk(256, 128, 48, "cuda") == 4
    assert auto_chunk(1, 4, 3) == 3


@pytest.mark.parametrize(
    "memory, shapes",
    [
        # An 80 GB H100 (torch reports 79.2 GiB): 32 x 512 in one chunk for MiniLM's 12 heads and MiniLMv2's 48.
        (85_000_000_000, {(32, 512, 12): 12, (32, 512, 48): 48, (64, 512, 12): 12, (64, 512, 48): 39}),
        # 16 GiB: budget 2^27 elements, 32 x 512 x 1 head = 2^23 of them: chunks of 16 heads.
        (16 * 2**30, {(32, 512, 12): 12, (32, 512, 48): 16, (8, 128, 12): 12}),
    ],
    ids=["80GB", "16GiB"],
)
def test_cuda_budget_is_a_share_of_the_gpu(monkeypatch, memory, shapes):
    from mlminilm.distillation import relations

    monkeypatch.setattr(relations, "gpu_memory", lambda index: memory)
    budget = memory // (4 * 32)  # fp32 elements in 1/32 of the GPU
    for (b, s, h), chunk in shapes.items():
        assert auto_chunk(b, s, h, "cuda") == chunk == min(h, budget // (b * s * s)), (b, s, h)
    assert auto_chunk(8, 512, 12, "cpu") == 1  # the CPU's budget is its own


def test_loss_api_accepts_chunk_and_rejects_a_bad_one():
    (tx, ty), (sx, sy), mask = make()
    a = minilm_v1_loss((tx, ty, tx), (sx, sy, sx), mask, 3)
    b = minilm_v1_loss((tx, ty, tx), (sx, sy, sx), mask, 3, chunk=2)
    assert a.item() == pytest.approx(b.item(), rel=1e-6)
    with pytest.raises(ValueError):
        relation_loss(tx, ty, sx, sy, mask, 3, chunk=0)
    with pytest.raises(ValueError):
        relation_loss(tx, ty, sx, sy, mask, 5)


@pytest.mark.slow
def test_relation_memory_benchmark_runs(tmp_path):
    """benchmarks/distill_step.py --relation-memory end to end at a small size: both modes, same loss."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "distill_step.py"
    out = tmp_path / "relation.json"
    subprocess.run(
        [
            sys.executable,
            str(script),
            "--relation-memory",
            "--relation-batch",
            "2",
            "--relation-seq",
            "128",
            "--relation-chunk",
            "3",
            "--steps",
            "1",
            "--threads",
            "1",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.read_text())
    assert result["loss_difference"] < 1e-5
    assert result["memory_ratio"] > 1
