"""A task's retention table from its stage results: per row and language the score with its 95 % interval, the
share of the teacher's score with its interval (paired bootstrap: teacher and row on the same resample,
mlminilm.metrics.retention), the same for the unweighted average over languages, and in how many languages a row
scores above the cut teacher."""

from __future__ import annotations

import math

import numpy as np

from mlminilm.retention.measures import Task, items_of
from mlminilm.retention.rows import BASELINE, TEACHER, Row


def _number(x) -> float | None:
    """A float for JSON, None where it is undefined (a share of a teacher at chance)."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _pair(lo_hi) -> list[float | None]:
    return [_number(v) for v in lo_hi]


def _summary(boot: dict, with_teacher: bool, score: float) -> dict:
    """`score` (the evaluation's figure; the bootstrap's point estimate is the same mean of the items), its
    interval, and with a teacher the share and its interval."""
    entry = {"score": float(score), "interval": _pair(boot["accuracy"])}
    if with_teacher:
        entry["share"] = _number(boot["point"].get("retention"))
        entry["share_interval"] = _pair(boot["retention"]) if "retention" in boot else [None, None]
    return entry


def task_table(task: Task, rows: list[Row], results: dict[str, dict], resamples: int, seed: int) -> dict:
    """{"task", "metric", "chance", "languages", "rows": {name: {"languages": {lang: entry}, "average": entry,
    "above_baseline": k or None}}}; an entry holds score and interval, and for every row but the teacher share
    and share_interval (fractions: 1 = the teacher's score). Languages: the teacher's, in its report's order."""
    from mlminilm.metrics.retention import bootstrap, bootstrap_average

    teacher = next(r for r in rows if r.kind == TEACHER)
    langs = list(results[teacher.name]["languages"])
    items = {
        r.name: [items_of(task.name, results[r.name]["languages"][lang]) for lang in langs]
        for r in rows
        if r.name in results
    }
    # the clusters: what the result names per language (MLQA's articles), else each item its own
    by_lang = results[teacher.name]["languages"]
    groups = [np.asarray(by_lang[lang].get("groups", np.arange(len(x)))) for lang, x in zip(langs, items[teacher.name])]
    if task.shared_items:  # row-parallel languages: the clusters (premise groups) and the draw shared by all
        groups = [np.asarray(results[teacher.name]["groups"])] * len(langs)
    options = dict(n=resamples, seed=seed, chance=task.chance)
    table: dict[str, dict] = {}
    for r in rows:
        if r.name not in items:
            continue
        paired = r.kind != TEACHER
        versus = items[teacher.name] if paired else [None] * len(langs)
        reported = [results[r.name]["languages"][lang]["score"] for lang in langs]  # the evaluation's own figure
        per_lang = {
            lang: _summary(bootstrap(own, other, g, **options), paired, score)
            for lang, own, other, g, score in zip(langs, items[r.name], versus, groups, reported)
        }
        average = bootstrap_average(
            items[r.name], items[teacher.name] if paired else None, groups, shared=task.shared_items, **options
        )
        entry = _summary(average, paired, float(np.mean(reported)))
        table[r.name] = {"languages": per_lang, "average": entry, "above_baseline": None}
    baseline = next((r.name for r in rows if r.kind == BASELINE and r.name in table), None)
    if baseline is not None:
        base = table[baseline]["languages"]
        for name, entry in table.items():
            if name != baseline:
                entry["above_baseline"] = sum(entry["languages"][l]["score"] > base[l]["score"] for l in langs)
    return {
        "task": task.name,
        "title": task.title,
        "metric": task.metric,
        "chance": task.chance,
        "languages": langs,
        "baseline": baseline,
        "rows": table,
    }
