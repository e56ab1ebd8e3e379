"""Classification accuracy (XNLI), offline.

`accuracy` is the plain function; `Accuracy` is the same as an `evaluate.Metric` (built on first access, since
`evaluate` takes seconds to import), standing in for `evaluate.load("accuracy")`, which needs the Hub.
Both return a fraction in [0, 1], as `evaluate`'s own accuracy does; reports convert to percent.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from mlminilm.errors import DataError

__all__ = ["accuracy", "Accuracy"]


def accuracy(predictions: Sequence[int], references: Sequence[int]) -> float:
    """The fraction of predicted labels equal to the reference labels."""
    if len(predictions) != len(references):
        raise DataError(f"{len(predictions)} predictions for {len(references)} references; they must pair up")
    if not references:
        raise DataError("no examples to score")
    correct = sum(int(p) == int(r) for p, r in zip(predictions, references))
    return correct / len(references)


@functools.cache
def _metric_class() -> type:
    import datasets
    import evaluate

    class Accuracy(evaluate.Metric):
        """`Accuracy().compute(predictions=[...], references=[...]) -> {"accuracy": fraction}`, no network."""

        def _info(self):
            return evaluate.MetricInfo(
                description="Accuracy: the fraction of predicted labels equal to the reference labels.",
                citation="",
                inputs_description="predictions and references: integer class ids of equal length.",
                features=datasets.Features(
                    {"predictions": datasets.Value("int32"), "references": datasets.Value("int32")}
                ),
            )

        def _compute(self, predictions, references):
            return {"accuracy": accuracy(predictions, references)}

    Accuracy.__qualname__ = "Accuracy"
    Accuracy.__module__ = __name__
    return Accuracy


def __getattr__(name: str):
    # PEP 562: `from mlminilm.metrics.accuracy import Accuracy` builds the evaluate.Metric subclass on first use.
    if name == "Accuracy":
        return _metric_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
