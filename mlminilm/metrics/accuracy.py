"""Classification accuracy (XNLI), offline: a plain function returning a fraction in [0, 1] (reports convert to
percent). The scorers are plain functions, not `evaluate` modules: `evaluate.load` fetches its metric scripts from
the Hub, which an offline run cannot reach.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlminilm.errors import DataError

__all__ = ["accuracy"]


def accuracy(predictions: Sequence[int], references: Sequence[int]) -> float:
    """The fraction of predicted labels equal to the reference labels."""
    if len(predictions) != len(references):
        raise DataError(f"{len(predictions)} predictions for {len(references)} references; they must pair up")
    if not references:
        raise DataError("no examples to score")
    correct = sum(int(p) == int(r) for p, r in zip(predictions, references))
    return correct / len(references)
