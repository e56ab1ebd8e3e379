"""Reports: per-language results as a terminal table (rich), JSON, CSV, Markdown and a chart.

- `tables`: an evaluation's metrics document (`eval-xnli` / `eval-mlqa` / `eval-tatoeba`) -> `write_reports`;
- `comparison`: the comparison document of `mlminilm compare` -> `write_comparison` (the same four files).
"""

from mlminilm.report.comparison import (  # noqa: F401
    comparison_chart,
    comparison_csv,
    comparison_markdown,
    comparison_notes,
    comparison_rows,
    comparison_table,
    comparison_title,
    write_comparison,
)
from mlminilm.report.tables import (  # noqa: F401
    FILES,
    chart,
    notes,
    rich_table,
    rows,
    to_csv,
    to_markdown,
    write_reports,
)
