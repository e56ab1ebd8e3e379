"""The MLQA scorer against hand-worked values of the official mlqa_evaluation_v1.py normalisation.

Every expected value below was worked out by hand from the official rules (METHOD.md section 7), never by
running the code under test.
"""

from __future__ import annotations

import json

import pytest

from mlminilm.errors import DataError
from mlminilm.metrics.accuracy import accuracy
from mlminilm.metrics.mlqa import evaluate_dataset, exact_match, f1, normalize_answer, score_prediction

MLQA_LANGS = ("en", "es", "de", "ar", "hi", "vi", "zh")


@pytest.mark.parametrize(
    ("lang", "text", "expected"),
    [
        # METHOD.md section 7 examples.
        ("en", "The Cat, a dog!", "cat dog"),
        ("de", "Das Haus des Mannes", "haus mannes"),
        ("ar", "الكتاب الجديد", "كتاب جديد"),
        ("zh", "北京大学 2008年 Olympics", "北 京 大 学 2008 年 olympics"),
        ("en", "$100 + 5% <a> | b", "100 5 b"),
        # Spanish and Vietnamese articles go, but only as whole words ("lasañas", "làm" stay).
        ("es", "El perro y la casa de los niños", "perro y casa de niños"),
        ("es", "Las lasañas de una abuela", "lasañas de abuela"),
        ("vi", "Những cái bàn của tôi", "bàn tôi"),
        ("vi", "làm việc", "làm việc"),
        # Hindi: nothing but punctuation goes; the danda "।" is category Po; English articles are kept.
        ("hi", "भारत की राजधानी।", "भारत की राजधानी"),
        ("hi", "The भारत", "the भारत"),
        # Arabic: every "ال" becomes a space, even inside a word.
        ("ar", "قال", "ق"),
        ("ar", "والمياه", "و مياه"),
        # Chinese: U+9FA6 and U+3400 are outside U+4E00-U+9FA5, so they stay together as one run.
        ("zh", "北\u9fa6\u3400京", "北 \u9fa6\u3400 京"),
        # Non-ASCII symbols (Sc, So) stay; ASCII symbols of string.punctuation go.
        ("en", "100 € at 20 °C", "100 € at 20 °c"),
        ("en", "a$b+c<d=e>f^g`h|i~j", "abcdefghij"),
        # A language the official script does not know (ru): no articles, whitespace tokens.
        ("ru", "Кошка, спит!", "кошка спит"),
        ("en", "", ""),
    ],
)
def test_normalize_answer_matches_hand_worked_values(lang, text, expected):
    assert normalize_answer(text, lang) == expected


def test_empty_prediction_and_gold_follow_the_official_edge_cases():
    # Two empty token lists share no token: F1 is 0, while the empty strings are equal: EM is 1.
    assert f1("", "", "en") == 0.0
    assert exact_match("", "", "en") == 1.0
    # Articles alone normalise to "" too.
    assert f1("the", "a", "en") == 0.0
    assert exact_match("the", "a", "en") == 1.0
    assert f1("", "cat", "en") == 0.0
    assert exact_match("cat", "", "en") == 0.0


@pytest.mark.parametrize(
    ("lang", "prediction", "gold", "expected"),
    [
        # [cat sat on mat] vs [cat on mat]: 3 shared, P 3/4, R 1 -> 6/7.
        ("en", "the cat sat on the mat", "a cat on a mat", 6 / 7),
        # [hund läuft schnell] vs [hund läuft]: P 2/3, R 1 -> 4/5.
        ("de", "Der Hund läuft schnell", "Hund läuft", 4 / 5),
        # [casa roja] vs [casa blanca]: P 1/2, R 1/2 -> 1/2.
        ("es", "la casa roja", "casa blanca", 1 / 2),
        # [كتاب جديد] vs [كتاب قديم]: P 1/2, R 1/2 -> 1/2.
        ("ar", "الكتاب الجديد", "كتاب قديم", 1 / 2),
        # 5 tokens vs 1, 1 shared: P 1/5, R 1 -> 1/3.
        ("hi", "भारत की राजधानी दिल्ली है", "दिल्ली", 1 / 3),
        # [thành phố hà nội] vs [hà nội]: P 1/2, R 1 -> 2/3.
        ("vi", "thành phố Hà Nội", "Hà Nội", 2 / 3),
        # [北 京 大 学] vs [北 京]: P 1/2, R 1 -> 2/3.
        ("zh", "北京大学", "北京", 2 / 3),
        # Counts matter: [cat cat] vs [cat] share one token: P 1/2, R 1 -> 2/3.
        ("en", "cat cat", "cat", 2 / 3),
    ],
)
def test_f1_of_a_partial_overlap_in_each_language(lang, prediction, gold, expected):
    assert f1(prediction, gold, lang) == pytest.approx(expected)
    assert exact_match(prediction, gold, lang) == 0.0


