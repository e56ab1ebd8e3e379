"""Per-language results as a terminal table (rich), JSON, CSV, Markdown and a chart.

Input: the metrics document of `eval-xnli` / `eval-mlqa` / `eval-tatoeba` (`languages`: key -> scores with
`examples`; `metrics`: the score names, in %; `average`; optional `gxlt` matrix; optional `summary` line). Files
written by `write_reports`: `metrics.json`, `metrics.csv`, `metrics.md`, `chart.png` (per-language bars with the
average as a line; for G-XLT a context x question heatmap of F1)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

FILES = ("metrics.json", "metrics.csv", "metrics.md", "chart.png")
_TITLES = {
    "accuracy": "accuracy",
    "exact_match": "EM",
    "f1": "F1",
    "xx_to_en": "xx->en",
    "en_to_xx": "en->xx",
    "mean": "mean",
    "ndcg_at_10": "nDCG@10",
    "mrr_at_10": "MRR@10",
    "recall_at_1": "R@1",
    "recall_at_10": "R@10",
    "recall_at_100": "R@100",
}


def _language_name(key: str) -> str:
    from mlminilm.langs import all_languages

    known = all_languages()
    if key in known:
        return known[key].name
    if "-" in key:
        c, q = key.split("-", 1)
        if c in known and q in known:
            return f"{known[c].name} / {known[q].name}"
    return ""


_TASKS = {
    "xnli": "XNLI",
    "mlqa": "MLQA",
    "xquad": "XQuAD",
    "tydiqa": "TyDiQA-GoldP",
    "tatoeba": "Tatoeba",
    "retrieval": "Retrieval",
}


def _title(doc: dict) -> str:
    task = _TASKS.get(doc["task"], doc["task"])
    if doc["task"] == "retrieval":
        task = f"{_TASKS.get(doc.get('benchmark'), doc.get('benchmark', ''))} question -> passage retrieval".strip()
    source = str(doc.get("model") or doc.get("predictions_from") or "")
    if len(source) > 48:  # keep the last path components
        source = "..." + source[-45:]
    scorer = f" ({doc['scorer']['title']} scorer)" if doc.get("scorer") else ""
    split = f" {doc['split']}" if doc.get("split") else ""
    return f"{task}{split}{' G-XLT' if doc.get('gxlt') else ''}{scorer}: {source}"


def rows(doc: dict) -> list[dict]:
    """One flat row per language and a last `average` row: language, name, examples, the metrics (+ missing)."""
    metrics = doc["metrics"]
    extra = ["missing"] if "exact_match" in metrics else []
    if any(scores.get("skipped") for scores in doc["languages"].values()):
        extra.append("skipped")  # XNLI rows without a gold label, when a file had any
    out = []
    for key, scores in doc["languages"].items():
        row = {"language": key, "name": _language_name(key), "examples": scores["examples"]}
        row.update({m: round(scores[m], 2) for m in metrics})
        row.update({m: scores.get(m, 0) for m in extra})
        out.append(row)
    avg = doc["average"]
    row = {"language": "average", "name": f"mean of {len(doc['languages'])}", "examples": avg["examples"]}
    row.update({m: round(avg[m], 2) for m in metrics})
    row.update({m: avg.get(m, 0) for m in extra})
    out.append(row)
    return out


def rich_table(doc: dict):
    """The per-language table for the terminal (the caller prints it on stdout)."""
    from rich.table import Table

    if doc.get("gxlt"):
        return _matrix_table(doc)
    data = rows(doc)
    table = Table(title=_title(doc), show_footer=False)
    columns = [c for c in data[0] if c != "name"]
    for column in ["language", "name", *columns[1:]]:
        label = _TITLES.get(column, column)
        table.add_column(label, justify="left" if column in ("language", "name") else "right")
    for i, row in enumerate(data):
        cells = [row["language"], row["name"]]
        for column in columns[1:]:
            value = row[column]
            cells.append(f"{value:,}" if isinstance(value, int) else f"{value:.2f}")
        table.add_row(*cells, end_section=i == len(data) - 2, style="bold" if row["language"] == "average" else None)
    return table


def _matrix_table(doc: dict):
    """G-XLT: F1 with context languages as rows and question languages as columns (EM in metrics.csv/md)."""
    from rich.table import Table

    g = doc["gxlt"]
    table = Table(title=f"{_title(doc)}\nF1 (%), rows: context language, columns: question language")
    table.add_column("context", justify="left")
    for q in g["questions"]:
        table.add_column(q, justify="right")
    table.add_column("mean", justify="right", style="bold")
    for c, values in zip(g["contexts"], g["f1"]):
        table.add_row(c, *(f"{v:.1f}" for v in values), f"{sum(values) / len(values):.1f}")
    columns = list(zip(*g["f1"]))
    table.add_section()
    avg = doc["average"]
    table.add_row("mean", *(f"{sum(col) / len(col):.1f}" for col in columns), f"{avg['f1']:.1f}", style="bold")
    table.caption = (
        f"average of {len(doc['languages'])} pairs: EM {avg['exact_match']:.2f}, F1 {avg['f1']:.2f} "
        f"on {avg['examples']:,} questions ({avg['missing']:,} without a prediction)"
    )
    return table


def notes(doc: dict) -> str:
    """What the table does not show: the selection rule and the throughput (printed under the table)."""
    return _caption(doc)


def _averages_line(doc: dict) -> str | None:
    """Retrieval: the monolingual and cross-lingual averages of the main metric, when the report has both."""
    averages = doc.get("averages") or {}
    mono, cross = averages.get("monolingual"), averages.get("crosslingual")
    if not (mono and cross):
        return None
    main = doc["metrics"][0]
    name = _TITLES.get(main, main)
    return (
        f"{name}: monolingual {mono[main]:.2f} (mean of {mono['pairs']} pairs), cross-lingual {cross[main]:.2f} "
        f"(mean of {cross['pairs']})"
    )


_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def precision_phrase(doc: dict) -> str | None:
    """How the forward pass computed (`computed in bf16 (autocast on a CPU with native bf16; ...)`), from the
    throughput record; None for an exported graph (its backend line says its dtype) or a report without a run
    (scored predictions)."""
    tp = doc.get("throughput")
    if not isinstance(tp, dict) or tp.get("backend") or not tp.get("precision"):
        return None
    precision = str(tp["precision"])
    name = _SHORT.get(precision, precision)
    if precision == "float32":
        return "computed in fp32"
    if not str(tp.get("device", "")).startswith("cpu"):
        return f"computed in {name} (autocast)"
    native = tp.get("native_bf16") if precision == "bfloat16" else None  # whether bf16 is native: for bf16 only
    cpu = "a CPU with native bf16" if native is True else "a CPU without native bf16" if native is False else "the CPU"
    return f"computed in {name} (autocast on {cpu}; --precision fp32 for float32)"


def summary_line(doc: dict) -> str | None:
    """The report's first line under its table: its `summary` and the precision it computed in."""
    parts = [p for p in (doc.get("summary"), precision_phrase(doc)) if p]
    return "; ".join(parts) or None


