"""Run configurations: one frozen dataclass per command, the single home of every default.

Typer option defaults are read from these fields (see `default`), and `__post_init__` validates
and names the CLI flag in its message, so a bad option fails before any expensive work starts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from mlminilm.errors import ConfigError

OBJECTIVES = ("minilm", "minilm-v2")
INITS = ("random", "teacher")
# --init-layers with --init teacher: which teacher layers the student's start from (mlminilm.models.init_layers).
# "first-last" is the default (README "Where the student starts"; docs/RETENTION.md): on multilingual-e5-small,
# untrained, it is as good a start as the cut teacher (Tatoeba xx->en / en->xx 69.4 / 71.3 against 70.3 / 65.3
# for "first", 36.3 / 33.2 for "every"), and unlike the cut teacher its top layer is the teacher's, so training
# towards the teacher's outputs does not first destroy it (100 steps with the output terms on de/zh/sw/ar:
# first-last 71.7, every 70.8, first 31.0).
INIT_LAYER_RULES = ("every", "first", "first-last")
DEFAULT_INIT_LAYERS = "first-last"
HIDDEN_DISTANCES = ("cosine", "mse")  # --hidden-distance (mlminilm.losses.hidden_cosine / hidden_mse)
# What --hidden-loss-weight / --embedding-loss-weight auto give a sentence-transformers teacher of the student's
# width (docs/RETENTION.md: the terms keep more of the teacher's Tatoeba than the relation losses alone).
OUTPUT_TERMS_WEIGHT = 1.0
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
QA_SCORERS = ("auto", "squad", "mlqa")  # eval-mlqa --scorer; auto: mlqa for MLQA files, squad for the others
EVAL_SPLITS = ("dev", "test")  # eval-xnli / eval-mlqa --split
COMPILE_MODES = ("auto", "on", "off")  # distill / assist --compile; auto: on for CUDA, off on CPU
AUTO = "auto"  # --batch-size auto (distill / assist): the largest micro-batch that fits, the global batch kept


def default(cls, name: str):
    """The default of field `name` of config class `cls` (for Typer option defaults)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                return f.default_factory()  # type: ignore[misc]
            raise KeyError(f"{cls.__name__}.{name} has no default")
    raise KeyError(f"{cls.__name__} has no field {name}")


def _problems_to_error(problems: list[str]) -> None:
    if problems:
        raise ConfigError("; ".join(problems))


def _choice(problems: list[str], value: str, choices: tuple[str, ...], flag: str) -> None:
    if value not in choices:
        problems.append(f"{flag} must be one of {', '.join(choices)} (got {value!r})")


