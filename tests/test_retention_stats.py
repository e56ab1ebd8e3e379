"""Premise-group splits and the retention bootstrap: hand-worked examples, a naive union-find, naive Python-loop
bootstraps that replay the same draws, coverage of a known proportion, pairing, speed, and (realdata) the split
of XNLI's English test set."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mlminilm.errors import ConfigError, DataError
from mlminilm.metrics.retention import CHANCE_XNLI, bootstrap, bootstrap_average, chance_corrected
from mlminilm.tasks.xnli_split import merge_groups, premise_groups, split_by_groups, subsample_groups

# --- premise groups, splits, subsets -----------------------------------------------------------------------


def test_premise_groups_number_by_first_appearance():
    assert premise_groups(["b", "b", "a", "c", "a", "b"]).tolist() == [0, 0, 1, 2, 1, 0]
    assert premise_groups([]).tolist() == []
    assert premise_groups(["x"]).dtype == np.int64


def test_merge_groups_follows_chains_across_passes():
    # Pairs (0,1) (2,3) (4,5) in one grouping and (1,2) (3,4) in the other chain every row into one group.
    assert merge_groups([0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 3]).tolist() == [0] * 6
    assert merge_groups([5, 5, 7, 8], [1, 2, 3, 3]).tolist() == [0, 0, 1, 1]
    assert merge_groups([3, 1, 3]).tolist() == [0, 1, 0]


def _union_find(groupings: list[np.ndarray]) -> np.ndarray:
    parent = list(range(len(groupings[0])))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for g in groupings:
        first: dict[int, int] = {}
        for row, gid in enumerate(g.tolist()):
            if gid in first:
                parent[root(row)] = root(first[gid])
            else:
                first[gid] = row
    roots = [root(i) for i in range(len(parent))]
    number: dict[int, int] = {}
    return np.array([number.setdefault(r, len(number)) for r in roots])


def test_merge_groups_matches_a_naive_union_find():
    rng = np.random.default_rng(3)
    for _ in range(20):
        groupings = [rng.integers(0, 40, size=60) for _ in range(3)]
        assert merge_groups(*groupings).tolist() == _union_find(groupings).tolist()


def _shortest_prefix_rule(groups: np.ndarray, size: int, seed: int) -> set:
    """The documented rule as a loop: walk the shuffled sorted ids, stop at the first prefix with >= size rows,
    step back one group when that is strictly closer."""
    ids = sorted(set(groups.tolist()))
    order = [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))]
    taken, rows = [], 0
    for gid in order:
        if rows >= size:
            break
        taken.append(gid)
        rows += int((groups == gid).sum())
    if len(taken) > 1:
        without = rows - int((groups == taken[-1]).sum())
        if size - without < rows - size:
            taken.pop()
    return set(taken)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_split_keeps_groups_whole_and_follows_the_rule(seed):
    rng = np.random.default_rng(seed)
    groups = np.repeat(rng.permutation(50) * 3 + 11, rng.integers(1, 7, size=50))  # sizes 1..6, odd ids
    train, selection = split_by_groups(groups, 40, seed)
    assert np.array_equal(np.sort(np.concatenate([train, selection])), np.arange(len(groups)))
    assert not set(groups[train]) & set(groups[selection])
    assert set(groups[selection].tolist()) == _shortest_prefix_rule(groups, 40, seed)
    assert abs(len(selection) - 40) <= 3  # within half the largest group (6) of the target
    again = split_by_groups(groups, 40, seed)
    assert np.array_equal(again[0], train) and np.array_equal(again[1], selection)
    assert not np.array_equal(split_by_groups(groups, 40, seed + 100)[1], selection)


def test_split_edges_and_closest_size():
    groups = np.repeat(np.arange(30), 3)
    assert len(split_by_groups(groups, 10, 0)[1]) == 9  # 9 is 1 away, 12 is 2 away
    assert len(split_by_groups(groups, 0, 0)[1]) == 0
    assert len(split_by_groups(groups, 90, 0)[0]) == 0
    with pytest.raises(ConfigError, match="selection_size"):
        split_by_groups(groups, 91, 0)


def test_subsample_groups_takes_every_kth_whole_group():
    groups = np.array([9, 9, 4, 4, 4, 7, 2, 2, 5])  # group numbers 0 0 1 1 1 2 3 3 4
    assert subsample_groups(groups, 2).tolist() == [0, 1, 5, 8]
    assert subsample_groups(groups, 2, offset=1).tolist() == [2, 3, 4, 6, 7]
    assert subsample_groups(groups, 1).tolist() == list(range(9))
    with pytest.raises(ConfigError):
        subsample_groups(groups, 2, offset=2)


@pytest.mark.realdata
def test_real_xnli_en_test_split_by_premise(shared_data):
    from mlminilm.tasks.xnli import load_xnli_split

    data = load_xnli_split(shared_data / "xnli", "test")
    groups = {lang: premise_groups([e.premise for e in examples]) for lang, examples in data.items()}
    en = groups["en"]
    assert len(en) == 5010 and en.max() + 1 == 1670
    assert np.array_equal(en, np.repeat(np.arange(1670), 3))  # 3 consecutive rows per premise
    labels = np.array([e.label for e in data["en"]]).reshape(-1, 3)
    assert (np.sort(labels, axis=1) == [0, 1, 2]).all()  # one of each label per premise
    train, selection = split_by_groups(en, 510, seed=0)
    assert (len(train), len(selection)) == (4500, 510)
    premises = [e.premise for e in data["en"]]
    assert not {premises[i] for i in train} & {premises[i] for i in selection}
    # A few translated premises coincide across different English premises; merged, one split holds everywhere.
    merged = merge_groups(*groups.values())
    assert merged.max() + 1 == 1660
    train, selection = split_by_groups(merged, 510, seed=0)
    assert abs(len(selection) - 510) <= 4
    for lang, examples in data.items():
        assert not {examples[i].premise for i in train} & {examples[i].premise for i in selection}, lang


# --- retention and the bootstrap ---------------------------------------------------------------------------


def test_chance_corrected_by_hand():
    assert chance_corrected(60.0, 80.0) == pytest.approx(4 / 7)  # (80/3) / (140/3)
    assert chance_corrected(80.0, 80.0) == 1.0
    assert np.isnan(chance_corrected(50.0, CHANCE_XNLI))
    out = chance_corrected(np.array([50.0, 75.0]), np.array([CHANCE_XNLI, 75.0]))
    assert np.isnan(out[0]) and out[1] == 1.0
    assert chance_corrected(0.6, 0.8, chance=0.5) == pytest.approx(1 / 3)


def test_point_estimates_by_hand():
    groups = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    student = np.array([1, 1, 0, 1, 0, 0, 1, 1, 1], dtype=bool)  # 6 of 9
    teacher = np.array([1, 1, 1, 1, 1, 0, 1, 1, 1], dtype=bool)  # 8 of 9
    out = bootstrap(student, teacher, groups, n=50)
    assert out["point"]["accuracy"] == pytest.approx(200 / 3)
    assert out["point"]["teacher_accuracy"] == pytest.approx(800 / 9)
    assert out["point"]["retention"] == pytest.approx(0.6)  # (100/3) / (500/9)
    assert out["resamples"] == 50 and out["level"] == 0.95
    for key in ("accuracy", "teacher_accuracy", "retention"):
        lo, hi = out[key]
        assert lo <= out["point"][key] <= hi
    alone = bootstrap(student, None, groups, n=50)
    assert set(alone) >= {"accuracy", "point"} and "retention" not in alone and "teacher_accuracy" not in alone
    assert alone["accuracy"] == out["accuracy"] and alone["point"] == {"accuracy": pytest.approx(200 / 3)}


def test_identical_groups_collapse_the_interval():
    groups = np.repeat(np.arange(40), 3)
    student = np.tile([True, True, False], 40)
    teacher = np.ones(120, dtype=bool)
    out = bootstrap(student, teacher, groups, n=200, seed=5)
    assert out["accuracy"] == (out["point"]["accuracy"],) * 2
    assert out["teacher_accuracy"] == (100.0, 100.0)
    assert out["retention"] == (out["point"]["retention"],) * 2
    assert out["point"]["retention"] == pytest.approx(0.5)  # (200/3 - 100/3) / (100 - 100/3)


def _naive_stats(student, teacher, groups, draws):
    """Per resample, loop over the drawn groups and their rows: student %, teacher %, retention."""
    ids = sorted(set(groups.tolist()))
    rows_of = {gid: [i for i in range(len(groups)) if groups[i] == gid] for gid in ids}
    acc, tacc = [], []
    for draw in draws:
        s = t = size = 0
        for j in draw:
            for row in rows_of[ids[j]]:
                s += int(student[row])
                t += int(teacher[row])
                size += 1
        acc.append(100.0 * s / size)
        tacc.append(100.0 * t / size)
    return np.array(acc), np.array(tacc)


def _pct(values, level=0.95):
    return tuple(np.quantile(values, [(1 - level) / 2, 1 - (1 - level) / 2]))


def test_bootstrap_equals_a_naive_loop_on_the_same_draws():
    rng = np.random.default_rng(11)
    sizes = rng.integers(1, 7, size=35)
    groups = np.repeat(rng.choice(1000, size=35, replace=False), sizes)  # unsorted, non-contiguous ids
    student = rng.random(len(groups)) < 0.6
    teacher = rng.random(len(groups)) < 0.8
    n, seed = 300, 4
    draws = np.random.default_rng(seed).integers(0, 35, size=(n, 35))
    acc, tacc = _naive_stats(student, teacher, groups, draws)
    retention = (acc - 100 / 3) / (tacc - 100 / 3)
    out = bootstrap(student, teacher, groups, n=n, seed=seed, level=0.9)
    assert out["accuracy"] == pytest.approx(_pct(acc, 0.9), rel=1e-12)
    assert out["teacher_accuracy"] == pytest.approx(_pct(tacc, 0.9), rel=1e-12)
    assert out["retention"] == pytest.approx(_pct(retention, 0.9), rel=1e-12)


@pytest.mark.parametrize("shared", [False, True])
def test_average_over_languages_equals_a_naive_loop(shared):
    rng = np.random.default_rng(2)
    langs = 4
    groups = [np.repeat(np.arange(30), 3)] * langs if shared else [np.repeat(np.arange(g), 3) for g in (30, 25, 40, 33)]
    students = [rng.random(len(g)) < p for g, p in zip(groups, (0.5, 0.6, 0.7, 0.55))]
    teachers = [rng.random(len(g)) < 0.8 for g in groups]
    n, seed = 200, 9
    gen = np.random.default_rng(seed)
    if shared:
        draws = [gen.integers(0, 30, size=(n, 30))] * langs
    else:
        draws = [gen.integers(0, g.max() + 1, size=(n, g.max() + 1)) for g in groups]
    per_lang = [_naive_stats(s, t, g, d) for s, t, g, d in zip(students, teachers, groups, draws)]
    acc = sum(a for a, _ in per_lang) / langs
    tacc = sum(t for _, t in per_lang) / langs
    out = bootstrap_average(students, teachers, groups, n=n, seed=seed, shared=shared)
    assert out["accuracy"] == pytest.approx(_pct(acc), rel=1e-12)
    assert out["teacher_accuracy"] == pytest.approx(_pct(tacc), rel=1e-12)
    assert out["retention"] == pytest.approx(_pct((acc - 100 / 3) / (tacc - 100 / 3)), rel=1e-12)
    point_s = np.mean([s.mean() for s in students]) * 100
    assert out["point"]["accuracy"] == pytest.approx(point_s)


def test_one_language_average_is_the_single_bootstrap():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(50), 3)
    student, teacher = rng.random(150) < 0.6, rng.random(150) < 0.75
    single = bootstrap(student, teacher, groups, n=100, seed=3)
    assert bootstrap_average([student], [teacher], [groups], n=100, seed=3) == single


def test_shared_draws_widen_the_average_of_correlated_languages():
    """Languages that translate the same items fail on the same items: drawing them independently averages the
    item noise away, which it must not."""
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(200), 3)
    base = rng.random(600) < 0.6
    students = [base.copy() for _ in range(8)]
    independent = bootstrap_average(students, None, [groups] * 8, n=400, seed=0)
    shared = bootstrap_average(students, None, [groups] * 8, n=400, seed=0, shared=True)
    single = bootstrap(base, None, groups, n=400, seed=0)
    width = lambda out: out["accuracy"][1] - out["accuracy"][0]  # noqa: E731
    assert shared["accuracy"] == pytest.approx(single["accuracy"], rel=1e-12)
    assert width(independent) < 0.5 * width(shared)


def test_pairing_student_equal_to_teacher_retains_exactly_one():
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(300), 3)
    correct = rng.random(900) < 0.8
    out = bootstrap(correct, correct.copy(), groups, n=500, seed=1)
    assert out["accuracy"][0] > CHANCE_XNLI
    assert out["retention"] == (1.0, 1.0) and out["retention_undefined"] == 0
    avg = bootstrap_average([correct] * 3, [correct.copy()] * 3, [groups] * 3, n=200)
    assert avg["retention"] == (1.0, 1.0)


def test_cluster_interval_covers_a_known_proportion():
    """Groups of 3 rows sharing one outcome (fully correlated, p = 0.6): the cluster interval should cover p in
    about 95 % of data sets; a row bootstrap covers far less (it counts 3x the independent information)."""
    rng = np.random.default_rng(123)
    groups = np.repeat(np.arange(150), 3)
    hits = row_hits = 0
    trials = 300
    for trial in range(trials):
        correct = np.repeat(rng.random(150) < 0.6, 3)
        lo, hi = bootstrap(correct, None, groups, n=400, seed=trial)["accuracy"]
        hits += lo <= 60.0 <= hi
        lo, hi = bootstrap(correct, None, np.arange(450), n=400, seed=trial)["accuracy"]  # every row its own group
        row_hits += lo <= 60.0 <= hi
    assert 0.90 <= hits / trials <= 0.99  # 0.927 with these seeds
    assert row_hits / trials < 0.8  # 0.673: the row bootstrap's interval is too narrow


def test_fifteen_languages_thousand_resamples_is_fast():
    rng = np.random.default_rng(0)
    groups = [np.repeat(np.arange(830), 3)] * 15
    students = [rng.random(2490) < 0.7 for _ in range(15)]
    teachers = [rng.random(2490) < 0.8 for _ in range(15)]
    start = time.perf_counter()
    bootstrap_average(students, teachers, groups, n=1000, seed=0)
    for s, t, g in zip(students, teachers, groups):
        bootstrap(s, t, g, n=1000, seed=0)
    assert time.perf_counter() - start < 3.0  # about 0.2 s measured alone; slack for a shared 2-core machine


def test_bad_inputs_name_the_problem():
    groups = np.repeat(np.arange(3), 3)
    with pytest.raises(DataError, match="pair up"):
        bootstrap(np.ones(9, bool), np.ones(8, bool), groups)
    with pytest.raises(ConfigError, match="level"):
        bootstrap(np.ones(9, bool), None, groups, level=95)
    with pytest.raises(DataError, match="same number of groups"):
        bootstrap_average([np.ones(9, bool), np.ones(6, bool)], None, [groups, groups[:6]], shared=True)
