"""`compare`: evaluation reports of several models on the same data and protocol, per language, side by side.

It reads the `metrics.json` that eval-xnli, eval-mlqa, eval-tatoeba and eval-retrieval write, refuses reports that do
not score the same data with the same protocol, and gives per language (and for the average) each model's score, its
ratio to the baseline's and, for classification, the chance-corrected ratio; with the speeds and sizes the reports
carry.

The same data and protocol means equal (where the reports record them; a field no report has is not compared):

- the task (`xnli`, `mlqa`, `xquad`, `tydiqa`, `squad-format`, `tatoeba`, `retrieval` with its benchmark), the split,
  the metrics (for Tatoeba the retrieval directions), the QA scorer, G-XLT or monolingual pairs, the classifier's
  label set and the retrieval rule (`settings.similarity`);
- for every compared language: the number of scored examples, of skipped rows (XNLI), and the data files by name
  (a copy of the data in another directory is the same data; where the reports read different directories, a
  warning says so). A report without file names (a `hf:` dataset) is compared by its data source.

What each model's run chose for itself is not refused but recorded: the embedding layer, pooling and prefix of
Tatoeba, lengths a fine-tuning run fixed (`settings`, one warning per difference), and the throughput's device,
precision and batch (a warning when they differ, as the speeds are then not like for like). A model can be
compared whether the report ran it or scored its predictions (`eval-mlqa --predictions`): the scores are of the
same questions with the same scorer.
Retrieval by asymmetric search (`eval-retrieval --query-model`: the questions embedded by one model, the passages by
another) is compared with symmetric reports of the same data, labelled: a warning and the comparison's `search` name
each report's models, and `--baseline` finds such a report by its query model.

Languages that only some reports have are left out, with a warning naming them; every average is then the
unweighted mean over the compared languages (each evaluation's own average is that mean over its languages).
Reports with no language in common are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.compare_checks import (
    compared_languages,
    refuse_different_data,
    refuse_different_protocol,
    search_label,
    warning_lines,
)
from mlminilm.config import CompareConfig
from mlminilm.errors import ConfigError, DataError, Problems
from mlminilm.io import user_json
from mlminilm.version import __version__

log = mlog.get(__name__)

REPORT_FILE = "metrics.json"
KIND = "comparison"  # the `kind` of the document compare writes (an evaluation report has none)
HEADLINE = ("f1", "xx_to_en", "ndcg_at_10", "accuracy")  # the table's metric by default: the first the reports have
# The wall-clock and CPU-time speed ratios of two reports disagreeing by more than this factor: the wall clock
# measured the machine (its other work) as well as the models, so the CPU-time ratio leads.
SPEED_RATIOS_APART = 1.25
PROTOCOL = (
    "comparison of evaluation reports of the same data and protocol, per language: each model's score; ratio = "
    "score / the baseline's; chance-corrected = (score - chance) / (baseline's - chance), chance = 100 / the "
    "number of classes (classification); average = unweighted mean over the compared languages, its ratios "
    "those of the averages; speed = examples per second / the baseline's (wall clock), and on the CPU examples per "
    "CPU second of the process / the baseline's (CPU time), which leads where the runs' loads differ or the two "
    f"ratios disagree by more than {SPEED_RATIOS_APART:g}x"
)


@dataclass(frozen=True)
class Report:
    """One evaluation report: the argument as given, its metrics.json and the document in it."""

    arg: str
    file: Path
    doc: dict

    @property
    def folder(self) -> Path:
        return self.file.resolve().parent

    def model(self) -> str | None:
        # asymmetric retrieval (eval-retrieval --query-model): the model under test embeds the questions
        return self.doc.get("query_model") or self.doc.get("model") or self.doc.get("predictions_from")


def run(cfg: CompareConfig) -> dict:
    """`_run` under the output protocol: with --out, the lock is taken first and held for the whole comparison."""
    from mlminilm.evaluation.common import claims_report

    return claims_report("compare")(_run)(cfg)


def _run(cfg: CompareConfig) -> dict:
    """Compare the reports `cfg.reports`; returns the comparison document (and writes it into `cfg.out` as JSON,
    CSV, Markdown and a chart when given). Every problem with the inputs is found before anything is written."""
    problems = Problems()
    reports = [problems.attempt(lambda arg=arg: load_report(arg)) for arg in cfg.reports]
    report_dir = None
    if cfg.out is not None:
        from mlminilm.evaluation.common import ReportDir

        protect = [("REPORT_DIR", str(r.folder)) for r in reports if r is not None]
        report_dir = problems.attempt(lambda: ReportDir.open(cfg.out, cfg.overwrite, protect=protect))
    problems.raise_any()
    _refuse_repeats(reports)
    labels = report_labels(reports)
    baseline = pick_baseline(reports, labels, cfg.baseline)
    doc = compare_documents(
        {label: r.doc for label, r in zip(labels, reports)},
        baseline=baseline,
        metric=cfg.metric,
        sources={label: str(r.file) for label, r in zip(labels, reports)},
    )
    if report_dir is not None:
        from mlminilm import report

        doc["report_dir"] = str(report_dir.write(lambda folder: report.write_comparison(doc, folder)))
    return doc


# ------------------------------------------------------------------------------------------- reading


def load_report(arg: str | Path) -> Report:
    """The report at `arg` (a report directory, or its metrics.json); a DataError saying what is wrong with it."""
    path = Path(arg)
    if path.is_dir():
        file = path / REPORT_FILE
        if not file.is_file():
            raise DataError(
                f"{arg} has no {REPORT_FILE}: give the --out directory of eval-xnli, eval-mlqa, "
                f"eval-tatoeba or eval-retrieval (or its {REPORT_FILE})"
            )
    elif path.is_file():
        file = path
    else:
        raise DataError(f"{arg}: no such report directory or file")
    try:
        doc = user_json.load(file, finite=False)  # json.dumps writes NaN; report_problems names the field
    except user_json.JsonError as exc:
        raise DataError(
            f"{file} is damaged: not valid JSON ({exc.reason}); run the evaluation again to rewrite it"
        ) from None
    if isinstance(doc, dict) and doc.get("kind") == KIND:
        raise DataError(
            f"{file} is a comparison written by `mlminilm compare`, not an evaluation report; give the "
            f"reports it compared"
        )
    wrong = report_problems(doc)
    if wrong:
        raise DataError(f"{file} is damaged: {'; '.join(wrong)}; run the evaluation again to rewrite it")
    return Report(str(arg), file, doc)


def report_problems(doc) -> list[str]:
    """What keeps `doc` from being an evaluation report compare can read (at most a few, the first found)."""
    if not isinstance(doc, dict):
        return [f"a JSON {type(doc).__name__}, not an object"]
    p: list[str] = []
    if not isinstance(doc.get("task"), str) or not doc["task"]:
        p.append("no `task`")
    metrics = doc.get("metrics")
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
        p.append("no `metrics` list")
        metrics = []
    if not isinstance(doc.get("average"), dict):
        p.append("no `average`")
    languages = doc.get("languages")
    if not isinstance(languages, dict) or not languages:
        p.append("no `languages`")
        return p
    for key, scores in languages.items():
        if not isinstance(scores, dict):
            p.append(f"languages.{key} is not an object")
            continue
        if not _count(scores.get("examples")):
            p.append(f"languages.{key}.examples is not a count")
        for m in metrics:
            if not _number(scores.get(m)):
                p.append(f"languages.{key}.{m} is not a number")
            elif not _score(scores[m]):  # every metric compared is a percentage: 1e308 is no score
                p.append(f"languages.{key}.{m} is {scores[m]!r}, not a score in [0, 100]")
        if len(p) >= 3:
            break
    return p[:3]


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _score(x) -> bool:
    return 0 <= x <= 100


def _count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _refuse_repeats(reports: list[Report]) -> None:
    seen: dict[Path, str] = {}
    for r in reports:
        key = r.file.resolve()
        if key in seen:
            raise ConfigError(f"{seen[key]} and {r.arg} are the same report; give each report once")
        seen[key] = r.arg


# ------------------------------------------------------------------------------------ names, baseline


def report_labels(reports: list[Report]) -> list[str]:
    """Each report's name in the comparison: its directory's name (the path's last parts where two share one;
    the file name without .json for a metrics file not named metrics.json)."""
    keys = [r.folder if r.file.name == REPORT_FILE else r.file.resolve().with_suffix("") for r in reports]
    for depth in range(1, max(len(k.parts) for k in keys) + 1):
        labels = ["/".join(k.parts[-depth:]) for k in keys]
        if len(set(labels)) == len(labels):
            return labels
    return [str(k) for k in keys]


def pick_baseline(reports: list[Report], labels: list[str], name: str | None) -> str:
    """The label of the report `name` names: first by its own names (its label, directory name or path as
    given), then by its model (as the report records it, or the model path's last component)."""
    if name is None:
        return labels[0]

    def own(r: Report, label: str) -> set[str]:
        return {label, r.folder.name, r.arg, r.arg.rstrip("/"), str(r.file)}

    def model(r: Report, label: str) -> set[str]:
        m = r.model()
        return {m, m.rstrip("/"), Path(m).name} if m else set()

    for names in (own, model):
        hits = [label for r, label in zip(reports, labels) if name in names(r, label)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise ConfigError(f"--baseline {name} names several reports ({', '.join(hits)}); give one of those names")
    known = ", ".join(f"{label} (model {r.model() or 'unknown'})" for r, label in zip(reports, labels))
    raise ConfigError(f"--baseline {name}: no report has that name or model; the reports: {known}")


# ------------------------------------------------------------------------------------------ comparing


def compare_documents(
    docs: dict[str, dict], baseline: str | None = None, metric: str | None = None, sources: dict[str, str] | None = None
) -> dict:
    """The comparison document of evaluation documents `docs` (name -> metrics document, in the table's order)
    against `docs[baseline]` (default: the first). `metric`: the table's figure (default: the headline of
    HEADLINE the reports have); every metric is compared in the document. ConfigError / DataError when the
    documents are not of the same data and protocol (see the module's docstring)."""
    names = list(docs)
    baseline = names[0] if baseline is None else baseline
    if baseline not in docs:
        raise ConfigError(f"baseline {baseline!r} is not one of the reports ({', '.join(names)})")
    base = docs[baseline]
    refuse_different_protocol(docs)
    metrics = list(base.get("metrics") or ([metric] if metric else []))
    if metric is None:
        metric = next((m for m in HEADLINE if m in metrics), metrics[0] if metrics else None)
    if metric not in metrics:
        raise ConfigError(f"--metric {metric}: the reports' metrics are {', '.join(metrics) or 'not recorded'}")
    common, dropped = compared_languages(docs, base)
    refuse_different_data(docs, common)
    warnings = warning_lines(docs, dropped)
    for line in warnings:
        log.warning("%s", line)
    labels = base.get("labels")
    chance = 100.0 / len(labels) if labels and "accuracy" in metrics else None

    def entry(values: dict[str, dict[str, float]], examples: int) -> dict:
        out = {
            "examples": examples,
            "scores": values,
            "ratio": {n: {m: _ratio(v[m], values[baseline][m]) for m in metrics} for n, v in values.items()},
        }
        if chance is not None:
            out["chance_corrected"] = {
                n: {"accuracy": _corrected(v["accuracy"], values[baseline]["accuracy"], chance)}
                for n, v in values.items()
            }
        return out

    languages = {
        key: entry(
            {n: {m: float(d["languages"][key][m]) for m in metrics} for n, d in docs.items()},
            int(base["languages"][key]["examples"]),
        )
        for key in common
    }
    average = entry(
        {n: {m: sum(languages[k]["scores"][n][m] for k in common) / len(common) for m in metrics} for n in names},
        sum(v["examples"] for v in languages.values()),
    )
    log.debug("%d reports on %d languages, against %s", len(names), len(common), baseline)
    doc = {
        "kind": KIND,
        "task": base.get("task"),
        **({"split": base["split"]} if base.get("split") else {}),
        **({"scorer": base["scorer"]} if base.get("scorer") else {}),
        "protocol": PROTOCOL,
        "report_protocol": base.get("protocol"),
        "baseline": baseline,
        **_search(docs),
        "metric": metric,
        "metrics": metrics,
        "chance": chance,
        "reports": {n: _report_record(d, base, (sources or {}).get(n)) for n, d in docs.items()},
        "languages": languages,
        "average": average,
        "dropped_languages": dropped,
        "warnings": warnings,
        "mlminilm": __version__,
    }
    return doc


def _model_shown(doc: dict) -> str | None:
    """The report's model as the comparison names it; an asymmetric search's names both of its models."""
    if doc.get("search") == "asymmetric":
        return f"{doc.get('query_model')} (questions) on the index of {doc.get('model')}"
    return doc.get("model") or doc.get("predictions_from")


def _search(docs: dict[str, dict]) -> dict:
    """{"search": {report: its search}} where a retrieval report is asymmetric search (compare_checks.search_label),
    else nothing: a comparison of symmetric reports is as it was."""
    if not any(d.get("search") == "asymmetric" for d in docs.values()):
        return {}
    return {"search": {n: search_label(d) for n, d in docs.items()}}


def _ratio(score: float, base: float) -> float | None:
    return score / base if base else None


def _corrected(score: float, base: float, chance: float) -> float | None:
    from mlminilm.metrics.retention import chance_corrected

    value = chance_corrected(score, base, chance)
    return None if math.isnan(value) else value


def _parameters(doc: dict) -> int | None:
    value = doc.get("parameters")
    if isinstance(value, dict):
        value = value.get("total")
    if value is None and isinstance(doc.get("size"), dict):  # what the evaluations record (mlminilm.models.size)
        value = doc["size"].get("parameters")
    return value if _count(value) else None


def _size(doc: dict, key: str) -> int | None:
    value = doc["size"].get(key) if isinstance(doc.get("size"), dict) else None
    return value if _count(value) else None


def _report_record(doc: dict, base: dict, source: str | None) -> dict:
    """Where a report came from, its model, speed and size, each with its ratio to the baseline's."""
    tp = doc.get("throughput") if isinstance(doc.get("throughput"), dict) else None
    base_tp = base.get("throughput") if isinstance(base.get("throughput"), dict) else None
    speed = tp.get("examples_per_s") if tp else None
    base_speed = base_tp.get("examples_per_s") if base_tp else None
    wall = speed / base_speed if _number(speed) and _number(base_speed) and base_speed else None
    per_cpu, base_per_cpu = _per_cpu_s(tp), _per_cpu_s(base_tp)
    cpu = per_cpu / base_per_cpu if per_cpu and base_per_cpu else None
    params, base_params = _parameters(doc), _parameters(base)
    disk, base_disk = _size(doc, "disk_bytes"), _size(base, "disk_bytes")
    return {
        "source": source,
        "model": _model_shown(doc),
        "summary": doc.get("summary"),
        "throughput": tp,
        "examples_per_s": speed,
        "speed_ratio": wall,
        "examples_per_cpu_s": per_cpu,
        "cpu_speed_ratio": cpu,
        "speed_shown": _speed_shown(tp, base_tp, wall, cpu),
        "parameters": params,
        "parameters_ratio": params / base_params if params is not None and base_params else None,
        "embedding_parameters": _size(doc, "embedding_parameters"),
        "disk_bytes": disk,
        "disk_ratio": disk / base_disk if disk is not None and base_disk else None,
    }


def _per_cpu_s(tp: dict | None) -> float | None:
    """Examples per second of the process's CPU time (every thread's), for a run on the CPU that recorded it
    (mlminilm.evaluation.machine): what the model costs, whatever else the machine was doing. None on a GPU, where
    the CPU time is the host's waiting, not the model's work."""
    if not tp or not str(tp.get("device", "")).startswith("cpu"):
        return None
    per_s, elapsed, cpu = tp.get("examples_per_s"), tp.get("elapsed_s"), tp.get("cpu_s")
    if not (_number(per_s) and _number(elapsed) and _number(cpu)) or cpu <= 0 or elapsed <= 0:
        return None
    return per_s * elapsed / cpu


def _speed_shown(tp: dict | None, base_tp: dict | None, wall: float | None, cpu: float | None) -> dict | None:
    """Which speed ratio leads (`by`: "wall clock" or "CPU time") and why: the CPU-time ratio when the two runs'
    loads differ (compare_checks' rule, the one its warning uses) or the two ratios disagree by more than
    SPEED_RATIOS_APART; else the wall clock's. None without a wall-clock ratio."""
    if wall is None:
        return None
    if cpu is None or wall <= 0:
        return {"by": "wall clock", "why": "no CPU time recorded for both runs on a CPU" if cpu is None else None}
    from mlminilm.compare_checks import CPU_SHARE_APART, OTHER_LOAD_APART, _load

    why = []
    loads = [_load(t) for t in (tp, base_tp)]
    if all(loads):
        (other, share), (base_other, base_share) = loads
        apart = abs(other - base_other) >= OTHER_LOAD_APART
        if apart or (share is not None and base_share is not None and abs(share - base_share) >= CPU_SHARE_APART):
            why.append("the two runs' loads differ")
    if max(wall / cpu, cpu / wall) > SPEED_RATIOS_APART:
        why.append(f"the wall-clock and CPU-time ratios disagree by more than {SPEED_RATIOS_APART:g}x")
    if why:
        return {"by": "CPU time", "why": " and ".join(why)}
    return {"by": "wall clock", "why": None}


# `from mlminilm import compare` may give this module: calling it runs the command (mlminilm.api).
from mlminilm.api import command_module  # noqa: E402

command_module(__name__, CompareConfig)
