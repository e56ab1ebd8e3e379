"""The retention report's chart (chart.png: each row's share of the teacher per language, one panel per task, with
its 95 % interval) and its HTML page (retention.html: the Markdown report's tables, the chart inlined)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

CHART, HTML = "chart.png", "retention.html"
COLORS = ("#7f7f7f", "#3b75af", "#e6862a", "#4a9a48", "#c4413c", "#8c6bb1", "#8c564b", "#d17ab8")


def _share_rows(table: dict) -> list[str]:
    return [name for name, entry in table["rows"].items() if "share" in entry["average"]]


def _reach(value: float, cell: dict, end: int) -> float:
    bound = cell["share_interval"][end]
    if cell["share"] is None or bound is None:
        return 0.0
    return max(0.0, (100 * bound - value) if end else (value - 100 * bound))


def chart(doc: dict, path: Path) -> Path:
    """One figure: per task a panel of grouped bars, per language each row's share of the teacher (%), whiskers
    its 95 % interval, the teacher at 100 %."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = [t for t in doc["tasks"].values() if _share_rows(t)]
    widest = max([len(t["languages"]) + 1 for t in tables] + [4])
    fig, axes = plt.subplots(len(tables) or 1, 1, figsize=(max(6.0, 0.55 * widest * 2 + 2), 3.6 * max(len(tables), 1)))
    axes = [axes] if not hasattr(axes, "__len__") else list(axes)
    for ax, table in zip(axes, tables):
        names = _share_rows(table)
        keys = [*table["languages"], "avg"]
        width = 0.8 / len(names)
        for n, name in enumerate(names):
            entry = table["rows"][name]
            cells = [entry["languages"][k] for k in table["languages"]] + [entry["average"]]
            values = [100 * c["share"] if c["share"] is not None else 0.0 for c in cells]
            # whiskers from the bar to the interval's ends (none where the share is undefined; an interval that
            # does not hold its point, as a ratio's percentile interval may not, is drawn from the bar)
            low = [_reach(v, c, 0) for v, c in zip(values, cells)]
            high = [_reach(v, c, 1) for v, c in zip(values, cells)]
            xs = [i + (n - (len(names) - 1) / 2) * width for i in range(len(keys))]
            ax.bar(xs, values, width, label=name, color=COLORS[n % len(COLORS)])
            ax.errorbar(xs, values, yerr=[low, high], fmt="none", ecolor="black", elinewidth=0.7, capsize=1.5)
        ax.axhline(100, color="#d62728", linestyle="--", linewidth=1, label="teacher = 100 %")
        ax.set_xticks(range(len(keys)), keys, fontsize=8)
        ax.set_ylabel("share of the teacher (%)")
        ax.set_title(table["title"], fontsize=10)
        ax.legend(loc="lower right", fontsize=7, framealpha=0.9)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    if not tables:
        axes[0].text(0.5, 0.5, "no row beside the teacher", ha="center", va="center")
        axes[0].set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _html_table(lines: list[str]) -> str:
    """A Markdown table (header, rule, rows) as an HTML table; **bold** cells kept bold."""

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    def cell(text: str, tag: str) -> str:
        body = html.escape(text)
        if body.startswith("**") and "**" in body[2:]:
            end = body.index("**", 2)
            body = f"<b>{body[2:end]}</b>{body[end + 2 :]}"
        return f"<{tag}>{body}</{tag}>"

    head = "".join(cell(c, "th") for c in cells(lines[0]))
    body = "".join("<tr>" + "".join(cell(c, "td") for c in cells(line)) + "</tr>" for line in lines[2:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(markdown: str, png: bytes) -> str:
    """The Markdown report as one HTML page (headings, lists, tables, paragraphs), the chart inlined after the
    rows."""
    out, table, placed = [], [], False
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            out.append(_html_table(table))
            table = []
        if line.startswith("# "):
            out.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("## "):
            if not placed:
                image = base64.b64encode(png).decode()
                out.append(f'<p><img alt="share of the teacher per language" src="data:image/png;base64,{image}"></p>')
                placed = True
            out.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("- "):
            out.append(f"<li>{html.escape(line[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    style = (
        "body{font-family:sans-serif;max-width:72em;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Retention</title>'
        f"<style>{style}</style></head><body>\n" + "\n".join(out) + "\n</body></html>\n"
    )


def write_page(doc: dict, markdown: str, out: Path) -> list[Path]:
    """chart.png and retention.html into `out` (a staging directory)."""
    png = chart(doc, out / CHART).read_bytes()
    (out / HTML).write_text(page(markdown, png), encoding="utf-8")
    return [out / CHART, out / HTML]
