"""The relation KL with no [seq, seq] tensor: the design of a fused relation-KL kernel, and its blockwise
reference in plain torch.

`relations.relation_loss` bounds its memory by chunks of heads, but every chunk still holds [batch, chunk, seq, seq]
logits, probabilities and their difference, so memory grows with seq^2 (at 32 x 512, 12 heads: 384 MiB per tensor,
about five of them at the peak) and the backward either keeps the difference or recomputes whole softmaxes.

The fused kernel (to be written in Triton for CUDA; this module is its exact reference, proven against float64 in
tests/test_relation_blocks.py) treats the relation like flash attention treats attention, with two softmaxes and
no value matrix. Per head and query row i, teacher logits t_ij = tx_i . ty_j / sqrt(d_t), student logits s_ij =
sx_i . sy_j / sqrt(d_s), padded keys left out:

    KL_i = sum_j p_ij (log p_ij - log q_ij) = A_i / l_i - LSE_t(i) + LSE_s(i),
    where l_i = sum_j exp(t_ij - m_i), A_i = sum_j exp(t_ij - m_i) (t_ij - s_ij), m_i = max_j t_ij,

since sum_j p_ij = 1. Forward, one program per (batch, head, block of queries): for each block of keys, compute
the two [Bq, Bk] logit tiles from tiles of tx, ty, sx, sy in on-chip memory, update the running maxima and sums of
both softmaxes online (rescaling l, A and the student's l_s by exp(m_old - m_new)), and write per row only KL_i,
LSE_t(i) and LSE_s(i): O(batch x heads x seq) memory, nothing of size seq^2. Backward, per (batch, head, block of
keys) for dsy and per block of queries for dsx: recompute the tiles, p_ij = exp(t_ij - LSE_t(i)) and q_ij =
exp(s_ij - LSE_s(i)) from the saved row statistics, and with G_ij = g_i (q_ij - p_ij) (g_i the row's incoming
gradient) accumulate dsx_i += G_ij sy_j / sqrt(d_s) and dsy_j += G_ij sx_i / sqrt(d_s). Unlike attention's
backward there is no rowsum(dO * O) term: d KL_i / d s_ij is q_ij - p_ij directly. The teacher gets no gradient.
Cost: the forward's four tile matmuls and the backward's four (two recomputed logits, two gradients) are the
chunked path's, without its seq^2 reads and writes of HBM, which dominate it at seq 512 (the relation is memory
bound there: d is 32-64). Numerics as now: fp32 logits and statistics (tensor-core inputs in bf16 / TF32, which
read bf16 Q/K/V exactly, relations.tf32_relations), masked keys at MASKED_LOGIT.

`blockwise_relation_loss` is that algorithm in plain torch, a block of keys at a time over all query rows (so its
memory is [batch, heads, seq, block], not seq^2): the reference a Triton kernel must match, not the default path
(on CPU and through torch.compile the head-chunked path is as fast at the sequence lengths distill runs).
"""

from __future__ import annotations

import math

import torch

from mlminilm.distillation.relations import (
    MASKED_LOGIT,
    compute_dtype,
    key_padding,
    merge_heads,
    no_autocast,
    reduce_rows,
    split_heads,
)


def _tile(xh: torch.Tensor, yh: torch.Tensor, part: slice, padded_keys, scale: float) -> torch.Tensor:
    """Logits of every query against the keys in `part`: [batch, heads, seq, block], padded keys masked."""
    logits = torch.matmul(xh, yh[:, :, part].transpose(-1, -2)).mul_(scale)
    return logits if padded_keys is None else logits.masked_fill_(padded_keys[..., part], MASKED_LOGIT)


def _blocks(seq: int, block: int) -> list[slice]:
    return [slice(lo, min(lo + block, seq)) for lo in range(0, seq, block)]


