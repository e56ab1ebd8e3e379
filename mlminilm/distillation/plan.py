"""A `distill` run resolved once: what its checks found out (mlminilm.distill.validate) in one frozen record
that the run (distillation/run.py) consumes, so that no option is parsed, and no teacher file read, twice.

Also the pure functions of that record: the auto output terms, the teacher's embedding head, the loss in words
and the model card's facts. What the run reads is its list of inputs (distillation/inputs), read once here."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from mlminilm import logging as mlog
from mlminilm.config import DEFAULT_INIT_LAYERS, OUTPUT_TERMS_WEIGHT, DistillConfig, parse_init_layers
from mlminilm.corpus.dataset import PreparedData
from mlminilm.distillation.inputs import DistillInput, optional_kinds
from mlminilm.distillation.objective import EmbeddingHead
from mlminilm.distillation.terms import CAPTURE, OUTPUT, Words, in_words, terms_on, weight_of
from mlminilm.errors import ConfigError
from mlminilm.models.sentence_encoder import SentenceTransformerSetup

log = mlog.get("mlminilm.distill")  # the command's own logger, as before the split

# How the parallel term embeds sentences with a teacher that has no sentence-transformers Pooling module.
MEAN_POOLING = EmbeddingHead(("mean",), False)


@dataclass(frozen=True)
class NoRunningText:
    """The prepared data of a run without --data, whose terms (only the parallel ones) never read running text: no
    sequences to draw; the sequence length is the parallel sentences' limit, the tokenizer the teacher's."""

    seq_len: int
    tokenizer: dict
    languages: tuple[str, ...] = ()
    manifest: dict = field(default_factory=dict)

    def num_sequences(self, lang: str) -> int:
        return 0

    def highest_token_id(self) -> int:
        return 0


@dataclass(frozen=True)
class DistillPlan:
    cfg: DistillConfig  # auto choices decided (the output terms' weights)
    data: PreparedData | NoRunningText
    teacher_config: object  # the teacher's transformers config
    tokenizer: object  # the teacher's tokenizer
    sentence: SentenceTransformerSetup | None  # the teacher's sentence-transformers setup, read once
    head: EmbeddingHead | None  # what the embedding and parallel terms pool with; None when neither is on
    teacher_layer: int  # the distilled teacher layer, 0-based from the bottom
    init_layers: str | list[int] | None  # --init-layers parsed (DEFAULT_INIT_LAYERS when not given); None: random
    terms: tuple[tuple[str, float], ...]  # the loss terms on, with their weights, in the order a step sums them
    # What the run reads, each read once, in the order a step reads them: the running text (always there: it
    # holds `data`, maybe no text), then every other input a term on reads (distillation/inputs).
    inputs: tuple[DistillInput, ...]


def terms_with_weights(cfg: DistillConfig) -> tuple[tuple[str, float], ...]:
    return tuple((t.name, weight_of(t, cfg)) for t in terms_on(cfg))


def init_rule(cfg: DistillConfig) -> str | list[int] | None:
    """--init-layers parsed once (its default stated in mlminilm.config); None for a random start."""
    if cfg.init != "teacher":
        return None
    return parse_init_layers(cfg.init_layers if cfg.init_layers is not None else DEFAULT_INIT_LAYERS)


def teacher_layer(cfg: DistillConfig, depth: int) -> int:
    """--teacher-layer counted from the bottom of a `depth`-layer teacher (negative values count from its top)."""
    return cfg.teacher_layer + depth if cfg.teacher_layer < 0 else cfg.teacher_layer


def resolve_output_terms(
    cfg: DistillConfig, teacher_config, sentence: SentenceTransformerSetup | None
) -> DistillConfig:
    """The config with --hidden-loss-weight / --embedding-loss-weight auto (None) decided: OUTPUT_TERMS_WEIGHT for
    a sentence-transformers teacher of the student's width (what its users use it for is its embedding), else 0,
    the pure MiniLM objective. Explicit weights are kept as given (and checked later)."""
    if cfg.hidden_loss_weight is not None and cfg.embedding_loss_weight is not None:
        return cfg
    on = sentence is not None and cfg.hidden == teacher_config.hidden_size
    weight = OUTPUT_TERMS_WEIGHT if on else 0.0
    resolved = replace(
        cfg,
        hidden_loss_weight=weight if cfg.hidden_loss_weight is None else cfg.hidden_loss_weight,
        embedding_loss_weight=weight if cfg.embedding_loss_weight is None else cfg.embedding_loss_weight,
    )
    if on:
        log.info(
            "output terms on (auto: a sentence-transformers teacher of the student's width): hidden %g, embedding %g",
            resolved.hidden_loss_weight,
            resolved.embedding_loss_weight,
        )
    return resolved


def embedding_head(cfg: DistillConfig, st: SentenceTransformerSetup | None) -> EmbeddingHead | None:
    """The teacher's sentence-embedding head when the embedding or the parallel term is on, else None. The
    embedding term needs a sentence-transformers teacher (ConfigError otherwise); the parallel term pools a plain
    encoder's last hidden states by their mean over real tokens."""
    if not cfg.embedding_loss_weight and not any(t.reads not in (CAPTURE, OUTPUT) for t in terms_on(cfg)):
        return None
    from mlminilm.models.pooling import POOLING_MODES

    if st is None and not cfg.embedding_loss_weight:
        return MEAN_POOLING
    if st is None:
        raise ConfigError(
            f"--embedding-loss-weight needs a sentence-transformers teacher (modules.json with a Pooling module); "
            f"teacher '{cfg.teacher}' has none: use --hidden-loss-weight instead, or set --embedding-loss-weight 0"
        )
    bad = [m for m in st.pooling if m not in POOLING_MODES]
    if bad:
        raise ConfigError(
            f"teacher '{cfg.teacher}' pools with {'+'.join(bad)}, which the embedding, parallel and passage "
            f"terms do not implement ({', '.join(POOLING_MODES)}); set --embedding-loss-weight 0 and "
            f"leave out {' and '.join(k.option for k in optional_kinds())}"
        )
    if st.not_applied:
        log.warning(
            "teacher %s has %s after its pooling: the embedding term compares the pooled (and normalised) "
            "vectors before them",
            cfg.teacher,
            ", ".join(st.not_applied),
        )
    return EmbeddingHead(tuple(st.pooling), st.normalize)


