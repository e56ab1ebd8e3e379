"""Retention: how much of its teacher's XNLI accuracy a student keeps, with cluster-bootstrap intervals.

Retention is chance-corrected, (student - chance) / (teacher - chance): a student at chance keeps nothing, one
level with its teacher keeps 1. Raw ratios (student / teacher) flatter weak models because both sit near 33 %.

Intervals come from a paired cluster bootstrap: XNLI rows of one premise are correlated (see
`mlminilm.tasks.xnli_split`), so whole premise groups are resampled with replacement, and teacher and student
are scored on the same resample, so the shared difficulty of a resample cancels in the ratio. Percentile
intervals; accuracies in percent. A row may also carry a graded score in [0, 1] (a retrieval query's nDCG@10;
with chance 0 the retention is the plain share student / teacher). Vectorised: per-group sums gathered by one
[n, groups] index draw, `rng.integers(0, groups, size=(n, groups))`, which is also the exact draw a test can replay
in a plain loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlminilm.errors import ConfigError, DataError

__all__ = ["CHANCE_XNLI", "chance_corrected", "bootstrap", "bootstrap_average"]

CHANCE_XNLI = 100.0 / 3.0  # three balanced classes, in percent


def chance_corrected(student, teacher, chance: float = CHANCE_XNLI):
    """(student - chance) / (teacher - chance), elementwise for arrays. Where teacher == chance the ratio has no
    meaning and the result is nan (never inf, and no warning); below chance it is negative or flips sign, which
    is left visible rather than clipped. Scalars in, float out."""
    s = np.asarray(student, dtype=np.float64)
    t = np.asarray(teacher, dtype=np.float64)
    denominator = t - chance
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(denominator == 0, np.nan, (s - chance) / np.where(denominator == 0, 1.0, denominator))
    return float(ratio) if ratio.ndim == 0 else ratio


def _interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval over the defined samples (nan where none is)."""
    defined = samples[~np.isnan(samples)]
    if defined.size == 0:
        return (float("nan"), float("nan"))
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(defined, [tail, 1.0 - tail])
    return (float(lo), float(hi))


def _scores(values) -> np.ndarray:
    """One score per row in [0, 1] as float64: a bool (correct or not) or a graded score (a query's nDCG@10)."""
    scores = np.asarray(values, dtype=np.float64).reshape(-1)
    if scores.size and (np.isnan(scores).any() or scores.min() < 0.0 or scores.max() > 1.0):
        raise DataError("row scores must lie in [0, 1] (a bool per row, or a graded score such as nDCG@10)")
    return scores


class _Groups:
    """Per-group sums of the row scores (student, teacher) and sizes of one language: all a resample needs."""

    def __init__(self, correct_student, correct_teacher, groups):
        student = _scores(correct_student)
        ids = np.asarray(groups).reshape(-1)
        if len(ids) != len(student) or (correct_teacher is not None and len(correct_teacher) != len(student)):
            raise DataError(
                f"{len(student)} student rows, {len(ids)} group ids"
                + ("" if correct_teacher is None else f", {len(correct_teacher)} teacher rows")
                + ": they must pair up"
            )
        if len(student) == 0:
            raise DataError("no rows to bootstrap")
        _, inverse = np.unique(ids, return_inverse=True)
        inverse = inverse.reshape(-1)
        self.count = int(inverse.max()) + 1
        self.size = np.bincount(inverse, minlength=self.count).astype(np.int64)
        self.student = np.bincount(inverse, weights=student, minlength=self.count)
        self.teacher = None
        if correct_teacher is not None:
            self.teacher = np.bincount(inverse, weights=_scores(correct_teacher), minlength=self.count)

    def accuracies(self, draws: np.ndarray | None):
        """Student and teacher accuracy (%) of each resample (rows of `draws`), or of the data when None."""
        if draws is None:
            size, student = self.size.sum(), self.student.sum()
            teacher = None if self.teacher is None else self.teacher.sum()
        else:
            size, student = self.size[draws].sum(axis=1), self.student[draws].sum(axis=1)
            teacher = None if self.teacher is None else self.teacher[draws].sum(axis=1)
        acc = 100.0 * student / size
        return acc, (None if teacher is None else 100.0 * teacher / size)


def _check(n: int, level: float) -> None:
    if n < 1 or not 0.0 < level < 1.0:
        raise ConfigError(f"need n >= 1 resamples and 0 < level < 1; got n={n}, level={level}")


