"""Q, K, V of one encoder layer, computed with the model's own modules.

The clean way to get distillation targets (METHOD.md section 6): run the embeddings and the layers below
layer k normally, with the model's fast attention, and apply layer k's own query/key/value projections to
the input of layer k. Layers above k never run. `output_attentions` is not used: with sdpa it returns
nothing, and with eager attention in train mode it returns post-dropout probabilities.

The layers run in an explicit loop rather than through the model's forward stopped by an exception, so the
capture has no control flow that torch.compile or CUDA graphs cannot follow. The loop gives each layer the
attention mask the model's own forward would build (transformers' `create_bidirectional_mask`: None when
the batch has no padding, so sdpa can take its fast kernels). Layer k's three projections run as one matmul
with their weights concatenated.

Also a model's last hidden states and the teacher's sentence embedding through its pooling head, what the inputs
besides the running text compare (distillation/inputs)."""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import nn

from mlminilm.distillation.losses import sentence_embedding
from mlminilm.errors import ConfigError
from mlminilm.models.layers import base_model, encoder_layers, resolve_layer

# Fused [3 hidden, hidden] Q/K/V weights of frozen attention modules (a teacher's), by module. Each entry
# carries the identity of the parameters it was built from, so new or changed weights rebuild it.
_FUSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def layer_attention_mask(base: nn.Module, embeddings: torch.Tensor, attention_mask: torch.Tensor | None):
    """The mask the model's own forward hands its layers, for the model's attention implementation.

    None when the caller passes None (no padding: sdpa then uses its fast kernels).
    """
    if attention_mask is None:
        return None
    if getattr(base.config, "is_decoder", False):
        raise ConfigError(f"{type(base).__name__} is configured as a decoder; capture needs a bidirectional encoder")
    try:
        from transformers.masking_utils import create_bidirectional_mask
    except ImportError:  # transformers 4.x before masking_utils: the additive [batch, 1, 1, seq] mask
        return base.get_extended_attention_mask(attention_mask, attention_mask.shape, dtype=embeddings.dtype)
    # Materialised without asking whether it could be skipped: that question (`mask.all()`) is a device->host
    # read, and a caller that passes a mask has padding (distill passes None for batches without).
    return create_bidirectional_mask(
        config=base.config, inputs_embeds=embeddings, attention_mask=attention_mask, allow_is_bidirectional_skip=False
    )


def layer_input(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, layer: int
) -> torch.Tensor:
    """Hidden states entering layer `layer` (0-based, -1 = last): [batch, seq, hidden].

    The embeddings (position and token type ids as the model makes them by default) and the layers below,
    in the model's own modules and current mode (eval: deterministic; train: their usual dropout).
    """
    index = resolve_layer(model, layer)
    base = base_model(model)
    hidden = base.embeddings(input_ids=input_ids)
    mask = layer_attention_mask(base, hidden, attention_mask) if index > 0 else None
    for block in encoder_layers(model)[:index]:
        out = block(hidden, attention_mask=mask)
        hidden = out[0] if isinstance(out, tuple) else out  # transformers 4.x layers return tuples
    return hidden


def concatenate_qkv(attn: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[3 hidden, hidden] weight and [3 hidden] bias of query, key and value, in that order."""
    linears = (attn.query, attn.key, attn.value)
    weight = torch.cat([m.weight for m in linears])
    if all(m.bias is None for m in linears):
        return weight, None
    biases = [m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in linears]
    return weight, torch.cat(biases)


def fused_qkv_weights(attn: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The fused Q/K/V weight and bias of `attn`: cached for frozen modules, rebuilt each call for trained ones.

    Trained parameters (a student's) are concatenated inside the forward so gradients flow back to them; the
    optimizer updates them in place without bumping their version counters, so no cache could tell. Frozen
    ones (a teacher's) are cached and rebuilt when a parameter is replaced or changed in place
    (`load_state_dict`, `.to(...)`); a change made through `.data` bypasses that check. Under torch.compile
    the concatenation is traced instead (the cache's pointer checks are not traceable; the compiler hoists it).
    """
    params = [p for m in (attn.query, attn.key, attn.value) for p in m.parameters()]
    if torch.compiler.is_compiling() or any(p.requires_grad for p in params):
        return concatenate_qkv(attn)
    identity = tuple((p.data_ptr(), p._version, p.dtype, p.device, p.shape) for p in params)
    cached = _FUSED.get(attn)
    if cached is None or cached[0] != identity:
        with torch.no_grad():
            cached = (identity, *concatenate_qkv(attn))
        _FUSED[attn] = cached
    return cached[1], cached[2]


def project_qkv(attn: nn.Module, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """query(hidden), key(hidden), value(hidden) as one matmul: [batch, seq, hidden] views of one output."""
    weight, bias = fused_qkv_weights(attn)
    return F.linear(hidden, weight, bias).chunk(3, dim=-1)


def layer_qkv(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, layer: int = -1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v) of layer `layer` (0-based, -1 = last): [batch, seq, hidden] each, heads concatenated.

    The projections of that layer's input, by the layer's own query/key/value weights (no dropout applies
    to them). Layers below run as the model is set (eval: deterministic; train: their usual dropout).
    `attention_mask` ([batch, seq], 1 for real tokens) may be None for a batch without padding.
    """
    hidden = layer_input(model, input_ids, attention_mask, layer)
    attn = encoder_layers(model)[resolve_layer(model, layer)].attention.self
    return project_qkv(attn, hidden)


def qkv_and_output(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, layer: int = -1
) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """((q, k, v) of layer `layer`, the output of the model's last layer): what the relation losses and the
    output terms (last hidden states, sentence embedding) need, from one pass through every layer.

    Q/K/V are layer `layer`'s projections of its input, exactly as `layer_qkv` gives them (the layer's own
    attention computes them again inside its forward: one extra [hidden, 3 hidden] matmul for the top layer).
    """
    index = resolve_layer(model, layer)
    base = base_model(model)
    hidden = base.embeddings(input_ids=input_ids)
    mask = layer_attention_mask(base, hidden, attention_mask)
    qkv = None
    for i, block in enumerate(encoder_layers(model)):
        if i == index:
            qkv = project_qkv(block.attention.self, hidden)
        out = block(hidden, attention_mask=mask)
        hidden = out[0] if isinstance(out, tuple) else out
    return qkv, hidden


def last_hidden(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The model's last hidden states (the encoder itself, whatever head wraps it)."""
    return base_model(model)(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def teacher_embedding(teacher: nn.Module, ids: torch.Tensor, mask: torch.Tensor, head) -> torch.Tensor:
    """The teacher's sentence embedding of a batch through `head` (an objective.EmbeddingHead; call without
    gradient)."""
    return sentence_embedding(last_hidden(teacher, ids, mask), mask, head.modes, head.normalize)
