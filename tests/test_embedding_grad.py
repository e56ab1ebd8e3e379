"""mlminilm.models.embedding_grad: the word-embedding gradient written into the previous step's tensor, bit for bit."""

import copy

import pytest
import torch
from transformers import AutoModel, XLMRobertaConfig

from mlminilm.models.embedding_grad import ReusedGradEmbedding, keep_embedding_gradient, plain_embedding

VOCAB = 3000


def tiny(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = XLMRobertaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=80,
        pad_token_id=1,
    )
    return AutoModel.from_config(config, attn_implementation="sdpa").train()


def batch(step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(3, VOCAB, (4, 24), generator=g)
    ids[:, :4] = 7  # the same row looked up several times
    ids[0, -5:] = 1  # padding: its row gets no gradient
    return ids


def train(model, steps: int, accumulate: int = 1):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
    pointers = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        for micro in range(accumulate):
            torch.manual_seed(100 * step + micro)  # the same dropout noise for both models
            model(input_ids=batch(10 * step + micro)).last_hidden_state.square().mean().backward()
        pointers.append(model.get_input_embeddings().weight.grad.data_ptr())
        optimizer.step()
    return pointers


@pytest.mark.parametrize("accumulate", [1, 2])
def test_same_weights_bit_for_bit_and_one_gradient_tensor(accumulate):
    plain, reused = tiny(), tiny()
    assert keep_embedding_gradient(reused)
    assert isinstance(reused.get_input_embeddings(), ReusedGradEmbedding)
    assert list(plain.state_dict()) == list(reused.state_dict())
    train(plain, 4, accumulate)
    pointers = train(reused, 4, accumulate)
    for a, b in zip(plain.parameters(), reused.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(plain.get_input_embeddings().weight.grad, reused.get_input_embeddings().weight.grad)
    assert len(set(pointers)) == 1  # every step's gradient lands in the same tensor


def test_a_deep_copy_keeps_reusing_and_plain_embedding_undoes_it():
    model = tiny()
    keep_embedding_gradient(model)
    clone = copy.deepcopy(model)  # deepcopy drops tensor hooks: the module registers its own again
    plain = tiny()
    pointers = train(clone, 3)
    train(plain, 3)
    assert len(set(pointers)) == 1
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), clone.parameters()))
    plain_embedding(clone)
    assert type(clone.get_input_embeddings()) is torch.nn.Embedding


def test_steps_aside_without_gradients_and_when_frozen():
    model = tiny().eval()
    keep_embedding_gradient(model)
    ids = batch(0)
    with torch.no_grad():
        out = model(input_ids=ids).last_hidden_state
    model.get_input_embeddings().weight.requires_grad_(False)
    assert torch.equal(out, model(input_ids=ids).last_hidden_state)
    assert model.get_input_embeddings().weight.grad is None


def test_build_student_keeps_the_embedding_gradient():
    from mlminilm.config import StudentShape
    from mlminilm.models.student import build_student, student_config

    config = XLMRobertaConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128
    )
    student = build_student(student_config(config, StudentShape(2, 32, 4, 64)), seed=0)
    assert isinstance(student.get_input_embeddings(), ReusedGradEmbedding)
