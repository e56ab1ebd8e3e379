"""distill and assist: the student's shape, where it starts, its objective and the output terms."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import AUTO, COMPILE_MODES, check_choice, problems_to_error, unknown_langs
from mlminilm.config.training import TrainConfig

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
HIDDEN_DISTANCES = ("cosine", "mse")  # --hidden-distance (mlminilm.distillation.losses.hidden_cosine / hidden_mse)
# What --hidden-loss-weight / --embedding-loss-weight auto give a sentence-transformers teacher of the student's
# width (docs/RETENTION.md: the terms keep more of the teacher's Tatoeba than the relation losses alone).
OUTPUT_TERMS_WEIGHT = 1.0


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
    # with --global-batch kept by accumulation (mlminilm/training/batch_size.py).
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
    # Output terms beside the relation losses (mlminilm/distillation/losses.py); 0 = off. They reach every student parameter
    # below the output, so with either on the whole top layer trains (not only its Q/K/V). None = auto:
    # OUTPUT_TERMS_WEIGHT for a sentence-transformers teacher of the student's width, else 0 (pure MiniLM).
    hidden_loss_weight: float | None = None  # the last hidden states, per real token
    hidden_distance: str = "cosine"
    embedding_loss_weight: float | None = None  # the sentence embedding through the teacher's Pooling (+ Normalize)
    # Relation terms (MiniLM attention + value, or MiniLMv2 Q-Q/K-K/V-V) weigh this much; 0 = off (then only the
    # output and parallel terms train the student).
    relation_loss_weight: float = 1.0
    # Cross-lingual embedding term (mlminilm/corpus/parallel.py): on pairs (a sentence, its translation), the
    # student's sentence embeddings of both are pulled to the teacher's embedding of the sentence.
    parallel: Path | None = None
    parallel_loss_weight: float = 1.0
    # Put before every parallel sentence; None: the teacher's sentence-transformers "query" prompt (e5: "query: "),
    # as eval-tatoeba embeds, else nothing.
    parallel_prefix: str | None = None
    parallel_max_length: int = 128
    # In-batch translation ranking on the same pairs (losses.translation_ranking): weight (0 = off) and the
    # softmax temperature over cosine similarities.
    parallel_contrastive_weight: float = 0.0
    parallel_temperature: float = 0.05
    # With --init teacher: the embeddings and this many bottom student layers keep the teacher's weights (frozen).
    freeze_layers: int = 0
    # Where the teacher's embeddings of the parallel sources are kept (distillation/targets.py);
    # None: OUT/teacher-targets.
    target_cache: Path | None = None
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
    def parallel_term(self) -> bool:
        """Whether a term reads the parallel pairs (the MSE term or the contrastive one)."""
        return self.parallel is not None and (self.parallel_loss_weight > 0 or self.parallel_contrastive_weight > 0)

    @property
    def trains_output(self) -> bool:
        """Whether a term reaches the student's last layer whole (output or parallel terms): then nothing of it
        is frozen and the teacher runs to its top."""
        return self.output_terms or self.parallel_term

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
        check_choice(p, self.init, INITS, "--init")
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
        for flag, weight in (("--relation-loss-weight", self.relation_loss_weight),
                             ("--parallel-loss-weight", self.parallel_loss_weight),
                             ("--parallel-contrastive-weight", self.parallel_contrastive_weight)):
            if not (weight >= 0 and math.isfinite(weight)):
                p.append(f"{flag} must be non-negative and finite, 0 = off (got {weight})")
        if not (self.parallel_temperature > 0 and math.isfinite(self.parallel_temperature)):
            p.append(f"--parallel-temperature must be positive and finite (got {self.parallel_temperature})")
        if self.freeze_layers and self.init != "teacher":
            p.append("--freeze-layers needs --init teacher: randomly initialised layers must be trained")
        if not 0 <= self.freeze_layers < self.layers:
            p.append(f"--freeze-layers must be at least 0 and less than --layers {self.layers} "
                     f"(got {self.freeze_layers})")
        if self.parallel_max_length < 2:
            p.append(f"--parallel-max-length must be at least 2 (got {self.parallel_max_length})")
        if self.parallel is None and self.relation_loss_weight == 0 and self.hidden_loss_weight == 0 \
                and self.embedding_loss_weight == 0:
            p.append("--relation-loss-weight 0 with both output terms off leaves nothing to train: keep a term, or "
                     "give --parallel FILE")
        check_choice(p, self.hidden_distance, HIDDEN_DISTANCES, "--hidden-distance")
        if self.probe_every < 1:
            p.append(f"--probe-every must be at least 1 (got {self.probe_every})")
        if self.probe_pairs is not None and self.probe_pairs < 1:
            p.append(f"--probe-pairs must be at least 1 (got {self.probe_pairs})")
        if self.probe_langs and self.probe_tatoeba is None:
            p.append("--probe-langs needs --probe-tatoeba DIR")
        unknown_langs(p, tuple(self.probe_langs), "--probe-langs")
        check_choice(p, self.objective, OBJECTIVES, "--objective")
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
        check_choice(p, self.compile, COMPILE_MODES, "--compile")
        if self.data_workers is not None and self.data_workers < 0:
            p.append(f"--data-workers must be at least 0 (got {self.data_workers})")
        problems_to_error(p)


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
        problems_to_error(p)
