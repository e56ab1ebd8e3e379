"""trim: kept vocabulary, same tokenisation renumbered, same outputs, fallback segmentation, CLI errors."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import sample_lines

from helpers import assert_one_line_error, cli, prepare_data, save_tiny_teacher

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LANGS = ("en", "de", "ar", "zh")  # the tiny corpus's languages; fr, ru, el, hi stay out of the counts


@pytest.fixture(scope="module")
def teachers(tiny_wordpiece_dir, tiny_sentencepiece_dir, tmp_path_factory):
    """Tiny BERT (WordPiece) and XLM-R (SentencePiece Unigram) encoders."""
    root = tmp_path_factory.mktemp("trim-teachers")
    return {
        "wordpiece": save_tiny_teacher(tiny_wordpiece_dir, root / "bert", layers=2, hidden=32, intermediate=64),
        "unigram": save_tiny_teacher(
            tiny_sentencepiece_dir, root / "xlmr", kind="xlmr", layers=2, hidden=32, intermediate=64
        ),
    }


def trim(model, out, **kw):
    from mlminilm import vocab
    from mlminilm.config import TrimConfig

    return vocab.run(TrimConfig(model=str(model), out=out, workers=1, **kw))


def renumbered(tokenizer, texts, old_ids):
    return [[old_ids[i] for i in ids] for ids in tokenizer(texts)["input_ids"]]


def covered_texts():
    """Lines made of the corpus's words in other orders: every word was counted, so every piece is kept."""
    return [line for lang in LANGS for line in sample_lines(lang, 15, seed=7)]


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_trim_keeps_tokenisation_and_hidden_states(kind, teachers, tiny_corpus_dir, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    teacher = teachers[kind]
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
    assert set(record["counts"]["languages"]) == set(LANGS)

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


def test_counts_from_prepared_data_choose_the_same_ids(teachers, tiny_corpus_dir, tmp_path):
    teacher = teachers["unigram"]
    data = prepare_data(teacher, tiny_corpus_dir, tmp_path / "data")
    from_data = trim(teacher, tmp_path / "a", data=data)
    from_corpus = trim(teacher, tmp_path / "b", corpus=tiny_corpus_dir)
    assert from_data.record["old_ids"] == from_corpus.record["old_ids"]
    assert from_data.record["counts"]["source"] == "data"
    assert from_data.record["counts"]["corpus_tokens"] == from_corpus.record["counts"]["corpus_tokens"]


def test_prepare_and_distill_accept_a_trimmed_teacher(teachers, tiny_corpus_dir, tmp_path):
    from mlminilm import distill
    from mlminilm.config import DistillConfig

    trimmed = trim(teachers["unigram"], tmp_path / "trimmed", corpus=tiny_corpus_dir).out
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


def test_coverage_and_max_vocab_keep_the_most_frequent(teachers, tiny_corpus_dir, tmp_path):
    """The pooled rule alone (no single characters kept beside it)."""
    pooled = dict(corpus=tiny_corpus_dir, script_chars=False)
    full = trim(teachers["unigram"], tmp_path / "full", **pooled).record
    part = trim(teachers["unigram"], tmp_path / "part", coverage=0.9, **pooled).record
    small = trim(teachers["unigram"], tmp_path / "small", max_vocab=20, **pooled).record
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


def test_cli_trims_and_reports_json(teachers, tiny_corpus_dir, tmp_path):
    out = tmp_path / "trimmed"
    proc = cli(
        "trim",
        "--model",
        str(teachers["wordpiece"]),
        "--corpus",
        str(tiny_corpus_dir),
        "--langs",
        "en,de",
        "--min-count",
        "2",
        "--workers",
        "1",
        "--out",
        str(out),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["vocab_size"]["after"] < doc["vocab_size"]["before"] and "old_ids" not in doc
    assert set(doc["counts"]["languages"]) == {"en", "de"} and doc["options"]["min_count"] == 2
    assert len(json.loads((out / "trim.json").read_text())["old_ids"]) == doc["vocab_size"]["after"]
    assert not list(tmp_path.glob(".tmp-*"))


def _errors(teachers, tiny_corpus_dir, tmp_path):
    unigram, wordpiece = str(teachers["unigram"]), str(teachers["wordpiece"])
    wp_data = prepare_data(teachers["wordpiece"], tiny_corpus_dir, tmp_path / "wp-data")
    no_counts = prepare_data(teachers["unigram"], tiny_corpus_dir, tmp_path / "no-counts")
    (no_counts / "token_counts.npy").unlink()
    corpus = ("--corpus", str(tiny_corpus_dir), "--workers", "1")
    return [
        (("--model", unigram, "--data", str(no_counts)), "token counts"),
        (("--model", unigram, "--data", str(wp_data)), "was prepared with tokenizer"),
        (("--model", wordpiece, *corpus, "--min-count", "100000"), "nothing left to keep"),
        (("--model", wordpiece, *corpus, "--max-vocab", "3"), "--max-vocab 3 leaves no room"),
        (("--model", wordpiece), "give exactly one of --data"),
    ]


def test_cli_errors_are_one_line_and_leave_no_output(teachers, tiny_corpus_dir, tmp_path):
    for i, (args, needle) in enumerate(_errors(teachers, tiny_corpus_dir, tmp_path)):
        out = tmp_path / f"out-{i}"
        proc = cli("trim", *args, "--out", str(out))
        assert_one_line_error(proc, needle)
        assert not out.exists(), args
    assert not list(tmp_path.glob(".tmp-*"))


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


@pytest.mark.realdata
def test_real_xlmr_tokenizer_keeps_the_counted_text(shared_data):
    """XLM-R's own tokenizer (its precompiled normaliser, 250,002 pieces) trimmed to what a UD sample uses."""
    import numpy as np
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


# --- Per-language rules, single characters, the fill, the held-out check (issue 17, part 2) ------------------------


def _table():
    """A hand-made count table over ids 0-9 (0 is the special token): en is large, sw small."""
    en = [100, 50, 40, 30, 1, 0, 0, 0, 0, 0]
    sw = [10, 0, 0, 1, 0, 3, 2, 2, 0, 0]
    return {"en": en, "sw": sw}, [a + b for a, b in zip(en, sw)]


def test_per_lang_top_k_keeps_each_languages_most_frequent_ids():
    """Worked by hand. Pooled counts (id: count) 1: 50, 2: 40, 3: 31, 5: 3, 6: 2, 7: 2, 4: 1; 129 other tokens."""
    from mlminilm.vocab.counts import select_ids

    per_language, pooled = _table()
    top2 = dict(per_language=per_language, per_lang_top_k=2, coverage=None)
    # en: 1, 2 (id 0 is special: never one of the k); sw: 5, then 6 before 7 (a tie: lower id first).
    chosen = select_ids(pooled, {0}, **top2)
    assert chosen.old_ids.tolist() == [0, 1, 2, 5, 6]
    assert chosen.per_lang_top_k == {"en": 2, "sw": 2} and chosen.added["per_lang_top_k"] == 4
    # The pooled rule alone, with as much room, keeps only en's ids: sw loses every one of its own.
    assert select_ids(pooled, {0}, max_vocab=5).old_ids.tolist() == [0, 1, 2, 3, 5]
    assert select_ids(pooled, {0}, max_vocab=3).old_ids.tolist() == [0, 1, 2]
    # --min-count in each language's own counts: sw's 6 and 7 occur twice, under 3.
    assert select_ids(pooled, {0}, min_count=3, **top2).old_ids.tolist() == [0, 1, 2, 5]


def test_per_lang_top_k_combines_with_the_pooled_rules():
    """Worked by hand: the top-2 ids cover 50 + 40 + 3 + 2 = 95 of 129 tokens."""
    from mlminilm.errors import ConfigError
    from mlminilm.vocab.counts import select_ids

    per_language, pooled = _table()
    top2 = dict(per_language=per_language, per_lang_top_k=2)
    # --coverage 0.5 needs 65 tokens: already covered, the pooled rule adds nothing.
    assert select_ids(pooled, {0}, coverage=0.5, **top2).old_ids.tolist() == [0, 1, 2, 5, 6]
    # --coverage 0.9 needs ceil(116.1) = 117, 22 more: id 3 (31 tokens) is the pooled rule's first id.
    both = select_ids(pooled, {0}, coverage=0.9, **top2)
    assert both.old_ids.tolist() == [0, 1, 2, 3, 5, 6] and both.added["pooled"] == 1
    assert both.covered_tokens == 126 and both.corpus_tokens == 129
    # --max-vocab 7 leaves the pooled rule 2 of its ids (3, then 7 before 4: 2 > 1 occurrences).
    assert select_ids(pooled, {0}, coverage=1.0, max_vocab=7, **top2).old_ids.tolist() == [0, 1, 2, 3, 5, 6, 7]
    with pytest.raises(ConfigError, match="--max-vocab 4 leaves no room.*number 5"):
        select_ids(pooled, {0}, coverage=1.0, max_vocab=4, **top2)


def test_fill_takes_each_languages_next_ids_after_the_count_rules():
    """Each language's list is its counted ids by count, then its ranking of ids it never showed."""
    from mlminilm.vocab.counts import select_ids

    per_language, pooled = _table()
    rankings = {"en": [8, 9, 7], "sw": [9, 1, 8]}
    # Top 1 (en: 1; sw: 5), then 2 more each: en 2, 3; sw 6, 7.
    chosen = select_ids(
        pooled, {0}, per_language=per_language, per_lang_top_k=1, coverage=None, fill=2, fill_rankings=rankings
    )
    assert chosen.old_ids.tolist() == [0, 1, 2, 3, 5, 6, 7] and chosen.added["script_fill"] == 4
    # Every counted id kept (the default pooled rule): en's next are 8, 9; sw's 9 (kept by en), then 8.
    chosen = select_ids(pooled, {0}, per_language=per_language, fill=2, fill_rankings=rankings)
    assert chosen.old_ids.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] and chosen.added["script_fill"] == 2


def test_fill_ranks_pieces_that_look_like_the_language_first():
    from mlminilm.vocab import scripts

    pieces = ["▁schön", "▁qxzv", "▁sch", "ön", "▁schon"]
    counts = np.array([0, 0, 40, 40, 10])
    candidates = np.array([0, 1])
    scores = np.zeros(5)  # the same model score: only the likeness decides
    order = scripts.fill_ranking(counts, pieces, scores, candidates, scripts.script_log_probs(pieces, candidates))
    assert order.tolist() == [0, 1]
    scores[1] = 30.0  # a far more common piece wins anyway
    order = scripts.fill_ranking(counts, pieces, scores, candidates, scripts.script_log_probs(pieces, candidates))
    assert order.tolist() == [1, 0]


def _hand_unigram(path: Path):
    """The hand-built Unigram vocabulary of test_dropped_pieces_fall_back_to_the_best_split_over_kept_pieces."""
    from transformers import AutoTokenizer, XLMRobertaTokenizer

    scores = {"▁abc": -1.0, "▁ab": -2.0, "c": -2.0, "▁a": -3.0, "bc": -0.5, "▁": -3.0, "a": -6.0, "b": -6.0}
    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *scores.items(), ("<mask>", 0.0)]
    XLMRobertaTokenizer(vocab=pieces).save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def test_held_out_sentences_compared_piece_by_piece(tmp_path):
    """Checked by hand with the scores above, '▁abc' dropped: 'abc' was ['▁abc'] and becomes ['▁a', 'bc']; 'ab c'
    stays ['▁ab', '▁', 'c'] and 'a bc' stays ['▁a', '▁', 'bc'] (all their pieces are kept)."""
    from mlminilm.vocab import identity
    from mlminilm.vocab.tokenizer import tokenizer_document, trim_document

    full = _hand_unigram(tmp_path / "full")
    assert full.tokenize("ab c") == ["▁ab", "▁", "c"] and full.tokenize("a bc") == ["▁a", "▁", "bc"]
    doc = tokenizer_document(full, "full")
    dropped = full.convert_tokens_to_ids("▁abc")
    old_ids = [i for i in range(len(full)) if i != dropped]
    trimmed = trim_document(doc, old_ids)
    check = tmp_path / "check"
    check.mkdir()
    (check / "en.txt").write_text("abc\nab c\n\na bc\nb\n", encoding="utf-8")  # the empty line is skipped
    (check / "notes.md").write_text("not a language file")
    files = identity.check_files(check)
    assert list(files) == ["en"]
    result = identity.held_out(files, full, trimmed, old_ids, counted=("en",))["en"]
    assert (result["sentences"], result["equal"], result["tokens"]) == (4, 3, 9)  # 'b' is ['▁', 'b'] both times
    assert result["equal_share"] == pytest.approx(3 / 4) and result["counted"]
    assert result["example"] == {"text": "abc", "original": ["▁abc"], "trimmed": ["▁a", "bc"]}
    # '▁ab', 'a' and 'b' dropped too: only 'a bc' is unchanged. 'b' becomes ['▁', <unk>], which the tokenizer
    # reports with the text 'b': compared by id, it differs.
    old_ids = [i for i in old_ids if full.convert_ids_to_tokens(i) not in ("▁ab", "a", "b")]
    from tokenizers import Tokenizer

    fewer = trim_document(doc, old_ids)
    assert Tokenizer.from_str(json.dumps(fewer)).encode("b", add_special_tokens=False).tokens == ["▁", "b"]
    result = identity.held_out(files, full, fewer, old_ids)["en"]
    assert result["equal"] == 1 and not result["counted"]