@dataclass(frozen=True)
class TrainConfig:
    """What every training loop shares (distill, assist stages, finetune)."""

    AUTO_BATCH = False  # whether --batch-size auto is accepted (a class attribute, not a field)
    ZERO_STEPS = False  # whether --max-steps 0 is accepted (distill: export the initialised student)

    out: Path
    max_steps: int = 10_000
    batch_size: int = 32  # sequences per process per micro-batch
    grad_accum: int = 1
    lr: float = 5e-4
    warmup: float = 0.06  # below 1: a fraction of max_steps; from 1: a number of steps
    weight_decay: float = 0.01
    # Gradient clipping (max global L2 norm) before each optimizer step; 0 = off. Off for distill / assist: the
    # distillation recipes on record do not clip (METHOD.md section 4). FinetuneConfig clips at 1.0, as XTREME.
    max_grad_norm: float = 0.0
    # Keep the word-embedding matrix fixed. With XLM-R's 250k vocabulary it is 96M of a 6x384 student's ~107M
    # parameters: freezing it saves its gradient and AdamW state (memory, and much of a CPU step), and keeps the
    # teacher's cross-lingual token space when the student starts from the teacher (--init teacher).
    freeze_embeddings: bool = False
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    adam_eps: float = 1e-6
    seed: int = 0
    save_every: int = 1000
    keep: int = 3
    log_every: int = 10
    resume: bool = False
    overwrite: bool = False
    # auto: bf16 on CUDA GPUs that have it and on CPUs with native bf16 (train.cpu_has_native_bf16); fp16 with a
    # gradient scaler on older GPUs (V100, T4); else fp32
    precision: str = "auto"
    device: str = "auto"
    quiet: bool = False

    def _train_problems(self) -> list[str]:
        p: list[str] = []
        if self.max_steps < (0 if self.ZERO_STEPS else 1):
            least = "0 (the initialised student, exported untrained)" if self.ZERO_STEPS else "1"
            p.append(f"--max-steps must be at least {least} (got {self.max_steps})")
        if self.batch_size == AUTO:
            if not self.AUTO_BATCH:
                p.append("--batch-size auto is for distill and assist; give a number of sequences")
        elif not isinstance(self.batch_size, int) or self.batch_size < 1:
            p.append(f"--batch-size must be at least 1 or auto (got {self.batch_size!r})")
        if self.grad_accum < 1:
            p.append(f"--grad-accum must be at least 1 (got {self.grad_accum})")
        # `not x >= 0` and math.isfinite: NaN fails every comparison, and inf would pass a plain one.
        if not (self.lr > 0 and math.isfinite(self.lr)):
            p.append(f"--lr must be positive and finite (got {self.lr})")
        if not (self.warmup >= 0 and math.isfinite(self.warmup)):
            p.append(f"--warmup must be non-negative and finite (got {self.warmup})")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            p.append(f"--weight-decay must be non-negative and finite (got {self.weight_decay})")
        if not (self.max_grad_norm >= 0 and math.isfinite(self.max_grad_norm)):
            p.append(f"--max-grad-norm must be non-negative and finite, 0 to turn clipping off "
                     f"(got {self.max_grad_norm})")
        if self.save_every < 1:
            p.append(f"--save-every must be at least 1 (got {self.save_every})")
        if self.keep < 1:
            p.append(f"--keep must be at least 1 (got {self.keep})")
        if self.log_every < 1:
            p.append(f"--log-every must be at least 1 (got {self.log_every})")
        if self.resume and self.overwrite:
            p.append("--resume and --overwrite cannot be used together")
        _choice(p, self.precision, PRECISIONS, "--precision")
        _choice(p, self.device, DEVICES, "--device")
        return p

    def warmup_steps(self) -> int:
        return int(round(self.warmup * self.max_steps)) if self.warmup < 1 else int(self.warmup)


@dataclass(frozen=True)
class StudentShape:
    layers: int = 6
    hidden: int = 384
    heads: int = 12
    intermediate: int = 1536

    def problems(self, prefix: str = "--") -> list[str]:
        p: list[str] = []
        for name in ("layers", "hidden", "heads", "intermediate"):
            if getattr(self, name) < 1:
                p.append(f"{prefix}{name} must be at least 1 (got {getattr(self, name)})")
        if self.heads >= 1 and self.hidden % self.heads:
            p.append(f"{prefix}heads ({self.heads}) must divide {prefix}hidden ({self.hidden})")
        return p


