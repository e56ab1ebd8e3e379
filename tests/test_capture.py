"""layer_qkv against the attention probabilities of the same tiny model run with eager attention, and against
the previous implementation (the model's own forward, stopped by an exception at the captured layer)."""

import pytest
import torch
from transformers import AutoModel, BertConfig, XLMRobertaConfig

from mlminilm.distillation.capture import layer_qkv
from mlminilm.distillation.losses import minilm_v1_loss
from mlminilm.models.layers import encoder_layers, resolve_layer, truncate_encoder
from mlminilm.models.student import freeze_unused


def tiny_config(kind):
    common = dict(
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        vocab_size=100,
    )
    if kind == "bert":
        return BertConfig(**common, pad_token_id=0)
    return XLMRobertaConfig(**common, pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1)


def inputs(pad_id):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (2, 7), generator=g)
    mask = torch.ones_like(ids)
    ids[1, 5:] = pad_id
    mask[1, 5:] = 0
    return ids, mask


@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
@pytest.mark.parametrize("layer", [0, 1, -1])
def test_layer_qkv_reproduces_eager_attention_probabilities(kind, layer):
    config = tiny_config(kind)
    torch.manual_seed(0)
    eager = AutoModel.from_config(config, attn_implementation="eager").eval()
    # A config of its own: from_config records the attention implementation on the config object.
    fast = AutoModel.from_config(tiny_config(kind), attn_implementation="sdpa").eval()
    fast.load_state_dict(eager.state_dict())
    ids, mask = inputs(config.pad_token_id)
    with torch.no_grad():
        probs = eager(input_ids=ids, attention_mask=mask, output_attentions=True).attentions[layer]
        q, k, v = layer_qkv(fast, ids, mask, layer)
    heads, d = 4, 8
    qh = q.view(2, 7, heads, d).transpose(1, 2)
    kh = k.view(2, 7, heads, d).transpose(1, 2)
    logits = qh @ kh.transpose(-1, -2) / d**0.5
    logits = logits.masked_fill(mask[:, None, None, :] == 0, torch.finfo(logits.dtype).min)
    ours = logits.softmax(-1)
    real = mask.bool()
    for b in range(2):
        rows = real[b]
        torch.testing.assert_close(ours[b][:, rows][:, :, rows], probs[b][:, rows][:, :, rows], rtol=1e-5, atol=1e-6)
    assert q.shape == k.shape == v.shape == (2, 7, 32)


def test_truncated_teacher_gives_the_same_qkv():
    config = tiny_config("xlm-roberta")
    torch.manual_seed(0)
    full = AutoModel.from_config(config, attn_implementation="sdpa").eval()
    ids, mask = inputs(1)
    with torch.no_grad():
        expected = layer_qkv(full, ids, mask, 1)
    truncate_encoder(full, 1)
    assert len(full.encoder.layer) == 2 and full.pooler is None
    with torch.no_grad():
        got = layer_qkv(full, ids, mask, -1)
    for a, b in zip(expected, got):
        torch.testing.assert_close(a, b)


def test_gradients_reach_qkv_and_below_only():
    config = tiny_config("bert")
    torch.manual_seed(0)
    teacher = AutoModel.from_config(config, attn_implementation="sdpa").eval()
    student_cfg = tiny_config("bert")
    student_cfg.hidden_size, student_cfg.intermediate_size, student_cfg.num_hidden_layers = 16, 32, 2
    student = AutoModel.from_config(student_cfg, attn_implementation="sdpa").train()
    ids, mask = inputs(0)
    with torch.no_grad():
        t = layer_qkv(teacher, ids, mask, -1)
    minilm_v1_loss(t, layer_qkv(student, ids, mask, -1), mask, 4).backward()
    top = student.encoder.layer[-1]
    for name, p in student.named_parameters():
        above = (name.startswith("encoder.layer.1.") and ".attention.self." not in name) or name.startswith("pooler")
        if above:
            assert p.grad is None, name
        elif "token_type" not in name and "position" not in name:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    # freeze_unused freezes exactly the parameters that got no gradient.
    frozen = {n for n, p in student.named_parameters() if p.grad is None}
    freeze_unused(student, -1)
    assert {n for n, p in student.named_parameters() if not p.requires_grad} == frozen
    assert top.attention.self.query.weight.requires_grad


# ------------------------------------------------------------------ against the previous implementation


class _Reached(Exception):
    def __init__(self, hidden):
        super().__init__()
        self.hidden = hidden


