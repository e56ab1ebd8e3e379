"""`mlminilm eval-retrieval`: the CLI translates options into an EvalRetrievalConfig and calls
mlminilm.evaluation.retrieval.run."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.commands._show import render
from mlminilm.commands.eval_xnli import JSON_HELP
from mlminilm.config import EvalRetrievalConfig

EXAMPLES = """\b
Examples:
  mlminilm eval-retrieval --model runs/l6h384/student --data mlqa/ --out reports/retrieval
  mlminilm eval-retrieval --model multilingual-e5-small --data mlqa/dev --langs de,en,zh --monolingual
  mlminilm eval-retrieval --model student/ --data xquad/ --passage-max-length 256 --update-card
  mlminilm eval-retrieval --model student/ --data beir/scifact --lang en --split test
  mlminilm eval-retrieval --model student-int8/ --data mlqa/ --backend openvino --out reports/retrieval-int8
  mlminilm eval-retrieval --model multilingual-e5-small --query-model student-int8/ --data mlqa/ --update-card
"""


def main(cfg: EvalRetrievalConfig, json_out: bool) -> None:
    """Question -> passage retrieval, no fine-tuning: nDCG@10, MRR@10, recall@1/10/100 per language pair."""
    from mlminilm.evaluation import retrieval

    render(retrieval.run(cfg), json_out)


command = build(EvalRetrievalConfig, main, json_help=JSON_HELP)