@dataclass(frozen=True)
class DistillConfig(TrainConfig):
    teacher: str = ""
    data: Path = Path("data")
    layers: int = 6
    hidden: int = 384
    heads: int = 12
    intermediate: int = 1536
    init: str = "random"
    objective: str = "minilm"
    relation_heads: int = 48
    teacher_layer: int = -1  # 0-based, -1 = last
    alpha: float = 0.3
    dropout: float | None = None  # None: the teacher's hidden/attention dropout
    max_steps: int = 10_000
    # Sequences per process per micro-batch, or "auto": the largest power of two that fits the GPU (CPU: up to 32),
    # with --global-batch kept by accumulation (mlminilm/batch_size.py).
    batch_size: int | str = 32
    # Sequences per optimizer step over all processes; None = batch size x accumulation x processes. With a numeric
    # --batch-size it sets the accumulation; --batch-size auto needs it.
    global_batch: int | None = None
    compile: str = "auto"  # torch.compile the student's forward and the loss: auto = on CUDA
    data_workers: int | None = None  # DataLoader worker processes; None: corpus.loader.default_workers
    # With --init teacher: "every" (every k-th layer, ending at the last), "first" (the bottom k layers),
    # "first-last" (the bottom k-1 layers and the last), or an explicit 0-based list "0,1,2,3,4,5";
    # None = DEFAULT_INIT_LAYERS.
    init_layers: str | None = None
    # Output terms beside the relation losses (mlminilm/losses.py); 0 = off. They reach every student parameter
    # below the output, so with either on the whole top layer trains (not only its Q/K/V). None = auto:
    # OUTPUT_TERMS_WEIGHT for a sentence-transformers teacher of the student's width, else 0 (pure MiniLM).
    hidden_loss_weight: float | None = None  # the last hidden states, per real token
    hidden_distance: str = "cosine"
    embedding_loss_weight: float | None = None  # the sentence embedding through the teacher's Pooling (+ Normalize)
    # The in-training probe: Tatoeba xx->en of the student at step 0, every probe_every steps and at the end.
    probe_tatoeba: Path | None = None
    probe_langs: tuple[str, ...] = ()  # empty: every language found in probe_tatoeba
    probe_every: int = 100
    probe_pairs: int | None = None  # at most this many pairs per language (the first ones); None = all

    AUTO_BATCH = True
    ZERO_STEPS = True

    @property
    def output_terms(self) -> bool:
        """Whether any term reads the student's output (then its top layer trains whole); auto (None) counts as
        off until `distill.resolve_output_terms` has decided."""
        return (self.hidden_loss_weight or 0) > 0 or (self.embedding_loss_weight or 0) > 0

    @property
    def init_rule(self) -> str:
        return self.init_layers if self.init_layers is not None else DEFAULT_INIT_LAYERS

    @property
    def shape(self) -> StudentShape:
        return StudentShape(self.layers, self.hidden, self.heads, self.intermediate)

    def __post_init__(self) -> None:
        p = self._train_problems()
        if not self.teacher:
            p.append("--teacher is required (a hub id or a local model directory)")
        p += self.shape.problems()
        _choice(p, self.init, INITS, "--init")
        if self.freeze_embeddings and self.init != "teacher":
            p.append("--freeze-embeddings needs --init teacher: randomly initialised embeddings must be trained")
        if self.init_layers is not None:
            if self.init != "teacher":
                p.append("--init-layers needs --init teacher (it says which teacher layers the student starts from)")
            p += init_layers_problems(self.init_layers, self.layers)
        for flag, weight in (("--hidden-loss-weight", self.hidden_loss_weight),
                             ("--embedding-loss-weight", self.embedding_loss_weight)):
            if weight is not None and not (weight >= 0 and math.isfinite(weight)):
                p.append(f"{flag} must be non-negative and finite, 0 = off (got {weight})")
        _choice(p, self.hidden_distance, HIDDEN_DISTANCES, "--hidden-distance")
        if self.probe_every < 1:
            p.append(f"--probe-every must be at least 1 (got {self.probe_every})")
        if self.probe_pairs is not None and self.probe_pairs < 1:
            p.append(f"--probe-pairs must be at least 1 (got {self.probe_pairs})")
        if self.probe_langs and self.probe_tatoeba is None:
            p.append("--probe-langs needs --probe-tatoeba DIR")
        _unknown_langs(p, tuple(self.probe_langs), "--probe-langs")
        _choice(p, self.objective, OBJECTIVES, "--objective")
        if self.objective == "minilm-v2":
            if self.relation_heads < 1:
                p.append(f"--relation-heads must be at least 1 (got {self.relation_heads})")
            elif self.hidden % self.relation_heads:
                p.append(
                    f"--relation-heads ({self.relation_heads}) must divide the student's --hidden ({self.hidden})"
                )
        if not 0 < self.alpha <= 1:  # also false for NaN
            p.append(f"--alpha must be in (0, 1] (got {self.alpha})")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            p.append(f"--dropout must be in [0, 1) (got {self.dropout})")
        if self.global_batch is not None:
            if self.global_batch < 1:
                p.append(f"--global-batch must be at least 1 (got {self.global_batch})")
            if self.grad_accum != 1:
                p.append("--global-batch sets the accumulation itself: leave out --grad-accum")
        elif self.batch_size == AUTO:
            p.append("--batch-size auto needs --global-batch N (the sequences per optimizer step it keeps)")
        _choice(p, self.compile, COMPILE_MODES, "--compile")
        if self.data_workers is not None and self.data_workers < 0:
            p.append(f"--data-workers must be at least 0 (got {self.data_workers})")
        _problems_to_error(p)


