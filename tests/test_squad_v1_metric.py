"""The SQuAD v1.1 scorer (XTREME's scorer for XQuAD and TyDiQA-GoldP) against hand-worked values.

Every expected value was worked out by hand from the SQuAD v1.1 rules (METHOD.md section 7: lower-case, delete
ASCII string.punctuation only, remove English a|an|the as whole words, split on whitespace, no language), never
by running the code under test. Where MLQA's rules give another value, the test says so and checks both.
"""

from __future__ import annotations

import pytest

from mlminilm.errors import DataError
from mlminilm.metrics import mlqa, squad_v1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Cat, a dog!", "cat dog"),
        # ASCII symbols of string.punctuation are deleted ("$100 + 5%" -> "100  5"), then "a" goes as a word.
        ("$100 + 5% <a> | b", "100 5 b"),
        # Non-ASCII punctuation stays: guillemets, the ideographic full stop, the curly apostrophe, the danda.
        ("«Paris»", "«paris»"),
        ("北京大学。", "北京大学。"),
        ("l’homme", "l’homme"),
        ("भारत।", "भारत।"),
        # ... while the ASCII apostrophe is deleted, joining the word.
        ("l'homme", "lhomme"),
        # Only English articles, only as whole words: Spanish and German articles stay; "anthem", "theatre" stay.
        ("El perro y la casa", "el perro y la casa"),
        ("Das Haus des Mannes", "das haus des mannes"),
        ("An anthem in the theatre", "anthem in theatre"),
        # Punctuation is deleted before articles are looked for: "the-cat" becomes one word "thecat".
        ("the-cat", "thecat"),
        # No Arabic rule: "ال" stays, even as a prefix.
        ("الكتاب الجديد", "الكتاب الجديد"),
        # Non-ASCII symbols stay (as in MLQA); whitespace of any kind collapses.
        ("100 € at 20 °C", "100 € at 20 °c"),
        ("  a\tcat\n on\u00a0it ", "cat on it"),
        ("", ""),
    ],
)
def test_normalize_answer_matches_hand_worked_values(text, expected):
    assert squad_v1.normalize_answer(text) == expected


def test_non_ascii_punctuation_is_kept_where_mlqa_deletes_it():
    # SQuAD: "«paris»" vs "paris": different strings, and no shared token -> EM 0, F1 0.
    assert squad_v1.exact_match("«Paris»", "Paris") == 0.0
    assert squad_v1.f1("«Paris»", "Paris") == 0.0
    # MLQA deletes every Unicode P* character: both become "paris".
    assert mlqa.exact_match("«Paris»", "Paris", "fr") == 1.0
    # A trailing ideographic full stop makes another token: SQuAD ["北京。"] vs ["北京"] share nothing.
    assert squad_v1.f1("北京。", "北京") == 0.0


def test_only_english_articles_are_removed():
    # [el museo] vs [museo]: 1 shared, P 1/2, R 1 -> 2/3; EM 0. MLQA (es) removes "el": EM 1, F1 1.
    assert squad_v1.f1("el museo", "museo") == pytest.approx(2 / 3)
    assert squad_v1.exact_match("el museo", "museo") == 0.0
    assert mlqa.exact_match("el museo", "museo", "es") == 1.0
    # English articles go whatever the answer's language.
    assert squad_v1.exact_match("the museo", "museo") == 1.0


def test_unspaced_chinese_is_one_token():
    # SQuAD: ["北京大学"] vs ["北京"]: no shared token -> F1 0. MLQA (zh) splits every CJK character:
    # [北 京 大 学] vs [北 京]: P 1/2, R 1 -> F1 2/3.
    assert squad_v1.f1("北京大学", "北京") == 0.0
    assert mlqa.f1("北京大学", "北京", "zh") == pytest.approx(2 / 3)
    # With spaces, tokens are words again: [北京 大学] vs [北京]: P 1/2, R 1 -> 2/3.
    assert squad_v1.f1("北京 大学", "北京") == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        # [cat sat on mat] vs [cat on mat]: 3 shared, P 3/4, R 1 -> 6/7.
        ("the cat sat on the mat", "a cat on a mat", 6 / 7),
        # Counts matter: [cat cat] vs [cat]: one shared, P 1/2, R 1 -> 2/3.
        ("cat cat", "cat", 2 / 3),
        # [der hund läuft schnell] vs [hund läuft]: P 2/4, R 1 -> 2/3 (MLQA de would drop "der": 4/5).
        ("Der Hund läuft schnell", "Hund läuft", 2 / 3),
    ],
)
def test_f1_of_partial_overlaps(prediction, gold, expected):
    assert squad_v1.f1(prediction, gold) == pytest.approx(expected)
    assert squad_v1.exact_match(prediction, gold) == 0.0


def test_empty_answers_follow_the_script():
    # Equal empty strings match (EM 1); two empty token lists share no token (F1 0).
    assert squad_v1.exact_match("", "") == 1.0 and squad_v1.f1("", "") == 0.0
    assert squad_v1.exact_match("the", "an") == 1.0 and squad_v1.f1("the", "an") == 0.0


def test_score_is_the_maximum_over_gold_answers_and_missing_scores_zero():
    assert squad_v1.score_prediction("cat sat", ["dog", "cat"]) == (0.0, pytest.approx(2 / 3))
    assert squad_v1.score_prediction("The cat.", ["dog", "cat"]) == (1.0, 1.0)
    with pytest.raises(DataError, match="no gold answer"):
        squad_v1.score_prediction("x", [])
    qas = [
        {"id": "q1", "question": "?", "answers": [{"text": "The Cat", "answer_start": 0}]},
        {"id": "q2", "question": "?", "answers": [{"text": "北京", "answer_start": 0}]},
        {"id": "q3", "question": "?", "answers": [{"text": "dog", "answer_start": 0}]},
    ]
    dataset = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "unused", "qas": qas}]}]}
    # q1 EM 1 F1 1; q2 ["北京大学"] vs ["北京"]: 0, 0; q3 missing: 0, 0.
    result = squad_v1.evaluate_dataset(dataset, {"q1": "cat", "q2": "北京大学"})
    assert result == {"exact_match": pytest.approx(100 / 3), "f1": pytest.approx(100 / 3), "examples": 3, "missing": 1}
    with pytest.raises(DataError, match="no questions"):
        squad_v1.evaluate_dataset({"data": []}, {})
