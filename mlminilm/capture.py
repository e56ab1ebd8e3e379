"""Q, K, V of one encoder layer, computed with the model's own modules.

The clean way to get distillation targets (METHOD.md section 6): run the embeddings and the layers below
layer k normally, with the model's fast attention, stop at the input of layer k, and apply layer k's own
query/key/value projections to it. Layers above k never run. `output_attentions` is not used: with sdpa it
returns nothing, and with eager attention in train mode it returns post-dropout probabilities.
"""

from __future__ import annotations

import torch
from torch import nn

from mlminilm.errors import ConfigError


class _ReachedLayer(Exception):
    """Raised by the pre-hook to stop the forward pass at the input of the captured layer."""

    def __init__(self, hidden_states: torch.Tensor):
        super().__init__()
        self.hidden_states = hidden_states


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The ModuleList of transformer layers of a BERT-family encoder (BERT, RoBERTa, XLM-R, ...)."""
    base = getattr(model, "base_model", model)
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


def layer_input(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, layer: int) -> torch.Tensor:
    """Hidden states entering layer `layer` (0-based, -1 = last): [batch, seq, hidden]."""
    index = resolve_layer(model, layer)
    target = encoder_layers(model)[index]

    def stop(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        raise _ReachedLayer(hidden)

    handle = target.register_forward_pre_hook(stop, with_kwargs=True)
    try:
        base = getattr(model, "base_model", model)
        base(input_ids=input_ids, attention_mask=attention_mask)
    except _ReachedLayer as reached:
        return reached.hidden_states
    finally:
        handle.remove()
    raise RuntimeError("the forward pass never reached the captured layer")  # pragma: no cover


def layer_qkv(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, layer: int = -1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v) of layer `layer` (0-based, -1 = last): [batch, seq, hidden] each, heads concatenated.

    The projections of that layer's input, by the layer's own query/key/value modules (no dropout applies
    to them). Layers below run as the model is set (eval: deterministic; train: their usual dropout).
    """
    hidden = layer_input(model, input_ids, attention_mask, layer)
    attn = encoder_layers(model)[resolve_layer(model, layer)].attention.self
    return attn.query(hidden), attn.key(hidden), attn.value(hidden)


def truncate_encoder(model: nn.Module, layer: int) -> int:
    """Drop every layer above `layer` (and the pooler) in place, so a teacher never computes what is not used.

    Returns the 0-based index of the kept top layer (still the captured one).
    """
    index = resolve_layer(model, layer)
    base = getattr(model, "base_model", model)
    base.encoder.layer = nn.ModuleList(list(base.encoder.layer)[: index + 1])
    if getattr(base, "pooler", None) is not None:
        base.pooler = None
    base.config.num_hidden_layers = index + 1
    return index
