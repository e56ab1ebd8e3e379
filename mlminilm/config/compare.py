"""compare: which evaluation reports, which one the others are measured against, where the comparison goes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import Config, quiet_option
from mlminilm.config.evaluation import OVERWRITE_HELP
from mlminilm.config.options import EACH, option


@dataclass(frozen=True)
class CompareConfig(Config):
    """`compare`: evaluation reports of several models on the same data and protocol, side by side.

    `reports`: the `--out` directories of eval-xnli / eval-mlqa / eval-tatoeba, or their metrics.json files.
    `baseline` None: the first report; else a report's directory name or its model as the report records it
    (the path, or its last component). `metric` None: the task's headline figure (accuracy; F1 for QA; xx->en for
    Tatoeba). `out` None: the comparison on the terminal only, nothing written."""

    reports: tuple[str, ...] = option(
        (),
        argument=True,
        required=True,
        repeat=EACH,
        cli_type=Path,
        metavar="REPORT_DIR",
        show_default=False,
        group="inputs",
        help="Two or more evaluation reports of the same data and protocol: the --out directories of eval-xnli, "
        "eval-mlqa or eval-tatoeba, or their metrics.json files. Each is named by its directory's name.",
    )
    baseline: str | None = option(
        None,
        metavar="NAME",
        group="method",
        help="The report the others are divided by: its name (its directory's name, as in the table) or its model "
        "as the report records it (the path, or its last component). Default: the first report.",
    )
    metric: str | None = option(
        None,
        metavar="NAME",
        group="method",
        help="The figure of the table, CSV, Markdown and chart, one of the reports' metrics (accuracy; exact_match, "
        "f1; xx_to_en, en_to_xx, mean). Default: accuracy, F1 for QA, xx_to_en for Tatoeba. metrics.json holds "
        "every metric.",
    )
    out: Path | None = option(
        None,
        replay=False,
        group="output",
        help="Write the comparison here: metrics.json/.csv/.md, chart.png (must be empty unless --overwrite).",
    )
    overwrite: bool = option(False, group="output", help=OVERWRITE_HELP, replay=False)
    quiet: bool = quiet_option()

    def problems(self) -> list[str]:
        p: list[str] = []
        if len(self.reports) < 2:
            p.append(
                f"give at least two reports to compare (got {len(self.reports)}), e.g. "
                f"`mlminilm compare reports/teacher reports/student`"
            )
        if self.baseline is not None and not self.baseline.strip():
            p.append("--baseline must name a report (its directory name or its model)")
        if self.metric is not None and not self.metric.strip():
            p.append("--metric must name one of the reports' metrics")
        return p
