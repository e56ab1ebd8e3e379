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


def relation_kl(teacher_logits: torch.Tensor, student_logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Batch mean of 1/(heads |x|) sum_heads sum_real_queries KL(softmax(teacher) || softmax(student)).

    Logits: [batch, heads, seq, seq]; attention_mask: [batch, seq] with 1 for real tokens. Padded keys get
    probability 0 on both sides, padded query rows are left out, and |x| counts the real tokens of each sequence.
    """
    mask = attention_mask.to(torch.bool)
    key_mask = mask[:, None, None, :]
    t = torch.where(key_mask, teacher_logits.float(), MASKED_LOGIT)
    s = torch.where(key_mask, student_logits.float(), MASKED_LOGIT)
    log_p_t = F.log_softmax(t, dim=-1)
    log_p_s = F.log_softmax(s, dim=-1)
    # kl_div(input=log Q, target=log P, log_target=True) = P (log P - log Q), elementwise.
    pointwise = F.kl_div(log_p_s, log_p_t, reduction="none", log_target=True)
    pointwise = torch.where(key_mask, pointwise, 0.0)
    per_row = pointwise.sum(-1)  # [batch, heads, seq]
    per_row = torch.where(mask[:, None, :], per_row, 0.0)
    heads = teacher_logits.shape[1]
    real_tokens = mask.sum(-1).clamp(min=1).to(per_row.dtype)
    per_sequence = per_row.sum((1, 2)) / (heads * real_tokens)
    return per_sequence.mean()
