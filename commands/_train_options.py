"""Option types shared by the training commands (distill, assist, finetune). Defaults come from mlminilm.config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mlminilm.commands._params import ALPHA, BATCH_SIZE, DROPOUT, NON_NEGATIVE, POSITIVE
from mlminilm.commands._params import Compile as CompileChoice
from mlminilm.commands._params import Device as DeviceChoice
from mlminilm.commands._params import HiddenDistance as HiddenDistanceChoice
from mlminilm.commands._params import Init as InitChoice
from mlminilm.commands._params import Objective as ObjectiveChoice
from mlminilm.commands._params import Precision as PrecisionChoice
from mlminilm.commands._params import ReportTo as ReportToChoice
from mlminilm.config import DEFAULT_INIT_LAYERS

Out = Annotated[Path, typer.Option("--out", help="Output directory (created; must be empty unless --resume/--overwrite).")]
MaxSteps = Annotated[int, typer.Option("--max-steps", min=1, help="Optimizer steps.")]
DistillMaxSteps = Annotated[int, typer.Option(
    "--max-steps", min=0, help="Optimizer steps; 0 exports the initialised student untrained (to evaluate a "
    "starting point, e.g. with eval-tatoeba, before spending compute).")]
BatchSize = Annotated[int, typer.Option("--batch-size", min=1, help="Sequences per process per micro-batch.")]
GradAccum = Annotated[int, typer.Option("--grad-accum", min=1, help="Micro-batches accumulated per optimizer step.")]
DistillBatchSize = Annotated[str, typer.Option(
    "--batch-size", callback=BATCH_SIZE, metavar="N|auto", show_default=True,
    help="Sequences per process per micro-batch, or auto: the largest power of two whose step fits the GPU (CPU: up "
    "to 32), with --global-batch kept by accumulation; the choice is recorded in run.json.")]
GlobalBatch = Annotated[Optional[int], typer.Option(
    "--global-batch", min=1,
    help="Sequences per optimizer step over all processes (sets the accumulation; needed by --batch-size auto). "
    "Default: batch size x --grad-accum x processes.")]
Compile = Annotated[CompileChoice, typer.Option(
    "--compile", help="torch.compile the student, the teacher's capture and the loss: auto (on for CUDA), on or off.")]
DataWorkers = Annotated[Optional[int], typer.Option(
    "--data-workers", min=0,
    help="DataLoader worker processes reading the shards (default: 0 on CPU, up to 4 per GPU process).")]
Lr = Annotated[float, typer.Option(
    "--lr", callback=POSITIVE, help="Peak learning rate (AdamW). With --resume it may change (recorded in run.json).")]
Warmup = Annotated[float, typer.Option(
    "--warmup", callback=NON_NEGATIVE,
    help="Linear warmup: a fraction of --max-steps if below 1, else steps. With --resume it may change.")]
WeightDecay = Annotated[float, typer.Option(
    "--weight-decay", callback=NON_NEGATIVE, help="AdamW weight decay (weight matrices only).")]
MaxGradNorm = Annotated[float, typer.Option(
    "--max-grad-norm", callback=NON_NEGATIVE, help="Clip the global gradient norm to this before each step; 0 = no clipping.")]
FreezeEmbeddings = Annotated[bool, typer.Option(
    "--freeze-embeddings", help="Keep the word embeddings fixed (with a 250k vocabulary most of a small model's parameters).")]
Seed = Annotated[int, typer.Option("--seed", help="Random seed (init, data order, dropout).")]
SaveEvery = Annotated[int, typer.Option("--save-every", min=1, help="Checkpoint every N steps (and at the end).")]
Keep = Annotated[int, typer.Option("--keep", min=1, help="Keep the last K checkpoints.")]
LogEvery = Annotated[int, typer.Option(
    "--log-every", min=1, help="Write a metrics.jsonl record every N steps (and a log line, when no progress bar shows).")]
Resume = Annotated[bool, typer.Option(
    "--resume", help="Continue the run in --out from its latest checkpoint (--lr and --warmup may change).")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Start over, replacing a previous run in --out.")]
Precision = Annotated[PrecisionChoice, typer.Option(
    "--precision", help="auto (bf16 on CUDA GPUs that have it and on CPUs with native bf16, AVX512-BF16 or AMX; fp16 "
    "on older GPUs; else fp32), fp32, bf16, or fp16 (with a gradient scaler; for GPUs without bf16: V100, T4).")]
Device = Annotated[DeviceChoice, typer.Option("--device", help="auto, cpu or cuda.")]
ReportTo = Annotated[ReportToChoice, typer.Option(
    "--report-to",
    help="Where the metrics records also go (metrics.jsonl is always written: --resume reads it): jsonl (nowhere "
    "else), tensorboard (also TensorBoard event files in OUT/tb/; needs pip install 'mlminilm[tensorboard]') or "
    "none (no extra sink, as jsonl). May change on --resume.")]
Json = Annotated[bool, typer.Option("--json", help="Print the result as one JSON document on stdout.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Only warnings and errors on stderr; no progress bar.")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")]

Teacher = Annotated[str, typer.Option("--teacher", help="Teacher encoder: hub id (e.g. xlm-roberta-base) or local directory.")]
Data = Annotated[Path, typer.Option("--data", help="Output directory of `mlminilm prepare`.")]
Layers = Annotated[int, typer.Option("--layers", min=1, help="Student layers.")]
Hidden = Annotated[int, typer.Option("--hidden", min=1, help="Student hidden size.")]
Heads = Annotated[int, typer.Option("--heads", min=1, help="Student attention heads (minilm: must equal the teacher's).")]
Intermediate = Annotated[int, typer.Option("--intermediate", min=1, help="Student FFN size.")]
Init = Annotated[InitChoice, typer.Option("--init", help="random, or teacher (every k-th teacher layer; widths must match).")]
InitLayers = Annotated[Optional[str], typer.Option(
    "--init-layers", metavar="first|every|first-last|LIST",
    help="With --init teacher, the teacher layers the student starts from: first (the bottom k layers), every "
    "(every k-th layer, ending at the last), first-last (the bottom k-1 and the last) or a 0-based list such as "
    "0,1,2,3,4,5. Default: " + DEFAULT_INIT_LAYERS + " (measured in docs/RETENTION.md).")]
HiddenLossWeight = Annotated[Optional[float], typer.Option(
    "--hidden-loss-weight", callback=NON_NEGATIVE, show_default="auto",
    help="Weight of a term on the last hidden states per real token (--hidden-distance); 0 = off. Needs the "
    "teacher's hidden size; trains the whole top layer. Default auto: 1 for a sentence-transformers teacher of "
    "the student's width (e5, all-MiniLM), else 0.")]
HiddenDistance = Annotated[HiddenDistanceChoice, typer.Option(
    "--hidden-distance", help="The hidden-state term's distance: cosine (1 - cos) or mse.")]
EmbeddingLossWeight = Annotated[Optional[float], typer.Option(
    "--embedding-loss-weight", callback=NON_NEGATIVE, show_default="auto",
    help="Weight of the squared distance between sentence embeddings through the teacher's own Pooling (+ "
    "Normalize), as sentence-transformers' multilingual distillation; 0 = off. Needs a sentence-transformers "
    "teacher of the student's width. Default auto: as --hidden-loss-weight.")]
RelationLossWeight = Annotated[float, typer.Option(
    "--relation-loss-weight", callback=NON_NEGATIVE,
    help="Weight of the MiniLM relation terms (attention + value, or MiniLMv2's Q-Q/K-K/V-V); 0 = off, then only "
    "the output and parallel terms train the student.")]
Parallel = Annotated[Optional[Path], typer.Option(
    "--parallel", metavar="FILE|DIR",
    help="Parallel sentences (each line: a sentence in the teacher's language, a tab, one or more tab-separated "
    "translations; .tsv/.txt, optionally .gz; a directory of them): turns on the cross-lingual embedding term, "
    "the student's embeddings of a sentence and of its translation pulled to the teacher's embedding of the "
    "sentence. Needs the teacher's hidden size; trains the whole student.")]
ParallelLossWeight = Annotated[float, typer.Option(
    "--parallel-loss-weight", callback=NON_NEGATIVE, help="Weight of the parallel term (with --parallel).")]
ParallelPrefix = Annotated[Optional[str], typer.Option(
    "--parallel-prefix", show_default="the teacher's query prompt",
    help="Text put before every parallel sentence. Default: the teacher's sentence-transformers 'query' prompt "
    '(e5: "query: "), as eval-tatoeba embeds; none for a teacher without one. "" = none.')]
ParallelMaxLength = Annotated[int, typer.Option(
    "--parallel-max-length", min=2, help="Parallel sentences are cut to this many tokens.")]
ParallelContrastiveWeight = Annotated[float, typer.Option(
    "--parallel-contrastive-weight", callback=NON_NEGATIVE,
    help="Weight of in-batch translation ranking on the parallel pairs (each sentence must rank its own "
    "translation first among the batch's, both directions, cosine over --parallel-temperature); 0 = off.")]
ParallelTemperature = Annotated[float, typer.Option(
    "--parallel-temperature", callback=POSITIVE,
    help="Softmax temperature of the contrastive term (cosine similarity / temperature).")]
FreezeLayers = Annotated[int, typer.Option(
    "--freeze-layers", min=0,
    help="With --init teacher: keep the embeddings and this many bottom student layers as the teacher has them "
    "(frozen); no backward pass runs below the first trained layer.")]
TargetCache = Annotated[Optional[Path], typer.Option(
    "--target-cache", metavar="DIR", show_default="OUT/teacher-targets",
    help="Where the teacher's embeddings of the parallel sentences are kept: computed once before training, "
    "keyed by the teacher and the text, reused on --resume; give several runs one directory to share it.")]
ProbeTatoeba = Annotated[Optional[Path], typer.Option(
    "--probe-tatoeba", metavar="DIR",
    help="Tatoeba folder (tatoeba.XXX-eng.*): the student's xx->en retrieval at step 0, every --probe-every steps "
    "and at the end, in metrics.jsonl and the log (never used for selection).")]
ProbeLangs = Annotated[list[str], typer.Option(
    "--probe-langs", help="Probe only these languages (project codes, comma-separated or repeated; default: all "
    "found).")]
ProbeEvery = Annotated[int, typer.Option("--probe-every", min=1, help="Steps between probes.")]
ProbePairs = Annotated[Optional[int], typer.Option(
    "--probe-pairs", min=1, help="Probe at most this many pairs per language (the first ones; default: all).")]
Objective = Annotated[ObjectiveChoice, typer.Option(
    "--objective", help="minilm (attention + value relation) or minilm-v2 (Q-Q, K-K, V-V).")]
RelationHeads = Annotated[int, typer.Option(
    "--relation-heads", min=1, help="minilm-v2: relation heads (must divide both hidden sizes).")]
TeacherLayer = Annotated[int, typer.Option("--teacher-layer", help="Teacher layer to distil, 0-based; -1 = last.")]
Alpha = Annotated[float, typer.Option(
    "--alpha", callback=ALPHA, help="Language sampling exponent in (0, 1]: q_i proportional to p_i^alpha.")]
Dropout = Annotated[Optional[float], typer.Option(
    "--dropout", callback=DROPOUT, help="Student dropout in [0, 1) (default: the teacher's).")]


def emit(result, as_json: bool, summary) -> None:
    """The result of a run: `result.to_dict()` as one JSON document on stdout with --json, else `summary(result)`, a
    few lines, on stdout. Only the main process prints: under torchrun every rank returns a result."""
    import json

    from mlminilm import logging as mlog

    if not mlog.is_main_process():
        return
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        print(summary(result))


def loss_summary(result) -> str:
    """"first -> last" loss of a run, or what happened when this call trained no step (a finished run resumed)."""
    if result.steps == 0:
        return "none (--max-steps 0: the initialised student, exported untrained)"
    if result.first_loss is None or result.last_loss is None:
        return "no step trained (the run had already finished)"
    return f"{result.first_loss:.4f} -> {result.last_loss:.4f}"