def parse_init_layers(value: str) -> str | list[int]:
    """"every", "first", or the 0-based layer list of "0,1,2" (ValueError when it is neither)."""
    value = value.strip()
    if value in INIT_LAYER_RULES:
        return value
    return [int(x) for x in value.split(",")]


def init_layers_problems(value: str, layers: int) -> list[str]:
    """What is wrong with an --init-layers value for a student of `layers` layers (the teacher's depth is checked
    when its config is read)."""
    try:
        rule = parse_init_layers(value)
    except ValueError:
        return [f"--init-layers must be every, first, first-last, or a comma-separated list of 0-based teacher layers such as "
                f"0,1,2,3,4,5 (got {value!r})"]
    if isinstance(rule, str):
        return []
    if len(rule) != layers:
        return [f"--init-layers lists {len(rule)} teacher layers for a {layers}-layer student: give exactly {layers}"]
    if any(i < 0 for i in rule) or any(b <= a for a, b in zip(rule, rule[1:])):
        return [f"--init-layers must list increasing, non-negative teacher layers (got {value})"]
    return []


@dataclass(frozen=True)
class AssistConfig(DistillConfig):
    """Teacher -> assistant (teacher's depth, student's width) -> student."""

    assistant_steps: int = 10_000
    student_steps: int = 10_000
    force: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        p = []
        if self.assistant_steps < 1:
            p.append(f"--assistant-steps must be at least 1 (got {self.assistant_steps})")
        if self.student_steps < 1:
            p.append(f"--student-steps must be at least 1 (got {self.student_steps})")
        _problems_to_error(p)


@dataclass(frozen=True)
class PrepareConfig:
    """`prepare`: multilingual text -> fixed-length token sequences in per-language shards."""

    teacher: str  # hub id or local directory whose tokenizer is used
    inputs: tuple[str, ...]  # directories of <lang>.txt files, LANG=PATH, or hf:DATASET[:CONFIG_TEMPLATE]
    out: Path
    seq_len: int = 128
    workers: int = 0  # tokenizer processes; 0 = all cores, 1 = in-process
    shard_sequences: int = 16_384  # sequences per shard file
    text_field: str = "text"  # the text key of JSON lines and Hub dataset rows
    langs: tuple[str, ...] = ()  # only these languages (all found when empty)
    max_docs: int | None = None  # per-language cap on documents; None = all
    overwrite: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        p: list[str] = []
        if not self.teacher:
            p.append("--teacher is required (a hub id or a local model or tokenizer directory)")
        if not self.inputs:
            p.append("--input is required (a directory of <lang>.txt files, LANG=PATH, or hf:DATASET[:CONFIG])")
        if self.seq_len < 3:
            p.append(f"--seq-len must be at least 3: two specials and one token (got {self.seq_len})")
        if self.workers < 0:
            p.append(f"--workers must be 0 (all cores) or more (got {self.workers})")
        if self.shard_sequences < 1:
            p.append(f"--shard-sequences must be at least 1 (got {self.shard_sequences})")
        if not self.text_field:
            p.append("--text-field must not be empty")
        if self.max_docs is not None and self.max_docs < 1:
            p.append(f"--max-docs must be at least 1 (got {self.max_docs})")
        _problems_to_error(p)


