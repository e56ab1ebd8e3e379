"""A distill step's objective: the teacher's and the student's Q/K/V (and outputs) of one micro-batch, the MiniLM
relation terms between them, the optional output terms, and their weighted sum."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mlminilm.config import DistillConfig
from mlminilm.distillation.capture import layer_qkv, qkv_and_output
from mlminilm.distillation.losses import (
    embedding_mse,
    hidden_cosine,
    hidden_mse,
    minilm_v1_terms,
    minilm_v2_terms,
    sentence_embedding,
)


class StudentQKV(nn.Module):
    """The student's forward for distillation: Q, K, V of its top layer, and with `outputs` also its last hidden
    states (for the output terms). A module, so DDP can wrap it."""

    def __init__(self, student: nn.Module, outputs: bool = False):
        super().__init__()
        self.student = student
        self.outputs = outputs

    def forward(self, input_ids, attention_mask):
        if self.outputs:
            return qkv_and_output(self.student, input_ids, attention_mask, -1)
        return layer_qkv(self.student, input_ids, attention_mask, -1)


@dataclass(frozen=True)
class EmbeddingHead:
    """How the teacher turns its last hidden states into a sentence embedding (its sentence-transformers Pooling
    and Normalize modules): what the embedding term compares."""

    modes: tuple[str, ...]
    normalize: bool


# The weight of each named loss term in the total; relation terms (attention, value, qq, kk, vv) weigh 1.
def term_weights(cfg: DistillConfig) -> dict[str, float]:
    return {"hidden": cfg.hidden_loss_weight or 0.0, "embedding": cfg.embedding_loss_weight or 0.0}


def weighted_loss(parts: dict[str, torch.Tensor], cfg: DistillConfig) -> torch.Tensor:
    """The loss the student minimises: relation terms plus the weighted output terms (metrics.jsonl records each
    term unweighted, under its name)."""
    weights = term_weights(cfg)
    return sum(weights.get(name, 1.0) * value for name, value in parts.items())


def distill_terms(teacher: nn.Module, teacher_layer: int, student_forward: nn.Module, input_ids: torch.Tensor,
                  mask: torch.Tensor | None, cfg: DistillConfig, head: EmbeddingHead | None = None,
                  ) -> dict[str, torch.Tensor]:
    """The loss terms of one micro-batch: the teacher's Q/K/V (no gradient) against the student's, and with
    output terms on (cfg.output_terms), the last hidden states and the sentence embedding (`head`).

    `mask` is None for a batch without padding (then nothing is masked anywhere).

    A module-level function so that benchmarks/distill_step.py times exactly what `distill` runs.
    """
    # The teacher runs in its weights' dtype (bf16 / fp16 when the run computes in them) with autocast off: under
    # autocast its layer norms and softmaxes would run in fp32 and every matmul recast its input back, for targets
    # that are bf16 projections anyway. The relations built from them are fp32 (mlminilm/distillation/relations.py).
    with torch.no_grad(), torch.autocast(input_ids.device.type, enabled=False):
        if cfg.output_terms:
            t_qkv, t_out = qkv_and_output(teacher, input_ids, mask, teacher_layer)
        else:
            t_qkv = layer_qkv(teacher, input_ids, mask, teacher_layer)
    if cfg.output_terms:
        s_qkv, s_out = student_forward(input_ids, mask)
    else:
        s_qkv = student_forward(input_ids, mask)
    if cfg.objective == "minilm":
        parts = minilm_v1_terms(t_qkv, s_qkv, mask, cfg.heads)
    else:
        parts = minilm_v2_terms(t_qkv, s_qkv, mask, cfg.relation_heads)
    weights = term_weights(cfg)
    if weights["hidden"] > 0:
        distance = hidden_cosine if cfg.hidden_distance == "cosine" else hidden_mse
        parts["hidden"] = distance(t_out, s_out, mask)
    if weights["embedding"] > 0:
        if head is None:
            raise ValueError("the embedding term needs the teacher's EmbeddingHead")
        with torch.no_grad():
            t_emb = sentence_embedding(t_out, mask, head.modes, head.normalize)
        parts["embedding"] = embedding_mse(t_emb, sentence_embedding(s_out, mask, head.modes, head.normalize))
    return parts
