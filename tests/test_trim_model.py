"""trim, what a trimmed model keeps: the same tokenisation renumbered, the same hidden states, a classifier's head
and logits, a masked-LM output layer, the best split over kept pieces for dropped ones; no invented weights; prepare
and distill accept it. The tiny trim_teachers: tests/conftest.py (trim_teachers)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from helpers import TRIM_LANGS, covered_texts, prepare_data, trim

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def renumbered(tokenizer, texts, old_ids):
    return [[old_ids[i] for i in ids] for ids in tokenizer(texts)["input_ids"]]


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_trim_keeps_tokenisation_and_hidden_states(kind, trim_teachers, tiny_corpus_dir, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    teacher = trim_teachers[kind]
    result = trim(teacher, tmp_path / "trimmed", corpus=tiny_corpus_dir)
    out = result.out
    record = json.loads((out / "trim.json").read_text())
    old_ids = record["old_ids"]
    before, after = AutoTokenizer.from_pretrained(teacher), AutoTokenizer.from_pretrained(out)
    model_before, model_after = AutoModel.from_pretrained(teacher).eval(), AutoModel.from_pretrained(out).eval()

    assert len(after) == len(old_ids) == model_after.config.vocab_size == result.vocab_after < len(before)
    assert old_ids == sorted(old_ids) and set(before.all_special_ids) <= set(old_ids)
    for special in before.all_special_tokens:  # same strings; the small ids stay the same
        assert old_ids[after.convert_tokens_to_ids(special)] == before.convert_tokens_to_ids(special)
    assert (after.pad_token_id, after.unk_token_id) == (before.pad_token_id, before.unk_token_id)
    assert model_after.config.pad_token_id == after.pad_token_id
    assert record["coverage"] == 1.0 and result.parameters_after < result.parameters_before
    assert set(record["counts"]["languages"]) == set(TRIM_LANGS)

    texts = covered_texts()
    assert renumbered(after, texts, old_ids) == before(texts)["input_ids"]
    assert [after.convert_ids_to_tokens(i) for i in range(len(after))] == before.convert_ids_to_tokens(old_ids)
    if kind == "wordpiece":
        assert (out / "vocab.txt").read_text().splitlines() == before.convert_ids_to_tokens(old_ids)

    batch_before = before(texts[:8], padding=True, return_tensors="pt")
    batch_after = after(texts[:8], padding=True, return_tensors="pt")
    assert torch.equal(torch.tensor(old_ids)[batch_after["input_ids"]], batch_before["input_ids"])
    with torch.no_grad():
        hidden_before = model_before(**batch_before).last_hidden_state
        hidden_after = model_after(**batch_after).last_hidden_state
    assert torch.equal(hidden_before, hidden_after)


def test_counts_from_prepared_data_choose_the_same_ids(trim_teachers, tiny_corpus_dir, tmp_path):
    teacher = trim_teachers["unigram"]
    data = prepare_data(teacher, tiny_corpus_dir, tmp_path / "data")
    from_data = trim(teacher, tmp_path / "a", data=data)
    from_corpus = trim(teacher, tmp_path / "b", corpus=tiny_corpus_dir)
    assert from_data.record["old_ids"] == from_corpus.record["old_ids"]
    assert from_data.record["counts"]["source"] == "data"
    assert from_data.record["counts"]["corpus_tokens"] == from_corpus.record["counts"]["corpus_tokens"]


def test_prepare_and_distill_accept_a_trimmed_teacher(trim_teachers, tiny_corpus_dir, tmp_path):
    from mlminilm import distill
    from mlminilm.config import DistillConfig

    trimmed = trim(trim_teachers["unigram"], tmp_path / "trimmed", corpus=tiny_corpus_dir).out
    data = prepare_data(trimmed, tiny_corpus_dir, tmp_path / "data")
    result = distill.run(
        DistillConfig(
            teacher=str(trimmed),
            data=data,
            out=tmp_path / "run",
            layers=1,
            hidden=32,
            heads=4,
            intermediate=64,
            init="teacher",
            max_steps=2,
            batch_size=2,
            save_every=2,
            warmup=0.0,
        )
    )
    assert (
        json.loads((result.student / "config.json").read_text())["vocab_size"]
        == json.loads((trimmed / "config.json").read_text())["vocab_size"]
    )


def test_coverage_and_max_vocab_keep_the_most_frequent(trim_teachers, tiny_corpus_dir, tmp_path):
    """The pooled rule alone (no single characters kept beside it)."""
    pooled = dict(corpus=tiny_corpus_dir, script_chars=False)
    full = trim(trim_teachers["unigram"], tmp_path / "full", **pooled).record
    part = trim(trim_teachers["unigram"], tmp_path / "part", coverage=0.9, **pooled).record
    small = trim(trim_teachers["unigram"], tmp_path / "small", max_vocab=20, **pooled).record
    assert 0.9 <= part["coverage"] < 1.0 and len(part["old_ids"]) < len(full["old_ids"])
    assert len(small["old_ids"]) == 20 and set(small["special_ids"]) <= set(small["old_ids"])
    counts = dict(zip(full["old_ids"], full["kept_counts"]))
    dropped = set(full["old_ids"]) - set(part["old_ids"])
    kept = set(part["old_ids"]) - set(part["special_ids"])
    assert max(counts[i] for i in dropped) <= min(counts[i] for i in kept)


def test_fine_tuned_classifier_keeps_its_head_and_logits(tiny_sentencepiece_dir, tiny_corpus_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, XLMRobertaConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_sentencepiece_dir)
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=160,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=0,
        eos_token_id=2,
        type_vocab_size=1,
        num_labels=3,
        id2label={0: "entailment", 1: "neutral", 2: "contradiction"},
        label2id={"entailment": 0, "neutral": 1, "contradiction": 2},
    )
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config).eval()
    source = tmp_path / "ft"
    model.save_pretrained(source)
    tokenizer.save_pretrained(source)
    (source / "run.json").write_text(json.dumps({"max_seq_len": 64}))

    result = trim(source, tmp_path / "trimmed", corpus=tiny_corpus_dir)
    trimmed = AutoModelForSequenceClassification.from_pretrained(result.out).eval()
    after = AutoTokenizer.from_pretrained(result.out)
    assert trimmed.config.architectures == ["XLMRobertaForSequenceClassification"]
    assert trimmed.config.id2label == model.config.id2label
    assert json.loads((result.out / "run.json").read_text()) == {"max_seq_len": 64}
    premises, hypotheses = covered_texts()[:6], covered_texts()[6:12]
    with torch.no_grad():
        logits = model(**tokenizer(premises, hypotheses, padding=True, return_tensors="pt")).logits
        logits_after = trimmed(**after(premises, hypotheses, padding=True, return_tensors="pt")).logits
    assert torch.equal(logits, logits_after)
    from huggingface_hub import ModelCard

    card = ModelCard.load(result.out / "README.md").data
    assert card.pipeline_tag == "text-classification" and card.base_model == str(source)


@pytest.mark.parametrize("tied", [True, False])
def test_masked_lm_output_layer_is_subset(tied, tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_wordpiece_dir)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=160,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    model = BertForMaskedLM(config).eval()
    with torch.no_grad():  # a bias that is not zero, so a wrong subset would show
        model.get_output_embeddings().bias.normal_()
    source = tmp_path / "mlm"
    model.save_pretrained(source)
    tokenizer.save_pretrained(source)

    result = trim(source, tmp_path / "trimmed", corpus=tiny_corpus_dir)
    old_ids = result.record["old_ids"]
    trimmed = BertForMaskedLM.from_pretrained(result.out).eval()
    after = AutoTokenizer.from_pretrained(result.out)
    assert (trimmed.get_output_embeddings().weight is trimmed.get_input_embeddings().weight) == tied
    texts = covered_texts()[:4]
    with torch.no_grad():
        logits = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
        logits_after = trimmed(**after(texts, padding=True, return_tensors="pt")).logits
    assert torch.equal(logits[..., old_ids], logits_after)


def test_dropped_pieces_fall_back_to_the_best_split_over_kept_pieces(tmp_path):
    """Checked by hand: with '▁abc' dropped, 'abc' splits as '▁a' + 'bc' (-3.0 - 0.5 = -3.5), which beats the
    longest-prefix split '▁ab' + 'c' (-2.0 - 2.0 = -4.0)."""
    from transformers import AutoTokenizer, XLMRobertaTokenizer

    from mlminilm.vocab.counts import select_ids
    from mlminilm.vocab.tokenizer import required_ids, tokenizer_document, trim_document

    scores = {"▁abc": -1.0, "▁ab": -2.0, "c": -2.0, "▁a": -3.0, "bc": -0.5, "▁": -3.0, "a": -6.0, "b": -6.0}
    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *scores.items(), ("<mask>", 0.0)]
    XLMRobertaTokenizer(vocab=pieces).save_pretrained(tmp_path / "full")
    full = AutoTokenizer.from_pretrained(tmp_path / "full")
    assert full.tokenize("abc") == ["▁abc"]
    counts = [0] * len(full)
    for piece in ("▁ab", "c", "▁a", "bc", "▁"):  # everything but ▁abc, a and b occurs
        counts[full.convert_tokens_to_ids(piece)] = 5
    doc = tokenizer_document(full, "full")
    selection = select_ids(counts, required_ids(full, doc))
    trimmed_doc = trim_document(doc, selection.old_ids)
    kept = [piece for piece, _ in trimmed_doc["model"]["vocab"]]
    assert kept == ["<s>", "<pad>", "</s>", "<unk>", "▁ab", "c", "▁a", "bc", "▁", "<mask>"]

    from tokenizers import Tokenizer

    trimmed = Tokenizer.from_str(json.dumps(trimmed_doc))
    assert trimmed.encode("abc", add_special_tokens=False).tokens == ["▁a", "bc"]
    # The same by brute force: the best-scoring split of '▁abc' into kept pieces.
    word, vocab = "▁abc", dict(trimmed_doc["model"]["vocab"])
    splits = []
    for cuts in itertools.chain.from_iterable(itertools.combinations(range(1, len(word)), k) for k in range(len(word))):
        parts = [word[i:j] for i, j in zip((0, *cuts), (*cuts, len(word)))]
        if all(p in vocab for p in parts):
            splits.append((sum(vocab[p] for p in parts), parts))
    assert max(splits)[1] == ["▁a", "bc"]


def test_weights_the_model_files_lack_are_not_invented(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    """An encoder saved without a pooler (as the converted e5 teacher is) is trimmed without one."""
    from safetensors import safe_open
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(tiny_wordpiece_dir)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=160,
    )
    BertModel(config, add_pooling_layer=False).save_pretrained(tmp_path / "nopool")
    tokenizer.save_pretrained(tmp_path / "nopool")
    result = trim(tmp_path / "nopool", tmp_path / "trimmed", corpus=tiny_corpus_dir)
    with safe_open(result.out / "model.safetensors", "pt") as f:
        names = list(f.keys())
    assert names and not any("pooler" in name for name in names)
    embeddings = len(tokenizer) * 32
    assert result.parameters_before - result.parameters_after == embeddings - result.vocab_after * 32


@pytest.mark.slow
@pytest.mark.realdata
def test_real_xlmr_tokenizer_keeps_the_counted_text(shared_data):
    """XLM-R's own tokenizer (its precompiled normaliser, 250,002 pieces) trimmed to what a UD sample uses."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from mlminilm.vocab.counts import select_ids
    from mlminilm.vocab.tokenizer import required_ids, tokenizer_document, trim_document

    tokenizer = AutoTokenizer.from_pretrained(shared_data / "tokenizers" / "xlm-roberta")
    lines = [
        line
        for lang in ("de", "zh", "hi")
        for line in (shared_data / "corpus" / "ud" / f"{lang}.txt").read_text(encoding="utf-8").splitlines()[:300]
    ]
    ids = tokenizer(lines)["input_ids"]
    counts = np.bincount(np.concatenate([np.asarray(i) for i in ids]), minlength=len(tokenizer))
    doc = tokenizer_document(tokenizer, "xlm-roberta")
    selection = select_ids(counts, required_ids(tokenizer, doc))
    assert len(selection.old_ids) < len(tokenizer) // 10
    trimmed = Tokenizer.from_str(json.dumps(trim_document(doc, selection.old_ids)))
    old_ids = selection.old_ids.tolist()
    assert [[old_ids[i] for i in e.ids] for e in trimmed.encode_batch(lines)] == ids
