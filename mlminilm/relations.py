"""Self-attention relations and the masked KL between teacher and student relations.

MiniLM v1 and v2 losses are compositions of these two functions (see `mlminilm.losses`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# A large negative *finite* logit for masked keys: a bare -inf would turn a fully masked row into NaN.
MASKED_LOGIT = -1e9


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[batch, seq, hidden] -> [batch, heads, seq, hidden // heads] (heads in the model's concatenation order)."""
    b, s, h = x.shape
    if h % heads:
        raise ValueError(f"{heads} heads do not divide hidden size {h}")
    return x.view(b, s, heads, h // heads).transpose(1, 2)


def relation_logits(x: torch.Tensor, y: torch.Tensor, heads: int) -> torch.Tensor:
    """Scaled dot-product relation logits x_a y_a^T / sqrt(d) per head a, in float32.

    x, y: [batch, seq, hidden]; returns [batch, heads, seq, seq]. Float32 even under bf16 autocast:
    the softmax of these logits is the distillation target, and bf16 logits lose too much of it.
    """
    xh = split_heads(x, heads).float()
    yh = split_heads(y, heads).float()
    scale = 1.0 / math.sqrt(xh.shape[-1])
    with torch.autocast(device_type=x.device.type, enabled=False):
        return torch.matmul(xh * scale, yh.transpose(-1, -2))


class _RowKL(torch.autograd.Function):
    """Per-row KL(softmax(t) || softmax(s)) over the last dimension, with the gradient written out.

    d KL_row / d s = softmax(s) - softmax(t), so the backward needs the two probability tensors and nothing
    else; autograd through log_softmax + kl_div + where keeps and re-reads about twice as many [b, h, s, s]
    tensors (both v1 relations at 8 x 128, 12 heads, forward + backward on 1 CPU thread: 54 -> 38 ms, and less
    step memory; docs/BENCHMARKS.md). The teacher is a constant: it gets no gradient.
    """

    @staticmethod
    def forward(ctx, t: torch.Tensor, s: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        if key_mask is not None:
            t = torch.where(key_mask, t, MASKED_LOGIT)
            s = torch.where(key_mask, s, MASKED_LOGIT)
        log_p_t = F.log_softmax(t, dim=-1)
        p_t = log_p_t.exp()
        log_q = F.log_softmax(s, dim=-1)
        q = log_q.exp()
        # sum_j P_j (log P_j - log Q_j); masked keys have P = Q = 0 and finite logs, so they add 0.
        per_row = torch.einsum("...j,...j->...", p_t, log_p_t.sub_(log_q))
        ctx.save_for_backward(p_t, q)
        return per_row

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_row: torch.Tensor):
        p_t, q = ctx.saved_tensors
        return None, (q - p_t).mul_(grad_row.unsqueeze(-1)), None


def relation_kl(teacher_logits: torch.Tensor, student_logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Batch mean of 1/(heads |x|) sum_heads sum_real_queries KL(softmax(teacher) || softmax(student)).

    Logits: [batch, heads, seq, seq]; attention_mask: [batch, seq] with 1 for real tokens. Padded keys get
    probability 0 on both sides, padded query rows are left out, and |x| counts the real tokens of each sequence.
    The teacher is the target: no gradient flows to it.
    """
    mask = attention_mask.to(torch.bool)
    key_mask = mask[:, None, None, :]
    if mask.device.type == "cpu" and bool(mask.all()):
        # Packed batches rarely hold padding (only a language's last sequence): skip two passes. Not on CUDA,
        # where the check would cost a host sync.
        key_mask = None
    per_row = _RowKL.apply(teacher_logits.detach().float(), student_logits.float(), key_mask)  # [batch, heads, seq]
    per_row = torch.where(mask[:, None, :], per_row, 0.0)
    heads = teacher_logits.shape[1]
    real_tokens = mask.sum(-1).clamp(min=1).to(per_row.dtype)
    per_sequence = per_row.sum((1, 2)) / (heads * real_tokens)
    return per_sequence.mean()
