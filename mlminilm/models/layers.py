"""The anatomy of a BERT-like encoder: its base model, its layer list, a layer index resolved from a possibly
negative one, and truncation above a layer."""

from __future__ import annotations

from torch import nn

from mlminilm.errors import ConfigError


def base_model(model: nn.Module) -> nn.Module:
    """The bare encoder (embeddings + encoder) of a model with or without a task head."""
    return getattr(model, "base_model", model)


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The ModuleList of transformer layers of a BERT-family encoder (BERT, RoBERTa, XLM-R, ...)."""
    base = base_model(model)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ConfigError(
            f"{type(model).__name__} is not a BERT-family encoder (no encoder.layer list); "
            "use a BERT, RoBERTa or XLM-R model"
        )
    attn = getattr(getattr(layers[0], "attention", None), "self", None)
    if not all(hasattr(attn, name) for name in ("query", "key", "value")):
        raise ConfigError(
            f"{type(model).__name__} layers have no attention.self.query/key/value projections; "
            "use a BERT, RoBERTa or XLM-R model"
        )
    return layers


def resolve_layer(model: nn.Module, layer: int) -> int:
    """0-based index of `layer` (negative counts from the end), checked against the model's depth."""
    n = len(encoder_layers(model))
    index = layer + n if layer < 0 else layer
    if not 0 <= index < n:
        raise ConfigError(f"layer {layer} is out of range for a model with {n} layers")
    return index


def truncate_encoder(model: nn.Module, layer: int) -> int:
    """Drop every layer above `layer` (and the pooler) in place, so a teacher never computes what is not used.

    Returns the 0-based index of the kept top layer (still the captured one).
    """
    index = resolve_layer(model, layer)
    base = base_model(model)
    base.encoder.layer = nn.ModuleList(list(base.encoder.layer)[: index + 1])
    if getattr(base, "pooler", None) is not None:
        base.pooler = None
    base.config.num_hidden_layers = index + 1
    return index
