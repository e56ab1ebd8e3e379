"""The SQuAD v1.1 scorer: exact match and F1 as the plain SQuAD v1.1 evaluation script computes them, offline.

XTREME scores XQuAD and TyDiQA-GoldP with this scorer (its `METRIC_FUNCTION` maps both to `squad_em_f1`);
only MLQA uses the language-aware MLQA scorer (`mlminilm.metrics.mlqa`). Scoring XQuAD with MLQA's rules
gives figures that are not comparable with published XQuAD tables (METHOD.md section 7).

Normalisation, with no language argument:

- lower-case;
- delete every character of Python's ASCII `string.punctuation` (and nothing else: "«", "»", "。", "’" stay);
- replace the English articles `a`, `an`, `the` by a space, only as whole words (regex `\\b(a|an|the)\\b`);
  articles of other languages (Spanish "el", German "der") stay;
- split on whitespace and join with single spaces. There is no segmentation of unspaced scripts, so a Chinese
  answer written without spaces is ONE token.

Exact match compares the normalised strings; F1 is the bag-of-tokens overlap of the normalised token lists
(0 when they share no token). A prediction scores the maximum of each over the gold answers, reported in %;
a question without a prediction scores 0.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping

from mlminilm.errors import DataError
from mlminilm.metrics.qa_aggregate import aggregate, dataset_questions, token_f1

__all__ = ["normalize_answer", "exact_match", "f1", "score_prediction", "evaluate_questions", "evaluate_dataset"]

_ASCII_PUNCTUATION = frozenset(string.punctuation)
_ENGLISH_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower-case, delete ASCII punctuation, replace English articles by spaces, collapse whitespace."""
    text = "".join(char for char in text.lower() if char not in _ASCII_PUNCTUATION)
    text = _ENGLISH_ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal (so "" against "" is a match), else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    """Bag-of-tokens F1 of the normalised, whitespace-split token lists; 0.0 when they share no token."""
    predicted = normalize_answer(prediction).split()
    expected = normalize_answer(gold).split()
    return token_f1(predicted, expected)


def score_prediction(prediction: str, golds: Iterable[str]) -> tuple[float, float]:
    """(exact match, F1) of one prediction: the maximum of each over the gold answers."""
    golds = list(golds)
    if not golds:
        raise DataError("a question has no gold answer; the SQuAD v1.1 scorer needs at least one per question")
    return max(exact_match(prediction, gold) for gold in golds), max(f1(prediction, gold) for gold in golds)


def evaluate_questions(
    questions: Iterable[tuple[str, list[str]]], predictions: Mapping[str, str]
) -> dict[str, float | int]:
    """Score `(question id, gold answer texts)` pairs against `predictions` (id -> answer text).

    Returns exact_match and f1 in percent over all questions, `examples` (questions scored) and `missing`
    (questions without a prediction, which score 0)."""
    return aggregate(questions, predictions, score_prediction)


def evaluate_dataset(dataset: Mapping | list, predictions: Mapping[str, str]) -> dict[str, float | int]:
    """Score a SQuAD-format dataset (the parsed JSON, or its `data` list) as the SQuAD v1.1 script does.

    Returns {"exact_match": %, "f1": %, "examples": n, "missing": n}."""
    return evaluate_questions(dataset_questions(dataset), predictions)