# ------------------------------------------------------------------------------------ fine-tuning and evaluation

TASKS = ("xnli", "qa")


@dataclass(frozen=True)
class TaskDefaults:
    """What differs between the two fine-tuning tasks; a FinetuneConfig field left at None takes these."""

    max_seq_len: int
    lr: float
    epochs: float
    warmup: float  # below 1: a fraction of the steps
    weight_decay: float


# XTREME's recipes (google-research/xtreme scripts/train_xnli.sh and scripts/train_qa.sh, METHOD.md section 7):
# XNLI: lr 2e-5, 5 epochs, max length 128, batch 8 x 4 accumulation = 32, no warmup, no weight decay
#   (run_classify.py defaults). QA: lr 3e-5, 2 epochs, max length 384, doc stride 128, max query 64, batch 32,
#   weight decay 1e-4 and 500 warmup steps, which is about 10% of a 2-epoch SQuAD run at batch 32, hence 0.1.
TASK_DEFAULTS = {
    "xnli": TaskDefaults(max_seq_len=128, lr=2e-5, epochs=5.0, warmup=0.0, weight_decay=0.0),
    "qa": TaskDefaults(max_seq_len=384, lr=3e-5, epochs=2.0, warmup=0.1, weight_decay=1e-4),
}
QA_DOC_STRIDE = 128  # context tokens shared by consecutive windows
QA_MAX_QUERY_LENGTH = 64  # question tokens kept
QA_N_BEST = 20
QA_MAX_ANSWER_LENGTH = 30

# The per-task fields of FinetuneConfig that default to TASK_DEFAULTS when None.
_TASK_FIELDS = ("max_seq_len", "lr", "epochs", "warmup", "weight_decay")


def _unknown_langs(p: list[str], langs: tuple[str, ...], flag: str) -> None:
    from mlminilm.langs import all_languages

    unknown = [code for code in langs if code not in all_languages()]
    if unknown:
        p.append(f"{flag}: unknown language {', '.join(map(repr, unknown))}; known: {', '.join(all_languages())}")


def _qa_window_problems(p: list[str], max_seq_len, doc_stride, max_query_length) -> None:
    if max_seq_len is not None and max_seq_len < 8:
        p.append(f"--max-seq-len must be at least 8 (got {max_seq_len})")
    if doc_stride is not None and doc_stride < 1:
        p.append(f"--doc-stride must be at least 1 (got {doc_stride})")
    if max_query_length is not None and max_query_length < 1:
        p.append(f"--max-query-length must be at least 1 (got {max_query_length})")


