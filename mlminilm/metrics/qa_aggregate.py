"""What the MLQA and SQuAD v1.1 scorers share: the questions of a SQuAD-format file and the per-question
aggregation (missing predictions score 0, totals in percent) and the token F1. Each scorer supplies its own
normalisation."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Mapping

from mlminilm.errors import DataError

ScoreFn = Callable[[str, list[str]], tuple[float, float]]  # (prediction, golds) -> (exact match, F1)


def dataset_questions(dataset: Mapping | list) -> Iterable[tuple[str, list[str]]]:
    """(question id, gold answer texts) of a SQuAD-format dataset (the parsed JSON, or its `data` list)."""
    articles = dataset["data"] if isinstance(dataset, Mapping) else dataset
    for article in articles:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield qa["id"], [answer["text"] for answer in qa["answers"]]


def aggregate(
    questions: Iterable[tuple[str, list[str]]], predictions: Mapping[str, str], score: ScoreFn
) -> dict[str, float | int]:
    """exact_match and f1 in percent over all questions, `examples` (questions scored) and `missing`
    (questions without a prediction: they score 0, as in the official scripts)."""
    total_em = total_f1 = 0.0
    examples = missing = 0
    for question_id, golds in questions:
        examples += 1
        if question_id not in predictions:
            missing += 1
            continue
        em, f1_score = score(predictions[question_id], golds)
        total_em += em
        total_f1 += f1_score
    if examples == 0:
        raise DataError("no questions to score")
    return {
        "exact_match": 100.0 * total_em / examples,
        "f1": 100.0 * total_f1 / examples,
        "examples": examples,
        "missing": missing,
    }


def token_f1(predicted: list[str], expected: list[str]) -> float:
    """The official scorers' bag-of-tokens F1 of two normalised token lists (SQuAD v1.1's `f1_score`, which
    MLQA's copies): 0.0 when they share no token, two empty lists included."""
    shared = sum((Counter(predicted) & Counter(expected)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(predicted)
    recall = shared / len(expected)
    return 2 * precision * recall / (precision + recall)