def test_corpus_shares_count_kept_tokens_per_language():
    """Worked by hand: en's other tokens are 50 + 40 + 30 + 1 = 121, of which ids 1 and 3 hold 80; sw's 1 + 3 + 2
    + 2 = 8, of which ids 3 and 5 hold 4."""
    from mlminilm.vocab.identity import corpus_shares

    per_language, _ = _table()
    shares = corpus_shares({k: np.array(v) for k, v in per_language.items()}, np.array([0, 1, 3, 5]), np.array([0]))
    assert shares["en"] == {"tokens": 121, "kept_tokens": 80, "kept_share": 80 / 121}
    assert shares["sw"] == {"tokens": 8, "kept_tokens": 4, "kept_share": 0.5}


def _script(ch: str) -> str:
    """The script of a character by its Unicode name (independent of the code under test)."""
    import unicodedata

    if unicodedata.category(ch)[0] not in "LM":  # letters and marks belong to a script
        return "Common"
    name = unicodedata.name(ch, "")
    return "Han" if name.startswith("CJK") else name.split(" ")[0].capitalize()


def test_script_chars_keep_every_single_character_of_the_languages_scripts(teachers, tiny_corpus_dir, tmp_path):
    """The tiny corpus is en, de, ar, zh: Latin, Arabic and Han single characters stay, Cyrillic, Greek and
    Devanagari ones (ru, el, hi: never counted) go, unless counted."""
    from transformers import AutoTokenizer

    teacher = teachers["unigram"]
    before = AutoTokenizer.from_pretrained(teacher)
    with_chars = trim(teacher, tmp_path / "chars", corpus=tiny_corpus_dir).record
    without = trim(teacher, tmp_path / "plain", corpus=tiny_corpus_dir, script_chars=False).record
    singles = {
        i: p.removeprefix("▁")
        for i, p in enumerate(before.convert_ids_to_tokens(range(len(before))))
        if len(p.removeprefix("▁")) == 1 and i not in with_chars["special_ids"]
    }
    wanted = {i for i, ch in singles.items() if _script(ch) in ("Latin", "Arabic", "Han", "Common")}
    other = {i for i, ch in singles.items() if _script(ch) in ("Cyrillic", "Greek", "Devanagari")}
    assert wanted and other
    kept = set(with_chars["old_ids"])
    assert wanted <= kept, {singles[i] for i in wanted - kept}
    assert not (other & kept), {singles[i] for i in other & kept}
    assert not wanted <= set(without["old_ids"])  # some were never counted: the option is what keeps them
    assert with_chars["rules"]["added"]["script_chars"] == len(wanted - set(without["old_ids"]))
    assert {with_chars["languages"][lang]["scripts"][0] for lang in LANGS} == {"Latin", "Arabic", "Han"}
    # A word of those characters the corpus never had: no <unk> with the option, some without it.
    word = "".join(singles[i] for i in sorted(wanted - set(without["old_ids"]))[:6] if singles[i].isalpha())
    assert word
    assert "<unk>" not in AutoTokenizer.from_pretrained(tmp_path / "chars").tokenize(word)


