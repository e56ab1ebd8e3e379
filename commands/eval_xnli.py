"""`mlminilm eval-xnli`: the CLI translates options into an EvalXnliConfig and calls mlminilm.evaluation.xnli.run."""

from __future__ import annotations

from typing import Annotated

import typer

from mlminilm.commands._eval_options import *  # noqa: F403 (the shared option types)
from mlminilm.commands._eval_options import render
from mlminilm.commands._params import EvalSplit
from mlminilm.commands._run import configure
from mlminilm.config import EvalXnliConfig, default

E = EvalXnliConfig

EXAMPLES = """\b
Examples:
  mlminilm eval-xnli --model ft/xnli --data XNLI-1.0/ --split test --out reports/xnli
  mlminilm eval-xnli --model ft/xnli --data xtreme/xnli/ --langs de,zh --json
  mlminilm eval-xnli --model ft/xnli --data xtreme/xnli/ --out reports/xnli --update-card
  mlminilm eval-xnli --model ft/xnli-int8 --data xtreme/xnli/ --backend onnx --out reports/xnli-int8
"""


def command(
    model: Annotated[str, typer.Option("--model", help="A fine-tuned directory (`mlminilm finetune --task xnli`) or hub id.")] = ...,
    data: Annotated[str, typer.Option(
        "--data", help="XNLI: a directory in the XTREME layout ({split}-XX.tsv) or XNLI-1.0 (xnli.{split}.tsv), or hf:xnli.")] = ...,
    split: Annotated[EvalSplit, typer.Option("--split", help="test or dev.")] = default(E, "split"),
    langs: Langs = list(default(E, "langs")),
    label_order: Annotated[list[str], typer.Option(
        "--label-order", help="For a classifier whose config does not name its labels (LABEL_0...): the NLI class of "
        "output 0, 1, 2, comma-separated, e.g. entailment,neutral,contradiction. Such a model is refused without "
        "it.")] = list(default(E, "label_order")),
    out: EvalOut = default(E, "out"),
    batch_size: EvalBatch = default(E, "batch_size"),
    max_seq_len: EvalMaxSeqLen = default(E, "max_seq_len"),
    overwrite: EvalOverwrite = default(E, "overwrite"),
    update_card: UpdateCard = default(E, "update_card"),
    backend: Backend = default(E, "backend"),
    precision: Precision = default(E, "precision"),
    device: Device = default(E, "device"),
    json_out: Json = False,
    quiet: Quiet = default(E, "quiet"),
    verbose: Verbose = False,
) -> None:
    """Evaluate a sequence-classification model on XNLI, zero-shot, per language (accuracy, confusion matrix)."""
    cfg = configure(EvalXnliConfig, locals())
    from mlminilm.evaluation import xnli

    render(xnli.run(cfg), json_out)
