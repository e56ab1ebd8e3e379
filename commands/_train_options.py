"""Option types shared by the training commands (distill, assist, finetune). Defaults come from mlminilm.config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

Out = Annotated[Path, typer.Option("--out", help="Output directory (created; must be empty unless --resume/--overwrite).")]
MaxSteps = Annotated[int, typer.Option("--max-steps", help="Optimizer steps.")]
BatchSize = Annotated[int, typer.Option("--batch-size", help="Sequences per process per micro-batch.")]
GradAccum = Annotated[int, typer.Option("--grad-accum", help="Micro-batches accumulated per optimizer step.")]
Lr = Annotated[float, typer.Option("--lr", help="Peak learning rate (AdamW).")]
Warmup = Annotated[float, typer.Option("--warmup", help="Linear warmup: a fraction of --max-steps if below 1, else steps.")]
WeightDecay = Annotated[float, typer.Option("--weight-decay", help="AdamW weight decay (weight matrices only).")]
MaxGradNorm = Annotated[float, typer.Option(
    "--max-grad-norm", help="Clip the global gradient norm to this before each step; 0 = no clipping.")]
FreezeEmbeddings = Annotated[bool, typer.Option(
    "--freeze-embeddings", help="Keep the word embeddings fixed (with a 250k vocabulary most of a small model's parameters).")]
Seed = Annotated[int, typer.Option("--seed", help="Random seed (init, data order, dropout).")]
SaveEvery = Annotated[int, typer.Option("--save-every", help="Checkpoint every N steps (and at the end).")]
Keep = Annotated[int, typer.Option("--keep", help="Keep the last K checkpoints.")]
LogEvery = Annotated[int, typer.Option("--log-every", help="Write a metrics.jsonl record every N steps.")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its latest checkpoint.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Start over, replacing a previous run in --out.")]
Precision = Annotated[str, typer.Option("--precision", help="auto (bf16 on CUDA and on CPUs with native bf16, AVX512-BF16 or AMX; else fp32), fp32 or bf16.")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")]
Json = Annotated[bool, typer.Option("--json", help="Print the result as one JSON document on stdout.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Only warnings and errors on stderr; no progress bar.")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")]

Teacher = Annotated[str, typer.Option("--teacher", help="Teacher encoder: hub id (e.g. xlm-roberta-base) or local directory.")]
Data = Annotated[Path, typer.Option("--data", help="Output directory of `mlminilm prepare`.")]
Layers = Annotated[int, typer.Option("--layers", help="Student layers.")]
Hidden = Annotated[int, typer.Option("--hidden", help="Student hidden size.")]
Heads = Annotated[int, typer.Option("--heads", help="Student attention heads (minilm: must equal the teacher's).")]
Intermediate = Annotated[int, typer.Option("--intermediate", help="Student FFN size.")]
Init = Annotated[str, typer.Option("--init", help="random, or teacher (every k-th teacher layer; widths must match).")]
Objective = Annotated[str, typer.Option("--objective", help="minilm (attention + value relation) or minilm-v2 (Q-Q, K-K, V-V).")]
RelationHeads = Annotated[int, typer.Option("--relation-heads", help="minilm-v2: relation heads (must divide both hidden sizes).")]
TeacherLayer = Annotated[int, typer.Option("--teacher-layer", help="Teacher layer to distil, 0-based; -1 = last.")]
Alpha = Annotated[float, typer.Option("--alpha", help="Language sampling exponent: q_i proportional to p_i^alpha.")]
Dropout = Annotated[Optional[float], typer.Option("--dropout", help="Student dropout (default: the teacher's).")]


def emit(result: dict, as_json: bool, summary: str) -> None:
    """The result: one JSON document on stdout with --json, else a short summary on stdout."""
    import json

    if as_json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(summary)
