"""What `compare` (mlminilm.compare) checks before it compares evaluation reports: that they share their protocol
(`SAME_PROTOCOL`), which languages every report has, and that they scored the same data (examples, skipped rows,
data files), refusing them with a DataError otherwise; and the differences it only warns about (languages left out,
data read from different places, each run's own settings, throughput set-ups, asymmetric retrieval search beside
symmetric: `search_lines`). The rule itself is described in the
docstring of mlminilm.compare."""

from __future__ import annotations

import json
from pathlib import Path

from mlminilm.errors import DataError

# What must be equal for reports to be compared: (what, the value a report records). None: not recorded.
SAME_PROTOCOL = (
    ("task", lambda d: d.get("task")),
    ("benchmark", lambda d: d.get("benchmark")),  # retrieval: MLQA, XQuAD, TyDiQA-GoldP or BEIR files
    ("split", lambda d: d.get("split")),
    ("metrics", lambda d: ", ".join(d["metrics"]) if d.get("metrics") else None),  # Tatoeba: the directions
    ("scorer", lambda d: (d.get("scorer") or {}).get("title")),
    ("language pairs", lambda d: "G-XLT" if d.get("gxlt") else "monolingual" if d.get("scorer") else None),
    ("labels", lambda d: ", ".join(d["labels"]) if d.get("labels") else None),
    ("retrieval rule", lambda d: (d.get("settings") or {}).get("similarity")),
)
# `settings` that do not depend on the model's own run and are not worth a warning when they differ.
_QUIET_SETTINGS = ("batch_size", "sorted_by_length", "similarity")


def refuse_different_protocol(docs: dict[str, dict]) -> None:
    """DataError naming every protocol field (`SAME_PROTOCOL`) on which the reports `docs` differ."""
    problems = _protocol_problems(docs)
    if problems:
        raise DataError(
            "the reports do not share their data and protocol: "
            + "; ".join(problems)
            + "; compare reports of one evaluation of the same data"
        )


def compared_languages(docs: dict[str, dict], base: dict) -> tuple[list[str], dict[str, list[str]]]:
    """The languages every report has, in the baseline's (`base`) order, and the others with the reports that have
    them (left out of the comparison); DataError when no language is in every report."""
    common = [k for k in base["languages"] if all(k in d["languages"] for d in docs.values())]
    dropped: dict[str, list[str]] = {}
    for name, d in docs.items():
        for key in d["languages"]:
            if key not in common:
                dropped.setdefault(key, []).append(name)
    if not common:
        have = "; ".join(f"{n}: {', '.join(d['languages'])}" for n, d in docs.items())
        raise DataError(f"the reports have no language in common ({have})")
    return common, dropped


def refuse_different_data(docs: dict[str, dict], common: list[str]) -> None:
    """DataError naming the compared languages `common` on which the reports scored different data."""
    problems = _data_problems(docs, common)
    if problems:
        raise DataError(
            "the reports do not score the same data: "
            + "; ".join(problems)
            + "; compare reports of the same data files"
        )


def _differs(what: str, values: dict[str, object]) -> str | None:
    if len({json.dumps(v, sort_keys=True) for v in values.values()}) <= 1:
        return None
    return f"different {what} (" + "; ".join(f"{n}: {_shown(v)}" for n, v in values.items()) + ")"


def _shown(value) -> str:
    if value is None:
        return "not recorded"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def _protocol_problems(docs: dict[str, dict]) -> list[str]:
    found = []
    for what, get in SAME_PROTOCOL:
        values = {n: get(d) for n, d in docs.items()}
        if all(v is None for v in values.values()):
            continue
        found.append(_differs(what, values))
    return [p for p in found if p]


def data_files(doc: dict, key: str):
    """The names of the data files `doc` scored language `key` on (the data source where it records none)."""
    data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
    files = (data.get("files") or {}).get(key) if isinstance(data.get("files"), dict) else None
    scores = doc["languages"][key]
    files = files or scores.get("file") or scores.get("files")
    if isinstance(files, dict):
        return [Path(str(files[side])).name for side in sorted(files)]
    if isinstance(files, str):
        return [Path(files).name]
    return data.get("source")


def _data_problems(docs: dict[str, dict], common: list[str]) -> list[str]:
    checks = (
        ("examples", lambda d, k: d["languages"][k].get("examples")),
        ("rows skipped", lambda d, k: d["languages"][k].get("skipped")),
        ("data files", data_files),
    )
    found = []
    for what, get in checks:
        wrong = []
        for key in common:
            values = {n: get(d, key) for n, d in docs.items()}
            if what != "data files" and any(v is None for v in values.values()):
                continue  # not recorded by every report (older reports): not compared
            problem = _differs(what, values)
            if problem:
                wrong.append(f"{key}: {problem}")
        if len(wrong) > 3:
            wrong = [*wrong[:3], f"and {len(wrong) - 3} more languages"]
        found += wrong
    return found


