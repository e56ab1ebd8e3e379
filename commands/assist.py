"""`mlminilm assist`: teacher -> assistant -> student, each stage resumable and exported."""

from __future__ import annotations

from typing import Annotated

import typer

from mlminilm.commands._params import NON_NEGATIVE
from mlminilm.commands._run import configure
from mlminilm.commands._train_options import *  # noqa: F403 (the shared option types)
from mlminilm.commands._train_options import emit
from mlminilm.config import AssistConfig, default

A = AssistConfig

EXAMPLES = """\b
Examples:
  mlminilm assist --teacher xlm-roberta-base --data data/ --layers 6 --hidden 384 --out runs/l6h384-ta/
  mlminilm assist --teacher xlm-roberta-base --data data/ --out runs/l6h384-ta/ --resume
"""

AssistantSteps = Annotated[int, typer.Option(
    "--assistant-steps", min=1, help="Optimizer steps of the teacher -> assistant stage.")]
StudentSteps = Annotated[int, typer.Option(
    "--student-steps", min=1, help="Optimizer steps of the assistant -> student stage.")]
AssistWarmup = Annotated[float, typer.Option(
    "--warmup", callback=NON_NEGATIVE,
    help="Linear warmup of each stage: a fraction of its steps (--assistant-steps, --student-steps) if below 1, "
         "else steps. With --resume it may change.")]
Force = Annotated[bool, typer.Option("--force", help="Use an assistant even when the rule (M <= L/2, d' <= d/2) does not apply.")]


def command(
    teacher: Teacher = ...,
    data: Data = default(A, "data"),
    out: Out = ...,
    layers: Layers = default(A, "layers"),
    hidden: Hidden = default(A, "hidden"),
    heads: Heads = default(A, "heads"),
    intermediate: Intermediate = default(A, "intermediate"),
    init: Init = default(A, "init"),
    init_layers: InitLayers = default(A, "init_layers"),
    objective: Objective = default(A, "objective"),
    relation_heads: RelationHeads = default(A, "relation_heads"),
    teacher_layer: TeacherLayer = default(A, "teacher_layer"),
    hidden_loss_weight: HiddenLossWeight = default(A, "hidden_loss_weight"),
    hidden_distance: HiddenDistance = default(A, "hidden_distance"),
    embedding_loss_weight: EmbeddingLossWeight = default(A, "embedding_loss_weight"),
    relation_loss_weight: RelationLossWeight = default(A, "relation_loss_weight"),
    parallel: Parallel = default(A, "parallel"),
    parallel_loss_weight: ParallelLossWeight = default(A, "parallel_loss_weight"),
    parallel_prefix: ParallelPrefix = default(A, "parallel_prefix"),
    parallel_max_length: ParallelMaxLength = default(A, "parallel_max_length"),
    parallel_contrastive_weight: ParallelContrastiveWeight = default(A, "parallel_contrastive_weight"),
    parallel_temperature: ParallelTemperature = default(A, "parallel_temperature"),
    target_cache: TargetCache = default(A, "target_cache"),
    freeze_layers: FreezeLayers = default(A, "freeze_layers"),
    alpha: Alpha = default(A, "alpha"),
    dropout: Dropout = default(A, "dropout"),
    assistant_steps: AssistantSteps = default(A, "assistant_steps"),
    student_steps: StudentSteps = default(A, "student_steps"),
    force: Force = default(A, "force"),
    batch_size: DistillBatchSize = default(A, "batch_size"),
    grad_accum: GradAccum = default(A, "grad_accum"),
    global_batch: GlobalBatch = default(A, "global_batch"),
    lr: Lr = default(A, "lr"),
    warmup: AssistWarmup = default(A, "warmup"),
    weight_decay: WeightDecay = default(A, "weight_decay"),
    max_grad_norm: MaxGradNorm = default(A, "max_grad_norm"),
    seed: Seed = default(A, "seed"),
    save_every: SaveEvery = default(A, "save_every"),
    keep: Keep = default(A, "keep"),
    log_every: LogEvery = default(A, "log_every"),
    resume: Resume = default(A, "resume"),
    overwrite: Overwrite = default(A, "overwrite"),
    precision: Precision = default(A, "precision"),
    compile: Compile = default(A, "compile"),
    data_workers: DataWorkers = default(A, "data_workers"),
    device: Device = default(A, "device"),
    report_to: ReportTo = default(A, "report_to"),
    probe_tatoeba: ProbeTatoeba = default(A, "probe_tatoeba"),
    probe_langs: ProbeLangs = list(default(A, "probe_langs")),
    probe_every: ProbeEvery = default(A, "probe_every"),
    probe_pairs: ProbePairs = default(A, "probe_pairs"),
    json_out: Json = False,
    quiet: Quiet = default(A, "quiet"),
    verbose: Verbose = False,
) -> None:
    """Distil through a teacher assistant: teacher -> assistant (teacher's depth, student's width) -> student."""
    cfg = configure(AssistConfig, locals())
    from mlminilm import assist

    emit(assist.run(cfg), json_out, summary)


def summary(result) -> str:
    """What `mlminilm assist` prints on stdout without --json."""
    return f"assistant: {result.assistant}\nstudent: {result.student}"
