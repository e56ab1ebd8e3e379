"""The documented path of the layer capture (README, Python API); it lives in `mlminilm.distillation.capture`."""

from mlminilm.distillation.capture import layer_qkv, qkv_and_output  # noqa: F401
from mlminilm.models.layers import encoder_layers, resolve_layer, truncate_encoder  # noqa: F401

__all__ = ["encoder_layers", "layer_qkv", "qkv_and_output", "resolve_layer", "truncate_encoder"]
