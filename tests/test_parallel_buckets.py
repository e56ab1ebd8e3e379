"""`distill --parallel` under torch.compile: pair batches are padded to a few fixed lengths, so the compiled step
(`dynamic=False`) is compiled for at most three shapes however long the drawn sentences are, and the padding changes
nothing of the loss."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from conftest import SAMPLE_TEXT

from mlminilm.corpus.parallel import ParallelSampler, pad_length, pad_lengths, read_parallel
from mlminilm.distillation.objective import StudentForward, distill_terms
from mlminilm.distillation.plan import MEAN_POOLING

MAX_LENGTH = 128


def test_pad_lengths_by_hand():
    assert pad_lengths(128) == (32, 64, 128)
    assert pad_lengths(512) == (128, 256, 512)
    assert pad_lengths(100) == (32, 56, 100)  # 25 -> 32, 50 -> 56: multiples of 8, never past max_length
    assert pad_lengths(8) == (8,) and pad_lengths(2) == (2,)
    assert [pad_length(n, 128) for n in (1, 32, 33, 64, 65, 128)] == [32, 32, 64, 64, 128, 128]


def pairs_file(path: Path, n: int = 64) -> Path:
    """Pairs whose lengths range from 1 word to past MAX_LENGTH tokens, so that batches of one pair (two rows)
    padded to their longest row take many lengths."""
    rng = random.Random(0)
    words = {lang: SAMPLE_TEXT[lang].split() for lang in ("en", "de")}
    rows = []
    for i in range(n):
        k = 1 + (i * 7) % 90
        rows.append(" ".join(rng.choices(words["en"], k=k)) + "\t" + " ".join(rng.choices(words["de"], k=k)))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def setup(tiny_sentencepiece_dir, tmp_path_factory):
    from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaModel

    from mlminilm.config import DistillConfig

    tok = AutoTokenizer.from_pretrained(tiny_sentencepiece_dir)
    common = dict(
        vocab_size=len(tok),
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=MAX_LENGTH + 4,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=tok.pad_token_id,
        type_vocab_size=1,
    )
    torch.manual_seed(0)
    teacher = XLMRobertaModel(XLMRobertaConfig(num_hidden_layers=2, **common)).eval()
    student = XLMRobertaModel(XLMRobertaConfig(num_hidden_layers=1, **common))
    where = tmp_path_factory.mktemp("buckets")
    pairs = read_parallel(pairs_file(where / "en-de.tsv"))
    sampler = ParallelSampler(pairs, tok, prefix="query: ", max_length=MAX_LENGTH, seed=0)
    cfg = DistillConfig(
        out=where / "out",
        teacher="unused",
        parallel=where / "en-de.tsv",
        relation_loss_weight=0.0,
        hidden_loss_weight=0.0,
        embedding_loss_weight=0.0,
        parallel_contrastive_weight=0.5,
    )
    return teacher, StudentForward(student), sampler, cfg


def step_loss(terms, teacher, forward, pairs, cfg):
    parts = terms(teacher, -1, forward, None, None, cfg, MEAN_POOLING, {"pairs": pairs})
    loss = sum(parts.values())
    loss.backward()
    return loss.detach()


def test_compiled_parallel_step_compiles_at_most_three_shapes(setup):
    from torch._dynamo.testing import CompileCounterWithBackend

    teacher, forward, sampler, cfg = setup
    batches = [sampler.batch(step, 0, 1, 1, 0, 1) for step in range(16)]
    unpadded = {int(b.both_mask.sum(1).max()) for b in batches}
    assert len({-(-n // 16) for n in unpadded}) >= 5, unpadded  # multiples of 16 alone would give 5+ shapes
    counter = CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    compiled = torch.compile(distill_terms, backend=counter, dynamic=False)
    try:
        for b in batches:
            step_loss(compiled, teacher, forward, b, cfg)
            forward.zero_grad(set_to_none=True)
    finally:
        torch._dynamo.reset()
    shapes = {b.both_ids.shape[1] for b in batches}
    assert counter.frame_count <= 3, (counter.frame_count, shapes)  # the first compilation and at most 2 recompiles
    assert shapes <= set(pad_lengths(MAX_LENGTH)) and len(shapes) >= 2, shapes


def test_the_bucket_changes_nothing_of_the_loss(setup):
    """The same pairs padded to their longest row and to each longer bucket: the same loss and gradients (fp32,
    1e-5 relative: the padded keys' softmax weights are exp(-huge) = 0, so only summation order differs)."""
    teacher, forward, sampler, cfg = setup
    step = next(i for i in range(100) if int(sampler.batch(i, 0, 2, 1, 0, 1).both_mask.sum(1).max()) < 30)
    longest = int(sampler.batch(step, 0, 2, 1, 0, 1).both_mask.sum(1).max())
    results = []
    for length in sorted({longest, *(n for n in pad_lengths(MAX_LENGTH) if n >= longest)}):
        b = sampler.batch(step, 0, 2, 1, 0, 1)
        for name in ("source_ids", "source_mask", "both_ids", "both_mask"):
            x = getattr(b, name)
            real = x[:, :longest]
            pad = sampler.tokenizer.pad_token_id if name.endswith("ids") else 0
            setattr(b, name, torch.nn.functional.pad(real, (0, length - longest), value=pad))
        forward.zero_grad(set_to_none=True)
        loss = step_loss(distill_terms, teacher, forward, b, cfg)
        results.append((length, loss, [p.grad.clone() for p in forward.parameters() if p.grad is not None]))
    assert len(results) == 4  # the longest row, 32, 64 and 128
    (_, loss0, grads0), *rest = results
    for length, loss, grads in rest:
        torch.testing.assert_close(loss, loss0, rtol=1e-5, atol=1e-7, msg=f"padded to {length}")
        for g, g0 in zip(grads, grads0):
            torch.testing.assert_close(g, g0, rtol=1e-4, atol=1e-6, msg=f"padded to {length}")


def test_every_process_pads_a_micro_batch_to_the_same_bucket(setup):
    """With 4 processes of one pair each, the rows differ in length from 1 word to past MAX_LENGTH: every process
    pads each micro-batch to the bucket of the longest row any of them draws (before: its own longest row's, so
    the ranks ran different shapes and a compiled step recompiled on one rank while the others waited)."""
    _, _, sampler, _ = setup
    world, differed = 4, 0
    for step in range(12):
        for micro in range(2):
            batches = [sampler.batch(step, micro, 1, 2, rank, world) for rank in range(world)]
            shapes = {b.both_ids.shape[1] for b in batches}
            assert len(shapes) == 1, (step, micro, shapes)
            own = {pad_length(int(b.both_mask.sum(1).max()), MAX_LENGTH) for b in batches}
            differed += len(own) > 1  # the ranks' own buckets would have differed here
            assert shapes.pop() == max(own)
            assert all(b.source_ids.shape[1] == b.both_ids.shape[1] for b in batches)
    assert differed, "no micro-batch where the ranks' own buckets differ: the case is not shown"
    one = sampler.batch(3, 0, 4, 2, 0, 1)  # one process: its own longest row, as before
    assert one.both_ids.shape[1] == pad_length(int(one.both_mask.sum(1).max()), MAX_LENGTH)