def hooked_layer_qkv(model, input_ids, attention_mask, layer):
    """The implementation before the explicit loop: the model's forward, stopped by a pre-hook that raises."""
    target = encoder_layers(model)[resolve_layer(model, layer)]

    def stop(module, args, kwargs):
        raise _Reached(args[0] if args else kwargs["hidden_states"])

    handle = target.register_forward_pre_hook(stop, with_kwargs=True)
    try:
        getattr(model, "base_model", model)(input_ids=input_ids, attention_mask=attention_mask)
    except _Reached as reached:
        attn = target.attention.self
        return attn.query(reached.hidden), attn.key(reached.hidden), attn.value(reached.hidden)
    finally:
        handle.remove()
    raise AssertionError("never reached the layer")


@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
@pytest.mark.parametrize("layer", [0, 1, -1])
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_layer_qkv_equals_the_hooked_forward(kind, layer, padded, attn):
    config = tiny_config(kind)
    torch.manual_seed(0)
    model = AutoModel.from_config(config, attn_implementation=attn).eval()
    ids, mask = inputs(config.pad_token_id)
    if not padded:
        ids, mask = ids[:1], mask[:1]
    with torch.no_grad():
        expected = hooked_layer_qkv(model, ids, mask, layer)
        got = layer_qkv(model, ids, mask, layer)
    for name, a, b in zip("qkv", got, expected):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=name)


def test_layer_qkv_equals_the_hooked_forward_in_train_mode():
    """Dropout draws the same random numbers in the same order: same outputs under the same seed."""
    model = AutoModel.from_config(tiny_config("xlm-roberta"), attn_implementation="sdpa").train()
    ids, mask = inputs(1)
    torch.manual_seed(1)
    expected = hooked_layer_qkv(model, ids, mask, -1)
    torch.manual_seed(1)
    got = layer_qkv(model, ids, mask, -1)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_unpadded_batch_gives_the_layers_no_mask():
    """attention_mask=None (the caller's "no padding") reaches the layers as None (sdpa's fast kernels); a mask the
    caller passes is used as given, never inspected (that would be a device->host read), with the same result."""
    model = AutoModel.from_config(tiny_config("bert"), attn_implementation="sdpa").eval()
    ids, mask = inputs(0)
    seen = []
    model.encoder.layer[1].register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(kwargs.get("attention_mask", args[1] if len(args) > 1 else None)),
        with_kwargs=True,
    )
    with torch.no_grad():
        full = layer_qkv(model, ids[:1], mask[:1], -1)
        none = layer_qkv(model, ids[:1], None, -1)
        layer_qkv(model, ids, mask, -1)
    assert seen[0] is not None and seen[1] is None and seen[2] is not None
    for a, b in zip(full, none):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_frozen_fused_weights_are_cached_and_follow_weight_changes():
    model = AutoModel.from_config(tiny_config("bert"), attn_implementation="sdpa").eval().requires_grad_(False)
    ids, mask = inputs(0)
    first = layer_qkv(model, ids, mask, -1)
    again = layer_qkv(model, ids, mask, -1)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    other = AutoModel.from_config(tiny_config("bert"), attn_implementation="sdpa").eval()
    model.load_state_dict(other.state_dict())  # copies in place: the cached fused weight must not be reused
    with torch.no_grad():
        expected = hooked_layer_qkv(model, ids, mask, -1)
    for a, b in zip(layer_qkv(model, ids, mask, -1), expected):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_trained_qkv_weights_are_used_live():
    """A student's Q/K/V change under the optimizer (in place, no version bump): every call sees the new ones."""
    student = AutoModel.from_config(tiny_config("bert"), attn_implementation="sdpa").eval()
    ids, mask = inputs(0)
    optimizer = torch.optim.AdamW(student.parameters(), lr=0.1, fused=True)
    sum(x.sum() for x in layer_qkv(student, ids, mask, -1)).backward()
    optimizer.step()
    with torch.no_grad():
        expected = hooked_layer_qkv(student, ids, mask, -1)
        got = layer_qkv(student, ids, mask, -1)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "no-mask"])
def test_layer_qkv_compiles_as_one_graph(padded):
    """No exception stops the forward any more, so torch.compile traces the capture without a graph break."""
    model = AutoModel.from_config(tiny_config("xlm-roberta"), attn_implementation="sdpa").eval().requires_grad_(False)
    ids, mask = inputs(1)
    mask = mask if padded else None
    compiled = torch.compile(lambda i, m: layer_qkv(model, i, m, 1), backend="eager", fullgraph=True)
    with torch.no_grad():
        for a, b in zip(compiled(ids, mask), layer_qkv(model, ids, mask, 1)):
            torch.testing.assert_close(a, b)
