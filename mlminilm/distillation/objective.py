"""A distill step's objective: the teacher's and the student's Q/K/V (and outputs) of one micro-batch, the MiniLM
relation terms between them, the optional output terms, and their weighted sum."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mlminilm.config import DistillConfig
from mlminilm.distillation.capture import layer_qkv, qkv_and_output
from mlminilm.models.layers import base_model
from mlminilm.distillation.losses import (
    embedding_mse,
    hidden_cosine,
    hidden_mse,
    minilm_v1_terms,
    minilm_v2_terms,
    sentence_embedding,
    translation_ranking,
)


class StudentQKV(nn.Module):
    """The student's forward for distillation: Q, K, V of its top layer, and with `outputs` also its last hidden
    states (for the output terms). A module, so DDP can wrap it: one call computes everything a step's backward
    needs, the parallel pairs' last hidden states (`pair_ids`) included."""

    def __init__(self, student: nn.Module, outputs: bool = False):
        super().__init__()
        self.student = student
        self.outputs = outputs

    def forward(self, input_ids, attention_mask, pair_ids=None, pair_mask=None):
        if input_ids is None:
            found = None
        elif self.outputs:
            found = qkv_and_output(self.student, input_ids, attention_mask, -1)
        else:
            found = layer_qkv(self.student, input_ids, attention_mask, -1)
        if pair_ids is None:
            return found
        return found, last_hidden(self.student, pair_ids, pair_mask)


def last_hidden(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The model's last hidden states (the encoder itself, whatever head wraps it)."""
    return base_model(model)(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


@dataclass(frozen=True)
class EmbeddingHead:
    """How the teacher turns its last hidden states into a sentence embedding (its sentence-transformers Pooling
    and Normalize modules): what the embedding term compares."""

    modes: tuple[str, ...]
    normalize: bool


# The relation terms (MiniLM v1: attention, value; MiniLMv2: qq, kk, vv) weigh --relation-loss-weight.
RELATION_TERMS = ("attention", "value", "qq", "kk", "vv")


# The weight of each named loss term in the total, the relation terms excepted.
def term_weights(cfg: DistillConfig) -> dict[str, float]:
    on = cfg.parallel is not None
    return {"hidden": cfg.hidden_loss_weight or 0.0, "embedding": cfg.embedding_loss_weight or 0.0,
            "parallel": cfg.parallel_loss_weight if on else 0.0,
            "contrastive": cfg.parallel_contrastive_weight if on else 0.0}


def weighted_loss(parts: dict[str, torch.Tensor], cfg: DistillConfig) -> torch.Tensor:
    """The loss the student minimises: the weighted relation, output and parallel terms (metrics.jsonl records
    each term unweighted, under its name). A term without a weight is an error, never a silent default."""
    weights = term_weights(cfg)
    weights.update(dict.fromkeys(RELATION_TERMS, cfg.relation_loss_weight))
    unknown = sorted(set(parts) - set(weights))
    if unknown:
        raise KeyError(f"loss term(s) {', '.join(unknown)} have no weight in objective.term_weights")
    return sum(weights[name] * value for name, value in parts.items())


def uses_running_text(cfg: DistillConfig) -> bool:
    """Whether any term reads the running-text batch (with only the parallel term on, it is not drawn)."""
    return cfg.relation_loss_weight > 0 or cfg.output_terms


def parallel_terms(target: torch.Tensor, s_hidden: torch.Tensor, both_mask: torch.Tensor, head: EmbeddingHead,
                   cfg: DistillConfig, not_negative: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The terms on parallel pairs, from the teacher's embedding of the B sources (`target`, [B, H], no gradient)
    and the student's last hidden states of the sources then the translations (`s_hidden`, [2B, T, H]):

    - `parallel`: sentence-transformers' multilingual distillation (Reimers & Gurevych 2020), the student's
      embeddings of both sides against the teacher's embedding of the source, squared L2 distance averaged over
      the 2B embeddings (embedding_mse's scale);
    - `contrastive` (with --parallel-contrastive-weight): in-batch translation ranking of the student's source and
      translation embeddings, both directions, at --parallel-temperature (losses.translation_ranking)."""
    student = sentence_embedding(s_hidden, both_mask, head.modes, head.normalize)
    parts = {}
    if cfg.parallel_loss_weight > 0:
        parts["parallel"] = embedding_mse(torch.cat([target, target]), student)
    if cfg.parallel_contrastive_weight > 0:
        b = target.shape[0]
        parts["contrastive"] = translation_ranking(student[:b], student[b:], cfg.parallel_temperature, not_negative)
    return parts


def teacher_embedding(teacher: nn.Module, ids: torch.Tensor, mask: torch.Tensor, head: EmbeddingHead) -> torch.Tensor:
    """The teacher's sentence embedding of a batch (call without gradient)."""
    return sentence_embedding(last_hidden(teacher, ids, mask), mask, head.modes, head.normalize)


def distill_terms(teacher: nn.Module, teacher_layer: int, student_forward: nn.Module, input_ids: torch.Tensor,
                  mask: torch.Tensor | None, cfg: DistillConfig, head: EmbeddingHead | None = None,
                  pairs=None) -> dict[str, torch.Tensor]:
    """The loss terms of one micro-batch: the teacher's Q/K/V (no gradient) against the student's, and with
    output terms on (cfg.output_terms), the last hidden states and the sentence embedding (`head`); with
    `pairs` (a corpus.parallel.ParallelBatch), the parallel term.

    `mask` is None for a batch without padding (then nothing is masked anywhere). `input_ids` is None when no
    term reads the running text (only the parallel term on).

    A module-level function so that benchmarks/distill_step.py times exactly what `distill` runs.
    """
    # The teacher runs in its weights' dtype (bf16 / fp16 when the run computes in them) with autocast off: under
    # autocast its layer norms and softmaxes would run in fp32 and every matmul recast its input back, for targets
    # that are bf16 projections anyway. The relations built from them are fp32 (mlminilm/distillation/relations.py).
    device = (input_ids if input_ids is not None else pairs.source_ids).device.type
    with torch.no_grad(), torch.autocast(device, enabled=False):
        if input_ids is None:
            t_qkv = None
        elif cfg.output_terms:
            t_qkv, t_out = qkv_and_output(teacher, input_ids, mask, teacher_layer)
        else:
            t_qkv = layer_qkv(teacher, input_ids, mask, teacher_layer)
        if pairs is not None:  # the teacher's embeddings of the sources: from the target cache, or computed here
            t_pairs = pairs.targets if pairs.targets is not None else teacher_embedding(
                teacher, pairs.source_ids, pairs.source_mask, head)
    if pairs is not None:
        found, s_pairs = student_forward(input_ids, mask, pairs.both_ids, pairs.both_mask)
    else:
        found = student_forward(input_ids, mask)
    parts: dict[str, torch.Tensor] = {}
    if pairs is not None:
        parts.update(parallel_terms(t_pairs, s_pairs, pairs.both_mask, head, cfg, pairs.not_negative))
    if input_ids is None:
        return parts
    s_qkv, s_out = found if cfg.output_terms else (found, None)
    if cfg.relation_loss_weight > 0:
        if cfg.objective == "minilm":
            parts.update(minilm_v1_terms(t_qkv, s_qkv, mask, cfg.heads))
        else:
            parts.update(minilm_v2_terms(t_qkv, s_qkv, mask, cfg.relation_heads))
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