@dataclass(frozen=True)
class FinetuneConfig(TrainConfig):
    """`finetune`: an encoder + English task data -> a task model (classification or span-extraction head).

    `max_seq_len`, `lr`, `epochs`, `warmup` and `weight_decay` left at None take the task's XTREME default
    (TASK_DEFAULTS); `max_steps` None means `epochs` worth of steps, `save_every` None once per epoch.
    `resolved(steps_per_epoch)` returns the config with every one of them concrete (what `run.json` records)."""

    model: str = ""
    task: str = "xnli"
    train: str = ""  # a file (XNLI/MultiNLI TSV or JSON lines; SQuAD JSON) or hf:multi_nli / hf:squad
    dev: str | None = None  # English dev file: checkpoint selection; None selects the last checkpoint
    max_seq_len: int | None = None
    doc_stride: int = QA_DOC_STRIDE
    max_query_length: int = QA_MAX_QUERY_LENGTH
    epochs: float | None = None
    max_steps: int | None = None  # type: ignore[assignment]
    lr: float | None = None  # type: ignore[assignment]
    warmup: float | None = None  # type: ignore[assignment]
    weight_decay: float | None = None  # type: ignore[assignment]
    batch_size: int = 32
    max_grad_norm: float = 1.0  # XTREME (HF run_* scripts): clip the global gradient norm at 1.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999  # fine-tuning uses the usual Adam betas and epsilon (XTREME / HF run_* scripts)
    adam_eps: float = 1e-8
    save_every: int | None = None  # type: ignore[assignment]
    eval_batch_size: int = 128  # dev evaluation
    log_every: int = 10
    keep: int = 1  # resume needs only the latest; the best model so far is exported separately (checkpoints/best)
    group_by_length: bool = False  # batches of similar length (less padding); off: plain shuffling, as XTREME

    def task_default(self, name: str):
        value = getattr(self, name)
        if value is None and self.task in TASK_DEFAULTS:
            return getattr(TASK_DEFAULTS[self.task], name)
        return value

    def resolved(self, steps_per_epoch: int) -> "FinetuneConfig":
        """Every None filled in: task defaults, `max_steps` from `epochs`, `save_every` once per epoch."""
        values = {name: self.task_default(name) for name in _TASK_FIELDS}
        if self.max_steps is None:
            values["max_steps"] = max(1, math.ceil(values["epochs"] * steps_per_epoch))
        else:  # --max-steps decides; record how many epochs that is
            values["epochs"] = round(self.max_steps / steps_per_epoch, 4)
        if self.save_every is None:
            values["save_every"] = max(1, steps_per_epoch)
        return dataclasses.replace(self, **values)

    def __post_init__(self) -> None:
        p: list[str] = []
        _choice(p, self.task, TASKS, "--task")
        if not self.model:
            p.append("--model is required (a hub id or a local model directory, e.g. a distilled student)")
        if not self.train:
            p.append("--train is required (a TSV / JSON lines / SQuAD JSON file, or hf:multi_nli / hf:squad)")
        if self.epochs is not None and not (self.epochs > 0 and math.isfinite(self.epochs)):
            p.append(f"--epochs must be positive and finite (got {self.epochs})")
        if self.eval_batch_size < 1:
            p.append(f"--eval-batch-size must be at least 1 (got {self.eval_batch_size})")
        _qa_window_problems(p, self.max_seq_len, self.doc_stride, self.max_query_length)
        # The shared training checks, on the values this config will run with.
        probe = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        task = TASK_DEFAULTS.get(self.task, TASK_DEFAULTS["xnli"])  # an unknown task is reported above
        probe.update({name: getattr(task, name) if getattr(self, name) is None else getattr(self, name)
                      for name in _TASK_FIELDS})
        probe["max_steps"] = 1 if self.max_steps is None else self.max_steps
        probe["save_every"] = 1 if self.save_every is None else self.save_every
        p += TrainConfig._train_problems(_Probe(probe))  # type: ignore[arg-type]
        _problems_to_error(p)


class _Probe:
    """Attribute access over a dict: lets TrainConfig's checks run on resolved values."""

    AUTO_BATCH = False
    ZERO_STEPS = False

    def __init__(self, values: dict):
        self.__dict__.update(values)


