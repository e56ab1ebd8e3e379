"""The blockwise relation KL (online softmax over key blocks, the fused kernel's reference): equal to a float64
naive reference in value and gradients, at every block size, with and without padding, for cross and self
relations; equal to the chunked path in fp32; nothing of size seq x seq kept for the backward."""

from __future__ import annotations

import pytest
import torch
from test_relations_chunked import make, reference_kl, reference_logits

from mlminilm.distillation.relation_blocks import blockwise_relation_loss
from mlminilm.distillation.relations import relation_loss


def naive(tx, ty, sx, sy, mask, heads):
    """float64 KL through whole logits, keys and queries restricted to the real tokens (autograd for gradients)."""
    mask = torch.ones(sx.shape[:2], dtype=torch.long) if mask is None else mask
    return reference_kl(reference_logits(tx, ty, heads), reference_logits(sx, sy, heads), mask)


def grads(fn, sx, sy, same):
    sx = sx.detach().clone().requires_grad_(True)
    sy = sx if same else sy.detach().clone().requires_grad_(True)
    value = fn(sx, sy)
    value.backward()
    return value.detach(), sx.grad, (None if same else sy.grad)


@pytest.mark.parametrize("block", [1, 3, 7, 11, 64])  # 64: one block longer than the sequence
@pytest.mark.parametrize("padded", [True, False], ids=["mask", "packed"])
@pytest.mark.parametrize("same", [False, True], ids=["qk", "vv"])
def test_blockwise_equals_float64_reference(block, padded, same):
    (tx, ty), (sx, sy), mask = make(seq=11, t_hidden=36, s_hidden=18, dtype=torch.float64)
    mask = mask if padded else None
    heads = 6
    if same:
        ty = tx
    ref = grads(lambda x, y: naive(tx, ty, x, y, mask, heads), sx, sy, same)
    got = grads(lambda x, y: blockwise_relation_loss(tx, ty, x, y, mask, heads, block), sx, sy, same)
    assert got[0].dtype == torch.float64
    torch.testing.assert_close(got[0], ref[0], rtol=1e-12, atol=1e-14)
    for g, r in zip(got[1:], ref[1:]):
        if r is not None:
            torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-13)
    if padded:
        assert torch.all(got[1][1, -3:] == 0)  # padded positions get no gradient


def test_blockwise_gradcheck_float64():
    (tx, ty), (sx, sy), mask = make(batch=2, seq=5, t_hidden=6, s_hidden=6, dtype=torch.float64)
    sx.requires_grad_(True)
    sy.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, y: blockwise_relation_loss(tx, ty, x, y, mask, 3, 2), (sx, sy))


def test_blockwise_equals_the_chunked_path_in_fp32():
    (tx, ty), (sx, sy), mask = make(batch=3, seq=40, t_hidden=48, s_hidden=24)
    a = grads(lambda x, y: relation_loss(tx, ty, x, y, mask, 4), sx, sy, False)
    b = grads(lambda x, y: blockwise_relation_loss(tx, ty, x, y, mask, 4, 16), sx, sy, False)
    torch.testing.assert_close(b[0], a[0], rtol=1e-5, atol=1e-7)
    for g, r in zip(b[1:], a[1:]):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)


def test_blockwise_keeps_nothing_of_size_seq_squared():
    (tx, ty), (sx, sy), mask = make(batch=2, seq=64, t_hidden=16, s_hidden=16)
    sx.requires_grad_(True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        blockwise_relation_loss(tx, ty, sx, sy, mask, 4, 8)
    assert max(saved) <= max(sx.numel(), tx.numel()) < 2 * 4 * 64 * 64


def test_blockwise_refuses_a_bad_block():
    (tx, ty), (sx, sy), mask = make()
    with pytest.raises(ValueError):
        blockwise_relation_loss(tx, ty, sx, sy, mask, 3, 0)
