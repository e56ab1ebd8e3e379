"""`mlminilm eval-xnli`: the CLI translates options into an EvalXnliConfig and calls mlminilm.evaluation.xnli.run."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.commands._show import render
from mlminilm.config import EvalXnliConfig

EXAMPLES = """\b
Examples:
  mlminilm eval-xnli --model ft/xnli --data XNLI-1.0/ --split test --out reports/xnli
  mlminilm eval-xnli --model ft/xnli --data xtreme/xnli/ --langs de,zh --json
  mlminilm eval-xnli --model ft/xnli --data xtreme/xnli/ --out reports/xnli --update-card
  mlminilm eval-xnli --model ft/xnli-int8 --data xtreme/xnli/ --backend onnx --out reports/xnli-int8
"""

# The evaluations' --json prints the metrics document.
JSON_HELP = "Print the metrics document as JSON on stdout, and nothing else."


def main(cfg: EvalXnliConfig, json_out: bool) -> None:
    """Evaluate a sequence-classification model on XNLI, zero-shot, per language (accuracy, confusion matrix)."""
    from mlminilm.evaluation import xnli

    render(xnli.run(cfg), json_out)


command = build(EvalXnliConfig, main, json_help=JSON_HELP)
