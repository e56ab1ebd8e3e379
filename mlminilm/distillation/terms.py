"""The loss terms of `distill`, as one table: each term's name, the config field that weighs it, what it reads
(the teacher's and the student's Q/K/V, their outputs, or the parallel pairs), how it is computed and its
metrics.jsonl key.

Adding a term is adding its row to TERMS (and its weight field to DistillConfig, with its option): the step
computes every row whose weight is positive, weighs it by that field, logs it under its key, and the loss in words
(the log, run.json, the model card) says it as its row does. Nothing else names a term, so no term can train at a
weight the table does not give it, or go unsaid:

- a part a step computes that the table does not name is an error (`weighted_loss`, KeyError naming it);
- a row whose weight field the config lacks, or a `*_loss_weight` field that no row uses, stops the run at
  start-up (`check_table`, ConfigError naming it), before anything is written or loaded.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import torch

from mlminilm.distillation.losses import (
    embedding_mse,
    hidden_cosine,
    hidden_mse,
    minilm_v1_terms,
    minilm_v2_terms,
    score_kl,
    sentence_embedding,
    translation_ranking,
)
from mlminilm.errors import ConfigError

# What a term reads (LossTerm.reads): each is computed only when its input is there. Besides the running text's
# two, an input's name (distillation/inputs: its module's DistillInput.name).
CAPTURE = "teacher capture"  # Q, K, V of the distilled layer (the running text)
OUTPUT = "output"  # the last hidden states of teacher and student (the running text; the top layer trains whole)
PAIRS = "pairs"  # the student's embeddings of --parallel sources and translations, the teacher's targets
PASSAGES = "passages"  # the student's embeddings of --passages questions and passages, the teacher's targets
# The config field that gives each input besides the running text: its terms weigh 0 without it.
INPUT_FIELDS = {PAIRS: "parallel", PASSAGES: "passages"}
# The order the loss in words says terms in, by what they read (terms of inputs not listed here come last).
READS_ORDER = [CAPTURE, OUTPUT, PAIRS, PASSAGES]


@dataclass
class StepTensors:
    """What one micro-batch gives the terms: teacher and student Q/K/V (t_qkv, s_qkv) and last hidden states
    (t_out, s_out; None unless an OUTPUT term is on) of the running text with its `mask` (None: no padding), and
    with pairs, the teacher's embeddings of the sources (t_pairs) and the student's last hidden states of sources
    then translations (s_pairs); with passages (a corpus.passages.PassageBatch, the teacher's embeddings inside),
    the student's last hidden states of the questions and of the passages (s_passages); an input kind without
    fields of its own puts what its terms read in `extra`. `shared` holds what several terms compute once (the
    relations, the student's pair embeddings), in the order the first asks."""

    cfg: object
    head: object = None  # objective.EmbeddingHead
    mask: torch.Tensor | None = None
    t_qkv: tuple | None = None
    s_qkv: tuple | None = None
    t_out: torch.Tensor | None = None
    s_out: torch.Tensor | None = None
    pairs: object = None  # corpus.parallel.ParallelBatch
    t_pairs: torch.Tensor | None = None
    s_pairs: torch.Tensor | None = None
    passages: object = None  # corpus.passages.PassageBatch
    s_passages: tuple | None = None
    t_passage_hidden: torch.Tensor | None = None  # the teacher's last hidden states of the passages (if a term reads)
    shared: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    def once(self, key: str, make: Callable[[], object]):
        if key not in self.shared:
            self.shared[key] = make()
        return self.shared[key]


def _always(cfg) -> bool:
    return True


@dataclass(frozen=True)
class Words:
    """What the loss in words says beside the config: how the embedding terms pool (`how`), the pairs' prefix."""

    how: str = ""
    prefix: str = ""
    prompts: tuple[str, str] = ("", "")  # the questions' and the passages' (--passages)


@dataclass(frozen=True)
class LossTerm:
    name: str  # its key in a step's parts
    weight: str  # the DistillConfig field that weighs it (0 = off)
    reads: str  # CAPTURE, OUTPUT or an input's name (PAIRS, PASSAGES)
    compute: Callable[[StepTensors], torch.Tensor]
    words: Callable[[object, Words], str]  # the term in the loss in words, its weight included (rows may share one)
    metric: str = ""  # its metrics.jsonl key ("" = its name)
    applies: Callable[[object], bool] = _always  # whether the config's objective has it at all

    @property
    def logged_as(self) -> str:
        return self.metric or self.name


# ------------------------------------------------------------------------------------------ the computations


def _relations(t: StepTensors) -> dict[str, torch.Tensor]:
    """MiniLM's (attention, value) or MiniLMv2's (qq, kk, vv) terms, computed together once per micro-batch."""

    def make():
        cfg = t.cfg
        if cfg.objective == "minilm":
            found = minilm_v1_terms(t.t_qkv, t.s_qkv, t.mask, cfg.heads)
        else:
            found = minilm_v2_terms(t.t_qkv, t.s_qkv, t.mask, cfg.relation_heads)
        unknown = sorted(set(found) - set(TERMS))
        if unknown:
            raise KeyError(
                f"loss term(s) {', '.join(unknown)} are not in the loss-term table "
                "(mlminilm/distillation/terms.py TERMS)"
            )
        return found

    return t.once("relations", make)


def _relation(name: str) -> Callable[[StepTensors], torch.Tensor]:
    return lambda t: _relations(t)[name]


def _hidden_distance(cfg) -> Callable[..., torch.Tensor]:
    """The hidden-state terms' distance (--hidden-distance), for the running text's and the passages' tokens."""
    return hidden_cosine if cfg.hidden_distance == "cosine" else hidden_mse


def _hidden(t: StepTensors) -> torch.Tensor:
    return _hidden_distance(t.cfg)(t.t_out, t.s_out, t.mask)


def _embedding(t: StepTensors) -> torch.Tensor:
    head = t.head
    if head is None:
        raise ValueError("the embedding term needs the teacher's EmbeddingHead")
    with torch.no_grad():
        t_emb = sentence_embedding(t.t_out, t.mask, head.modes, head.normalize)
    return embedding_mse(t_emb, sentence_embedding(t.s_out, t.mask, head.modes, head.normalize))


def pair_embeddings(t: StepTensors) -> torch.Tensor:
    """The student's sentence embeddings of the sources then the translations ([2B, H]), once per micro-batch."""
    return t.once(
        "pair_embeddings", lambda: sentence_embedding(t.s_pairs, t.pairs.both_mask, t.head.modes, t.head.normalize)
    )


def _parallel(t: StepTensors) -> torch.Tensor:
    student = pair_embeddings(t)
    return embedding_mse(torch.cat([t.t_pairs, t.t_pairs]), student)


def _contrastive(t: StepTensors) -> torch.Tensor:
    student, b = pair_embeddings(t), t.t_pairs.shape[0]
    return translation_ranking(student[:b], student[b:], t.cfg.parallel_temperature, t.pairs.not_negative)


def passage_embeddings(t: StepTensors) -> tuple[torch.Tensor, torch.Tensor]:
    """The student's sentence embeddings of the questions and of the passages ([B, H] each), once per micro-batch."""

    def make():
        (q_hidden, p_hidden), batch, head = t.s_passages, t.passages, t.head
        return (
            sentence_embedding(q_hidden, batch.question_mask, head.modes, head.normalize),
            sentence_embedding(p_hidden, batch.passage_mask, head.modes, head.normalize),
        )

    return t.once("passage_embeddings", make)


def _passage_embedding(t: StepTensors) -> torch.Tensor:
    questions, passages = passage_embeddings(t)
    return embedding_mse(t.passages.question_targets, questions) + embedding_mse(t.passages.passage_targets, passages)


def _passage_hidden(t: StepTensors) -> torch.Tensor:
    return _hidden_distance(t.cfg)(t.t_passage_hidden, t.s_passages[1], t.passages.passage_mask)


def _passage_scores(t: StepTensors) -> torch.Tensor:
    questions, passages = passage_embeddings(t)
    batch = t.passages
    return score_kl(batch.question_targets, batch.passage_targets, questions, passages, t.cfg.passage_temperature)


# ------------------------------------------------------------------------------------------ the words


def _relation_words(cfg, w: Words) -> str:
    relations = (
        "MiniLM attention + value relations"
        if cfg.objective == "minilm"
        else f"MiniLMv2 Q-Q/K-K/V-V relations over {cfg.relation_heads} heads"
    )
    return relations if cfg.relation_loss_weight == 1 else f"{cfg.relation_loss_weight:g} x {relations}"


def _hidden_words(cfg, w: Words) -> str:
    return f"{cfg.hidden_loss_weight:g} x last hidden states ({cfg.hidden_distance})"


def _embedding_words(cfg, w: Words) -> str:
    return f"{cfg.embedding_loss_weight:g} x sentence embedding MSE ({w.how})"


def _parallel_words(cfg, w: Words) -> str:
    return (
        f"{cfg.parallel_loss_weight:g} x parallel embedding MSE (sentence and translation to the "
        f"teacher's sentence; {w.how}; prefix {w.prefix!r})"
    )


def _contrastive_words(cfg, w: Words) -> str:
    return (
        f"{cfg.parallel_contrastive_weight:g} x in-batch translation ranking (both directions, "
        f"temperature {cfg.parallel_temperature:g}; {w.how})"
    )


def _passage_embedding_words(cfg, w: Words) -> str:
    return (
        f"{cfg.passage_embedding_weight:g} x passage embedding MSE (questions and passages to the teacher's; "
        f"{w.how}; prompts {w.prompts[0]!r} / {w.prompts[1]!r})"
    )


def _passage_hidden_words(cfg, w: Words) -> str:
    return f"{cfg.passage_hidden_weight:g} x passage last hidden states ({cfg.hidden_distance}, per real token)"


def _passage_score_words(cfg, w: Words) -> str:
    return (
        f"{cfg.passage_loss_weight:g} x KL(teacher || student) of the in-batch question -> passage scores (both "
        f"directions, temperature {cfg.passage_temperature:g})"
    )


def _v1(cfg) -> bool:
    return cfg.objective == "minilm"


def _v2(cfg) -> bool:
    return cfg.objective != "minilm"


# The table. Its order is the order a step computes and sums the terms in (a seeded run's losses depend on it).
TERMS: dict[str, LossTerm] = {
    term.name: term
    for term in (
        # sentence-transformers' multilingual distillation (Reimers & Gurevych 2020): the student's embeddings of a
        # sentence and its translation against the teacher's embedding of the sentence
        LossTerm("parallel", "parallel_loss_weight", PAIRS, _parallel, _parallel_words),
        # in-batch translation ranking of the student's source and translation embeddings, both directions
        LossTerm("contrastive", "parallel_contrastive_weight", PAIRS, _contrastive, _contrastive_words),
        # --passages: the student's question and passage embeddings against the teacher's, each to its own
        LossTerm(
            "passage_embedding", "passage_embedding_weight", PASSAGES, _passage_embedding, _passage_embedding_words
        ),
        # --passages: the teacher's in-batch question -> passage score distributions (KL, both directions)
        LossTerm("passage_scores", "passage_loss_weight", PASSAGES, _passage_scores, _passage_score_words),
        # --passages: the passages' last hidden states against the teacher's, run on the same micro-batch
        LossTerm("passage_hidden", "passage_hidden_weight", PASSAGES, _passage_hidden, _passage_hidden_words),
        # MiniLM v1: attention distributions and value relations of the distilled layer
        LossTerm("attention", "relation_loss_weight", CAPTURE, _relation("attention"), _relation_words, applies=_v1),
        LossTerm("value", "relation_loss_weight", CAPTURE, _relation("value"), _relation_words, applies=_v1),
        # MiniLMv2: Q-Q, K-K, V-V relations over --relation-heads
        LossTerm("qq", "relation_loss_weight", CAPTURE, _relation("qq"), _relation_words, applies=_v2),
        LossTerm("kk", "relation_loss_weight", CAPTURE, _relation("kk"), _relation_words, applies=_v2),
        LossTerm("vv", "relation_loss_weight", CAPTURE, _relation("vv"), _relation_words, applies=_v2),
        # the last hidden states, per real token (--hidden-distance)
        LossTerm("hidden", "hidden_loss_weight", OUTPUT, _hidden, _hidden_words),
        # the sentence embedding through the teacher's Pooling (+ Normalize)
        LossTerm("embedding", "embedding_loss_weight", OUTPUT, _embedding, _embedding_words),
    )
}


# ------------------------------------------------------------------------------------------ the table's use


def weight_of(term: LossTerm, cfg) -> float:
    """The term's weight in the total: its config field (None, auto undecided, counts as 0); a term of an input
    given by an option (INPUT_FIELDS) weighs 0 without it (a pairs term without --parallel)."""
    given = INPUT_FIELDS.get(term.reads)
    if given is not None and getattr(cfg, given, None) is None:
        return 0.0
    return getattr(cfg, term.weight) or 0.0


def term_weights(cfg) -> dict[str, float]:
    """Every term's weight, by name."""
    return {name: weight_of(term, cfg) for name, term in TERMS.items()}


def terms_on(cfg, reads: tuple[str, ...] | None = None) -> tuple[LossTerm, ...]:
    """The terms a run with `cfg` computes (positive weight, in its objective), of the kinds in `reads` (None:
    all)."""
    return tuple(
        t for t in TERMS.values() if (reads is None or t.reads in reads) and t.applies(cfg) and weight_of(t, cfg) > 0
    )


def reads_output(cfg) -> bool:
    """Whether a term on reads the last hidden states of the running text (then the student's forward returns
    them)."""
    return bool(terms_on(cfg, (OUTPUT,)))


def teacher_reads_passages(cfg) -> bool:
    """Whether a term on needs the teacher's last hidden states of the passages (run live, not cached)."""
    return weight_of(TERMS["passage_hidden"], cfg) > 0


def trains_output(cfg) -> bool:
    """Whether a term on reaches the student's last layer whole (an output term, or one of an input besides the
    running text: all compare outputs): then nothing of it is frozen and the teacher runs to its top."""
    return any(t.reads != CAPTURE for t in terms_on(cfg))


def uses_running_text(cfg) -> bool:
    """Whether any term reads the running-text batch (with only the pairs terms on, it is not drawn)."""
    return bool(terms_on(cfg, (CAPTURE, OUTPUT)))


def in_words(cfg, words: Words) -> str:
    """The loss in words, for the log, run.json and the model card: each term on as its row says it (rows that
    share words said once), those on the running text first, then those on the pairs, then on the passages
    (READS_ORDER)."""

    def rank(t: LossTerm) -> int:
        return READS_ORDER.index(t.reads) if t.reads in READS_ORDER else len(READS_ORDER)

    on = sorted(terms_on(cfg), key=rank)  # stable: the table's order within a kind
    return " + ".join(dict.fromkeys(t.words(cfg, words) for t in on))


def weighted_loss(parts: dict[str, torch.Tensor], cfg) -> torch.Tensor:
    """The loss the student minimises: each part at its table weight (metrics.jsonl records each part unweighted,
    under its key). A part the table does not name is an error, never a silent default."""
    weights = term_weights(cfg)
    unknown = sorted(set(parts) - set(weights))
    if unknown:
        raise KeyError(
            f"loss term(s) {', '.join(unknown)} have no weight: they are not in the loss-term table "
            "(mlminilm/distillation/terms.py TERMS)"
        )
    return sum(weights[name] * value for name, value in parts.items())


def logged(parts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The parts under their metrics.jsonl keys."""
    return {TERMS[name].logged_as: value for name, value in parts.items()}


def compute_terms(t: StepTensors, running_text: bool, **inputs: bool) -> dict[str, torch.Tensor]:
    """The parts of one micro-batch: every term on whose input is there (the running text; `inputs`: by input
    name, e.g. pairs=True), in the table's order."""
    kinds = tuple(name for name, there in inputs.items() if there) + ((CAPTURE, OUTPUT) if running_text else ())
    return {term.name: term.compute(t) for term in terms_on(t.cfg, kinds)}


def check_table(cfg) -> None:
    """At start-up: every row's weight is a field of the config, and every loss-weight field weighs a row (a
    field without one would be an option that silently does nothing; a row without one, a term at no weight)."""
    fields = {f.name for f in dataclasses.fields(cfg)}
    problems = [
        f"loss term {t.name!r} is weighed by {t.weight!r}, which {type(cfg).__name__} has no field for"
        for t in TERMS.values()
        if t.weight not in fields
    ]
    used = {t.weight for t in TERMS.values()}
    problems += [
        f"{name!r} weighs no loss term: add the term to the loss-term table (mlminilm/distillation/terms.py TERMS)"
        for name in sorted(fields)
        if name.endswith("_loss_weight") and name not in used
    ]
    keys = [t.logged_as for t in TERMS.values()]
    problems += [f"loss terms share the metrics key {k!r}" for k in sorted({k for k in keys if keys.count(k) > 1})]
    if problems:
        raise ConfigError("; ".join(problems))
