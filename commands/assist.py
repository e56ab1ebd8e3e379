"""`mlminilm assist`: teacher -> assistant -> student, each stage resumable and exported."""

from __future__ import annotations

from typing import Annotated

import typer

from mlminilm.commands._params import NON_NEGATIVE, value
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
    probe_tatoeba: ProbeTatoeba = default(A, "probe_tatoeba"),
    probe_langs: ProbeLangs = list(default(A, "probe_langs")),
    probe_every: ProbeEvery = default(A, "probe_every"),
    probe_pairs: ProbePairs = default(A, "probe_pairs"),
    json_out: Json = False,
    quiet: Quiet = default(A, "quiet"),
    verbose: Verbose = False,
) -> None:
    """Distil through a teacher assistant: teacher -> assistant (teacher's depth, student's width) -> student."""
    from mlminilm import logging as mlog
    from mlminilm.commands._eval_options import split_langs

    mlog.setup(quiet=quiet, verbose=verbose)
    cfg = AssistConfig(
        teacher=teacher, data=data, out=out, layers=layers, hidden=hidden, heads=heads,
        intermediate=intermediate, init=value(init), objective=value(objective), relation_heads=relation_heads,
        teacher_layer=teacher_layer, alpha=alpha, dropout=dropout, assistant_steps=assistant_steps,
        student_steps=student_steps, force=force, batch_size=batch_size, grad_accum=grad_accum,
        global_batch=global_batch, compile=value(compile), data_workers=data_workers, lr=lr,
        warmup=warmup, weight_decay=weight_decay, max_grad_norm=max_grad_norm, seed=seed, save_every=save_every,
        keep=keep, log_every=log_every, resume=resume, overwrite=overwrite, precision=value(precision),
        device=value(device),
        quiet=quiet, init_layers=init_layers, hidden_loss_weight=hidden_loss_weight,
        hidden_distance=value(hidden_distance), embedding_loss_weight=embedding_loss_weight,
        probe_tatoeba=probe_tatoeba, probe_langs=split_langs(probe_langs), probe_every=probe_every,
        probe_pairs=probe_pairs,
    )
    from mlminilm import assist

    result = assist.run(cfg)
    if mlog.is_main_process():
        emit(result.to_dict(), json_out, f"assistant: {result.assistant}\nstudent: {result.student}")
