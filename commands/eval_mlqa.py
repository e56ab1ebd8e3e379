"""`mlminilm eval-mlqa`: the CLI translates options into an EvalMlqaConfig and calls mlminilm.evaluation.mlqa.run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mlminilm.commands._eval_options import *  # noqa: F403 (the shared option types)
from mlminilm.commands._eval_options import render
from mlminilm.commands._params import EvalSplit, QaScorer
from mlminilm.commands._run import configure
from mlminilm.config import EvalMlqaConfig, default

E = EvalMlqaConfig

EXAMPLES = """\b
Examples:
  mlminilm eval-mlqa --model ft/qa --data MLQA_V1/ --split dev --out reports/mlqa
  mlminilm eval-mlqa --data MLQA_V1/ --split dev --predictions preds/ --json
  mlminilm eval-mlqa --model ft/qa --data xquad/ --update-card
"""


def command(
    data: Annotated[str, typer.Option(
        "--data", help="An MLQA directory ({split}-context-C-question-Q.json, also under {split}/), a directory of "
        "xquad.XX.json or tydiqa.goldp.XX.{split}.json files, or one SQuAD-format file.")] = ...,
    model: Annotated[str, typer.Option("--model", help="A fine-tuned directory (`mlminilm finetune --task qa`) or hub id.")] = default(E, "model"),
    predictions: Annotated[Optional[Path], typer.Option(
        "--predictions", help="Score these official-format prediction files ({question_id: answer}, named like the "
        "data files) instead of running a model.")] = default(E, "predictions"),
    split: Annotated[EvalSplit, typer.Option("--split", help="dev or test.")] = default(E, "split"),
    langs: Langs = list(default(E, "langs")),
    gxlt: Annotated[bool, typer.Option("--gxlt", help="MLQA: every context x question language pair (7x7).")] = default(E, "gxlt"),
    lang: Annotated[Optional[str], typer.Option("--lang", help="Language of a --data file whose name does not tell it.")] = default(E, "lang"),
    out: EvalOut = default(E, "out"),
    batch_size: EvalBatch = default(E, "batch_size"),
    max_seq_len: EvalMaxSeqLen = default(E, "max_seq_len"),
    doc_stride: Annotated[Optional[int], typer.Option(
        "--doc-stride", min=1, help="Context tokens shared by consecutive windows (default: the fine-tuning run's, else 128).")] = default(E, "doc_stride"),
    max_query_length: Annotated[Optional[int], typer.Option(
        "--max-query-length", min=1, help="Question tokens kept (default: the fine-tuning run's, else 64).")] = default(E, "max_query_length"),
    n_best: Annotated[int, typer.Option("--n-best", min=1, help="Start and end candidates per window.")] = default(E, "n_best"),
    max_answer_length: Annotated[int, typer.Option("--max-answer-length", min=1, help="Longest answer, in tokens.")] = default(E, "max_answer_length"),
    scorer: Annotated[QaScorer, typer.Option(
        "--scorer", help="auto: MLQA's official scorer for MLQA files, the SQuAD v1.1 scorer for XQuAD, TyDiQA-GoldP "
        "and other SQuAD-format files (as XTREME); squad or mlqa: that scorer for every file.")] = default(E, "scorer"),
    overwrite: EvalOverwrite = default(E, "overwrite"),
    update_card: UpdateCard = default(E, "update_card"),
    precision: Precision = default(E, "precision"),
    device: Device = default(E, "device"),
    json_out: Json = False,
    quiet: Quiet = default(E, "quiet"),
    verbose: Verbose = False,
) -> None:
    """Evaluate extractive QA on MLQA / XQuAD / TyDiQA-GoldP per language (EM and F1, each benchmark's scorer)."""
    cfg = configure(EvalMlqaConfig, locals())
    from mlminilm.evaluation import mlqa

    render(mlqa.run(cfg), json_out)
