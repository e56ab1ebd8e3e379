"""`mlminilm finetune`: the CLI translates options into a FinetuneConfig and calls mlminilm.finetune.run."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.commands._show import emit, loss_summary
from mlminilm.config import FinetuneConfig

EXAMPLES = """\b
Examples:
  mlminilm finetune --task xnli --model runs/l6h384/student --train en-train.tsv --dev en-dev.tsv --out ft/xnli
  mlminilm finetune --task qa --model runs/l6h384/student --train squad-train.json --dev en-dev.json --out ft/qa
"""


def main(cfg: FinetuneConfig, json_out: bool) -> None:
    """Fine-tune an encoder on English task data (XNLI or QA); select the checkpoint on English dev."""
    from mlminilm import finetune

    emit(finetune.run(cfg), json_out, summary)


command = build(FinetuneConfig, main)


def summary(result) -> str:
    """What `mlminilm finetune` prints on stdout without --json."""
    score = (
        f"{result.selection_metric} {result.selected_score:.2f}" if result.selected_score is not None else "no dev set"
    )
    return (
        f"model: {result.out}\nsteps: {result.steps}  loss: {loss_summary(result)}  examples/s: "
        f"{result.examples_per_s:,.1f}\n"
        f"selected: step {result.selected_step} ({score})"
    )
