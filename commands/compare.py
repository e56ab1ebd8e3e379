"""`mlminilm compare`: the CLI translates its arguments into a CompareConfig and calls mlminilm.compare.run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mlminilm.commands._train_options import Quiet, Verbose
from mlminilm.commands._run import configure
from mlminilm.config import CompareConfig, default

C = CompareConfig
Json = Annotated[bool, typer.Option(
    "--json", help="Print the comparison as one JSON document on stdout, and nothing else.")]

EXAMPLES = """\b
Examples:
  mlminilm compare reports/xnli-teacher reports/xnli-student --out reports/xnli-compare
  mlminilm compare reports/tatoeba-*/ --baseline teacher --metric en_to_xx --json
"""


def command(
    reports: Annotated[list[Path], typer.Argument(
        metavar="REPORT_DIR", show_default=False,
        help="Two or more evaluation reports of the same data and protocol: the --out directories of eval-xnli, "
        "eval-mlqa or eval-tatoeba, or their metrics.json files. Each is named by its directory's name.")],
    baseline: Annotated[Optional[str], typer.Option(
        "--baseline", metavar="NAME",
        help="The report the others are divided by: its name (its directory's name, as in the table) or its model "
        "as the report records it (the path, or its last component). Default: the first report.")]
    = default(C, "baseline"),
    metric: Annotated[Optional[str], typer.Option(
        "--metric", metavar="NAME",
        help="The figure of the table, CSV, Markdown and chart, one of the reports' metrics (accuracy; exact_match, "
        "f1; xx_to_en, en_to_xx, mean). Default: accuracy, F1 for QA, xx_to_en for Tatoeba. metrics.json holds "
        "every metric.")] = default(C, "metric"),
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Write the comparison here: metrics.json/.csv/.md, chart.png (must be empty unless "
        "--overwrite).")] = default(C, "out"),
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing report in --out.")]
    = default(C, "overwrite"),
    json_out: Json = False,
    quiet: Quiet = default(C, "quiet"),
    verbose: Verbose = False,
) -> None:
    """Compare evaluation reports of several models on the same data, per language: each model's score, its ratio
    to the baseline and, for XNLI, the chance-corrected ratio (score - 33.3) / (baseline - 33.3); with the speeds
    and sizes the reports carry. Refuses reports of different data or protocols (task, split, scorer, metrics,
    data files, examples per language); languages only some reports have are left out with a warning."""
    cfg = configure(CompareConfig, {**locals(), "reports": tuple(str(r) for r in reports)})
    from mlminilm import compare

    render(compare.run(cfg), json_out)


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
