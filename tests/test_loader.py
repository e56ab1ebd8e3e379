"""The distill data loader: its micro-batches against the in-step reads, resume, workers (fork and spawn), pickling."""

from __future__ import annotations

import multiprocessing
import pickle
from collections import Counter

import numpy as np
import pytest
import torch

from helpers import prepare_data
from mlminilm.corpus.dataset import PreparedData
from mlminilm.corpus.loader import MicroBatch, default_pin_memory, default_workers, make_loader
from mlminilm.corpus.sampling import BatchSampler

BATCH, ACCUM, STEPS = 4, 2, 5


@pytest.fixture(scope="module")
def data(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path_factory) -> PreparedData:
    """The tiny corpus at seq 32: ~14 sequences per language, each language's last one padded."""
    root = prepare_data(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path_factory.mktemp("loader") / "data")
    data = PreparedData.open(root)
    pad = data.tokenizer["pad_token_id"]
    padded = {lang: info["padded_tokens"] for lang, info in data.manifest["languages"].items()}
    assert any(padded.values())
    for lang in data.languages:
        assert int((data.get(lang, data.num_sequences(lang) - 1) == pad).sum()) == padded[lang]
    return data


def sampler_for(data: PreparedData, seed: int = 3) -> BatchSampler:
    return BatchSampler({lang: data.num_sequences(lang) for lang in data.languages}, alpha=0.5, seed=seed)


def loader(data, sampler, *, rank=0, world=1, start_step=0, max_steps=STEPS, workers=0, pad=0, **kw):
    return make_loader(
        data,
        sampler,
        batch_size=BATCH,
        accum=ACCUM,
        rank=rank,
        world=world,
        pad_id=pad,
        start_step=start_step,
        max_steps=max_steps,
        workers=workers,
        pin_memory=False,
        **kw,
    )


def expected(data, sampler, step, micro, rank, world, pad):
    """What distill's in-step code computes for (step, micro), in numpy; tokens also from the manifest's
    per-language padding counts, which `prepare` wrote independently of any mask."""
    lang_idx, seq_idx = sampler.micro_batch(step, micro, BATCH, ACCUM, rank, world)
    pairs = [(sampler.langs[l], int(i)) for l, i in zip(lang_idx, seq_idx)]
    ids = data.batch(pairs)
    mask = ids != pad if pad is not None else np.ones(ids.shape, bool)
    if pad is not None:
        languages = data.manifest["languages"]
        pads = sum(languages[lang]["padded_tokens"] for lang, i in pairs if i == data.num_sequences(lang) - 1)
        assert int(mask.sum()) == ids.size - pads
    return ids, mask, Counter(lang for lang, _ in pairs)


def check(batch: MicroBatch, data, sampler, step, micro, rank, world, pad=0) -> bool:
    """Asserts `batch` is (step, micro)'s in-step batch; returns whether it was padded: masked when any rank's
    slice of the micro-batch holds padding (every rank then runs the same variant of the step)."""
    ids, mask, langs = expected(data, sampler, step, micro, rank, world, pad)
    assert (batch.step, batch.micro) == (step, micro)
    assert batch.input_ids.dtype == torch.long and torch.equal(batch.input_ids, torch.from_numpy(ids).long())
    assert batch.tokens == int(mask.sum()) and batch.langs == dict(langs)
    anywhere = any(not expected(data, sampler, step, micro, r, world, pad)[1].all() for r in range(world))
    assert batch.padded == anywhere
    if batch.padded:
        assert batch.attention_mask.dtype == torch.long
        assert torch.equal(batch.attention_mask, torch.from_numpy(mask).long())
    else:
        assert batch.attention_mask is None
    return batch.padded


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_equal_the_in_step_reads(data, workers):
    sampler = sampler_for(data)
    padded = []
    for rank, world in [(0, 1), (0, 2), (1, 2)]:
        batches = list(loader(data, sampler, rank=rank, world=world, workers=workers))
        assert len(batches) == STEPS * ACCUM
        for i, batch in enumerate(batches):
            padded.append(check(batch, data, sampler, *divmod(i, ACCUM), rank, world))
    assert any(padded) and not all(padded)  # both paths: with a mask and without