def test_prompt_pieces_are_kept(teachers, tiny_corpus_dir, tmp_path):
    """A sentence-transformers prompt the corpus never shows (Russian, with an en/de corpus) keeps its pieces."""
    import shutil

    from transformers import AutoTokenizer

    model = tmp_path / "st"
    shutil.copytree(teachers["unigram"], model)
    prompt = "Кошка спит "
    (model / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": prompt}}))
    result = trim(model, tmp_path / "trimmed", corpus=tiny_corpus_dir, langs=("en", "de"), script_chars=False)
    before, after = AutoTokenizer.from_pretrained(model), AutoTokenizer.from_pretrained(result.out)
    pieces = before.tokenize(prompt)
    never_counted = set(pieces) - set(before.tokenize(" ".join(covered_texts())))
    assert before.unk_token not in pieces and never_counted
    assert result.record["prompt_pieces"] == sorted(set(pieces), key=before.convert_tokens_to_ids)
    assert after.tokenize(prompt + "The cat") == before.tokenize(prompt + "The cat")
    assert result.record["rules"]["added"]["prompts"] >= len(never_counted)


def test_trim_reports_per_language_figures(teachers, tiny_corpus_dir, tmp_path):
    """--per-lang-top-k and --check through `run`, counts from a prepare output (its shards) as from the corpus."""
    teacher = teachers["unigram"]
    check = tmp_path / "check"
    check.mkdir()
    counted = [line for line in covered_texts() if line]  # words the corpus has: every piece counted
    (check / "en.txt").write_text("\n".join(counted[:15]) + "\n", encoding="utf-8")
    (check / "ru.txt").write_text("\n".join(sample_lines("ru", 5)) + "\n", encoding="utf-8")
    data = prepare_data(teacher, tiny_corpus_dir, tmp_path / "data")
    options = dict(per_lang_top_k=5, script_chars=False, check=check)
    from_data = trim(teacher, tmp_path / "a", data=data, **options).record
    from_corpus = trim(teacher, tmp_path / "b", corpus=tiny_corpus_dir, **options).record
    assert from_data["old_ids"] == from_corpus["old_ids"]
    languages = from_corpus["languages"]
    assert set(languages) == {*LANGS, "ru"}
    assert {lang: languages[lang]["per_lang_top_k"] for lang in LANGS} == dict.fromkeys(LANGS, 5)
    for lang in LANGS:  # the top 5 cover part of each language's tokens
        assert 0 < languages[lang]["corpus"]["kept_share"] < 1
        assert languages[lang]["corpus"] == from_data["languages"][lang]["corpus"]
    assert languages["en"]["held_out"]["counted"] and not languages["ru"]["held_out"]["counted"]
    assert languages["ru"]["held_out"]["equal"] == 0  # no Cyrillic piece is kept
    full = trim(teacher, tmp_path / "c", corpus=tiny_corpus_dir, check=check).record["languages"]
    assert full["en"]["held_out"]["equal"] == full["en"]["held_out"]["sentences"] == 15
    assert full["en"]["corpus"]["kept_share"] == 1.0


def test_cli_per_language_options_and_bad_input(teachers, tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    from helpers import assert_error, run_main

    unigram = str(teachers["unigram"])
    check = tmp_path / "check"
    check.mkdir()
    (check / "de.txt").write_text("\n".join(sample_lines("de", 6)) + "\n", encoding="utf-8")
    corpus = ("--corpus", str(tiny_corpus_dir), "--workers", "1")
    code, out, err = run_main(
        monkeypatch,
        capsys,
        "trim",
        "--model",
        unigram,
        *corpus,
        "--per-lang-top-k",
        "8",
        "--script-fill",
        "3",
        "--check",
        str(check),
        "--out",
        str(tmp_path / "ok"),
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["options"]["per_lang_top_k"] == 8 and doc["options"]["coverage"] is None
    assert doc["languages"]["de"]["held_out"]["sentences"] == 6 and doc["rules"]["added"]["script_fill"] > 0
    (check / "ru.txt").write_text("\n".join(sample_lines("ru", 4)) + "\n", encoding="utf-8")  # not counted
    code, out, err = run_main(
        monkeypatch, capsys, "trim", "--model", unigram, *corpus, "--check", str(check), "--out", str(tmp_path / "line")
    )
    assert code == 0, err
    share = json.loads((tmp_path / "line" / "trim.json").read_text())["languages"]["de"]["held_out"]["equal_share"]
    assert out.strip().endswith(
        f"held-out sentences tokenised as before: mean {100 * share:.1f}%, lowest {100 * share:.1f}% (de)"
    ), out  # the counted languages only: ru is left out
    assert "ru: 0 of 4 held-out sentences (0.0%) tokenise as before (not counted)" in err, err

    pooled_only = prepare_data(teachers["unigram"], tiny_corpus_dir, tmp_path / "pooled-only")
    for shard in (pooled_only / "shards").iterdir():
        shard.unlink()
    bad = [
        (
            ("--model", unigram, "--data", str(pooled_only), "--per-lang-top-k", "5"),
            "--per-lang-top-k needs per-language counts",
            "holds only pooled counts",
        ),
        (("--model", unigram, *corpus, "--check", str(tmp_path / "absent")), "--check", "does not exist"),
        (("--model", unigram, *corpus, "--check", str(tmp_path)), "holds no <lang>.txt file"),
    ]
    for i, (args, *needles) in enumerate(bad):
        out_dir = tmp_path / f"bad-{i}"
        assert_error(run_main(monkeypatch, capsys, "trim", *args, "--out", str(out_dir)), *needles)
        assert not out_dir.exists(), args
    # Bad option values are usage errors (exit 2) naming the option, as the reliability guide's exit codes say.
    from helpers import assert_usage_error

    for option, value in (
        ("--per-lang-top-k", "0"),
        ("--per-lang-top-k", "-3"),
        ("--script-fill", "-1"),
        ("--coverage", "0"),
        ("--coverage", "1.5"),
        ("--coverage", "nan"),
        ("--min-count", "0"),
        ("--max-vocab", "0"),
        ("--workers", "-1"),
    ):
        out_dir = tmp_path / "bad-value"
        assert_usage_error(
            run_main(monkeypatch, capsys, "trim", "--model", unigram, *corpus, option, value, "--out", str(out_dir)),
            option,
        )
        assert not out_dir.exists(), option
    # --check file names are language codes, like --langs.
    wrong = tmp_path / "wrong-check"
    wrong.mkdir()
    (wrong / "notes.txt").write_text("hello\n", encoding="utf-8")
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "trim",
            "--model",
            unigram,
            *corpus,
            "--check",
            str(wrong),
            "--out",
            str(tmp_path / "bad-check"),
        ),
        "--check",
        "'notes'",
        "not an ISO 639",
    )
    assert not (tmp_path / "bad-check").exists()
    assert not list(tmp_path.glob(".tmp-*"))
    # The pooled counts alone still trim by the pooled rules (a warning says the per-language figures are absent).
    code, out, err = run_main(
        monkeypatch, capsys, "trim", "--model", unigram, "--data", str(pooled_only), "--out", str(tmp_path / "pooled")
    )
    assert code == 0 and "only its pooled counts are known" in err, err
