"""`mlminilm eval-tatoeba`: the CLI translates options into an EvalTatoebaConfig and calls
mlminilm.evaluation.tatoeba.run."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from mlminilm.commands._eval_options import *  # noqa: F403 (the shared option types)
from mlminilm.commands._eval_options import render
from mlminilm.commands._params import Pooling
from mlminilm.commands._run import configure
from mlminilm.config import TATOEBA_MAX_LENGTH, EvalTatoebaConfig, default

E = EvalTatoebaConfig

EXAMPLES = """\b
Examples:
  mlminilm eval-tatoeba --model runs/l6h384/student --data tatoeba/ --out reports/tatoeba
  mlminilm eval-tatoeba --model intfloat/multilingual-e5-small --data tatoeba/ --langs de,zh --prefix "query: "
  mlminilm eval-tatoeba --model runs/l6h384/student --data tatoeba/ --update-card
  mlminilm eval-tatoeba --model student-int8/ --data tatoeba/ --backend onnx --out reports/tatoeba-int8
"""


def command(
    model: Annotated[str, typer.Option(
        "--model", help="Any encoder directory or hub id (a distilled student, a teacher, a sentence-transformers "
                        "model).")] = ...,
    data: Annotated[str, typer.Option(
        "--data", help="A directory of Tatoeba test files as LASER / XTREME distribute them: tatoeba.XXX-eng.XXX and "
                       "tatoeba.XXX-eng.eng (ISO 639-3 codes; line i of one translates line i of the other)."
    )] = ...,
    langs: Annotated[list[str], typer.Option(
        "--langs", help="Only these languages (project codes: de, zh, sw, ...; the file code of a language not in "
                        "langs/), comma-separated or repeated "
                        "(default: every language found in --data).")] = list(default(E, "langs")),
    out: EvalOut = default(E, "out"),
    layer: Annotated[Optional[int], typer.Option(
        "--layer", help="Hidden-states index to pool (0 = embedding output, N = output of layer N, -1 = last). "
                        "Default: the last layer for sentence-transformers models, else XTREME's layers // 2 + 1 "
                        "(7 of 12, 13 of 24, 4 of 6).")] = default(E, "layer"),
    pooling: Annotated[Pooling, typer.Option(
        "--pooling", help="auto (the model's sentence-transformers Pooling mode, else mean over real tokens), "
                          "mean, cls or max.")] = default(E, "pooling"),
    prefix: Annotated[Optional[str], typer.Option(
        "--prefix", help="Text put before every sentence on both sides, e.g. \"query: \" for e5 (default: the model's "
                         "'query' prompt from config_sentence_transformers.json, else none; \"\" for none)."
    )] = default(E, "prefix"),
    max_length: Annotated[Optional[int], typer.Option(
        "--max-length", min=2, help=f"Tokens per sentence, special tokens included (default: {TATOEBA_MAX_LENGTH}, or the "
                             "model's position limit when smaller).")] = default(E, "max_length"),
    batch_size: EvalBatch = default(E, "batch_size"),
    overwrite: EvalOverwrite = default(E, "overwrite"),
    update_card: UpdateCard = default(E, "update_card"),
    backend: Backend = default(E, "backend"),
    precision: Precision = default(E, "precision"),
    device: Device = default(E, "device"),
    json_out: Json = False,
    quiet: Quiet = default(E, "quiet"),
    verbose: Verbose = False,
) -> None:
    """Tatoeba cross-lingual sentence retrieval, no fine-tuning: accuracy xx->en and en->xx per language."""
    cfg = configure(EvalTatoebaConfig, locals())
    from mlminilm.evaluation import tatoeba

    render(tatoeba.run(cfg), json_out)
