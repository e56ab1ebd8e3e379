"""The comparison document of `mlminilm compare` (`mlminilm.compare`) rendered as the evaluation reports are: a
terminal table, CSV, Markdown and a chart (`write_comparison`: the same four files as `write_reports`)."""

from __future__ import annotations

import json
from pathlib import Path

from mlminilm.report.tables import _TASKS, _TITLES, FILES, _language_name, csv_text


def _ratio_column(name: str, base: str, corrected: bool = False) -> str:
    return f"{name}/{base}" + (" (cc)" if corrected else "")


def _rounded(value, digits: int):
    return None if value is None else round(value, digits)


def comparison_rows(doc: dict) -> list[dict]:
    """The comparison of `doc["metric"]` as flat rows, one per language and a last `average`: language, name,
    examples, each report's score, each other report's ratio to the baseline (`NAME/BASE`) and, for
    classification, its chance-corrected ratio (`NAME/BASE (cc)`); None where a ratio has no meaning."""
    metric, base = doc["metric"], doc["baseline"]
    others = [n for n in doc["reports"] if n != base]
    out = []
    for key, entry in [*doc["languages"].items(), ("average", doc["average"])]:
        name = f"mean of {len(doc['languages'])}" if key == "average" else _language_name(key)
        row = {"language": key, "name": name, "examples": entry["examples"]}
        row.update({n: _rounded(entry["scores"][n][metric], 2) for n in doc["reports"]})
        row.update({_ratio_column(n, base): _rounded(entry["ratio"][n][metric], 4) for n in others})
        corrected = entry.get("chance_corrected", {})
        if metric in corrected.get(base, {}):
            row.update({_ratio_column(n, base, True): _rounded(corrected[n][metric], 4) for n in others})
        out.append(row)
    return out


def _comparison_cell(doc: dict, column: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.2f}" if column in doc["reports"] else f"{value:.3f}"
    return str(value)


def comparison_title(doc: dict) -> str:
    split = f" {doc['split']}" if doc.get("split") else ""
    scorer = f" ({doc['scorer']['title']} scorer)" if doc.get("scorer") else ""
    metric = _TITLES.get(doc["metric"], doc["metric"])
    return (
        f"{_TASKS.get(doc['task'], doc['task'] or 'evaluation')}{split}{scorer}: {metric} (%) of "
        f"{', '.join(doc['reports'])}, against {doc['baseline']}"
    )


def comparison_table(doc: dict):
    """The comparison for the terminal (the caller prints it on stdout)."""
    from rich.table import Table

    data = comparison_rows(doc)
    cells = [[_comparison_cell(doc, c, v) for c, v in row.items()] for row in data]
    table = Table(title=comparison_title(doc))
    for i, column in enumerate(data[0]):
        # Figures and header words are never cut: on a narrow terminal the headers wrap between words and the
        # language names shorten.
        header = column.replace("/", " / ") if column not in doc["reports"] else column
        widest = 0 if column == "name" else max([len(row[i]) for row in cells] + [len(w) for w in header.split()])
        table.add_column(header, justify="left" if column in ("language", "name") else "right", min_width=widest)
    for i, (row, values) in enumerate(zip(data, cells)):
        table.add_row(*values, end_section=i == len(data) - 2, style="bold" if row["language"] == "average" else None)
    return table


def _comparison_lines(doc: dict) -> list[str]:
    """What the table does not show: how the ratios are made, and each report's model, speed and size."""
    base, chance = doc["baseline"], doc.get("chance")
    how = f"ratio: score / {base}'s"
    if chance:
        how += (
            f"; cc: chance-corrected, (score - {chance:.1f}) / ({base}'s - {chance:.1f}), chance = 100 / "
            f"{round(100 / chance)} classes"
        )
    how += f"; average: mean over the {len(doc['languages'])} compared languages, its ratios those of the averages"
    lines = [how]
    for name, r in doc["reports"].items():
        parts = [f"{name}: {r.get('model') or r.get('source') or 'model not recorded'}"]
        tp = r.get("throughput") or {}
        if r.get("examples_per_s") is not None:
            lead = _cpu_time_lead(r) if name != base else None
            ratio = f" ({r['speed_ratio']:.2f}x)" if name != base and r.get("speed_ratio") is not None else ""
            load = (tp.get("load_average_1min") or {}).get("end")
            busy = f", load {load:g}, {tp['cpu_per_wall_s']:.2f} CPU s per s" if load is not None else ""
            if lead:
                parts.append(lead)
                ratio = ""  # said in the lead, beside the CPU time's
            parts.append(
                f"{r['examples_per_s']:,.1f} examples/s{ratio} on {tp.get('device')} "
                f"({tp.get('precision')}, batch {tp.get('batch_size')}{busy})"
            )
        if r.get("parameters") is not None:
            ratio = f" ({r['parameters_ratio']:.2f}x)" if name != base and r.get("parameters_ratio") else ""
            embeddings = r.get("embedding_parameters")
            share = f", {embeddings / r['parameters']:.0%} of them word embeddings" if embeddings else ""
            parts.append(f"{r['parameters']:,} parameters{ratio}{share}")
        if r.get("disk_bytes") is not None:
            ratio = f" ({r['disk_ratio']:.2f}x)" if name != base and r.get("disk_ratio") else ""
            parts.append(f"{r['disk_bytes'] / 1e6:,.1f} MB on disk{ratio}")
        if r.get("summary"):
            parts.append(r["summary"])
        lines.append("; ".join(parts))
    return lines