def warning_lines(docs: dict[str, dict], dropped: dict[str, list[str]]) -> list[str]:
    lines = []
    if dropped:
        lines.append(
            "languages not in every report, left out of the comparison and its averages: "
            + "; ".join(f"{key} (only in {', '.join(names)})" for key, names in dropped.items())
        )
    sources = {n: (d.get("data") or {}).get("source") for n, d in docs.items()}
    if len(set(sources.values()) - {None}) > 1:
        lines.append(
            "the reports read their data from different places ("
            + "; ".join(f"{n}: {s}" for n, s in sources.items())
            + "); compared because the file names and example counts agree"
        )
    settings = {n: d.get("settings") or {} for n, d in docs.items()}
    for key in dict.fromkeys(k for s in settings.values() for k in s):
        if key in _QUIET_SETTINGS:
            continue
        values = {n: s.get(key) for n, s in settings.items()}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            lines.append(
                f"evaluated with different {key} ("
                + "; ".join(f"{n}: {_shown(v)}" for n, v in values.items())
                + "), each run's own choice"
            )
    setups = {n: _setup(d.get("throughput")) for n, d in docs.items() if d.get("throughput")}
    if len(set(setups.values())) > 1:
        lines.append(
            "throughput measured on different set-ups ("
            + "; ".join(f"{n}: {s}" for n, s in setups.items())
            + "): the speeds are not like for like"
        )
    return search_lines(docs) + lines + load_lines(docs)


def search_label(doc: dict) -> str | None:
    """How a retrieval report searched: symmetric (one model embeds questions and passages) or asymmetric
    (`eval-retrieval --query-model`: the questions by one model, the passages, the index, by another); None for
    other tasks."""
    if doc.get("task") != "retrieval":
        return None
    if doc.get("search") == "asymmetric":
        return f"asymmetric, questions by {doc.get('query_model')}, passages (the index) by {doc.get('model')}"
    return f"symmetric, questions and passages by {doc.get('model')}"


def search_lines(docs: dict[str, dict]) -> list[str]:
    """A warning that labels each report's search where any is asymmetric: such a report is compared with the
    others (the same questions, passages and scoring), never silently."""
    if not any(d.get("search") == "asymmetric" for d in docs.values()):
        return []
    mixed = len({d.get("search") == "asymmetric" for d in docs.values()}) > 1
    return [
        ("symmetric and asymmetric search side by side (" if mixed else "asymmetric search (")
        + "; ".join(f"{n}: {search_label(d)}" for n, d in docs.items())
        + "): the same questions and passages, each report's embedded by the models it names; an asymmetric "
        "report's size is its index model's and its speed that of all its texts (its query model's own: "
        "`query_size`, `throughput.sides.query`)"
    ]


# Loads apart by this much (1-minute load average, less the run's own CPU use) or CPU shares (the CPU seconds a run
# got per wall second, per thread it asked for) apart by this much: the speed ratios measure the machine too.
OTHER_LOAD_APART = 1.0
CPU_SHARE_APART = 0.25


def load_lines(docs: dict[str, dict]) -> list[str]:
    """Warnings when the reports' speeds were measured on different machines, or under different loads (the
    throughput's `machine`, `load_average_1min`, `cpu_per_wall_s` and `threads`: mlminilm.evaluation.machine)."""
    tps = {n: d["throughput"] for n, d in docs.items() if isinstance(d.get("throughput"), dict)}
    lines = []
    machines = {n: tp["machine"] for n, tp in tps.items() if isinstance(tp.get("machine"), dict)}
    if len({json.dumps(m, sort_keys=True) for m in machines.values()}) > 1:
        lines.append(
            "throughput measured on different machines ("
            + "; ".join(f"{n}: {m.get('host')}, {m.get('cpu')}, {m.get('cores')} cores" for n, m in machines.items())
            + "): the speed ratios are not like for like"
        )
    loads = {n: _load(tp) for n, tp in tps.items() if _load(tp) is not None}
    if len(loads) > 1:
        others = [o for o, _ in loads.values()]
        shares = [s for _, s in loads.values() if s is not None]
        apart = max(others) - min(others) >= OTHER_LOAD_APART
        if apart or (len(shares) > 1 and max(shares) - min(shares) >= CPU_SHARE_APART):
            lines.append(
                "throughput measured under different loads ("
                + "; ".join(
                    f"{n}: load {tps[n]['load_average_1min']['end']:g}"
                    + (f", the run got {s:.0%} of its {tps[n]['threads']} threads" if s is not None else "")
                    for n, (_, s) in loads.items()
                )
                + "): the speed ratios are not like for like; measure them again on an idle machine"
            )
    return lines


def _load(tp: dict) -> tuple[float, float | None] | None:
    """(the load besides the run itself, the share of its threads' time the run got on a CPU) or None."""
    end = (tp.get("load_average_1min") or {}).get("end")
    own = tp.get("cpu_per_wall_s")
    if not isinstance(end, (int, float)) or not isinstance(own, (int, float)):
        return None
    threads = tp.get("threads")
    on_cpu = str(tp.get("device", "")).startswith("cpu") and isinstance(threads, int) and threads > 0
    return max(0.0, end - own), (own / threads if on_cpu else None)


def _setup(tp: dict) -> str:
    return f"{tp.get('device')}, {tp.get('precision')}, batch {tp.get('batch_size')}"