def test_every_rank_runs_the_same_variant_of_each_micro_batch(data):
    """Whether a micro-batch goes to the model with an attention mask (padded) or without (packed) is decided
    for all ranks at once: under torch.compile the two are different graphs, and a rank meeting its first
    padded micro-batch alone would compile while every other rank waits for it in the gradient all-reduce."""
    sampler = sampler_for(data)
    world = 2
    ranks = [list(loader(data, sampler, rank=r, world=world)) for r in range(world)]
    own = [
        [not expected(data, sampler, *divmod(i, ACCUM), r, world, 0)[1].all() for i in range(STEPS * ACCUM)]
        for r in range(world)
    ]
    assert own[0] != own[1]  # the slices alone would disagree: the case this is about
    for i, (a, b) in enumerate(zip(*ranks)):
        assert a.padded == b.padded == (own[0][i] or own[1][i]), i
        assert (a.attention_mask is None) == (b.attention_mask is None) == (not a.padded), i


def test_ranks_take_different_slices(data):
    sampler = sampler_for(data)
    first = [next(iter(loader(data, sampler, rank=r, world=2, max_steps=1))) for r in (0, 1)]
    assert not torch.equal(first[0].input_ids, first[1].input_ids)


def test_no_pad_id_means_no_mask(data):
    sampler = sampler_for(data)
    for i, batch in enumerate(loader(data, sampler, pad=None, max_steps=2)):
        check(batch, data, sampler, *divmod(i, ACCUM), 0, 1, pad=None)
        assert not batch.padded and batch.attention_mask is None and batch.tokens == BATCH * data.seq_len


@pytest.mark.parametrize("start", [3, STEPS])
def test_resume_yields_the_tail(data, start):
    sampler = sampler_for(data, seed=11)
    full = list(loader(data, sampler, workers=0))
    tail = list(loader(data, sampler, start_step=start, workers=2))
    assert len(tail) == (STEPS - start) * ACCUM
    for a, b in zip(full[start * ACCUM :], tail):
        assert (a.step, a.micro, a.tokens, a.langs, a.padded) == (b.step, b.micro, b.tokens, b.langs, b.padded)
        assert torch.equal(a.input_ids, b.input_ids)
        assert (a.attention_mask is None) == (b.attention_mask is None)
        assert a.attention_mask is None or torch.equal(a.attention_mask, b.attention_mask)


def test_prepared_data_pickles_without_its_maps(data):
    lang = data.languages[0]
    before = [data.get(lang, i) for i in range(data.num_sequences(lang))]  # opens the maps
    assert data._maps
    blob = pickle.dumps(data)
    shard_bytes = sum(s["bytes"] for info in data.manifest["languages"].values() for s in info["shards"])
    assert b"memmap" not in blob and len(blob) < shard_bytes
    copy = pickle.loads(blob)
    assert copy._maps == {} and data._maps  # the original keeps its maps
    assert all(np.array_equal(a, copy.get(lang, i)) for i, a in enumerate(before))
    assert copy._maps  # mapped again on first use


def test_spawned_worker(data):
    sampler = sampler_for(data)
    spawned = list(loader(data, sampler, max_steps=2, workers=1, multiprocessing_context="spawn"))
    assert len(spawned) == 2 * ACCUM
    for i, batch in enumerate(spawned):
        check(batch, data, sampler, *divmod(i, ACCUM), 0, 1)


def test_close_stops_the_workers(data):
    sampler = sampler_for(data)
    before = set(multiprocessing.active_children())
    with loader(data, sampler, max_steps=50, workers=2) as batches:
        it = iter(batches)
        check(next(it), data, sampler, 0, 0, 0, 1)
        assert len(set(multiprocessing.active_children()) - before) == 2
    assert set(multiprocessing.active_children()) <= before  # stopped now, not when `it` is collected
    del it


def test_default_workers(monkeypatch):
    assert default_workers("cpu", 1) == 0 and not default_pin_memory("cpu")
    assert default_pin_memory("cuda")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert [default_workers("cuda", w) for w in (1, 4, 8, 16)] == [4, 3, 1, 0]
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert default_workers("cuda", 1) == 1


@pytest.mark.gpu
def test_pinned_batches_copy_to_the_device(data):
    sampler = sampler_for(data)
    batches = make_loader(
        data,
        sampler,
        batch_size=BATCH,
        accum=ACCUM,
        rank=0,
        world=1,
        pad_id=0,
        start_step=0,
        max_steps=STEPS,
        workers=2,
        pin_memory=True,
    )
    for i, batch in enumerate(batches):
        assert batch.input_ids.is_pinned()
        on_device = batch.to("cuda", non_blocking=True)
        check(
            MicroBatch(
                **{
                    **vars(on_device),
                    "input_ids": on_device.input_ids.cpu(),
                    "attention_mask": None if batch.attention_mask is None else on_device.attention_mask.cpu(),
                }
            ),
            data,
            sampler,
            *divmod(i, ACCUM),
            0,
            1,
        )