class _BlockwiseRelationKL(torch.autograd.Function):
    """Per-row KL(softmax(t) || softmax(s)) [batch, heads, seq] by online softmax over key blocks; the backward
    recomputes each block from the saved log-sum-exps. ty / sy None: the relation of x with itself."""

    @staticmethod
    def forward(ctx, tx, ty, sx, sy, padded_keys, heads: int, block: int) -> torch.Tensor:
        ctx.self_s = sy is None
        dtype = compute_dtype(sx)
        with no_autocast(sx.device):
            tq, tk = (split_heads(v, heads).to(dtype) for v in (tx, tx if ty is None else ty))
            sq, sk = (split_heads(v, heads).to(dtype) for v in (sx, sx if sy is None else sy))
            t_scale, s_scale = 1.0 / math.sqrt(tq.shape[-1]), 1.0 / math.sqrt(sq.shape[-1])
            rows = sq.shape[:3]
            m_t = torch.full(rows, -math.inf, dtype=dtype, device=sx.device)
            m_s = m_t.clone()
            l_t, l_s, a = (torch.zeros(rows, dtype=dtype, device=sx.device) for _ in range(3))
            for part in _blocks(sq.shape[2], block):
                t = _tile(tq, tk, part, padded_keys, t_scale)
                s = _tile(sq, sk, part, padded_keys, s_scale)
                new_t = torch.maximum(m_t, t.amax(-1))
                keep = torch.exp(m_t - new_t)  # the old sums' rescaling (0 at the first block)
                e = torch.exp(t - new_t[..., None])
                l_t = l_t * keep + e.sum(-1)
                a = a * keep + (e * (t - s)).sum(-1)
                new_s = torch.maximum(m_s, s.amax(-1))
                l_s = l_s * torch.exp(m_s - new_s) + torch.exp(s - new_s[..., None]).sum(-1)
                m_t, m_s = new_t, new_s
            lse_t, lse_s = m_t + torch.log(l_t), m_s + torch.log(l_s)
            per_row = a / l_t - lse_t + lse_s
        ctx.heads, ctx.block, ctx.dtype = heads, block, dtype
        ctx.save_for_backward(tx, ty, sx, sy, padded_keys, lse_t, lse_s)
        return per_row

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_row: torch.Tensor):
        tx, ty, sx, sy, padded_keys, lse_t, lse_s = ctx.saved_tensors
        heads, dtype = ctx.heads, ctx.dtype
        with no_autocast(sx.device):
            tq, tk = (split_heads(v, heads).to(dtype) for v in (tx, tx if ty is None else ty))
            sq, sk = (split_heads(v, heads).to(dtype) for v in (sx, sx if ctx.self_s else sy))
            t_scale, s_scale = 1.0 / math.sqrt(tq.shape[-1]), 1.0 / math.sqrt(sq.shape[-1])
            grad_q, grad_k = torch.zeros_like(sq), torch.zeros_like(sk)
            g_row = grad_row.to(dtype)[..., None]
            for part in _blocks(sq.shape[2], ctx.block):
                p = torch.exp(_tile(tq, tk, part, padded_keys, t_scale) - lse_t[..., None])
                g = torch.exp(_tile(sq, sk, part, padded_keys, s_scale) - lse_s[..., None]).sub_(p).mul_(g_row)
                grad_q += torch.matmul(g, sk[:, :, part]).mul_(s_scale)
                grad_k[:, :, part] = torch.matmul(g.transpose(-1, -2), sq).mul_(s_scale)
        if ctx.self_s:  # x and y are one tensor: its gradient is the sum of both roles
            return None, None, merge_heads(grad_q + grad_k).to(sx.dtype), None, None, None, None
        return None, None, merge_heads(grad_q).to(sx.dtype), merge_heads(grad_k).to(sy.dtype), None, None, None


def blockwise_relation_loss(
    teacher_x: torch.Tensor,
    teacher_y: torch.Tensor,
    student_x: torch.Tensor,
    student_y: torch.Tensor,
    attention_mask: torch.Tensor | None,
    heads: int,
    block: int = 128,
) -> torch.Tensor:
    """`relations.relation_loss` computed `block` keys at a time with online softmax: the same value and gradients,
    holding [batch, heads, seq, block] tensors at most (the fused kernel's reference; see the module's text)."""
    if block < 1:
        raise ValueError(f"block must be at least 1 key, got {block}")
    for name, x in (("teacher", teacher_x), ("student", student_x)):
        if x.shape[-1] % heads:
            raise ValueError(f"{heads} heads do not divide the {name}'s hidden size {x.shape[-1]}")
    mask, padded_keys = key_padding(attention_mask)
    tx = teacher_x.detach()
    ty = None if teacher_y is teacher_x else teacher_y.detach()
    sy = None if student_y is student_x else student_y
    per_row = _BlockwiseRelationKL.apply(tx, ty, student_x, sy, padded_keys, heads, block)
    return reduce_rows(per_row, mask)