def _caption(doc: dict) -> str:
    parts = [summary_line(doc)] if summary_line(doc) else []
    if _averages_line(doc):
        parts.append(_averages_line(doc))
    if doc.get("selection") and doc["selection"].get("rule"):
        parts.append(f"selection: {doc['selection']['rule']}")
    skipped = doc.get("average", {}).get("skipped")
    if skipped:
        parts.append(f"skipped: {skipped:,} rows without a gold label ('-' or empty), not scored")
    tp = doc.get("throughput")
    if tp:
        parts.append(
            f"{tp['examples_per_s']:,.1f} examples/s on {tp['device']} ({tp['precision']}, batch {tp['batch_size']})"
        )
    return "\n".join(parts)


def csv_text(data: list[dict]) -> str:
    """Rows (dicts with the same keys, in column order) as CSV text with a header line."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(data[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(data)
    return buffer.getvalue()


def to_csv(doc: dict) -> str:
    return csv_text(rows(doc))


def to_markdown(doc: dict) -> str:
    data = rows(doc)
    columns = list(data[0])
    lines = [f"# {_title(doc)}", ""]
    lines.append(f"- protocol: {doc.get('protocol', '')}")
    if doc.get("scorer"):
        lines.append(f"- scorer: {doc['scorer']['title']} ({doc['scorer']['chosen']})")
    if "skipped" in doc.get("average", {}):
        skipped = doc["average"]["skipped"]
        lines.append(f"- rows without a gold label ('-' or empty), skipped and not scored: {skipped:,}")
    if doc.get("model"):
        lines.append(f"- model: `{doc['model']}`")
    if doc.get("predictions_from"):
        lines.append(f"- predictions: `{doc['predictions_from']}`")
    if doc.get("selection"):
        lines.append(f"- checkpoint selection: {doc['selection'].get('rule', 'unknown')}")
    if summary_line(doc):
        lines.append(f"- {summary_line(doc)}")
    if _averages_line(doc):
        lines.append(f"- {_averages_line(doc)}")
    lines.append(f"- data: `{doc.get('data', {}).get('source', '')}`")
    if doc.get("throughput"):
        tp = doc["throughput"]
        lines.append(
            f"- throughput: {tp['examples_per_s']:,.1f} examples/s on {tp['device']} ({tp['precision']}, batch "
            f"{tp['batch_size']})"
        )
    lines += ["", "| " + " | ".join(_TITLES.get(c, c) for c in columns) + " |"]
    lines.append("|" + "|".join("---" if c in ("language", "name") else "---:" for c in columns) + "|")
    for row in data:
        cells = []
        for c in columns:
            v = row[c]
            cell = f"{v:,}" if isinstance(v, int) else f"{v:.2f}" if isinstance(v, float) else str(v)
            cells.append(f"**{cell}**" if row["language"] == "average" and cell else cell)
        lines.append("| " + " | ".join(cells) + " |")
    if doc.get("matrix"):
        m = doc["matrix"]
        title = _TITLES.get(m["metric"], m["metric"])
        lines += ["", f"{title} (rows: passage language, columns: question language)", ""]
        lines.append("| passage \\ question | " + " | ".join(m["questions"]) + " |")
        lines.append("|---|" + "---:|" * len(m["questions"]))
        for c, values in zip(m["contexts"], m["values"]):
            lines.append(f"| {c} | " + " | ".join("" if v is None else f"{v:.1f}" for v in values) + " |")
    if doc.get("gxlt"):
        g = doc["gxlt"]
        lines += ["", "G-XLT F1 (rows: context language, columns: question language)", ""]
        lines.append("| context \\ question | " + " | ".join(g["questions"]) + " |")
        lines.append("|---|" + "---:|" * len(g["questions"]))
        for c, values in zip(g["contexts"], g["f1"]):
            lines.append(f"| {c} | " + " | ".join(f"{v:.1f}" for v in values) + " |")
    return "\n".join(lines) + "\n"


def _heatmap(plt, doc: dict):
    """A passage (context) x question language heatmap: G-XLT's F1, or a retrieval report's main metric."""
    if doc.get("gxlt"):
        g = doc["gxlt"]
        contexts, questions, values, name = g["contexts"], g["questions"], g["f1"], "F1"
        main = doc["average"]["f1"]
    else:
        m = doc["matrix"]
        contexts, questions, name = m["contexts"], m["questions"], _TITLES.get(m["metric"], m["metric"])
        values = [[float("nan") if v is None else v for v in row] for row in m["values"]]
        main = doc["average"][m["metric"]]
    fig, ax = plt.subplots(figsize=(1.0 * len(questions) + 2.5, 0.85 * len(contexts) + 2))
    finite = [v for row in values for v in row if v == v]
    image = ax.imshow(values, cmap="viridis", vmin=0, vmax=max([100.0, *finite]))
    ax.set_xticks(range(len(questions)), questions)
    ax.set_yticks(range(len(contexts)), contexts)
    ax.set_xlabel("question language")
    ax.set_ylabel("context language" if doc.get("gxlt") else "passage language")
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            if v == v:
                ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=9, color="white" if v < 60 else "black")
    fig.colorbar(image, ax=ax, label=f"{name} (%)")
    ax.set_title(f"{_title(doc)}\n{name}, average {main:.1f}", fontsize=11)
    return fig, ax


def chart(doc: dict, path: Path) -> Path:
    """Per-language bars with the average as a dashed line; a heatmap of F1 for G-XLT."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if doc.get("matrix") or doc.get("gxlt"):
        fig, ax = _heatmap(plt, doc)
    else:
        keys = list(doc["languages"])
        metrics = doc["metrics"]
        main = "f1" if "f1" in metrics else metrics[0]
        fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(keys) * len(metrics) + 2), 4.5))
        width = 0.8 / len(metrics)
        colors = {
            "accuracy": "#3b75af",
            "f1": "#3b75af",
            "exact_match": "#9ecae1",
            "xx_to_en": "#3b75af",
            "en_to_xx": "#9ecae1",
            "mean": "#636363",
        }
        for n, metric in enumerate(metrics):
            values = [doc["languages"][k][metric] for k in keys]
            xs = [i + (n - (len(metrics) - 1) / 2) * width for i in range(len(keys))]
            bars = ax.bar(xs, values, width, label=_TITLES.get(metric, metric), color=colors.get(metric))
            if len(keys) * len(metrics) <= 40:
                ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
        avg = doc["average"][main]
        if doc["task"] == "xnli":
            ax.axhline(100 / 3, color="grey", linestyle=":", linewidth=1, label="chance 33.3")
        ax.axhline(
            avg, color="#d62728", linestyle="--", linewidth=1.2, label=f"average {_TITLES.get(main, main)} {avg:.1f}"
        )
        ax.set_xticks(range(len(keys)), keys)
        ax.set_ylabel(" / ".join(_TITLES.get(m, m) for m in metrics) + " (%)")
        top = max([doc["languages"][k][m] for k in keys for m in metrics] + [avg])
        ax.set_ylim(0, min(100.0, top * 1.15 + 5) if top <= 100 else top * 1.1)
        ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
        ax.set_title(_title(doc), fontsize=11)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_reports(doc: dict, out: Path) -> dict[str, Path]:
    """metrics.json, metrics.csv, metrics.md and chart.png in `out` (which exists)."""
    out = Path(out)
    paths = {name: out / name for name in FILES}
    paths["metrics.json"].write_text(
        json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8"
    )
    paths["metrics.csv"].write_text(to_csv(doc), encoding="utf-8")
    paths["metrics.md"].write_text(to_markdown(doc), encoding="utf-8")
    chart(doc, paths["chart.png"])
    return paths
