"""Shape a student from its teacher's config, choose which teacher layers initialise it, and freeze what its
objective does not train."""

from __future__ import annotations

import copy

import torch
from torch import nn

from mlminilm.config import DEFAULT_INIT_LAYERS, StudentShape
from mlminilm.errors import ConfigError
from mlminilm.models.layers import encoder_layers, resolve_layer
from mlminilm.models.loading import load_encoder


def student_config(teacher_config, shape: StudentShape, dropout: float | None = None):
    """The teacher's config (model type, vocabulary, positions, special ids) with the student's shape."""
    config = copy.deepcopy(teacher_config)
    config.num_hidden_layers = shape.layers
    config.hidden_size = shape.hidden
    config.num_attention_heads = shape.heads
    config.intermediate_size = shape.intermediate
    if dropout is not None:
        config.hidden_dropout_prob = dropout
        config.attention_probs_dropout_prob = dropout
    config.architectures = None
    # The student trains and is saved in fp32 whatever dtype the teacher's checkpoint was stored in.
    config.dtype = torch.float32
    return config


def build_student(config, seed: int) -> nn.Module:
    """A randomly initialised encoder (the model type's own init) from `config`, reproducible for `seed`.

    Its word embedding computes its gradient on the CPU into the tensor of the previous step instead of a new
    [vocabulary, hidden] one (mlminilm.models.embedding_grad: the same values bit for bit; 250,002 x 384: ~170 ms less
    per fp32 step of the cpu-probe benchmark, experiments/distill_variants.py)."""
    from transformers import AutoModel

    from mlminilm.models.embedding_grad import keep_embedding_gradient

    torch.manual_seed(seed)
    model = AutoModel.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    keep_embedding_gradient(model)
    return model


def init_layers(rule: str | list[int], teacher_layers: int, student_layers: int) -> list[int]:
    """The 0-based teacher layer copied into each student layer, bottom to top.

    every: every k-th layer ending at the last (k = teacher // student; 12 -> 6: 1,3,5,7,9,11);
    first: the bottom layers (12 -> 6: 0..5), the teacher cut to the student's depth;
    first-last: the bottom k-1 layers and the last (12 -> 6: 0,1,2,3,4,11): the cut teacher's lower layers under
    the teacher's own top layer, whose outputs are the teacher's output space;
    a list: those layers (increasing, one per student layer)."""
    if student_layers > teacher_layers:
        raise ConfigError(f"--init teacher needs a student no deeper than the teacher ({teacher_layers} layers)")
    if rule == "every":
        k = teacher_layers // student_layers
        return [(i + 1) * k - 1 for i in range(student_layers)]
    if rule == "first":
        return list(range(student_layers))
    if rule == "first-last":
        return list(range(student_layers - 1)) + [teacher_layers - 1]
    picked = list(rule)
    if len(picked) != student_layers or any(not 0 <= i < teacher_layers for i in picked):
        raise ConfigError(
            f"--init-layers {','.join(map(str, picked))} must name {student_layers} layers of the "
            f"teacher's {teacher_layers} (0..{teacher_layers - 1})"
        )
    return picked


def init_from_teacher(student: nn.Module, teacher_name: str, rule: str | list[int] = DEFAULT_INIT_LAYERS) -> list[int]:
    """Copy the embeddings and the teacher layers `rule` picks (init_layers; by default the project's,
    mlminilm.config.DEFAULT_INIT_LAYERS) into the student (widths must match). Returns the teacher layers used,
    one per student layer."""
    teacher = load_encoder(teacher_name)
    t_layers, s_layers = encoder_layers(teacher), encoder_layers(student)
    picked = init_layers(rule, len(t_layers), len(s_layers))
    s_base, t_base = student.base_model, teacher.base_model
    s_base.embeddings.load_state_dict(t_base.embeddings.state_dict())
    for s_i, t_i in enumerate(picked):
        s_layers[s_i].load_state_dict(t_layers[t_i].state_dict())
    return picked


def freeze_unused(student: nn.Module, layer: int, through_output: bool = False) -> int:
    """Turn off gradients for every parameter the loss cannot reach.

    The relation losses reach nothing above Q/K/V of `layer`; with `through_output` (a term on the student's last
    hidden states or sentence embedding) every layer is reached, and only the pooler, which no term reads, is
    frozen. Unreached parameters would get no gradient anyway; freezing them keeps AdamW from touching them
    and lets DDP run without `find_unused_parameters`. Returns the number of frozen parameters.
    """
    index = resolve_layer(student, layer)
    layers = encoder_layers(student)
    used = {id(p) for p in student.base_model.embeddings.parameters()}
    if through_output:
        for block in layers:
            used |= {id(p) for p in block.parameters()}
    else:
        for lower in layers[:index]:
            used |= {id(p) for p in lower.parameters()}
        qkv = layers[index].attention.self
        for proj in (qkv.query, qkv.key, qkv.value):
            used |= {id(p) for p in proj.parameters()}
    frozen = 0
    for p in student.parameters():
        if id(p) not in used:
            p.requires_grad_(False)
            frozen += p.numel()
    return frozen


def freeze_bottom_layers(model: nn.Module, count: int) -> int:
    """Turn off gradients of the embeddings (all of them: words, positions, their layer norm) and the bottom
    `count` encoder layers: a student that starts from the teacher's bottom layers keeps them as the teacher has
    them, for every language, and no backward pass runs below the first trained layer. Returns how many
    parameters that freezes (0 for count 0)."""
    if count <= 0:
        return 0
    frozen = 0
    for module in (model.base_model.embeddings, *encoder_layers(model)[:count]):
        for p in module.parameters():
            if p.requires_grad:
                p.requires_grad_(False)
                frozen += p.numel()
    return frozen


def freeze_word_embeddings(model: nn.Module) -> int:
    """Turn off gradients of the word-embedding matrix; returns how many parameters that freezes."""
    weight = model.get_input_embeddings().weight
    if not weight.requires_grad:
        return 0
    weight.requires_grad_(False)
    return weight.numel()
