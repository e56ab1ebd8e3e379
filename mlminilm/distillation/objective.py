"""A distill step's objective: the teacher's and the student's Q/K/V (and outputs) of one micro-batch, the MiniLM
relation terms between them, the optional output terms, and their weighted sum."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from mlminilm.config import DistillConfig
from mlminilm.distillation.capture import (
    last_hidden,
    layer_qkv,
    qkv_and_output,
    teacher_embedding,  # noqa: F401 (its callers' name, beside EmbeddingHead)
)
from mlminilm.distillation.inputs import kind_named
from mlminilm.distillation.terms import StepTensors, compute_terms, reads_output


class StudentOutputs(NamedTuple):
    """What the student's forward computes of one micro-batch, whatever inputs it got: Q, K, V of its top layer
    (`qkv`) and with the output terms its last hidden states (`out`) of the running text (None without running
    text), and its last hidden states of every other (ids, mask) it was given (`hidden`, in that order)."""

    qkv: tuple | None
    out: torch.Tensor | None
    hidden: tuple


class StudentForward(nn.Module):
    """The student's forward for distillation: one call computes everything a step's backward needs (a module, so
    DDP can wrap it), the running text's Q/K/V (and with `outputs` its last hidden states) and the last hidden
    states of every other input's (ids, mask), as one `StudentOutputs`."""

    def __init__(self, student: nn.Module, outputs: bool = False):
        super().__init__()
        self.student = student
        self.outputs = outputs

    def forward(self, input_ids, attention_mask, others: tuple = ()) -> StudentOutputs:
        qkv = out = None
        if input_ids is not None and self.outputs:
            qkv, out = qkv_and_output(self.student, input_ids, attention_mask, -1)
        elif input_ids is not None:
            qkv = layer_qkv(self.student, input_ids, attention_mask, -1)
        return StudentOutputs(qkv, out, tuple(last_hidden(self.student, ids, mask) for ids, mask in others))


@dataclass(frozen=True)
class EmbeddingHead:
    """How the teacher turns its last hidden states into a sentence embedding (its sentence-transformers Pooling
    and Normalize modules): what the embedding term compares."""

    modes: tuple[str, ...]
    normalize: bool


def distill_terms(
    teacher: nn.Module,
    teacher_layer: int,
    student_forward: nn.Module,
    input_ids: torch.Tensor,
    mask: torch.Tensor | None,
    cfg: DistillConfig,
    head: EmbeddingHead | None = None,
    batches: dict | None = None,
) -> dict[str, torch.Tensor]:
    """The loss terms of one micro-batch (every row of terms.TERMS that is on): the teacher's Q/K/V (no gradient)
    against the student's, and with an output term on, the last hidden states and the sentence embedding
    (`head`); with `batches` (by input name, distillation/inputs: the pairs' corpus.parallel.ParallelBatch, ...),
    the terms of those inputs, each input saying what its batch gives the teacher, the student and the terms.

    `mask` is None for a batch without padding (then nothing is masked anywhere). `input_ids` is None when no
    term reads the running text.

    A module-level function so that benchmarks/distill_step.py times exactly what `distill` runs.
    """
    batches = batches or {}
    inputs = [(kind_named(name), batch) for name, batch in batches.items()]
    student_inputs = [kind.student_inputs(batch) for kind, batch in inputs]
    first = input_ids if input_ids is not None else next(ids for pairs in student_inputs for ids, _ in pairs)
    # The teacher runs in its weights' dtype (bf16 / fp16 when the run computes in them) with autocast off: under
    # autocast its layer norms and softmaxes would run in fp32 and every matmul recast its input back, for targets
    # that are bf16 projections anyway. The relations built from them are fp32 (mlminilm/distillation/relations.py).
    outputs = reads_output(cfg)
    with torch.no_grad(), torch.autocast(first.device.type, enabled=False):
        t_qkv = t_out = None
        if input_ids is None:
            pass
        elif outputs:
            t_qkv, t_out = qkv_and_output(teacher, input_ids, mask, teacher_layer)
        else:
            t_qkv = layer_qkv(teacher, input_ids, mask, teacher_layer)
        teacher_sides = [kind.teacher_side(teacher, batch, cfg, head) for kind, batch in inputs]
    found = student_forward(input_ids, mask, tuple(pair for pairs in student_inputs for pair in pairs))
    fields, at = {}, 0
    for (kind, batch), side, own in zip(inputs, teacher_sides, student_inputs):
        fields.update(kind.tensors(batch, side, found.hidden[at : at + len(own)]))
        at += len(own)
    known = set(StepTensors.__dataclass_fields__)
    step = StepTensors(
        cfg, head, mask, t_qkv, found.qkv, t_out, found.out, **{k: v for k, v in fields.items() if k in known}
    )
    step.extra.update({k: v for k, v in fields.items() if k not in known})
    return compute_terms(step, running_text=input_ids is not None, **{name: True for name in batches})
