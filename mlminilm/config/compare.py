"""compare: which evaluation reports, which one the others are measured against, where the comparison goes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import problems_to_error


@dataclass(frozen=True)
class CompareConfig:
    """`compare`: evaluation reports of several models on the same data and protocol, side by side.

    `reports`: the `--out` directories of eval-xnli / eval-mlqa / eval-tatoeba, or their metrics.json files.
    `baseline` None: the first report; else a report's directory name or its model as the report records it
    (the path, or its last component). `metric` None: the task's headline figure (accuracy; F1 for QA; xx->en for
    Tatoeba). `out` None: the comparison on the terminal only, nothing written."""

    reports: tuple[str, ...] = ()
    baseline: str | None = None
    metric: str | None = None
    out: Path | None = None
    overwrite: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        p: list[str] = []
        if len(self.reports) < 2:
            p.append(f"give at least two reports to compare (got {len(self.reports)}), e.g. "
                     f"`mlminilm compare reports/teacher reports/student`")
        if self.baseline is not None and not self.baseline.strip():
            p.append("--baseline must name a report (its directory name or its model)")
        if self.metric is not None and not self.metric.strip():
            p.append("--metric must name one of the reports' metrics")
        problems_to_error(p)
