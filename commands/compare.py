"""`mlminilm compare`: the CLI translates its arguments into a CompareConfig and calls mlminilm.compare.run."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.config import CompareConfig

EXAMPLES = """\b
Examples:
  mlminilm compare reports/xnli-teacher reports/xnli-student --out reports/xnli-compare
  mlminilm compare reports/tatoeba-*/ --baseline teacher --metric en_to_xx --json
"""


def main(cfg: CompareConfig, json_out: bool) -> None:
    """Compare evaluation reports of several models on the same data, per language: each model's score, its ratio
    to the baseline and, for XNLI, the chance-corrected ratio (score - 33.3) / (baseline - 33.3); with the speeds
    and sizes the reports carry. Refuses reports of different data or protocols (task, split, scorer, metrics,
    data files, examples per language); languages only some reports have are left out with a warning."""
    from mlminilm import compare

    render(compare.run(cfg), json_out)


command = build(CompareConfig, main, json_help="Print the comparison as one JSON document on stdout, and nothing else.")


def render(doc: dict, as_json: bool) -> None:
    """The comparison: as JSON alone on stdout, or as a table with its notes on stdout."""
    import json

    if as_json:
        print(json.dumps(doc, indent=2, ensure_ascii=False, default=str))
        return
    from rich.console import Console

    from mlminilm import logging as mlog
    from mlminilm.report import comparison_notes, comparison_table

    console = Console()
    table = comparison_table(doc)
    if not console.is_terminal:  # a pipe or a file: the whole table, not cut to 80 columns
        wide = console.measure(table, options=console.options.update_width(10_000)).maximum
        console = Console(width=max(console.width, wide))
    console.print(table)
    console.print(comparison_notes(doc), highlight=False, markup=False, soft_wrap=True)  # one line each
    if doc.get("report_dir"):
        mlog.get("report").info("comparison written to %s", doc["report_dir"])
