"""Sentence vectors from token hidden states: the pooling modes of sentence-transformers' Pooling module.

A low-level module shared by evaluation (eval-tatoeba, the in-training probe) and distillation (the sentence-
embedding loss term), so that both pool exactly the same way. Differentiable: the loss term backpropagates
through it.
"""

from __future__ import annotations

from typing import Sequence

import torch

POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len_tokens")  # the ones implemented here


def pool(hidden: torch.Tensor, mask: torch.Tensor | None, modes: Sequence[str], skip: int = 0) -> torch.Tensor:
    """[batch, seq, dim] hidden states -> [batch, dim x modes] in float32, over the positions where `mask` is 1
    (padding is on the right; `skip` leading positions are left out too; mask None = every position is real)."""
    hidden = hidden.float()
    if mask is None:
        mask = torch.ones(hidden.shape[:2], dtype=hidden.dtype, device=hidden.device)
    mask = mask.to(hidden.dtype)
    if skip:
        mask = mask.clone()
        mask[:, :skip] = 0
    weights = mask.unsqueeze(-1)
    count = weights.sum(1).clamp(min=1.0)
    out = []
    for mode in modes:
        if mode == "cls":
            out.append(hidden[:, 0])
        elif mode == "max":
            out.append(hidden.masked_fill(weights == 0, -1e9).max(1).values)
        elif mode == "mean":
            out.append((hidden * weights).sum(1) / count)
        elif mode == "mean_sqrt_len_tokens":
            out.append((hidden * weights).sum(1) / count.sqrt())
        else:
            raise ValueError(f"pooling mode {mode!r} is not implemented (implemented: {', '.join(POOLING_MODES)})")
    return torch.cat(out, dim=-1)
