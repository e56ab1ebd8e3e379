"""mlminilm.retention.finetuned.question_scores: each MLQA question's EM and F1 as `mlminilm retention --tasks mlqa`
reads them back from eval-mlqa's predictions (the items its bootstrap resamples), by MLQA's rules of the context's
language, against hand-worked answers."""

from __future__ import annotations

import json

import pytest

from mlminilm.retention.finetuned import question_scores


def _squad(questions_by_article: list[list[tuple[str, list[str]]]]) -> dict:
    return {
        "version": "1.0",
        "data": [
            {
                "title": f"a{i}",
                "paragraphs": [
                    {
                        "context": "ctx",
                        "qas": [
                            {"id": q, "question": "?", "answers": [{"text": g, "answer_start": 0} for g in golds]}
                            for q, golds in qs
                        ],
                    }
                ],
            }
            for i, qs in enumerate(questions_by_article)
        ],
    }


def test_question_scores_use_mlqa_rules_per_question(tmp_path):
    articles = [[("q1", ["the red house"]), ("q2", ["Paris"])], [("q3", ["a cat", "two cats"])]]
    out = {}
    for lang in ("en", "de"):
        data, preds = tmp_path / f"data-{lang}.json", tmp_path / f"preds-{lang}.json"
        data.write_text(json.dumps(_squad(articles)), encoding="utf-8")
        # q1: "red house" vs "the red house": the English article is dropped -> exact; German keeps "the" -> 2/3 recall
        # q2: missing -> 0; q3: "two cats" exact against the second gold
        preds.write_text(json.dumps({"q1": "red house", "q3": "two cats"}), encoding="utf-8")
        out[lang] = question_scores(data, preds, lang)
    assert out["en"] == {"em": [1.0, 0.0, 1.0], "f1": [1.0, 0.0, 1.0], "article": [0, 0, 1]}
    # German rules remove der/die/das..., not "the": prediction tokens {red, house}, gold {the, red, house}
    assert out["de"]["em"] == [0.0, 0.0, 1.0] and out["de"]["article"] == [0, 0, 1]
    assert out["de"]["f1"][0] == pytest.approx(2 * (1.0 * (2 / 3)) / (1.0 + 2 / 3))
