"""assist: distill through a teacher assistant, each stage a distill run with its own steps."""

from __future__ import annotations

from dataclasses import dataclass

from mlminilm.config.distill import DistillConfig
from mlminilm.config.options import option, redeclare


@dataclass(frozen=True)
class AssistConfig(DistillConfig):
    """Teacher -> assistant (teacher's depth, student's width) -> student."""

    assistant_steps: int = option(
        10_000, min=1, group="schedule", help="Optimizer steps of the teacher -> assistant stage."
    )
    student_steps: int = option(
        10_000, min=1, group="schedule", help="Optimizer steps of the assistant -> student stage."
    )
    force: bool = option(
        False, group="student", help="Use an assistant even when the rule (M <= L/2, d' <= d/2) does not apply."
    )
    # No --max-steps (each stage has its own, above) and no --freeze-embeddings (the assistant starts from random
    # weights, whose embeddings must train): fields of the Python API only.
    max_steps: int = redeclare(DistillConfig, "max_steps", cli=False)
    freeze_embeddings: bool = redeclare(DistillConfig, "freeze_embeddings", cli=False)
    warmup: float = redeclare(
        DistillConfig,
        "warmup",
        help="Linear warmup of each stage: a fraction of its steps (--assistant-steps, --student-steps) if below 1, "
        "else steps. With --resume it may change.",
    )
