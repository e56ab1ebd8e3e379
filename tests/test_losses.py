"""MiniLM v1/v2 losses against a naive float64 implementation written from METHOD.md with loops."""

import math

import numpy as np
import pytest
import torch

from mlminilm.distillation.losses import minilm_v1_loss, minilm_v1_terms, minilm_v2_loss, minilm_v2_terms


def naive_relation_kl(t_x, t_y, s_x, s_y, mask, heads_t, heads_s):
    """Mean over batch of 1/(A |x|) sum_a sum_t KL(R^T_{a,t} || R^S_{a,t}) with loops, float64, real tokens only."""
    total = 0.0
    batch = t_x.shape[0]
    for b in range(batch):
        real = [i for i in range(mask.shape[1]) if mask[b, i] == 1]
        n = len(real)
        dt = t_x.shape[2] // heads_t
        ds = s_x.shape[2] // heads_s
        assert heads_t == heads_s
        seq_sum = 0.0
        for a in range(heads_t):
            for t in real:
                lt = [
                    sum(t_x[b, t, a * dt + c] * t_y[b, j, a * dt + c] for c in range(dt)) / math.sqrt(dt) for j in real
                ]
                ls = [
                    sum(s_x[b, t, a * ds + c] * s_y[b, j, a * ds + c] for c in range(ds)) / math.sqrt(ds) for j in real
                ]
                mt, ms = max(lt), max(ls)
                zt = sum(math.exp(v - mt) for v in lt)
                zs = sum(math.exp(v - ms) for v in ls)
                for vt, vs in zip(lt, ls):
                    p = math.exp(vt - mt) / zt
                    log_p = vt - mt - math.log(zt)
                    log_q = vs - ms - math.log(zs)
                    seq_sum += p * (log_p - log_q)
        total += seq_sum / (heads_t * n)
    return total / batch


def random_qkv(batch, seq, hidden, seed):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, seq, hidden, generator=g, dtype=torch.float64) for _ in range(3))


@pytest.fixture
def setup():
    t = random_qkv(2, 5, 8, 0)
    s = random_qkv(2, 5, 6, 1)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    return t, s, mask


def to_np(x):
    return x.numpy()


def test_v1_matches_naive_float64(setup):
    t, s, mask = setup
    heads = 2
    terms = minilm_v1_terms(t, s, mask, heads)
    m = mask.numpy()
    at = naive_relation_kl(*map(to_np, (t[0], t[1], s[0], s[1])), m, heads, heads)
    vr = naive_relation_kl(*map(to_np, (t[2], t[2], s[2], s[2])), m, heads, heads)
    assert terms["attention"].item() == pytest.approx(at, rel=1e-5)
    assert terms["value"].item() == pytest.approx(vr, rel=1e-5)
    assert minilm_v1_loss(t, s, mask, heads).item() == pytest.approx(at + vr, rel=1e-5)


def test_v2_matches_naive_float64(setup):
    t, s, mask = setup
    rh = 2  # divides both 8 and 6, and need not equal either model's heads
    terms = minilm_v2_terms(t, s, mask, rh)
    m = mask.numpy()
    expected = {
        name: naive_relation_kl(*map(to_np, (t[i], t[i], s[i], s[i])), m, rh, rh)
        for i, name in enumerate(("qq", "kk", "vv"))
    }
    for name, value in expected.items():
        assert terms[name].item() == pytest.approx(value, rel=1e-5)
    assert minilm_v2_loss(t, s, mask, rh).item() == pytest.approx(sum(expected.values()), rel=1e-5)


def test_hand_worked_single_head():
    # One sequence, two tokens, one head of size 1: the teacher's attention row for token 0 is
    # softmax([q0*k0, q0*k1]) = softmax([0, 1]); the student's is uniform (all-zero keys).
    tq = torch.tensor([[[1.0], [0.0]]])
    tk = torch.tensor([[[0.0], [1.0]]])
    tv = torch.zeros(1, 2, 1)
    sq, sk, sv = torch.zeros(1, 2, 1), torch.zeros(1, 2, 1), torch.zeros(1, 2, 1)
    mask = torch.ones(1, 2)
    p = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    kl_row0 = float((p * (np.log(p) - np.log([0.5, 0.5]))).sum())
    # token 1's teacher row is softmax([0, 0]) = uniform: KL 0. L_AT = (kl_row0 + 0) / (1 head * 2 tokens).
    terms = minilm_v1_terms((tq, tk, tv), (sq, sk, sv), mask, 1)
    assert terms["attention"].item() == pytest.approx(kl_row0 / 2, rel=1e-6)
    assert terms["value"].item() == pytest.approx(0.0, abs=1e-7)


def test_zero_when_student_equals_teacher(setup):
    t, _, mask = setup
    assert minilm_v1_loss(t, t, mask, 2).item() == pytest.approx(0.0, abs=1e-6)
    assert minilm_v2_loss(t, t, mask, 4).item() == pytest.approx(0.0, abs=1e-6)


def test_padded_positions_never_change_the_loss(setup):
    t, s, mask = setup
    before_v1 = minilm_v1_loss(t, s, mask, 2)
    before_v2 = minilm_v2_loss(t, s, mask, 2)
    t2 = tuple(x.clone() for x in t)
    s2 = tuple(x.clone() for x in s)
    for x in t2 + s2:
        x[1, 3:] = torch.randn_like(x[1, 3:]) * 100  # garbage where the mask is 0
    assert minilm_v1_loss(t2, s2, mask, 2).item() == pytest.approx(before_v1.item(), rel=1e-9)
    assert minilm_v2_loss(t2, s2, mask, 2).item() == pytest.approx(before_v2.item(), rel=1e-9)
    # And the padded sequence alone equals its unpadded version.
    short_t = tuple(x[1:2, :3] for x in t)
    short_s = tuple(x[1:2, :3] for x in s)
    alone = minilm_v1_loss(short_t, short_s, torch.ones(1, 3), 2)
    padded = minilm_v1_loss(tuple(x[1:2] for x in t2), tuple(x[1:2] for x in s2), mask[1:2], 2)
    assert padded.item() == pytest.approx(alone.item(), rel=1e-9)
    assert torch.isfinite(padded)


def test_loss_is_finite_and_scalar_under_bf16_inputs(setup):
    t, s, mask = setup
    loss = minilm_v1_loss(tuple(x.bfloat16() for x in t), tuple(x.bfloat16() for x in s), mask, 2)
    assert loss.dim() == 0 and loss.dtype == torch.float32 and torch.isfinite(loss)


def test_gradients_reach_student_only(setup):
    t, s, mask = setup
    s = tuple(x.clone().requires_grad_(True) for x in s)
    t = tuple(x.clone().requires_grad_(True) for x in t)
    minilm_v1_loss(t, s, mask, 2).backward()
    for x in s:
        assert x.grad is not None and x.grad.abs().sum() > 0
        assert torch.all(x.grad[1, 3:] == 0)  # padded positions get no gradient
    # The teacher is the target: in training it runs under no_grad, but the loss itself must not need it.


def test_shape_mismatch_is_an_error(setup):
    t, s, mask = setup
    with pytest.raises(ValueError):
        minilm_v1_loss(t, tuple(x[:, :4] for x in s), mask, 2)