@dataclass(frozen=True)
class EvalConfig:
    """What both evaluation commands share. `out` None: report on the terminal only, write nothing."""

    model: str = ""
    data: str = ""
    split: str = "test"
    langs: tuple[str, ...] = ()  # empty: the benchmark's languages
    out: Path | None = None
    batch_size: int = 128
    max_seq_len: int | None = None  # None: the fine-tuning run's (run.json in --model), else the task default
    overwrite: bool = False
    precision: str = "auto"
    device: str = "auto"
    quiet: bool = False

    def _eval_problems(self) -> list[str]:
        p: list[str] = []
        if not self.data:
            p.append("--data is required")
        if self.batch_size < 1:
            p.append(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.max_seq_len is not None and self.max_seq_len < 8:
            p.append(f"--max-seq-len must be at least 8 (got {self.max_seq_len})")
        _choice(p, self.precision, PRECISIONS, "--precision")
        _choice(p, self.device, DEVICES, "--device")
        _unknown_langs(p, self.langs, "--langs")
        return p


@dataclass(frozen=True)
class EvalXnliConfig(EvalConfig):
    """`eval-xnli`: a sequence-classification model on every language's XNLI split."""

    split: str = "test"
    # The NLI class of each classifier output (output 0, 1, 2), for heads whose config does not name its labels
    # (id2label LABEL_0...); empty: the names in the model's id2label, and such a head is refused.
    label_order: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        p = self._eval_problems()
        if not self.model:
            p.append("--model is required (a fine-tuned directory from `mlminilm finetune --task xnli`)")
        _choice(p, self.split, EVAL_SPLITS, "--split")
        if self.label_order:
            _label_order_problems(p, self.label_order)
        _problems_to_error(p)


def _label_order_problems(p: list[str], order: tuple[str, ...]) -> None:
    from mlminilm.errors import DataError
    from mlminilm.tasks.xnli import NLI_LABELS, label_id

    try:
        ids = sorted(label_id(name) for name in order)
    except DataError:
        ids = None
    if ids != list(range(len(NLI_LABELS))):
        p.append(
            f"--label-order must name {', '.join(NLI_LABELS)} once each, in the order of the model's outputs "
            f"(got {','.join(order)!r}), e.g. --label-order {','.join(NLI_LABELS)}"
        )


@dataclass(frozen=True)
class EvalMlqaConfig(EvalConfig):
    """`eval-mlqa`: a span-extraction model (or existing predictions) on MLQA / XQuAD / TyDiQA-GoldP files."""

    split: str = "dev"  # the MLQA test split is not public everywhere; dev is what ../shared/data has
    gxlt: bool = False  # MLQA: all context x question pairs, not only the monolingual ones
    lang: str | None = None  # the language of a --data file whose name does not carry it
    predictions: Path | None = None  # score these prediction files instead of running a model
    doc_stride: int | None = None  # None: the fine-tuning run's, else QA_DOC_STRIDE
    max_query_length: int | None = None  # None: the fine-tuning run's, else QA_MAX_QUERY_LENGTH
    n_best: int = QA_N_BEST
    max_answer_length: int = QA_MAX_ANSWER_LENGTH
    scorer: str = "auto"  # QA_SCORERS: auto = mlqa for MLQA files, squad (SQuAD v1.1, as XTREME) for the others

    def __post_init__(self) -> None:
        p = self._eval_problems()
        _choice(p, self.scorer, QA_SCORERS, "--scorer")
        if not self.model and self.predictions is None:
            p.append("--model is required (a directory from `mlminilm finetune --task qa`), or --predictions DIR")
        if self.model and self.predictions is not None:
            p.append("--model and --predictions cannot be used together: --predictions scores existing files")
        _choice(p, self.split, EVAL_SPLITS, "--split")
        _qa_window_problems(p, None, self.doc_stride, self.max_query_length)
        if self.n_best < 1:
            p.append(f"--n-best must be at least 1 (got {self.n_best})")
        if self.max_answer_length < 1:
            p.append(f"--max-answer-length must be at least 1 (got {self.max_answer_length})")
        if self.lang is not None:
            _unknown_langs(p, (self.lang,), "--lang")
        _problems_to_error(p)


# ------------------------------------------------------------------------------------------- Tatoeba retrieval

TATOEBA_MAX_LENGTH = 512  # XTREME's max length for Tatoeba (capped at the model's position limit)
TATOEBA_POOLINGS = ("auto", "mean", "cls", "max")


@dataclass(frozen=True)
class EvalTatoebaConfig:
    """`eval-tatoeba`: cross-lingual sentence retrieval with an encoder as it is (no fine-tuning).

    `layer` is a hidden-states index (0 = the embedding output, N = the output of layer N, negative from the
    end); None: the model's own (the last layer of a sentence-transformers model) or XTREME's rule for base
    encoders, layers // 2 + 1 (7 of 12, 13 of 24). `pooling` auto: the sentence-transformers Pooling module's
    mode, else mean. `prefix` None: the model's "query" prompt (config_sentence_transformers.json), else none.
    `max_length` None: TATOEBA_MAX_LENGTH, or the model's position limit when that is smaller."""

    model: str = ""
    data: str = ""
    langs: tuple[str, ...] = ()  # empty: every language found in `data`
    out: Path | None = None
    layer: int | None = None
    pooling: str = "auto"
    prefix: str | None = None
    max_length: int | None = None
    batch_size: int = 128
    overwrite: bool = False
    precision: str = "auto"
    device: str = "auto"
    quiet: bool = False

    def __post_init__(self) -> None:
        from mlminilm.langs import from_iso639_3

        p: list[str] = []
        if not self.model:
            p.append("--model is required (an encoder directory or hub id, e.g. a distilled student)")
        if not self.data:
            p.append("--data is required (a directory of tatoeba.XXX-eng.XXX and tatoeba.XXX-eng.eng files)")
        if self.batch_size < 1:
            p.append(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.max_length is not None and self.max_length < 2:
            p.append(f"--max-length must be at least 2 (got {self.max_length})")
        _choice(p, self.pooling, TATOEBA_POOLINGS, "--pooling")
        _choice(p, self.precision, PRECISIONS, "--precision")
        _choice(p, self.device, DEVICES, "--device")
        # A Tatoeba file code given where a project code is expected: name the project code.
        iso = [code for code in self.langs if from_iso639_3(code)]
        if iso:
            p.append(f"--langs takes project language codes, not Tatoeba file codes: use "
                     f"{','.join(from_iso639_3(c) for c in iso)} for {','.join(iso)}")
        _unknown_langs(p, tuple(code for code in self.langs if code not in iso), "--langs")
        _problems_to_error(p)


# ------------------------------------------------------------------------------------------ vocabulary trimming


@dataclass(frozen=True)
class TrimConfig:
    """`trim`: keep the part of a model's vocabulary that a corpus uses (mlminilm.vocab).

    Token counts come from `data` (a `prepare` output: token_counts.npy, made with the model's own tokenizer) or
    are counted in `corpus` (<lang>.txt files, only `langs` when given) with the model's tokenizer. Kept: every
    special and added token, and the most frequent other ids that occur at least `min_count` times, until they
    cover `coverage` of the corpus's other tokens, at most `max_vocab` ids in all (None: no limit)."""

    model: str = ""
    out: Path | None = None
    data: Path | None = None
    corpus: Path | None = None
    langs: tuple[str, ...] = ()
    min_count: int = 1
    coverage: float = 1.0
    max_vocab: int | None = None
    workers: int = 0  # tokenizer processes counting --corpus; 0 = all cores
    overwrite: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        p: list[str] = []
        if not self.model:
            p.append("--model is required (a model directory or hub id: a teacher, a student or a fine-tuned model)")
        if self.out is None:
            p.append("--out is required (the directory to write the trimmed model to)")
        if (self.data is None) == (self.corpus is None):
            p.append("give exactly one of --data (a `mlminilm prepare` output) and --corpus (a directory of "
                     "<lang>.txt files)")
        if self.langs and self.corpus is None:
            p.append("--langs chooses files of --corpus; the counts of a --data directory cover all its languages "
                     "(prepare it with --langs instead)")
        if self.min_count < 1:
            p.append(f"--min-count must be at least 1 (got {self.min_count})")
        if not 0.0 < self.coverage <= 1.0:  # also false for NaN
            p.append(f"--coverage must be in (0, 1], a fraction of the corpus tokens (got {self.coverage})")
        if self.max_vocab is not None and self.max_vocab < 1:
            p.append(f"--max-vocab must be at least 1 (got {self.max_vocab})")
        if self.workers < 0:
            p.append(f"--workers must be 0 (all cores) or more (got {self.workers})")
        _unknown_langs(p, self.langs, "--langs")
        _problems_to_error(p)