def objective_summary(plan: DistillPlan) -> str:
    """The loss in words, for the log, run.json and the model card: as the loss-term table says each term on."""
    head = plan.head
    how = "" if head is None else "+".join(head.modes) + (" pooling, normalised" if head.normalize else " pooling")
    said = {k: v for i in plan.inputs for k, v in i.words().items()}
    return in_words(plan.cfg, Words(how, **said))


def frozen_words(cfg: DistillConfig) -> str:
    """What of the student kept the teacher's weights, untrained (--freeze-layers, --freeze-embeddings), in words."""
    n = cfg.freeze_layers
    if n > 0:
        layers = "layer 0" if n == 1 else f"layers 0-{n - 1}"
        return f"the embeddings and {layers} keep the teacher's weights (--freeze-layers {n})"
    if cfg.freeze_embeddings:
        return "the word embeddings keep the teacher's weights (--freeze-embeddings)"
    return "none"


def card_info(plan: DistillPlan, title: str, picked: list[int] | None) -> dict:
    """What the model card (and mlminilm.json) records about how the student was made."""
    cfg, data = plan.cfg, plan.data
    return {
        "title": f"mlminilm {title} {cfg.layers}x{cfg.hidden}",
        "teacher": cfg.teacher,
        "teacher_layer": plan.teacher_layer,
        # The relation objective only where its terms were on: a recipe of output or parallel terms is not MiniLM.
        "objective": cfg.objective if cfg.relation_loss_weight > 0 else "none (--relation-loss-weight 0)",
        "loss": objective_summary(plan),
        "relation_heads": cfg.relation_heads if cfg.objective == "minilm-v2" else None,
        "shape": f"{cfg.layers} layers x {cfg.hidden} hidden, {cfg.heads} heads, FFN {cfg.intermediate}",
        "init": cfg.init,
        "init_layers": (
            f"{cfg.init_rule}: teacher layers {','.join(map(str, picked))}" if picked is not None else None
        ),
        "frozen": frozen_words(cfg),
        "data": str(cfg.data) if cfg.data is not None else "none (only the parallel / passage terms, no running text)",
        # the running text's languages, or when it has none those of the other inputs
        "languages": ", ".join(
            plan.inputs[0].languages() or dict.fromkeys(lang for i in plan.inputs[1:] for lang in i.languages())
        ),
        "alpha": cfg.alpha,
        **{kind.field: None for kind in optional_kinds()},  # an input the terms do not read: none
        **{k: v for i in plan.inputs[1:] for k, v in i.card().items()},
        "steps": cfg.max_steps,
        "seq_len": data.seq_len,
    }
