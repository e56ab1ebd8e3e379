"""The retention table against a hand-worked example: shares of the teacher, above-baseline counts, and the
bootstrap intervals replayed by a plain loop over the same draws; the graded items (a query's nDCG@10) the
bootstrap takes beside booleans."""

from __future__ import annotations

import numpy as np
import pytest

from mlminilm.errors import DataError
from mlminilm.metrics.retention import bootstrap
from mlminilm.retention.measures import TASKS
from mlminilm.retention.rows import BASELINE, STUDENT, TEACHER, Row
from mlminilm.retention.table import task_table

ITEMS = {  # per row, per language: one item per Tatoeba pair (1 = its translation found)
    "teacher": {"de": "1111", "ar": "1100"},
    "cut teacher": {"de": "1000", "ar": "1000"},
    "small": {"de": "1100", "ar": "1000"},
}
ROWS = [Row("teacher", TEACHER, "t", 4), Row("cut teacher", BASELINE, "c", 2), Row("small", STUDENT, "s", 2)]
N = 300


def _results() -> dict:
    return {
        name: {"languages": {lang: {"score": 100 * s.count("1") / len(s), "items": s} for lang, s in langs.items()}}
        for name, langs in ITEMS.items()
    }


def _percentile(values) -> list[float]:
    values = np.array([v for v in values if not np.isnan(v)])
    return [float(x) for x in np.quantile(values, [0.025, 0.975])]


def test_shares_and_above_baseline_by_hand():
    table = task_table(TASKS["tatoeba"], ROWS, _results(), resamples=N, seed=0)
    rows = table["rows"]
    # small: de 50 of the teacher's 100, ar 25 of 50: half of the teacher in each; the average 37.5 of 75
    assert rows["small"]["languages"]["de"]["share"] == pytest.approx(0.5)
    assert rows["small"]["languages"]["ar"]["share"] == pytest.approx(0.5)
    assert rows["small"]["average"]["score"] == pytest.approx(37.5)
    assert rows["small"]["average"]["share"] == pytest.approx(0.5)
    # the cut teacher: de 25 of 100, ar 25 of 50; the average 25 of 75
    assert rows["cut teacher"]["languages"]["de"]["share"] == pytest.approx(0.25)
    assert rows["cut teacher"]["average"]["share"] == pytest.approx(1 / 3)
    # above the cut teacher: small in de (50 > 25), not in ar (25 = 25); the teacher in both
    assert rows["small"]["above_baseline"] == 1
    assert rows["teacher"]["above_baseline"] == 2
    assert rows["cut teacher"]["above_baseline"] is None
    assert "share" not in rows["teacher"]["average"]


def test_intervals_replay_the_draws_in_a_loop():
    table = task_table(TASKS["tatoeba"], ROWS, _results(), resamples=N, seed=5)
    small = table["rows"]["small"]
    for lang in ("de", "ar"):
        s = np.array([c == "1" for c in ITEMS["small"][lang]], dtype=float)
        t = np.array([c == "1" for c in ITEMS["teacher"][lang]], dtype=float)
        draws = np.random.default_rng(5).integers(0, 4, size=(N, 4))
        accuracy, share = [], []
        for draw in draws:
            acc_s, acc_t = 100 * s[draw].mean(), 100 * t[draw].mean()
            accuracy.append(acc_s)
            share.append(acc_s / acc_t if acc_t else np.nan)  # a resample whose teacher found nothing: no share
        assert small["languages"][lang]["interval"] == pytest.approx(_percentile(accuracy))
        assert small["languages"][lang]["share_interval"] == pytest.approx(_percentile(share))
    # the average: the languages drawn one after the other from one generator
    rng = np.random.default_rng(5)
    draws = {lang: rng.integers(0, 4, size=(N, 4)) for lang in ("de", "ar")}
    means_s, means_t = np.zeros(N), np.zeros(N)
    for lang, d in draws.items():
        means_s += 100 * np.array([[c == "1" for c in ITEMS["small"][lang]]], dtype=float)[0][d].mean(axis=1) / 2
        means_t += 100 * np.array([[c == "1" for c in ITEMS["teacher"][lang]]], dtype=float)[0][d].mean(axis=1) / 2
    assert small["average"]["interval"] == pytest.approx(_percentile(means_s))
    assert small["average"]["share_interval"] == pytest.approx(_percentile(means_s / means_t))


def test_graded_items_bootstrap_as_their_mean():
    # nDCG@10 of four questions: the relevant passage at rank 1, 3, none, 2
    student = [1.0, 1 / np.log2(4), 0.0, 1 / np.log2(3)]
    teacher = [1.0, 1.0, 0.5, 1.0]
    found = bootstrap(student, teacher, np.arange(4), n=50, seed=0, chance=0.0)
    assert found["point"]["accuracy"] == pytest.approx(100 * np.mean(student))
    assert found["point"]["retention"] == pytest.approx(np.mean(student) / np.mean(teacher))
    draws = np.random.default_rng(0).integers(0, 4, size=(50, 4))
    ratio = [np.mean(np.array(student)[d]) / np.mean(np.array(teacher)[d]) for d in draws]
    assert list(found["retention"]) == pytest.approx(_percentile(ratio))
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        bootstrap([0.5, 1.5], None, [0, 1])
