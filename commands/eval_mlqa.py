"""`mlminilm eval-mlqa`: the CLI translates options into an EvalMlqaConfig and calls mlminilm.evaluation.mlqa.run."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.commands._show import render
from mlminilm.commands.eval_xnli import JSON_HELP
from mlminilm.config import EvalMlqaConfig

EXAMPLES = """\b
Examples:
  mlminilm eval-mlqa --model ft/qa --data MLQA_V1/ --split dev --out reports/mlqa
  mlminilm eval-mlqa --data MLQA_V1/ --split dev --predictions preds/ --json
  mlminilm eval-mlqa --model ft/qa --data xquad/ --update-card
"""


def main(cfg: EvalMlqaConfig, json_out: bool) -> None:
    """Evaluate extractive QA on MLQA / XQuAD / TyDiQA-GoldP per language (EM and F1, each benchmark's scorer)."""
    from mlminilm.evaluation import mlqa

    render(mlqa.run(cfg), json_out)


command = build(EvalMlqaConfig, main, json_help=JSON_HELP)
