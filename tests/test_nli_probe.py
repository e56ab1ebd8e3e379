"""The frozen-encoder NLI probe: pair features by hand, separable data, the optimum's gradient from an independent
numpy formula, agreement with naive float64 gradient descent, determinism, and l2 selection."""

from __future__ import annotations

import numpy as np
import pytest

from mlminilm.errors import DataError
from mlminilm.evaluation.nli_probe import fit_logistic, pair_features, select_l2

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def blobs(n_per_class: int, dim: int, spread: float, seed: int, labels=(0, 1, 2)):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(labels), dim)) * 3.0
    y = np.repeat(np.array(labels), n_per_class)
    X = centres[np.repeat(np.arange(len(labels)), n_per_class)] + spread * rng.normal(size=(len(y), dim))
    return X, y


def standardised(X):
    std = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)


def numpy_gradient(Z, target, W, b, l2):
    """Gradient of mean cross-entropy + l2/2 ||W||^2 (bias unpenalised), written out in float64."""
    logits = Z @ W + b
    logits -= logits.max(axis=1, keepdims=True)
    P = np.exp(logits)
    P /= P.sum(axis=1, keepdims=True)
    Y = np.eye(W.shape[1])[target]
    return Z.T @ (P - Y) / len(Z) + l2 * W, (P - Y).mean(axis=0)


def test_pair_features_by_hand():
    u = np.array([[1.0, 2.0], [0.5, -1.0]], dtype=np.float32)
    v = np.array([[3.0, -1.0], [0.5, 2.0]], dtype=np.float32)
    out = pair_features(u, v)
    assert out.dtype == np.float64
    assert out.tolist() == [[1, 2, 3, -1, 2, 3, 3, -2], [0.5, -1, 0.5, 2, 0, 3, 0.25, -2]]
    # Computed after the cast: the product of two float32 values is exact in float64.
    a, b = np.float32(1 + 2**-20), np.float32(1 - 2**-20)
    assert pair_features(np.array([[a]]), np.array([[b]]))[0, 3] == float(a) * float(b) == 1 - 2**-40
    with pytest.raises(DataError, match="one shape"):
        pair_features(u, v[:, :1])


def test_separable_blobs_are_classified_perfectly_with_their_own_labels():
    X, y = blobs(40, 6, 0.3, seed=0, labels=(5, 7, 9))
    X_test, y_test = blobs(20, 6, 0.3, seed=0, labels=(5, 7, 9))
    probe = fit_logistic(X, y, l2=1e-3)
    assert probe.accuracy(X, y) == 1.0
    assert set(probe.predict(X_test).tolist()) == {5, 7, 9}
    assert probe.correct(X, y).all() and probe.correct(X, y).dtype == bool
    assert np.allclose(probe.mean, X.mean(axis=0)) and np.allclose(probe.std, X.std(axis=0))


def test_gradient_at_the_optimum_is_zero_by_an_independent_formula():
    X, y = blobs(60, 10, 2.5, seed=1)  # overlapping classes: a proper interior optimum
    X[:, 4] = 7.0  # a constant feature: standardised with std 1, not nan
    probe = fit_logistic(X, y, l2=1e-3)
    assert probe.std[4] == 1.0 and np.isfinite(probe.weight).all()
    grad_W, grad_b = numpy_gradient(standardised(X), y, probe.weight, probe.bias, 1e-3)
    assert np.sqrt((grad_W**2).sum() + (grad_b**2).sum()) < 1e-6
    assert probe.gradient_norm < 1e-6
    assert abs(probe.bias.sum()) < 1e-12  # returned centred
    assert 0.5 < probe.accuracy(X, y) < 1.0


def test_matches_naive_gradient_descent_on_a_tiny_problem():
    X, y = blobs(12, 3, 1.5, seed=2)
    l2 = 0.1
    Z = standardised(X)
    W, b = np.zeros((3, 3)), np.zeros(3)
    for _ in range(20000):
        gW, gb = numpy_gradient(Z, y, W, b, l2)
        W -= 0.5 * gW
        b -= 0.5 * gb
    assert np.sqrt((gW**2).sum() + (gb**2).sum()) < 1e-10  # the loop itself converged
    probe = fit_logistic(X, y, l2=l2)
    assert np.abs(probe.weight - W).max() < 1e-5
    assert np.abs(probe.bias - (b - b.mean())).max() < 1e-5


def test_fitting_is_deterministic():
    X, y = blobs(30, 8, 2.0, seed=3)
    first, second = fit_logistic(X, y, l2=1e-2), fit_logistic(X, y, l2=1e-2)
    assert np.array_equal(first.weight, second.weight) and np.array_equal(first.bias, second.bias)


def test_select_l2_keeps_the_best_and_breaks_ties_toward_more_penalty():
    X, y = blobs(40, 20, 3.0, seed=4)
    X_sel, y_sel = blobs(40, 20, 3.0, seed=4)
    chosen = select_l2(X[::2], y[::2], X_sel[1::2], y_sel[1::2])
    assert sorted(chosen.accuracies) == [1e-4, 1e-3, 1e-2, 1e-1]
    assert chosen.accuracy == max(chosen.accuracies.values())
    assert chosen.probe.l2 == chosen.l2 and chosen.probe.accuracy(X_sel[1::2], y_sel[1::2]) == chosen.accuracy
    assert chosen.l2 == max(l2 for l2, acc in chosen.accuracies.items() if acc == chosen.accuracy)
    easy_X, easy_y = blobs(20, 4, 0.1, seed=5)
    assert select_l2(easy_X, easy_y, easy_X, easy_y, grid=(1e-3, 1e-1, 1e-2)).l2 == 1e-1  # all 100 %: the largest


def test_bad_inputs_name_the_problem():
    X, y = blobs(5, 3, 1.0, seed=6)
    with pytest.raises(DataError, match="one class"):
        fit_logistic(X, np.zeros(len(X), dtype=int))
    with pytest.raises(DataError, match="labels"):
        fit_logistic(X, y[:-1])
    probe = fit_logistic(X, y)
    with pytest.raises(DataError, match="expects"):
        probe.predict(X[:, :2])
