"""`mlminilm assist`: teacher -> assistant -> student, each stage resumable and exported."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.commands._show import emit
from mlminilm.config import AssistConfig

EXAMPLES = """\b
Examples:
  mlminilm assist --teacher xlm-roberta-base --data data/ --layers 6 --hidden 384 --out runs/l6h384-ta/
  mlminilm assist --teacher xlm-roberta-base --data data/ --out runs/l6h384-ta/ --resume
"""


def main(cfg: AssistConfig, json_out: bool) -> None:
    """Distil through a teacher assistant: teacher -> assistant (teacher's depth, student's width) -> student."""
    from mlminilm import assist

    emit(assist.run(cfg), json_out, summary)


command = build(AssistConfig, main)


def summary(result) -> str:
    """What `mlminilm assist` prints on stdout without --json."""
    return f"assistant: {result.assistant}\nstudent: {result.student}"
