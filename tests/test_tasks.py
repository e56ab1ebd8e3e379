"""Task data: NLI readers (three formats and every bad input), SQuAD reading / file finding, QA featurisation
with WordPiece and SentencePiece tokenizers, and n-best post-processing on hand-built logits."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from mlminilm.errors import ConfigError, DataError
from mlminilm.tasks.qa_features import postprocess_predictions, prepare_eval_features, prepare_train_features
from mlminilm.tasks.squad import (
    QAExample,
    find_mlqa_files,
    find_tydiqa_files,
    find_xquad_files,
    qa_file_info,
    read_squad,
)
from mlminilm.tasks.xnli import NLI_LABELS, find_xnli_files, load_xnli_split, read_nli, read_nli_file

ENTAILMENT, NEUTRAL, CONTRADICTION = 0, 1, 2


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- NLI readers -------------------------------------------------------------------------------------------


def test_label_order_is_the_model_order():
    assert NLI_LABELS == ("entailment", "neutral", "contradiction")


def test_read_xtreme_tsv(tmp_path):
    path = _write(
        tmp_path / "dev-de.tsv",
        'Er sagte "Hallo.\tEr schwieg.\tcontradiction\nA\tB\tentailment\r\n\nC\tD\tneutral\n',
    )
    nli = read_nli_file(path, lang="de")
    assert nli.format == "xtreme-tsv"
    assert [(e.premise, e.hypothesis, e.label, e.lang) for e in nli.examples] == [
        ('Er sagte "Hallo.', "Er schwieg.", CONTRADICTION, "de"),  # an unbalanced quote is just text
        ("A", "B", ENTAILMENT, "de"),
        ("C", "D", NEUTRAL, "de"),
    ]


def test_read_xtreme_train_tsv_skips_its_header_and_maps_contradictory(tmp_path):
    path = _write(tmp_path / "train-en.tsv", "premise\thypo\tlabel\nA\tB\tcontradictory\n")
    assert [(e.premise, e.label, e.lang) for e in read_nli(path)] == [("A", CONTRADICTION, None)]


def _xnli10_tsv(rows):
    header = "language\tgold_label\tsentence1_binary_parse\tsentence1\tsentence2\tpairID"
    lines = [header]
    for n, (lang, label, premise, hypothesis) in enumerate(rows):
        lines.append("\t".join((lang, label, "( x )", premise, hypothesis, str(n))))
    return "\n".join(lines) + "\n"


XNLI10_ROWS = [
    ("en", "contradiction", 'He said "hi', "He left."),
    ("de", "entailment", "Er ging.", "Er war weg."),
    ("en", "neutral", "It rained.", "It was cold."),
    ("de", "contradictory", "Es regnete.", "Es war trocken."),
]


def test_read_official_xnli_tsv_with_language_filter(tmp_path):
    path = _write(tmp_path / "xnli.test.tsv", _xnli10_tsv(XNLI10_ROWS))
    everything = read_nli_file(path)
    assert everything.format == "header-tsv"
    assert [(e.lang, e.label) for e in everything.examples] == [
        ("en", CONTRADICTION),
        ("de", ENTAILMENT),
        ("en", NEUTRAL),
        ("de", CONTRADICTION),
    ]
    german = read_nli(path, lang="de")
    assert [(e.premise, e.hypothesis, e.label) for e in german] == [
        ("Er ging.", "Er war weg.", ENTAILMENT),
        ("Es regnete.", "Es war trocken.", CONTRADICTION),
    ]
    with pytest.raises(DataError, match="no rows for language 'fr'"):
        read_nli(path, lang="fr")


def test_read_multinli_jsonl_skips_and_counts_rows_without_gold_label(tmp_path):
    records = [
        {"gold_label": "neutral", "sentence1": "A", "sentence2": "B", "genre": "fiction"},
        {"gold_label": "-", "sentence1": "C", "sentence2": "D"},
        {"gold_label": "entailment", "sentence1": "E", "sentence2": "F"},
    ]
    text = "\n".join(json.dumps(r) for r in records) + "\n"
    for path in (_write(tmp_path / "mnli.jsonl", text), tmp_path / "mnli.jsonl.gz"):
        if path.suffix == ".gz":
            path.write_bytes(gzip.compress(text.encode("utf-8")))
        nli = read_nli_file(path)
        assert nli.format == "jsonl"
        assert nli.skipped_no_gold == 1
        assert [(e.premise, e.label) for e in nli.examples] == [("A", NEUTRAL), ("E", ENTAILMENT)]


def test_gzipped_tsv_reads_like_the_plain_file(tmp_path):
    path = tmp_path / "test-en.tsv.gz"
    path.write_bytes(gzip.compress("A\tB\tneutral\n".encode("utf-8")))
    assert [(e.premise, e.label) for e in read_nli(path)] == [("A", NEUTRAL)]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "bad.tsv",
            "A\tB\tneutral\nA\tB\tneutral\nonly two\tfields\n",
            r"bad\.tsv:3: expected 3 tab-separated fields.*found 2",
        ),
        (
            "bad.tsv",
            "A\tB\tneutral\nA\tB\tmaybe\n",
            r"bad\.tsv:2: label 'maybe'.*valid: entailment, neutral, contradiction",
        ),
        (
            "bad.jsonl",
            '{"gold_label": "neutral", "sentence1": "A", "sentence2": "B"}\n{"gold_label": \n',
            r"bad\.jsonl:2: not a JSON",
        ),
        ("bad.jsonl", '{"gold_label": "neutral", "sentence1": "A"}\n', r"bad\.jsonl:1: missing sentence2"),
        ("bad.jsonl", '{"gold_label": "yes", "sentence1": "A", "sentence2": "B"}\n', r"bad\.jsonl:1: label 'yes'"),
        # Issue 53: a RecursionError and a ValueError traceback; null read as the premise "None", 2 as a label "2".
        (
            "bad.jsonl",
            '{"gold_label": "neutral", "sentence1": "A", "sentence2": "B"}\n{"sentence1": ' + "[" * 100_000 + "\n",
            r"bad\.jsonl:2: not a JSON line \(nested more than 100 levels deep\)$",
        ),
        (
            "bad.jsonl",
            '{"gold_label": "neutral", "sentence1": "A", "sentence2": ' + "7" * 5000 + "}\n",
            r"bad\.jsonl:1: not a JSON line \(an integer of 5,000 digits, over the 4,300 allowed\)$",
        ),
        (
            "bad.jsonl",
            '{"gold_label": "neutral", "sentence1": null, "sentence2": "B", "language": 3}\n',
            r"bad\.jsonl:1: sentence1, language should be text \(a JSON string\)$",
        ),
        ("bad.jsonl", '{"gold_label": 2, "sentence1": "A", "sentence2": "B"}\n', r"bad\.jsonl:1: gold_label should"),
        ("empty.tsv", "\n\n", r"empty\.tsv: empty file"),
        (
            "nogold.jsonl",
            '{"gold_label": "-", "sentence1": "A", "sentence2": "B"}\n',
            r"all 1 rows have gold label '-'",
        ),
    ],
)
def test_bad_nli_input_names_file_and_line(tmp_path, name, text, message):
    with pytest.raises(DataError, match=message):
        read_nli(_write(tmp_path / name, text))


def test_bad_header_tsv_row_names_file_and_line(tmp_path):
    text = _xnli10_tsv(XNLI10_ROWS[:1]) + "en\tneutral\tonly three\n"
    with pytest.raises(DataError, match=r"xnli\.dev\.tsv:3: expected 6 tab-separated fields"):
        read_nli(_write(tmp_path / "xnli.dev.tsv", text))
    bad_label = _xnli10_tsv([("en", "unsure", "A", "B")])
    with pytest.raises(DataError, match=r"xnli\.dev\.tsv:2: label 'unsure'"):
        read_nli(_write(tmp_path / "xnli.dev.tsv", bad_label))


def test_missing_file_and_non_utf8_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_nli(tmp_path / "absent.tsv")
    (tmp_path / "latin1.tsv").write_bytes("caf\xe9\tB\tneutral\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_nli(tmp_path / "latin1.tsv")


def test_find_and_load_xtreme_layout(tmp_path):
    _write(tmp_path / "test-en.tsv", "A\tB\tneutral\n")
    _write(tmp_path / "test-de.tsv", "C\tD\tentailment\nE\tF\tcontradiction\n")
    sources = find_xnli_files(tmp_path, "test", ["en", "de"])
    assert {lang: (s.path.name, s.filter_by_language) for lang, s in sources.items()} == {
        "en": ("test-en.tsv", False),
        "de": ("test-de.tsv", False),
    }
    loaded = load_xnli_split(tmp_path, "test", ["en", "de"])
    assert {lang: [e.label for e in examples] for lang, examples in loaded.items()} == {
        "en": [NEUTRAL],
        "de": [ENTAILMENT, CONTRADICTION],
    }
    assert {e.lang for e in loaded["de"]} == {"de"}


def test_find_and_load_official_xnli_layout(tmp_path):
    _write(tmp_path / "xnli.test.tsv", _xnli10_tsv(XNLI10_ROWS))
    sources = find_xnli_files(tmp_path, "test", ["de", "en"])
    assert {lang: (s.path.name, s.filter_by_language) for lang, s in sources.items()} == {
        "de": ("xnli.test.tsv", True),
        "en": ("xnli.test.tsv", True),
    }
    loaded = load_xnli_split(tmp_path, "test", ["de", "en"])
    assert [e.premise for e in loaded["de"]] == ["Er ging.", "Es regnete."]
    assert [e.premise for e in loaded["en"]] == ['He said "hi', "It rained."]
    with pytest.raises(DataError, match=r"no rows for language 'fr'; languages present: de, en"):
        load_xnli_split(tmp_path, "test", ["fr"])


def test_find_xnli_files_default_is_every_split_file(tmp_path):
    # Every test-XX file (plain or .gz), XNLI's 15 or not, registered or not ("qu" is ISO 639-1, not in langs/);
    # dev files, train files and other names are not test languages.
    for name in (
        "test-en.tsv",
        "test-ja.tsv",
        "test-qu.tsv",
        "test-zh-Hant.tsv",
        "dev-de.tsv",
        "train-en.tsv",
        "test-en.mt.tsv",
        "notes.tsv",
    ):
        _write(tmp_path / name, "A\tB\tneutral\n")
    (tmp_path / "test-it.tsv.gz").write_bytes(gzip.compress(b"A\tB\tentailment\n"))
    sources = find_xnli_files(tmp_path, "test")
    assert {lang: s.path.name for lang, s in sources.items()} == {
        "en": "test-en.tsv",
        "it": "test-it.tsv.gz",
        "ja": "test-ja.tsv",
        "qu": "test-qu.tsv",
        "zh-Hant": "test-zh-Hant.tsv",
    }
    assert list(load_xnli_split(tmp_path, "dev")) == ["de"]
    # A file whose name cannot hold a language code stops the run, as a bad --langs code would.
    _write(tmp_path / "test-xx.tsv", "A\tB\tneutral\n")
    with pytest.raises(DataError, match="unknown language 'xx' \\(not an ISO 639-1 or 639-3 code"):
        find_xnli_files(tmp_path, "test")


def test_find_xnli_files_reports_every_missing_language_and_unknown_codes(tmp_path):
    _write(tmp_path / "test-en.tsv", "A\tB\tneutral\n")
    with pytest.raises(DataError, match=r"no XNLI test file for de, sw in .*present: test-en\.tsv"):
        find_xnli_files(tmp_path, "test", ["en", "de", "sw"])
    with pytest.raises(DataError, match=r"unknown languages 'qq', 'xx' \(not ISO 639-1 or 639-3 codes.*; known: .*en"):
        find_xnli_files(tmp_path, "test", ["en", "xx", "qq"])
    with pytest.raises(DataError, match="does not exist"):
        find_xnli_files(tmp_path / "absent", "test", ["en"])


def test_hub_xnli_offline_is_a_clear_data_error():
    with pytest.raises(DataError, match=r"cannot load hf:xnli \(test\) from the Hugging Face Hub.*local directory"):
        load_xnli_split("hf:xnli", "test", ["de"])


@pytest.mark.realdata
@pytest.mark.parametrize(("split", "rows"), [("dev", 2490), ("test", 5010)])
def test_real_xnli_files_have_official_sizes_and_balanced_classes(shared_data, split, rows):
    loaded = load_xnli_split(shared_data / "xnli", split)
    assert sorted(loaded) == "ar bg de el en es fr hi ru sw th tr ur vi zh".split()
    for lang, examples in loaded.items():
        assert len(examples) == rows, lang
        for label in range(3):
            assert sum(e.label == label for e in examples) == rows // 3, (lang, label)


# --- SQuAD reader and QA file finding ----------------------------------------------------------------------

CONTEXT = "Paris is the capital of France. It has many museums."


def _squad(qas, context=CONTEXT, title="France"):
    return {"version": "1.1", "data": [{"title": title, "paragraphs": [{"context": context, "qas": qas}]}]}


def _qa(qid, text, start, question="What?"):
    return {"id": qid, "question": question, "answers": [{"text": text, "answer_start": start}]}


def test_read_squad_keeps_raw_json_and_flat_examples(tmp_path):
    raw = _squad([_qa("q1", "Paris", 0), _qa("q2", "France", 24)])
    data = read_squad(_write(tmp_path / "train.json", json.dumps(raw)))
    assert data.raw == raw
    assert data.version == "1.1"
    assert [(e.id, e.title, e.answers) for e in data.examples] == [
        ("q1", "France", [{"text": "Paris", "answer_start": 0}]),
        ("q2", "France", [{"text": "France", "answer_start": 24}]),
    ]
    assert data.examples[0].context == CONTEXT


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"version": "1.1"}, r"not SQuAD JSON: missing top-level 'data'"),
        ({"data": [{"title": "t"}]}, r"data\[0\] has no 'paragraphs'"),
        ({"data": [{"paragraphs": [{"context": "x"}]}]}, r"data\[0\]\.paragraphs\[0\] has no 'qas'"),
        ({"data": [{"paragraphs": [{"qas": []}]}]}, r"data\[0\]\.paragraphs\[0\] has no 'context'"),
        (_squad([{"id": "q1", "question": "?"}]), r"qas\[0\] has no 'answers'"),
        (
            _squad([{"id": "q1", "question": "?", "answers": [{"text": "Paris"}]}]),
            r"answers\[0\] has no 'answer_start'",
        ),
        (_squad([_qa("q1", "Paris", 0), _qa("q1", "France", 24)]), r"question id 'q1' appears twice"),
    ],
)
def test_read_squad_names_what_is_missing(tmp_path, raw, message):
    path = _write(tmp_path / "bad.json", json.dumps(raw))
    with pytest.raises(DataError, match=message) as caught:
        read_squad(path)
    assert "bad.json" in str(caught.value)


def test_answer_start_mismatch_is_strict_by_default_and_counted_otherwise(tmp_path):
    path = _write(tmp_path / "shifted.json", json.dumps(_squad([_qa("q7", "France", 25), _qa("q8", "Paris", 0)])))
    expected = r"shifted\.json: question 'q7': answer_start 25 .*expected 'France', found 'rance\.'"
    with pytest.raises(DataError, match=expected):
        read_squad(path)
    lenient = read_squad(path, strict=False)
    assert lenient.mismatched_answers == 1
    assert [e.id for e in lenient.examples] == ["q7", "q8"]


def test_duplicate_ids_are_allowed_only_when_asked(tmp_path):
    path = _write(tmp_path / "train.json", json.dumps(_squad([_qa("0", "Paris", 0), _qa("0", "France", 24)])))
    data = read_squad(path, unique_ids=False)
    assert data.duplicate_ids == 1
    assert [e.answers[0]["text"] for e in data.examples] == ["Paris", "France"]
    with pytest.raises(DataError, match="not unique"):
        postprocess_predictions(data.examples, {"example_id": [], "offset_mapping": []}, [], [])


def test_read_squad_rejects_invalid_json(tmp_path):
    with pytest.raises(DataError, match=r"bad\.json: not JSON .*line 1"):
        read_squad(_write(tmp_path / "bad.json", "{"))


def test_read_squad_refuses_a_bool_answer_start(tmp_path):
    """Issue 53: `true` is a Python int, so `answer_start: true` was read as 1 (and matched "aris" at offset 1)."""
    path = _write(tmp_path / "bool.json", json.dumps(_squad([_qa("q1", "aris", True)])))
    with pytest.raises(DataError, match=r"qas\[0\]\.answers\[0\]\.answer_start should be an integer, found a boolean$"):
        read_squad(path, strict=False)
    path = _write(tmp_path / "none.json", json.dumps(_squad([_qa("q1", "Paris", None)])))
    with pytest.raises(DataError, match=r"answer_start should be an integer, found null$"):
        read_squad(path)
    assert read_squad(_write(tmp_path / "ok.json", json.dumps(_squad([_qa("q1", "aris", 1)])))).examples[0].answers == [
        {"text": "aris", "answer_start": 1}
    ]


def test_qa_file_info_reads_languages_from_names():
    assert qa_file_info("dev-context-zh-question-en.json")[1:] == ("zh", "en")
    assert qa_file_info("xquad.de.json")[1:] == ("de", "de")
    assert qa_file_info("tydiqa.goldp.ar.dev.json")[1:] == ("ar", "ar")
    assert qa_file_info("squad-dev.json", lang="en")[1:] == ("en", "en")
    with pytest.raises(DataError, match="cannot tell the language"):
        qa_file_info("squad-dev.json")
    with pytest.raises(DataError, match="unknown language 'xx'"):
        qa_file_info("xquad.xx.json")


def _touch_mlqa(folder: Path, langs):
    folder.mkdir(parents=True)
    for c in langs:
        for q in langs:
            _write(folder / f"dev-context-{c}-question-{q}.json", "{}")


def test_find_mlqa_files_monolingual_and_gxlt(tmp_path):
    _touch_mlqa(tmp_path / "dev", ["en", "de", "zh"])
    mono = find_mlqa_files(tmp_path, "dev", langs=["en", "de"])  # the MLQA root: dev/ is found inside
    assert {k: (f.path.name, f.context_lang, f.question_lang) for k, f in mono.items()} == {
        "en": ("dev-context-en-question-en.json", "en", "en"),
        "de": ("dev-context-de-question-de.json", "de", "de"),
    }
    gxlt = find_mlqa_files(tmp_path / "dev", "dev", gxlt=True, langs=["en", "de", "zh"])
    assert len(gxlt) == 9
    path, context_lang, question_lang = gxlt["zh-en"]
    assert (path.name, context_lang, question_lang) == ("dev-context-zh-question-en.json", "zh", "en")
    with pytest.raises(DataError, match=r"MLQA files missing in .*dev-context-ar-question-ar\.json"):
        find_mlqa_files(tmp_path, "dev")  # the default 7 languages
    with pytest.raises(DataError, match="no MLQA test files"):
        find_mlqa_files(tmp_path, "test", langs=["en"])


def test_find_xquad_and_tydiqa_files(tmp_path):
    _write(tmp_path / "xquad.de.json", "{}")
    _write(tmp_path / "tydiqa.goldp.ar.dev.json", "{}")
    assert find_xquad_files(tmp_path, ["de"])["de"].path.name == "xquad.de.json"
    assert find_tydiqa_files(tmp_path, "dev", ["ar"])["ar"][1:] == ("ar", "ar")
    with pytest.raises(DataError, match=r"XQuAD files missing .*xquad\.ru\.json"):
        find_xquad_files(tmp_path, ["de", "ru"])


@pytest.mark.realdata
def test_real_tydiqa_files_load_strictly(shared_data):
    files = find_tydiqa_files(shared_data / "tydiqa", "dev")
    assert sorted(files) == "ar bn en fi id ko ru sw te".split()
    for lang, (path, _, _) in files.items():
        assert read_squad(path).mismatched_answers == 0, lang
    # The English train file reuses question ids (89 distinct over 3,696 questions): fine for training only.
    train_file = shared_data / "tydiqa" / "tydiqa.goldp.en.train.json"
    with pytest.raises(DataError, match="appears twice"):
        read_squad(train_file)
    train = read_squad(train_file, unique_ids=False)
    assert len(train.examples) == 3696
    assert train.duplicate_ids == 3696 - 89


# --- QA featurisation --------------------------------------------------------------------------------------

FILLER = (
    "The cat sat on the mat. A dog runs in the park every morning. She reads a book about old ships. "
    "Der Hund läuft jeden Morgen durch den Park. Das Haus des Mannes ist groß. "
)
ANSWER = "Wir lesen ein Buch"


def _long_examples():
    """One long context (needing several windows) with the answer placed at its start, middle and end."""
    middle = FILLER * 3 + ANSWER + " über Schiffe. " + FILLER * 3
    contexts = [ANSWER + " über Schiffe. " + FILLER * 5, middle, FILLER * 5 + ANSWER + "."]
    return [
        QAExample(
            id=f"q{n}",
            question="Was lesen wir?",
            context=context,
            answers=[{"text": ANSWER, "answer_start": context.index(ANSWER)}],
        )
        for n, context in enumerate(contexts)
    ]


@pytest.fixture(params=["tiny_wordpiece_dir", "tiny_sentencepiece_dir"])
def tokenizer(request):
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(request.getfixturevalue(request.param))
    assert loaded.is_fast
    return loaded


SMALL = {"max_length": 48, "doc_stride": 12, "max_query_length": 10}


def _window(offsets):
    """The character range of the context a feature covers."""
    spans = [offset for offset in offsets if offset is not None]
    return spans[0][0], spans[-1][1]


def test_train_features_recover_the_answer_in_every_window_that_holds_it(tokenizer):
    examples = _long_examples()
    train = prepare_train_features(examples, tokenizer, **SMALL)
    evals = prepare_eval_features(examples, tokenizer, **SMALL)
    assert len(train["input_ids"]) == len(evals["example_id"])
    by_id = {e.id: e for e in examples}
    windows_with_answer = {e.id: 0 for e in examples}
    for i, example_id in enumerate(evals["example_id"]):
        example = by_id[example_id]
        assert len(train["input_ids"][i]) == SMALL["max_length"]
        start_char = example.answers[0]["answer_start"]
        first, last = _window(evals["offset_mapping"][i])
        start, end = train["start_positions"][i], train["end_positions"][i]
        if first <= start_char and start_char + len(ANSWER) <= last:
            windows_with_answer[example_id] += 1
            offsets = evals["offset_mapping"][i]
            assert example.context[offsets[start][0] : offsets[end][1]] == ANSWER
        else:
            assert (start, end) == (0, 0)  # the CLS token
    assert all(count >= 1 for count in windows_with_answer.values())
    assert evals["example_id"].count("q1") >= 3  # the middle context really needs several windows


def test_windows_cover_the_whole_context_and_keep_the_question_short(tokenizer):
    long_question = " ".join(["Was lesen wir jeden Morgen im Park?"] * 8)
    example = _long_examples()[1]
    example = QAExample(example.id, long_question, example.context, example.answers)
    features = prepare_eval_features([example], tokenizer, **SMALL)
    covered = set()
    specials = tokenizer.num_special_tokens_to_add(pair=True)
    for mask, offsets in zip(features["attention_mask"], features["offset_mapping"]):
        context_tokens = [offset for offset in offsets if offset is not None]
        question_tokens = sum(mask) - len(context_tokens) - specials
        assert 0 < question_tokens <= SMALL["max_query_length"]
        for start, end in context_tokens:
            covered.update(range(start, end))
    assert {k for k, char in enumerate(example.context) if not char.isspace()} <= covered


def test_eval_features_mark_non_context_tokens_with_none(tokenizer):
    features = prepare_eval_features(_long_examples()[:1], tokenizer, **SMALL)
    for ids, offsets in zip(features["input_ids"], features["offset_mapping"]):
        assert offsets[0] is None  # CLS / <s>
        assert ids[0] == tokenizer.cls_token_id
        assert any(offset is not None for offset in offsets)
    assert "overflow_to_sample_mapping" not in features


def test_a_stride_without_room_is_a_config_error(tokenizer):
    with pytest.raises(ConfigError, match="--doc-stride"):
        prepare_train_features(_long_examples(), tokenizer, max_length=32, doc_stride=20, max_query_length=10)


def _token_at(offsets, char, side):
    """Index of the context token whose start (side 0) or end (side 1) offset is `char` (the last such token,
    as SentencePiece may put a bare '▁' before it with the same start)."""
    return max(k for k, offset in enumerate(offsets) if offset is not None and offset[side] == char)


def test_postprocess_picks_the_best_valid_span_across_windows(tokenizer):
    import numpy as np

    examples = _long_examples()[1:2]
    features = prepare_eval_features(examples, tokenizer, **SMALL)
    example = examples[0]
    answer_start = example.answers[0]["answer_start"]
    answer_end = answer_start + len(ANSWER)
    count, length = len(features["example_id"]), SMALL["max_length"]
    start_logits = np.full((count, length), -10.0)
    end_logits = np.full((count, length), -10.0)
    holding = [
        i
        for i, offsets in enumerate(features["offset_mapping"])
        if _window(offsets)[0] <= answer_start and answer_end <= _window(offsets)[1]
    ]
    chosen = holding[-1]
    offsets = features["offset_mapping"][chosen]
    start_logits[chosen, _token_at(offsets, answer_start, 0)] = 5.0
    end_logits[chosen, _token_at(offsets, answer_end, 1)] = 5.0
    # Decoys: the question tokens / CLS score higher but are not context; an end before the start is invalid.
    start_logits[:, 0] = end_logits[:, 0] = 50.0
    start_logits[chosen, 1] = end_logits[chosen, 1] = 40.0
    other = next(i for i in range(count) if i != chosen)
    other_offsets = features["offset_mapping"][other]
    context_positions = [k for k, offset in enumerate(other_offsets) if offset is not None]
    end_logits[other, context_positions[0]] = 9.0
    start_logits[other, context_positions[5]] = 9.0  # end < start: never paired
    assert postprocess_predictions(examples, features, start_logits, end_logits) == {example.id: ANSWER}
    # Ragged rows (unpadded features) work too: cut each row after its last context token.
    lengths = [1 + max(k for k, o in enumerate(offsets) if o is not None) for offsets in features["offset_mapping"]]
    ragged_starts = [row[:n] for row, n in zip(start_logits, lengths)]
    ragged_ends = [row[:n].tolist() for row, n in zip(end_logits, lengths)]
    assert postprocess_predictions(examples, features, ragged_starts, ragged_ends) == {example.id: ANSWER}


def test_postprocess_respects_max_answer_length():
    import numpy as np

    example = QAExample("q", "?", "a b c d e f", [])
    # Hand-built features: one window, tokens 1..6 are the context words a..f.
    offsets = [None, (0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), None]
    features = {"example_id": ["q"], "offset_mapping": [offsets]}
    start = np.array([[0, 9, 0, 5, 0, 0, 0, 0]], dtype=float)  # a (9) is best, c (5) next
    end = np.array([[0, 0, 0, 0, 5, 0, 9, 0]], dtype=float)  # f (9) is best, d (5) next
    assert postprocess_predictions([example], features, start, end, max_answer_length=6) == {"q": "a b c d e f"}
    # a..f is 6 tokens: over a limit of 3. a..d (4 tokens) too. c..f is 4 too; c..d (2 tokens) scores 10.
    assert postprocess_predictions([example], features, start, end, max_answer_length=3) == {"q": "c d"}
    # n_best=1 keeps only a and f: their span is too long, so nothing is valid.
    assert postprocess_predictions([example], features, start, end, n_best=1, max_answer_length=3) == {"q": ""}


def test_postprocess_gives_empty_answers_without_features_and_checks_shapes():
    import numpy as np

    example = QAExample("lonely", "?", "text", [])
    features = {"example_id": [], "offset_mapping": []}
    assert postprocess_predictions([example], features, np.zeros((0, 4)), np.zeros((0, 4))) == {"lonely": ""}
    with pytest.raises(DataError, match="logits for 2 / 2 features, but there are 0"):
        postprocess_predictions([example], features, np.zeros((2, 4)), np.zeros((2, 4)))


@pytest.mark.realdata
def test_real_mlqa_spans_with_the_xlmr_tokenizer(shared_data):
    """On real MLQA contexts with the real XLM-R SentencePiece tokenizer, every window that holds the answer
    labels a token span whose text contains it (equal unless the answer boundary falls inside a token)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(shared_data / "tokenizers" / "xlm-roberta")
    for lang in ("en", "zh", "ar"):
        examples = read_squad(shared_data / "mlqa" / "dev" / f"dev-context-{lang}-question-{lang}.json").examples[:40]
        train = prepare_train_features(examples, tokenizer, max_length=128, doc_stride=32, max_query_length=32)
        evals = prepare_eval_features(examples, tokenizer, max_length=128, doc_stride=32, max_query_length=32)
        by_id = {e.id: e for e in examples}
        labelled = 0
        for i, example_id in enumerate(evals["example_id"]):
            example = by_id[example_id]
            answer = example.answers[0]
            first, last = _window(evals["offset_mapping"][i])
            start, end = train["start_positions"][i], train["end_positions"][i]
            if first <= answer["answer_start"] and answer["answer_start"] + len(answer["text"]) <= last:
                offsets = evals["offset_mapping"][i]
                labelled += 1
                assert answer["text"] in example.context[offsets[start][0] : offsets[end][1]]
            else:
                assert (start, end) == (0, 0)
        assert labelled >= len(examples)
