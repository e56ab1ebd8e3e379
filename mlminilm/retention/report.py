"""The retention report's text: Markdown (retention.md) and JSON (retention.json) of the run's document (the chart
and the HTML page: `page`)."""

from __future__ import annotations

import json
from pathlib import Path

MARKDOWN, JSON = "retention.md", "retention.json"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f} %"


def _interval(lo_hi, scale: float = 1.0, digits: int = 1) -> str:
    lo, hi = lo_hi
    if lo is None or hi is None:
        return ""
    return f"[{scale * lo:.{digits}f}, {scale * hi:.{digits}f}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def task_lines(table: dict) -> list[str]:
    """One task's two tables: the scores, then the shares of the teacher, per language and averaged."""
    langs, rows, base = table["languages"], table["rows"], table["baseline"]
    scores, shares = [], []
    for name, entry in rows.items():
        avg = entry["average"]
        above = entry["above_baseline"]
        scores.append(
            [name]
            + [f"{entry['languages'][lang]['score']:.1f}" for lang in langs]
            + [f"**{avg['score']:.1f}** {_interval(avg['interval'])}"]
            + ([("-" if above is None else f"{above}/{len(langs)}")] if base else [])
        )
        if "share" in avg:
            shares.append(
                [name]
                + [
                    f"{_pct(e['share'])} {_interval(e['share_interval'], 100, 0)}".strip()
                    for e in (entry["languages"][lang] for lang in langs)
                ]
                + [f"**{_pct(avg['share'])}** {_interval(avg['share_interval'], 100, 0)}".strip()]
            )
    share_rule = (
        f"chance-corrected, (row - {table['chance']:.1f}) / (teacher - {table['chance']:.1f})"
        if table["chance"]
        else "row / teacher"
    )
    lines = ["", f"## {table['title']}", ""]
    lines += _table(["model", *langs, "avg [95 % CI]"] + ([f"> {base}"] if base else []), scores)
    lines += ["", f"Share of the teacher ({share_rule}) [95 % CI]:", ""]
    lines += _table(["model", *langs, "avg"], shares)
    return lines


def finetune_lines(task: dict) -> list[str]:
    """What a fine-tuned task trained on, how long, and which checkpoint each row kept."""
    if not task.get("finetune"):
        return []
    first = next(iter(task["finetune"].values()))
    data, protocol = first["training"], first["protocol"]
    size = f"{data['pairs']:,} pairs" if "pairs" in data else f"{data['questions']:,} questions"
    held = data["selection"]
    return [
        "",
        f"Fine-tuning (`mlminilm finetune`): {data['data']} ({size}), {protocol['epochs']:g} epoch(s), batch "
        f"{protocol['batch_size']}, lr {protocol['lr']:g}, warmup {100 * protocol['warmup']:.0f} %, word embeddings "
        f"{'frozen' if protocol['freeze_embeddings'] else 'trained'}; the checkpoint chosen on {held:,} held-out "
        "English items: "
        + ", ".join(
            f"{n} step {f['selected_step']}"
            + (f" ({f['selected_score']:.1f})" if f.get("selected_score") is not None else "")
            for n, f in task["finetune"].items()
        )
        + ". Then evaluated zero-shot in every language.",
    ]


def markdown(doc: dict) -> str:
    """The whole report: what ran, the rows, each task's tables, how the figures were made."""
    lines = [
        f"# Retention: what students of {doc['teacher']} keep, per language",
        "",
        f"- command: `{doc['command']}`",
        f"- date: {doc['date']}; mlminilm {doc['mlminilm']}, git {doc['git']}; machine: {doc['machine']}",
        f"- data: {doc['data']}",
        "",
        "## Rows",
        "",
    ]
    lines += _table(["model", "what", "layers", "directory"], [_row_cells(r) for r in doc["rows"]])
    for task in doc["tasks"].values():
        lines += task_lines(task)
        lines += (
            ["", f"Embedding: {task['summary'].removeprefix('embedding: ')}."]
            if task.get("summary") and "finetune" not in task
            else []
        )
        lines += finetune_lines(task)
        if task.get("probe"):
            lines += [
                "",
                "Probe: "
                + ", ".join(
                    f"{n} L2 {p['l2']:g} ({p['selection_accuracy']:.1f} on {p['selection_pairs']} selection pairs)"
                    for n, p in task["probe"].items()
                )
                + f"; {next(iter(task['probe'].values()))['train_pairs']} English training pairs.",
            ]
    lines += [
        "",
        "## How the figures were made",
        "",
        "- Each row is measured by the evaluation command of its task (eval-tatoeba, eval-retrieval; finetune then "
        "eval-xnli or eval-mlqa; the probe embeds as eval-tatoeba does), with that command's defaults; the reports "
        f"are kept in the stages folder ({doc['work']}).",
        f"- Intervals: 95 % percentile bootstrap ({doc['resamples']} resamples, seed {doc['seed']}) over the items of "
        "each language (Tatoeba pairs, questions; whole premise groups for XNLI, shared by the languages; whole "
        "articles for MLQA); a share's interval resamples the teacher and the row together (the same draw), so what "
        "makes a resample easy or hard cancels in the ratio. The average is the unweighted mean over languages.",
        "- `> cut teacher`: in how many languages the row's score is above the cut teacher's (the teacher's first "
        "layers at the students' depth, untrained: what depth alone keeps).",
    ]
    return "\n".join(lines) + "\n"


def _row_cells(row: dict) -> list[str]:
    what = {
        "teacher": "the teacher",
        "baseline": f"the teacher's first {row['layers']} layers, untrained",
        "student": "a student",
    }[row["kind"]]
    return [row["name"], what, str(row["layers"]), f"`{row['model']}`"]


def write_text_reports(doc: dict, out: Path) -> list[Path]:
    """retention.md, retention.json, chart.png and retention.html into `out` (a staging directory)."""
    from mlminilm.retention.page import write_page

    text = markdown(doc)
    (out / MARKDOWN).write_text(text, encoding="utf-8")
    (out / JSON).write_text(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    return [out / MARKDOWN, out / JSON, *write_page(doc, text, out)]
