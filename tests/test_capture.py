"""layer_qkv against the attention probabilities of the same tiny model run with eager attention."""

import pytest
import torch
from transformers import AutoModel, BertConfig, XLMRobertaConfig

from mlminilm.capture import layer_qkv, truncate_encoder
from mlminilm.losses import minilm_v1_loss
from mlminilm.models import freeze_unused


def tiny_config(kind):
    common = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=64, vocab_size=100)
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
