"""Option types shared by the evaluation commands (eval-xnli, eval-mlqa, eval-tatoeba); defaults from mlminilm.config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mlminilm.commands._params import Backend as BackendChoice
from mlminilm.commands._params import Precision as PrecisionChoice
from mlminilm.commands._train_options import Device, Quiet, Verbose  # noqa: F401 (re-exported: the training commands' own)

Langs = Annotated[list[str], typer.Option("--langs", help="Only these languages, comma-separated or repeated (default: every language with a file in --data; MLQA: its 7).")]
EvalOut = Annotated[Optional[Path], typer.Option(
    "--out", help="Report directory: metrics.json/.csv/.md, chart.png, predictions/ (must be empty unless --overwrite).")]
EvalBatch = Annotated[int, typer.Option("--batch-size", min=1, help="Inputs per forward pass (sorted by length).")]
EvalMaxSeqLen = Annotated[Optional[int], typer.Option(
    "--max-seq-len", min=8, help="Tokens per input (default: the fine-tuning run's, from run.json in --model).")]
EvalOverwrite = Annotated[bool, typer.Option("--overwrite", help="Replace an existing report in --out.")]
UpdateCard = Annotated[bool, typer.Option(
    "--update-card", help="After the evaluation, write its results into --model's README.md: Hub model-index metadata "
    "and a table (a re-run replaces them; the rest of the card is kept). --model must be a local directory.")]
Json = Annotated[bool, typer.Option("--json", help="Print the metrics document as JSON on stdout, and nothing else.")]
Precision = Annotated[PrecisionChoice, typer.Option("--precision", help="auto (bf16 on CUDA and on CPUs with native bf16, AVX512-BF16 or AMX; else fp32), fp32 or bf16.")]
Backend = Annotated[BackendChoice, typer.Option(
    "--backend", help="torch: the PyTorch model; onnx: --model is a `mlminilm export` directory whose onnx/model.onnx "
    "runs in onnxruntime on the CPU (float32 or int8, as exported), with the same tokenisation, batching and scoring.")]


def split_langs(langs: list[str]) -> tuple[str, ...]:
    return tuple(code.strip() for item in langs for code in item.split(",") if code.strip())


def render(doc: dict, as_json: bool) -> None:
    """The metrics document: as JSON alone on stdout, or as a table on stdout (and where the files went on stderr)."""
    import json

    if as_json:
        print(json.dumps(doc, indent=2, ensure_ascii=False, default=str))
        return
    from rich.console import Console

    from mlminilm import logging as mlog
    from mlminilm.report import notes, rich_table

    console = Console()
    console.print(rich_table(doc))
    console.print(notes(doc), highlight=False, markup=False)
    if doc.get("report_dir"):
        mlog.get("report").info("report written to %s", doc["report_dir"])