def _summary(point: dict, samples: dict, level: float, n: int, chance: float) -> dict:
    if point["teacher_accuracy"] is not None:
        point["retention"] = chance_corrected(point["accuracy"], point["teacher_accuracy"], chance)
        samples["retention"] = chance_corrected(samples["accuracy"], samples["teacher_accuracy"], chance)
    result = {
        key: _interval(np.asarray(values, dtype=np.float64), level)
        for key, values in samples.items()
        if values is not None
    }
    result["point"] = {key: float(value) for key, value in point.items() if value is not None}
    result.update(resamples=n, level=level, chance=chance)
    if "retention" in samples:  # resamples whose teacher sat exactly at chance (left out of the interval)
        result["retention_undefined"] = int(np.isnan(samples["retention"]).sum())
    return result


def bootstrap(
    correct_student,
    correct_teacher,
    groups,
    n: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    chance: float = CHANCE_XNLI,
) -> dict:
    """Paired cluster-bootstrap percentile intervals for one language.

    `correct_student`, `correct_teacher` (or None): one bool per row, or one score in [0, 1] (a query's nDCG@10);
    `groups`: one id per row (any hashable sortable ids, e.g. `premise_groups`). Returns {"accuracy": (lo, hi),
    "teacher_accuracy": (lo, hi), "retention": (lo, hi), "point": {same keys: the estimate on the data},
    "resamples", "level", "chance", "retention_undefined"}; without a teacher only the accuracy keys. Draws:
    `default_rng(seed).integers(0, G, size=(n, G))` over the G sorted distinct group ids."""
    _check(n, level)
    data = _Groups(correct_student, correct_teacher, groups)
    draws = np.random.default_rng(seed).integers(0, data.count, size=(n, data.count))
    point_s, point_t = data.accuracies(None)
    samples_s, samples_t = data.accuracies(draws)
    return _summary(
        {"accuracy": point_s, "teacher_accuracy": point_t},
        {"accuracy": samples_s, "teacher_accuracy": samples_t},
        level,
        n,
        chance,
    )


def bootstrap_average(
    correct_student: Sequence,
    correct_teacher: Sequence | None,
    groups: Sequence,
    n: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    chance: float = CHANCE_XNLI,
    shared: bool = False,
) -> dict:
    """As `bootstrap`, for the unweighted mean over languages: per resample, the mean of the languages' student
    accuracies, of their teacher accuracies, and the retention of those two means.

    Lists hold one array per language. `shared=False`: groups are resampled in each language independently, in
    list order from one generator (language l draws `integers(0, G_l, size=(n, G_l))`). `shared=True`: one draw
    is used for every language, which must then have the same number of groups; pass the same (e.g. merged)
    groups for row-parallel files. XNLI's languages translate the same items, so per-item difficulty is shared
    across languages and the independent draw understates the spread of the average; shared draws do not."""
    _check(n, level)
    if (
        len(correct_student) == 0
        or len(groups) != len(correct_student)
        or (correct_teacher is not None and len(correct_teacher) != len(correct_student))
    ):
        raise DataError("need one student array, one group array (and one teacher array) per language, at least one")
    teachers = correct_teacher if correct_teacher is not None else [None] * len(correct_student)
    data = [_Groups(s, t, g) for s, t, g in zip(correct_student, teachers, groups)]
    rng = np.random.default_rng(seed)
    if shared:
        counts = {d.count for d in data}
        if len(counts) != 1:
            raise DataError(f"shared draws need the same number of groups in every language; got {sorted(counts)}")
        draw = rng.integers(0, counts.pop(), size=(n, data[0].count))
        draws = [draw] * len(data)
    else:
        draws = [rng.integers(0, d.count, size=(n, d.count)) for d in data]
    point = [d.accuracies(None) for d in data]
    samples = [d.accuracies(dr) for d, dr in zip(data, draws)]
    has_teacher = correct_teacher is not None

    def mean(values, which):
        return np.mean([v[which] for v in values], axis=0) if (which == 0 or has_teacher) else None

    return _summary(
        {"accuracy": mean(point, 0), "teacher_accuracy": mean(point, 1)},
        {"accuracy": mean(samples, 0), "teacher_accuracy": mean(samples, 1)},
        level,
        n,
        chance,
    )
