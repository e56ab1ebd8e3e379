"""A distill step's objective: the teacher's and the student's Q/K/V (and outputs) of one micro-batch, the MiniLM
relation terms between them, the optional output terms, and their weighted sum."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mlminilm.config import DistillConfig
from mlminilm.distillation.capture import layer_qkv, qkv_and_output
from mlminilm.distillation.losses import sentence_embedding
from mlminilm.distillation.terms import StepTensors, compute_terms, reads_output, teacher_reads_passages
from mlminilm.models.layers import base_model


class StudentQKV(nn.Module):
    """The student's forward for distillation: Q, K, V of its top layer, and with `outputs` also its last hidden
    states (for the output terms). A module, so DDP can wrap it: one call computes everything a step's backward
    needs, the parallel pairs' last hidden states (`pair_ids`) and those of --passages' questions and passages
    (`passage_inputs`: question ids, question mask, passage ids, passage mask) included: with `passage_inputs`
    it returns (found, pairs' hidden states or None, (questions', passages' hidden states))."""

    def __init__(self, student: nn.Module, outputs: bool = False):
        super().__init__()
        self.student = student
        self.outputs = outputs

    def forward(self, input_ids, attention_mask, pair_ids=None, pair_mask=None, passage_inputs=None):
        if input_ids is None:
            found = None
        elif self.outputs:
            found = qkv_and_output(self.student, input_ids, attention_mask, -1)
        else:
            found = layer_qkv(self.student, input_ids, attention_mask, -1)
        pairs = last_hidden(self.student, pair_ids, pair_mask) if pair_ids is not None else None
        if passage_inputs is None:
            return found if pair_ids is None else (found, pairs)
        q_ids, q_mask, p_ids, p_mask = passage_inputs
        return found, pairs, (last_hidden(self.student, q_ids, q_mask), last_hidden(self.student, p_ids, p_mask))


def last_hidden(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The model's last hidden states (the encoder itself, whatever head wraps it)."""
    return base_model(model)(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


@dataclass(frozen=True)
class EmbeddingHead:
    """How the teacher turns its last hidden states into a sentence embedding (its sentence-transformers Pooling
    and Normalize modules): what the embedding term compares."""

    modes: tuple[str, ...]
    normalize: bool


def teacher_embedding(teacher: nn.Module, ids: torch.Tensor, mask: torch.Tensor, head: EmbeddingHead) -> torch.Tensor:
    """The teacher's sentence embedding of a batch (call without gradient)."""
    return sentence_embedding(last_hidden(teacher, ids, mask), mask, head.modes, head.normalize)


def distill_terms(
    teacher: nn.Module,
    teacher_layer: int,
    student_forward: nn.Module,
    input_ids: torch.Tensor,
    mask: torch.Tensor | None,
    cfg: DistillConfig,
    head: EmbeddingHead | None = None,
    pairs=None,
    passages=None,
) -> dict[str, torch.Tensor]:
    """The loss terms of one micro-batch (every row of terms.TERMS that is on): the teacher's Q/K/V (no gradient)
    against the student's, and with an output term on, the last hidden states and the sentence embedding
    (`head`); with `pairs` (a corpus.parallel.ParallelBatch), the pairs terms; with `passages` (a
    corpus.passages.PassageBatch, its teacher embeddings inside), the passages terms.

    `mask` is None for a batch without padding (then nothing is masked anywhere). `input_ids` is None when no
    term reads the running text (only the parallel term on).

    A module-level function so that benchmarks/distill_step.py times exactly what `distill` runs.
    """
    # The teacher runs in its weights' dtype (bf16 / fp16 when the run computes in them) with autocast off: under
    # autocast its layer norms and softmaxes would run in fp32 and every matmul recast its input back, for targets
    # that are bf16 projections anyway. The relations built from them are fp32 (mlminilm/distillation/relations.py).
    device = next(x for x in (input_ids, pairs and pairs.both_ids, passages and passages.question_ids) if x is not None)
    device = device.device.type
    outputs = reads_output(cfg)
    with torch.no_grad(), torch.autocast(device, enabled=False):
        t_qkv = t_out = t_pairs = t_passage_hidden = None
        if input_ids is None:
            pass
        elif outputs:
            t_qkv, t_out = qkv_and_output(teacher, input_ids, mask, teacher_layer)
        else:
            t_qkv = layer_qkv(teacher, input_ids, mask, teacher_layer)
        if pairs is not None:  # the teacher's embeddings of the sources: from the target cache, or computed here
            t_pairs = (
                pairs.targets
                if pairs.targets is not None
                else teacher_embedding(teacher, pairs.source_ids, pairs.source_mask, head)
            )
        if passages is not None and teacher_reads_passages(cfg):  # token states are too many to cache
            t_passage_hidden = last_hidden(teacher, passages.passage_ids, passages.passage_mask)
    s_pairs = s_passages = None
    pair_ids, pair_mask = (pairs.both_ids, pairs.both_mask) if pairs is not None else (None, None)
    if passages is not None:
        inputs = (passages.question_ids, passages.question_mask, passages.passage_ids, passages.passage_mask)
        found, s_pairs, s_passages = student_forward(input_ids, mask, pair_ids, pair_mask, inputs)
    elif pairs is not None:
        found, s_pairs = student_forward(input_ids, mask, pair_ids, pair_mask)
    else:
        found = student_forward(input_ids, mask)
    s_qkv, s_out = (found if outputs else (found, None)) if input_ids is not None else (None, None)
    step = StepTensors(
        cfg, head, mask, t_qkv, s_qkv, t_out, s_out, pairs, t_pairs, s_pairs, passages, s_passages, t_passage_hidden
    )
    return compute_terms(
        step, running_text=input_ids is not None, pairs=pairs is not None, passages=passages is not None
    )