def test_score_is_the_maximum_over_gold_answers():
    em, f1_score = score_prediction("the cat sat on the mat", ["dog", "a cat on a mat", "Cat sat on mat!"], "en")
    assert (em, f1_score) == (1.0, 1.0)
    em, f1_score = score_prediction("cat sat", ["dog", "cat"], "en")
    assert em == 0.0
    assert f1_score == pytest.approx(2 / 3)


def _dataset(questions):
    """A SQuAD-format dataset: one article, one paragraph, `questions` as (id, [gold texts])."""
    qas = [
        {"id": qid, "question": "?", "answers": [{"text": text, "answer_start": 0} for text in golds]}
        for qid, golds in questions
    ]
    return {"version": "1.0", "data": [{"title": "t", "paragraphs": [{"context": "unused", "qas": qas}]}]}


def test_evaluate_dataset_scores_missing_predictions_as_zero():
    dataset = _dataset([("q1", ["The Cat"]), ("q2", ["a cat on a mat"]), ("q3", ["dog"])])
    result = evaluate_dataset(dataset, {"q1": "cat", "q2": "the cat sat on the mat"}, "en")
    assert result["examples"] == 3
    assert result["missing"] == 1
    assert result["exact_match"] == pytest.approx(100 / 3)
    assert result["f1"] == pytest.approx(100 * (1 + 6 / 7) / 3)


def test_evaluate_dataset_rejects_unknown_language_and_empty_dataset():
    with pytest.raises(DataError, match="unknown language 'xx'.*MLQA normalisation needs the language's rules.*known:"):
        evaluate_dataset(_dataset([("q1", ["a"])]), {"q1": "a"}, "xx")
    # A registered language without an [mlqa] table: normalisation depends on the language, so no guessing.
    with pytest.raises(DataError, match=r"langs/ja\.toml has no \[mlqa\] table.*languages with rules: ar, bg"):
        evaluate_dataset(_dataset([("q1", ["a"])]), {"q1": "a"}, "ja")
    with pytest.raises(DataError, match=r"langs/it\.toml has no \[mlqa\] table"):
        normalize_answer("il gatto", "it")
    with pytest.raises(DataError, match="no questions"):
        evaluate_dataset({"data": []}, {}, "en")


def test_accuracy_function():
    assert accuracy([0, 1, 2, 2], [0, 1, 1, 2]) == 0.75
    assert accuracy([0, 1, 2], [2, 1, 0]) == pytest.approx(1 / 3)
    with pytest.raises(DataError, match="pair up"):
        accuracy([0, 1], [0])
    with pytest.raises(DataError, match="no examples"):
        accuracy([], [])


# --- real MLQA dev files -----------------------------------------------------------------------------------

OFFICIAL_DEV_QUESTIONS = {"en": 1148, "de": 512, "es": 500, "ar": 517, "hi": 507, "vi": 511, "zh": 504}
# The one gold answer of MLQA dev that normalises to nothing: Spanish "una" is an article, so its F1 against
# itself is 0 under the official scorer (EM stays 1). It appears in every file with a Spanish context that
# carries this question.
EMPTY_AFTER_NORMALISATION = ("60184cb268780854f89dc022bbf2ccf2c8eea2ac", "una")


def _questions(raw):
    return [qa for article in raw["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]


@pytest.mark.realdata
def test_real_mlqa_dev_files_load_with_official_counts(shared_data):
    from mlminilm.tasks.squad import find_mlqa_files, read_squad

    files = find_mlqa_files(shared_data / "mlqa", "dev", gxlt=True)
    assert len(files) == 49
    for key, (path, context_lang, question_lang) in files.items():
        assert key == f"{context_lang}-{question_lang}"
        assert path.name == f"dev-context-{context_lang}-question-{question_lang}.json"
        data = read_squad(path)  # strict: every answer_start matches its context
        assert data.mismatched_answers == 0
        if context_lang == question_lang:
            assert len(data.examples) == OFFICIAL_DEV_QUESTIONS[context_lang]


@pytest.mark.realdata
def test_gold_answers_score_100_with_the_context_language(shared_data):
    from mlminilm.tasks.squad import find_mlqa_files

    seen_exception = 0
    for key, (path, context_lang, _question_lang) in find_mlqa_files(shared_data / "mlqa", "dev", gxlt=True).items():
        raw = json.loads(path.read_text(encoding="utf-8"))
        questions = _questions(raw)
        predictions = {qa["id"]: qa["answers"][0]["text"] for qa in questions}
        result = evaluate_dataset(raw, predictions, context_lang)
        assert result["exact_match"] == 100.0, key
        assert result["missing"] == 0
        question_id, text = EMPTY_AFTER_NORMALISATION
        if predictions.get(question_id) == text:
            seen_exception += 1
            assert result["f1"] == pytest.approx(100 * (len(questions) - 1) / len(questions)), key
        else:
            assert result["f1"] == pytest.approx(100.0), key
    assert seen_exception == 4  # es-ar, es-en, es-es, es-vi
