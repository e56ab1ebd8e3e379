"""`mlminilm finetune`: the CLI translates options into a FinetuneConfig and calls mlminilm.finetune.run."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from mlminilm.commands._params import NON_NEGATIVE, POSITIVE
from mlminilm.commands._params import Task as TaskChoice
from mlminilm.commands._run import configure
from mlminilm.commands._train_options import *  # noqa: F403 (the shared option types)
from mlminilm.commands._train_options import emit, loss_summary
from mlminilm.config import FinetuneConfig, default

F = FinetuneConfig

EXAMPLES = """\b
Examples:
  mlminilm finetune --task xnli --model runs/l6h384/student --train en-train.tsv --dev en-dev.tsv --out ft/xnli
  mlminilm finetune --task qa --model runs/l6h384/student --train squad-train.json --dev en-dev.json --out ft/qa
"""

Task = Annotated[TaskChoice, typer.Option("--task", help="xnli (3-way sequence classification) or qa (span extraction).")]
Model = Annotated[str, typer.Option("--model", help="Encoder: a local directory (e.g. a distilled student) or hub id.")]
Train = Annotated[str, typer.Option(
    "--train", help="English training data: XNLI/MultiNLI TSV, XNLI-1.0 TSV, MultiNLI JSON lines (xnli); SQuAD v1.1 "
    "JSON (qa); or a Hub dataset: hf:multi_nli, hf:squad (hf:NAME[:SPLIT]).")]
Dev = Annotated[Optional[str], typer.Option(
    "--dev", help="English dev data (same formats) for checkpoint selection; without it the last checkpoint is kept.")]
MaxSeqLen = Annotated[Optional[int], typer.Option("--max-seq-len", min=8, help="Tokens per input, specials included (default: 128 xnli, 384 qa).")]
DocStride = Annotated[int, typer.Option("--doc-stride", min=1, help="qa: context tokens shared by consecutive windows.")]
MaxQueryLength = Annotated[int, typer.Option("--max-query-length", min=1, help="qa: question tokens kept.")]
Epochs = Annotated[Optional[float], typer.Option("--epochs", callback=POSITIVE, help="Passes over the training data (default: 5 xnli, 2 qa).")]
FtMaxSteps = Annotated[Optional[int], typer.Option("--max-steps", min=1, help="Optimizer steps (default: from --epochs).")]
FtLr = Annotated[Optional[float], typer.Option(
    "--lr", callback=POSITIVE,
    help="Peak learning rate (default: 2e-5 xnli, 3e-5 qa). With --resume it may change (recorded in run.json).")]
FtWarmup = Annotated[Optional[float], typer.Option(
    "--warmup", callback=NON_NEGATIVE,
    help="Linear warmup: a fraction of the steps if below 1, else steps (default: 0 xnli, 0.1 qa). With --resume it "
         "may change.")]
FtWeightDecay = Annotated[Optional[float], typer.Option("--weight-decay", callback=NON_NEGATIVE, help="AdamW weight decay (default: 0 xnli, 1e-4 qa).")]
FtSaveEvery = Annotated[Optional[int], typer.Option(
    "--save-every", min=1, help="Checkpoint and English-dev evaluation every N steps (default: once per epoch).")]
GroupByLength = Annotated[bool, typer.Option(
    "--group-by-length", help="Batches of inputs of similar length (less padding; faster, notably for qa on CPU).")]
EvalBatchSize = Annotated[int, typer.Option("--eval-batch-size", min=1, help="Batch size of the dev evaluation.")]


def command(
    task: Task = default(F, "task"),
    model: Model = ...,
    train: Train = ...,
    out: Out = ...,
    dev: Dev = default(F, "dev"),
    max_seq_len: MaxSeqLen = default(F, "max_seq_len"),
    doc_stride: DocStride = default(F, "doc_stride"),
    max_query_length: MaxQueryLength = default(F, "max_query_length"),
    epochs: Epochs = default(F, "epochs"),
    max_steps: FtMaxSteps = default(F, "max_steps"),
    batch_size: BatchSize = default(F, "batch_size"),
    grad_accum: GradAccum = default(F, "grad_accum"),
    lr: FtLr = default(F, "lr"),
    warmup: FtWarmup = default(F, "warmup"),
    weight_decay: FtWeightDecay = default(F, "weight_decay"),
    max_grad_norm: MaxGradNorm = default(F, "max_grad_norm"),
    freeze_embeddings: FreezeEmbeddings = default(F, "freeze_embeddings"),
    seed: Seed = default(F, "seed"),
    save_every: FtSaveEvery = default(F, "save_every"),
    keep: Keep = default(F, "keep"),
    log_every: LogEvery = default(F, "log_every"),
    group_by_length: GroupByLength = default(F, "group_by_length"),
    eval_batch_size: EvalBatchSize = default(F, "eval_batch_size"),
    resume: Resume = default(F, "resume"),
    overwrite: Overwrite = default(F, "overwrite"),
    precision: Precision = default(F, "precision"),
    device: Device = default(F, "device"),
    report_to: ReportTo = default(F, "report_to"),
    json_out: Json = False,
    quiet: Quiet = default(F, "quiet"),
    verbose: Verbose = False,
) -> None:
    """Fine-tune an encoder on English task data (XNLI or QA); select the checkpoint on English dev."""
    cfg = configure(FinetuneConfig, locals())
    from mlminilm import finetune

    emit(finetune.run(cfg), json_out, summary)


def summary(result) -> str:
    """What `mlminilm finetune` prints on stdout without --json."""
    score = (f"{result.selection_metric} {result.selected_score:.2f}" if result.selected_score is not None
             else "no dev set")
    return (f"model: {result.out}\nsteps: {result.steps}  loss: {loss_summary(result)}  examples/s: {result.examples_per_s:,.1f}\n"
            f"selected: step {result.selected_step} ({score})")
