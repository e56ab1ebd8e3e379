"""A frozen-encoder NLI probe: multinomial logistic regression on SentEval / InferSent pair features.

The encoder is not fine-tuned: premise and hypothesis are embedded separately (`mlminilm.evaluation.embeddings`
gives float32 [n, dim] arrays), combined by `pair_features`, and a linear classifier is fitted on top. What the
probe reaches measures what the sentence vectors hold, the same way for teacher and student, with no
fine-tuning noise (seeds, schedules, early stopping) between them.

The fit is deterministic: features standardised with the training mean and standard deviation (population,
ddof 0; constant features get 1), zero initialisation, full-batch float64 L-BFGS with a strong-Wolfe line search
on the convex objective

    mean over rows of -log softmax(x W + b)[y]  +  l2 / 2 * ||W||^2        (no penalty on the bias b)

The bias is returned centred (sum 0 over classes): softmax ignores a common shift, so this fixes the one
direction the objective leaves free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from mlminilm.errors import ConfigError, DataError

__all__ = ["pair_features", "LogisticProbe", "fit_logistic", "L2Selection", "select_l2"]


def pair_features(u, v) -> np.ndarray:
    """[u, v, |u - v|, u * v] per row, float64 ([n, dim] twice -> [n, 4 * dim]); computed after the cast, so
    float32 inputs lose nothing in the difference and the product."""
    a = np.asarray(u, dtype=np.float64)
    b = np.asarray(v, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise DataError(f"pair_features needs two [n, dim] arrays of one shape; got {a.shape} and {b.shape}")
    return np.concatenate([a, b, np.abs(a - b), a * b], axis=1)


@dataclass(frozen=True)
class LogisticProbe:
    """A fitted probe: standardisation, weights [features, classes] and bias [classes] in standardised space."""

    mean: np.ndarray
    std: np.ndarray
    weight: np.ndarray
    bias: np.ndarray
    classes: np.ndarray  # label value of each output column (sorted distinct training labels)
    l2: float
    iterations: int  # L-BFGS iterations used
    gradient_norm: float  # Euclidean norm of the objective's gradient at the returned weights

    def scores(self, X) -> np.ndarray:
        """Logits [n, classes]."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.mean):
            raise DataError(f"probe expects [n, {len(self.mean)}] features, got {X.shape}")
        return ((X - self.mean) / self.std) @ self.weight + self.bias

    def predict(self, X) -> np.ndarray:
        """The predicted label of each row (ties: the first class)."""
        return self.classes[np.argmax(self.scores(X), axis=1)]

    def correct(self, X, y) -> np.ndarray:
        """One bool per row: prediction == label (what `metrics.retention.bootstrap` takes)."""
        y = np.asarray(y).reshape(-1)
        if len(y) != len(X):
            raise DataError(f"{len(X)} feature rows for {len(y)} labels; they must pair up")
        return self.predict(X) == y

    def accuracy(self, X, y) -> float:
        """Fraction correct in [0, 1] (as `metrics.accuracy`; reports convert to percent)."""
        return float(np.mean(self.correct(X, y)))


def _objective(Z, onehot, W, b, l2: float):
    import torch

    logits = Z @ W + b
    loss = -(onehot * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
    return loss + 0.5 * l2 * (W * W).sum()


def fit_logistic(X, y, *, l2: float = 1e-3, max_iter: int = 500, tolerance_grad: float = 1e-10) -> LogisticProbe:
    """Fit the probe on features X [n, d] and labels y [n] (any integer labels, at least two distinct).

    `max_iter`: L-BFGS iterations (one `step` call); it also stops when the largest gradient entry falls below
    `tolerance_grad` or progress stalls. Same inputs, same thread count -> same weights."""
    import torch

    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y).reshape(-1)
    if X.ndim != 2 or len(X) != len(y) or len(y) == 0:
        raise DataError(f"need features [n, d] and n labels, n >= 1; got {X.shape} and {y.shape}")
    if l2 < 0 or max_iter < 1:
        raise ConfigError(f"need l2 >= 0 and max_iter >= 1; got l2={l2}, max_iter={max_iter}")
    classes, target = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise DataError(f"training labels hold one class ({classes.tolist()}); a classifier needs two or more")
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    Z = torch.from_numpy((X - mean) / std)
    onehot = torch.nn.functional.one_hot(torch.from_numpy(target.reshape(-1)), len(classes)).to(torch.float64)
    W = torch.zeros(X.shape[1], len(classes), dtype=torch.float64, requires_grad=True)
    b = torch.zeros(len(classes), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [W, b],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=tolerance_grad,
        tolerance_change=1e-14,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure():
        optimizer.zero_grad()
        loss = _objective(Z, onehot, W, b, l2)
        loss.backward()
        return loss

    optimizer.step(closure)
    iterations = int(optimizer.state[W].get("n_iter", 0))
    with torch.no_grad():
        b -= b.mean()
    W.grad, b.grad = None, None
    loss = _objective(Z, onehot, W, b, l2)
    loss.backward()
    gradient_norm = float(torch.sqrt((W.grad**2).sum() + (b.grad**2).sum()))
    return LogisticProbe(
        mean=mean,
        std=std,
        weight=W.detach().numpy().copy(),
        bias=b.detach().numpy().copy(),
        classes=classes,
        l2=float(l2),
        iterations=iterations,
        gradient_norm=gradient_norm,
    )


class L2Selection(NamedTuple):
    """The chosen penalty, its selection accuracy (fraction), its probe, and every candidate's accuracy."""

    l2: float
    accuracy: float
    probe: LogisticProbe
    accuracies: dict[float, float]


def select_l2(
    X_train, y_train, X_select, y_select, grid: Sequence[float] = (1e-4, 1e-3, 1e-2, 1e-1), max_iter: int = 500
) -> L2Selection:
    """Fit one probe per penalty in `grid` on the training rows and keep the one most accurate on the selection
    rows; ties go to the larger penalty (the simpler model). The selection rows must not share premises with the
    training rows (`tasks.xnli_split.split_by_groups`)."""
    if not grid:
        raise ConfigError("select_l2 needs at least one l2 value in grid")
    best: L2Selection | None = None
    scores: dict[float, float] = {}
    for l2 in sorted(grid, reverse=True):
        probe = fit_logistic(X_train, y_train, l2=l2, max_iter=max_iter)
        scores[float(l2)] = probe.accuracy(X_select, y_select)
        if best is None or scores[float(l2)] > best.accuracy:
            best = L2Selection(float(l2), scores[float(l2)], probe, scores)
    assert best is not None
    return best._replace(accuracies=dict(sorted(scores.items())))
