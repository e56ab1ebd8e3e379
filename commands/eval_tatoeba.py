"""`mlminilm eval-tatoeba`: the CLI translates options into an EvalTatoebaConfig and calls
mlminilm.evaluation.tatoeba.run."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.commands._show import render
from mlminilm.commands.eval_xnli import JSON_HELP
from mlminilm.config import EvalTatoebaConfig

EXAMPLES = """\b
Examples:
  mlminilm eval-tatoeba --model runs/l6h384/student --data tatoeba/ --out reports/tatoeba
  mlminilm eval-tatoeba --model intfloat/multilingual-e5-small --data tatoeba/ --langs de,zh --prefix "query: "
  mlminilm eval-tatoeba --model runs/l6h384/student --data tatoeba/ --update-card
  mlminilm eval-tatoeba --model student-int8/ --data tatoeba/ --backend onnx --out reports/tatoeba-int8
"""


def main(cfg: EvalTatoebaConfig, json_out: bool) -> None:
    """Tatoeba cross-lingual sentence retrieval, no fine-tuning: accuracy xx->en and en->xx per language."""
    from mlminilm.evaluation import tatoeba

    render(tatoeba.run(cfg), json_out)


command = build(EvalTatoebaConfig, main, json_help=JSON_HELP)
