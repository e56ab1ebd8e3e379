"""benchmarks/finetuned.py: the MLQA per-question scores and the article bootstrap behind the retention report's MLQA
table, against hand-worked answers and a plain float64 loop over the same draws."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
finetuned = pytest.importorskip("finetuned")


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


def test_question_scores_use_mlqa_rules_per_question(tmp_path, monkeypatch):
    monkeypatch.setattr(finetuned, "MLQA_LANGS", ("en", "de"))
    data, preds = tmp_path / "data", tmp_path / "preds"
    data.mkdir()
    preds.mkdir()
    articles = [[("q1", ["the red house"]), ("q2", ["Paris"])], [("q3", ["a cat", "two cats"])]]
    for lang in ("en", "de"):
        name = f"dev-context-{lang}-question-{lang}.json"
        (data / name).write_text(json.dumps(_squad(articles)), encoding="utf-8")
        # q1: "red house" vs "the red house": the English article is dropped -> exact; German keeps "the" -> 2/3 recall
        # q2: missing -> 0; q3: "two cats" exact against the second gold
        (preds / name).write_text(json.dumps({"q1": "red house", "q3": "two cats"}), encoding="utf-8")
    out = finetuned.question_scores(data, preds)
    assert out["en"] == {"em": [1.0, 0.0, 1.0], "f1": [1.0, 0.0, 1.0], "article": [0, 0, 1]}
    # German rules remove der/die/das..., not "the": prediction tokens {red, house}, gold {the, red, house}
    assert out["de"]["em"] == [0.0, 0.0, 1.0]
    assert out["de"]["f1"][0] == pytest.approx(2 * (1.0 * (2 / 3)) / (1.0 + 2 / 3))


def test_article_bootstrap_equals_a_plain_loop(monkeypatch):
    langs = ("xa", "xb")
    monkeypatch.setattr(finetuned, "MLQA_LANGS", langs)
    monkeypatch.setattr(finetuned, "RESAMPLES", 200)
    rng = np.random.default_rng(5)
    scores = {}
    articles = {"xa": [0, 0, 1, 2, 2, 2, 3], "xb": [0, 1, 1, 2]}
    for model in ("teacher", "student"):
        scores[model] = {
            lang: {
                "f1": rng.uniform(0, 1, len(a)).round(3).tolist(),
                "em": rng.integers(0, 2, len(a)).astype(float).tolist(),
                "article": a,
            }
            for lang, a in articles.items()
        }
    got = finetuned.article_bootstrap(scores, "teacher", seed=3)

    # the same draws, replayed one resample and one article at a time in float64
    draw_rng = np.random.default_rng(3)
    samples = {m: {lang: [] for lang in langs} for m in scores}
    for lang in langs:
        count = max(articles[lang]) + 1
        draws = draw_rng.integers(0, count, size=(200, count))
        for row in draws:
            for m in scores:
                total, n = 0.0, 0
                for article in row:
                    for f, a in zip(scores[m][lang]["f1"], articles[lang]):
                        if a == article:
                            total, n = total + f, n + 1
                samples[m][lang].append(100 * total / n)
    for lang in langs:
        point = 100 * sum(scores["student"][lang]["f1"]) / len(articles[lang])
        assert got["student"][lang]["f1"] == pytest.approx(point)
        lo, hi = np.quantile(samples["student"][lang], [0.025, 0.975])
        assert got["student"][lang]["f1_ci"] == pytest.approx([lo, hi])
        ratio = np.array(samples["student"][lang]) / np.array(samples["teacher"][lang])
        assert got["student"][lang]["f1_ratio_ci"] == pytest.approx(list(np.quantile(ratio, [0.025, 0.975])))
    avg_s = np.mean([samples["student"][lang] for lang in langs], axis=0)
    avg_t = np.mean([samples["teacher"][lang] for lang in langs], axis=0)
    assert got["student"]["avg"]["f1_ci"] == pytest.approx(list(np.quantile(avg_s, [0.025, 0.975])))
    assert got["student"]["avg"]["f1_ratio_ci"] == pytest.approx(list(np.quantile(avg_s / avg_t, [0.025, 0.975])))
    assert got["teacher"]["avg"]["f1_ratio"] == pytest.approx(1.0)


def test_article_bootstrap_refuses_models_scored_on_other_questions(monkeypatch):
    monkeypatch.setattr(finetuned, "MLQA_LANGS", ("xa",))
    teacher = {"xa": {"f1": [1.0, 0.0], "em": [1.0, 0.0], "article": [0, 1]}}
    student = {"xa": {"f1": [1.0], "em": [1.0], "article": [0]}}
    with pytest.raises(SystemExit, match="other MLQA xa questions"):
        finetuned.article_bootstrap({"teacher": teacher, "student": student}, "teacher")
