"""`mlminilm retention`: the CLI translates options into a RetentionConfig and calls mlminilm.retention.run."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.config import RetentionConfig

EXAMPLES = """\b
Examples:
  mlminilm retention --teacher multilingual-e5-small --tasks tatoeba --data ../shared/data --out reports/cut
  mlminilm retention --teacher multilingual-e5-small --student recipe=runs/recipe/student --data DIR --work WORK
  mlminilm retention --teacher TEACHER_DIR --student a=A_DIR --student b=B_DIR --data DIR --cut-layers 6 --json
"""


def main(cfg: RetentionConfig, json_out: bool) -> None:
    """What each student keeps of its teacher, per task and language, beside the teacher cut to the students' depth
    (untrained, made by the command): each score, its share of the teacher's with 95 % bootstrap intervals, and in
    how many languages each row beats the cut teacher. Every row is measured by the evaluation command of its task
    (eval-tatoeba, eval-retrieval); with --work, a rerun reads finished stages back."""
    from mlminilm import retention

    render(retention.run(cfg), json_out)


def render(doc: dict, as_json: bool) -> None:
    """The document as JSON alone on stdout, or each task's tables (Markdown) on stdout and where the report went on
    stderr."""
    import json

    if as_json:
        print(json.dumps(doc, indent=2, ensure_ascii=False, default=str))
        return
    from mlminilm import logging as mlog
    from mlminilm.retention.report import task_lines

    for table in doc["tasks"].values():
        print("\n".join(task_lines(table)).lstrip("\n"))
        print()
    if doc.get("report_dir"):
        mlog.get("report").info("report written to %s", doc["report_dir"])


command = build(
    RetentionConfig,
    main,
    json_help="Print the report's document (every row, task, language and interval) as one JSON document on stdout.",
)