def _cpu_time_lead(r: dict) -> str | None:
    """`speed 1.81x by CPU time (...)`, when the comparison leads with the CPU-time ratio (mlminilm.compare's
    `speed_shown`), else None (the wall-clock ratio follows the examples/s as before)."""
    shown = r.get("speed_shown") or {}
    if shown.get("by") != "CPU time" or r.get("cpu_speed_ratio") is None:
        return None
    return (
        f"speed {r['cpu_speed_ratio']:.2f}x by CPU time per example (shown because {shown['why']}; "
        f"wall clock {r['speed_ratio']:.2f}x, which measured the machine's other work too)"
    )


def comparison_notes(doc: dict) -> str:
    """Printed under the comparison table (warnings go to the log, and into metrics.md)."""
    return "\n".join(_comparison_lines(doc))


def comparison_csv(doc: dict) -> str:
    return csv_text(comparison_rows(doc))


def comparison_markdown(doc: dict) -> str:
    data = comparison_rows(doc)
    columns = list(data[0])
    lines = [f"# {comparison_title(doc)}", "", f"- protocol: {doc['protocol']}"]
    if doc.get("report_protocol"):
        lines.append(f"- the reports' protocol: {doc['report_protocol']}")
    lines.append(f"- baseline: {doc['baseline']}")
    lines += [f"- {line}" for line in _comparison_lines(doc)]
    lines += [f"- warning: {line}" for line in doc.get("warnings", [])]
    lines += ["", "| " + " | ".join(columns) + " |"]
    lines.append("|" + "|".join("---" if c in ("language", "name") else "---:" for c in columns) + "|")
    for row in data:
        cells = [_comparison_cell(doc, c, v) for c, v in row.items()]
        if row["language"] == "average":
            cells = [f"**{cell}**" for cell in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def comparison_chart(doc: dict, path: Path) -> Path:
    """Per-language bars, one per report (the average as the last group), with chance for classification."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric, names = doc["metric"], list(doc["reports"])
    keys = [*doc["languages"], "average"]
    entries = [*doc["languages"].values(), doc["average"]]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(keys) * len(names) + 2), 4.5))
    width = 0.8 / len(names)
    top = 0.0
    for n, name in enumerate(names):
        values = [e["scores"][name][metric] for e in entries]
        top = max(top, *values)
        xs = [i + (n - (len(names) - 1) / 2) * width for i in range(len(keys))]
        label = f"{name} (baseline)" if name == doc["baseline"] else name
        bars = ax.bar(xs, values, width, label=label)
        if len(keys) * len(names) <= 48:
            ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
    if doc.get("chance"):
        ax.axhline(doc["chance"], color="grey", linestyle=":", linewidth=1, label=f"chance {doc['chance']:.1f}")
    ax.set_xticks(range(len(keys)), keys)
    ax.set_ylabel(f"{_TITLES.get(metric, metric)} (%)")
    ax.set_ylim(0, min(100.0, top * 1.15 + 5) if top <= 100 else top * 1.1)
    # Below the axes: never over a bar.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=min(len(names) + 1, 5), fontsize=8, frameon=False)
    ax.set_title(comparison_title(doc), fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def write_comparison(doc: dict, out: Path) -> dict[str, Path]:
    """The comparison as metrics.json, metrics.csv, metrics.md and chart.png in `out` (which exists): the file
    names of an evaluation report, so that the report directories' rules (--overwrite) hold for it too."""
    out = Path(out)
    paths = {name: out / name for name in FILES}
    text = json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n"
    paths["metrics.json"].write_text(text, encoding="utf-8")
    paths["metrics.csv"].write_text(comparison_csv(doc), encoding="utf-8")
    paths["metrics.md"].write_text(comparison_markdown(doc), encoding="utf-8")
    comparison_chart(doc, paths["chart.png"])
    return paths
