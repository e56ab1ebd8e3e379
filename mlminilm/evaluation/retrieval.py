"""`eval-retrieval`: question -> passage retrieval with an encoder as it is (no fine-tuning), per language pair.

Every question and every passage becomes one vector (`mlminilm.evaluation.embeddings`, as eval-tatoeba: the model's
sentence-transformers layer and pooling, else XTREME's), questions under the model's query prompt and passages
under its passage prompt, each cut at its own maximum length. For each question the corpus is ranked by cosine
similarity (float32; equal scores to the lower corpus index) and scored as BEIR and MTEB score it
(mlminilm.metrics.retrieval: nDCG@10 the main figure, MRR@10, recall@1/10/100). A text that occurs in several pairs
(MLQA's passages of one language serve every question language) is embedded once.

Asymmetric search (`--query-model`): the questions are embedded by another encoder than the passages (the index),
each side with its own model's embedding and backend (mlminilm.evaluation.retrieval_models); the report names both.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

import numpy as np

from mlminilm import logging as mlog
from mlminilm.config.retrieval import RETRIEVAL_MAX_LENGTH, EvalRetrievalConfig
from mlminilm.errors import ConfigError, DataError, MlminilmError
from mlminilm.evaluation import backends
from mlminilm.evaluation import retrieval_models as models
from mlminilm.evaluation.common import ReportDir, card_to_update, claims_report, throughput_record
from mlminilm.evaluation.embeddings import EmbeddingSpec, embed, encode, resolve_spec, skipping_prompt
from mlminilm.evaluation.machine import Span
from mlminilm.evaluation.retrieval_files import find_retrieval_sets
from mlminilm.evaluation.tatoeba import normalize
from mlminilm.langs import warn_unregistered
from mlminilm.metrics.retrieval import DEPTH, METRICS, mean_scores
from mlminilm.models.size import model_size
from mlminilm.tasks.retrieval import RetrievalSet
from mlminilm.version import __version__

log = mlog.get(__name__)

SIMILARITY = "cosine, float32, equal scores to the lower corpus index"
PREDICTED = 10  # ranked documents per question in predictions/ (TREC run format)
BENCHMARKS = {
    "mlqa": "MLQA",
    "xquad": "XQuAD",
    "tydiqa": "TyDiQA-GoldP",
    "squad-format": "SQuAD-format",
    "beir": "BEIR",
}
PROTOCOL = (
    "{benchmark} question -> passage retrieval, no fine-tuning ({corpus}): each text -> {embedding}; the corpus "
    "ranked per question by cosine similarity ({similarity}); nDCG@10 (linear gain, as "
    "BEIR / MTEB via pytrec_eval), MRR@10, recall@1/10/100 in %, mean over questions; average = unweighted mean "
    "over the language pairs"
)
# In the protocol of asymmetric search (`--query-model`), after "no fine-tuning".
ASYMMETRIC = "asymmetric search with questions embedded by {query.name} and passages (the index) by {passage.name}"
CORPUS_RULES = {
    "squad": "corpus = each file's distinct contexts (identical text = one document), each question's own context "
    "its one relevant document, as MTEB's MLQARetrieval",
    "beir": "BEIR layout: title + ' ' + text per document, the queries with qrels, graded gains",
}


def _check(cfg: EvalRetrievalConfig):
    """Everything cheap, all problems at once: the data (read whole), the models' configs, the two embeddings."""
    problems: list[str] = []
    benchmark, sets, unregistered = "", {}, []
    try:
        benchmark, sets, unregistered = find_retrieval_sets(
            cfg.data, cfg.split, list(cfg.langs) or None, cfg.lang, cfg.monolingual
        )
    except MlminilmError as exc:
        problems.append(str(exc))
    data_ok = not problems
    encoders = specs = None
    try:
        encoders = models.open_encoders(cfg)
        specs = _specs(cfg, encoders)
        models.check_exports(encoders, specs)  # an exported graph: its last layer only
        models.check_pair(encoders, specs)  # asymmetric search: vectors of one size
    except MlminilmError as exc:
        problems.append(str(exc))
    if problems:
        raise (ConfigError if data_ok else DataError)("; ".join(problems))
    return benchmark, sets, unregistered, encoders, specs


def _specs(cfg: EvalRetrievalConfig, encoders: dict[str, models.Encoder]) -> dict[str, EmbeddingSpec]:
    """The query and passage embeddings: each side's model's layer and pooling (one model: one layer and pooling),
    each side's prompt and length. A ConfigError with every problem once, naming each side's own length option."""
    problems: list[str] = []
    specs = {}
    for side, prompt, length in (
        ("query", cfg.query_prompt, cfg.query_max_length),
        ("passage", cfg.passage_prompt, cfg.passage_max_length),
    ):
        enc = encoders[side]
        try:
            spec = resolve_spec(
                enc.directory,
                enc.config,
                enc.st,
                layer=cfg.layer,
                pooling=cfg.pooling,
                prefix=None,
                max_length=length,
                default_max_length=RETRIEVAL_MAX_LENGTH,
            )
            specs[side] = _side_spec(spec, side, prompt, enc.st)
        except ConfigError as exc:
            for message in str(exc).replace("--max-length", f"--{side}-max-length").split("; "):
                if message not in problems:
                    problems.append(message)
    if problems:
        raise ConfigError("; ".join(problems))
    return specs


def _side_spec(spec: EmbeddingSpec, side: str, prompt: str | None, st) -> EmbeddingSpec:
    """The spec of one side with its prompt: the option, else the model's own prompt for that side, else none."""
    flag = f"--{side}-prompt"
    if prompt is not None:
        text, rule = prompt, flag
    else:
        own = (st.query_prompt if side == "query" else st.passage_prompt) if st is not None else None
        name = "query" if side == "query" else "passage / document"
        text, rule = (own, f"the model's '{name}' prompt") if own else ("", "none")
        if side == "passage" and own is None and st is not None and st.query_prompt:
            log.warning("model has a 'query' prompt but no 'passage' or 'document' prompt: passages get no prompt")
    length_rule = spec.rules["max_length"].replace("--max-length", f"--{side}-max-length")
    rules = {**spec.rules, "prefix": rule, "max_length": length_rule}
    return dataclasses.replace(spec, prefix=text, rules=rules)


@claims_report("eval-retrieval")
def run(cfg: EvalRetrievalConfig) -> dict:
    """Evaluate `cfg.model` (with `cfg.query_model` embedding the questions: asymmetric search) on every retrieval
    set of `cfg.data`; returns the metrics document (and writes the report into `cfg.out` when given)."""
    inputs = {"--model": cfg.model, "--data": cfg.data}
    if cfg.query_model is not None:
        inputs["--query-model"] = cfg.query_model
    report_dir = ReportDir.open(cfg.out, cfg.overwrite, protect=inputs)
    card = card_to_update(cfg) if cfg.query_model is None or not cfg.update_card else _query_card(cfg)
    benchmark, sets, unregistered, encoders, specs = _check(cfg)
    warn_unregistered(unregistered, "evaluated and reported under that code")
    _warn_about(sets)
    embedders, rts = models.load(encoders, specs, cfg)
    specs = {side: skipping_prompt(spec, embedders[side][1], encoders[side].st) for side, spec in specs.items()}
    texts = {
        "query": list(dict.fromkeys(q for s in sets.values() for q in s.queries)),
        "passage": list(dict.fromkeys(d for s in sets.values() for d in s.corpus)),
    }
    total = sum(len(v) for v in texts.values())
    log.info(
        "%s retrieval: %d language pairs, %s distinct questions and %s distinct passages; %s",
        BENCHMARKS.get(benchmark, benchmark),
        len(sets),
        f"{len(texts['query']):,}",
        f"{len(texts['passage']):,}",
        _where(encoders, rts),
    )
    t0, span = time.perf_counter(), Span()  # the span: CPU time and load beside the wall clock
    vectors, cut, sides = _embed_all(texts, embedders, specs, cfg.batch_size, rts, total)
    languages, predictions = {}, {}
    # monolingual pairs first, then the cross-lingual ones, each in the data's order
    order = sorted(sets, key=lambda k: sets[k].context_lang != sets[k].question_lang)
    for key in order:
        rset = sets[key]
        languages[key], predictions[key] = _score_set(rset, texts, vectors)
        log.info(
            "%s: nDCG@10 %.2f, MRR@10 %.2f on %s questions, %s passages",
            key,
            languages[key]["ndcg_at_10"],
            languages[key]["mrr_at_10"],
            f"{len(rset.queries):,}",
            f"{len(rset.corpus):,}",
        )
    elapsed = time.perf_counter() - t0
    if any(cut.values()):
        log.warning(
            "%s questions and %s passages were longer than their maximum length and were cut (--query-max-length "
            "%d, --passage-max-length %d)",
            cut["query"],
            cut["passage"],
            specs["query"].max_length,
            specs["passage"].max_length,
        )
    doc = _document(cfg, benchmark, sets, specs, languages, cut, unregistered, encoders)
    doc["throughput"] = throughput_record(total, elapsed, rts["passage"], cfg.batch_size, span, texts=total)
    if models.asymmetric(encoders):
        models.stamp(doc, encoders, specs, rts, sides)
    else:
        export = encoders["passage"].export
        backends.stamp(doc, export, rts["passage"])
        doc["size"] = model_size(str(export.directory) if export is not None else specs["query"].weights)
    return report_dir.publish(doc, _prediction_writer(sets, predictions), card)


def _query_card(cfg: EvalRetrievalConfig):
    """--update-card with --query-model: the query model's card (its results against --model's index)."""
    from mlminilm.models.card_results import target

    return target(cfg.query_model, flag="--query-model")


def _where(encoders: dict[str, models.Encoder], rts: dict) -> str:
    """Which model embeds what, where, for the log."""
    query, index = encoders["query"], encoders["passage"]
    if not models.asymmetric(encoders):
        return f"model {index.name} on {backends.where(index.export, rts['passage'])}"
    return (
        f"questions by {query.name} on {backends.where(query.export, rts['query'])}, passages (the index) by "
        f"{index.name} on {backends.where(index.export, rts['passage'])}"
    )


def _warn_about(sets: dict[str, RetrievalSet]) -> None:
    """One warning per pair for what the data does that a reader of the scores should know."""
    for key, rset in sets.items():
        if rset.no_relevant:
            log.warning(
                "%s: %d of %d judged questions have no relevant passage in %s (every score 0); they score 0, as in "
                "BEIR",
                key,
                rset.no_relevant,
                len(rset.queries),
                rset.files.get("qrels"),
            )
        if rset.duplicate_ids:
            log.warning(
                "%s: %d questions reuse an earlier question's id in %s; each is scored, but predictions/%s.trec "
                "lists those ids more than once",
                key,
                rset.duplicate_ids,
                rset.files.get("qa"),
                key,
            )


def _embed_all(texts, embedders, specs, batch_size: int, rts, total: int):
    """Unit-length float32 vectors of every distinct question and passage, each side by its (model, tokenizer) in
    `embedders`; how many of each side were cut; each side's (texts, seconds)."""
    vectors, cut, sides = {}, {}, {}
    with mlog.counter("retrieval", total, "text") as advance:
        for side in ("query", "passage"):
            start = time.perf_counter()
            spec, (model, tokenizer) = specs[side], embedders[side]
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            rows, cut[side] = encode(tokenizer, texts[side], spec.prefix, spec.max_length)
            raw = embed(model, rows, spec, batch_size=batch_size, rt=rts[side], pad_id=pad_id, on_batch=advance)
            vectors[side] = normalize(raw)
            sides[side] = (len(texts[side]), time.perf_counter() - start)
    return vectors, cut, sides


def rank(queries: np.ndarray, docs: np.ndarray, depth: int = DEPTH) -> np.ndarray:
    """For each query row, the indices of the `depth` most similar document rows (all when fewer), best first;
    cosine similarity in float32 (rows are normalised here), equal scores to the lower index (a stable sort)."""
    q, d = normalize(queries), normalize(docs)
    k = min(depth, len(d))
    out = np.empty((len(q), k), dtype=np.int64)
    chunk = max(1, min(1024, (1 << 25) // max(len(d), 1)))  # at most 32M similarities (128 MB) at a time
    for start in range(0, len(q), chunk):
        scores = q[start : start + chunk] @ d.T
        out[start : start + chunk] = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return out


def _score_set(rset: RetrievalSet, texts: dict[str, list[str]], vectors: dict[str, np.ndarray]):
    """One pair's scores (with what it read) and its top PREDICTED documents per question."""
    q_row = {t: i for i, t in enumerate(texts["query"])}
    d_row = {t: i for i, t in enumerate(texts["passage"])}
    q = vectors["query"][[q_row[t] for t in rset.queries]]
    d = vectors["passage"][[d_row[t] for t in rset.corpus]]
    ranked = rank(q, d)
    scores: dict = mean_scores(ranked, rset.qrels)
    scores.update(
        {
            "examples": len(rset.queries),
            "corpus": len(rset.corpus),
            "context_lang": rset.context_lang,
            "question_lang": rset.question_lang,
            "files": rset.files,
            "merged_contexts": rset.merged,
            "duplicate_texts": rset.duplicate_texts,
            "unjudged_queries": rset.unjudged,
            "no_relevant": rset.no_relevant,
        }
    )
    top = min(PREDICTED, ranked.shape[1])
    best = ranked[:, :top]
    sims = np.einsum("ih,ikh->ik", normalize(q), normalize(d)[best])
    return scores, (best, sims)


def _side(spec: EmbeddingSpec) -> str:
    prompt = repr(spec.prefix) if spec.prefix else "none"
    return f"prompt {prompt} ({spec.rules['prefix']}), max length {spec.max_length}"


def _layer_pooling(s: EmbeddingSpec) -> str:
    pooling = "+".join(s.pooling)
    return f"layer {s.layer} of {s.num_layers} ({s.rules['layer']}), {pooling} pooling ({s.rules['pooling']})"


def _summary(specs: dict[str, EmbeddingSpec], encoders: dict[str, models.Encoder]) -> str:
    """One line: the layer and pooling both sides share, then each side's prompt and length; in asymmetric search
    each side's model and backend, then its layer, pooling, prompt and length."""
    s = specs["query"]
    if not models.asymmetric(encoders):
        return f"{_layer_pooling(s)}; questions: {_side(s)}; passages: {_side(specs['passage'])}"
    return "; ".join(
        f"{what} by {encoders[side].name} ({models.backend_text(encoders[side])}): {_layer_pooling(specs[side])}, "
        f"{_side(specs[side])}"
        for side, what in (("query", "questions"), ("passage", "passages (the index)"))
    )


def _mean(languages: dict[str, dict], keys: list[str]) -> dict | None:
    if not keys:
        return None
    return {
        **{m: float(np.mean([languages[k][m] for k in keys])) for m in METRICS},
        "examples": int(sum(languages[k]["examples"] for k in keys)),
        "pairs": len(keys),
    }


def _document(cfg, benchmark, sets, specs, languages, cut, unregistered, encoders) -> dict:
    layout = next(iter(sets.values())).layout
    mono = [k for k, s in languages.items() if s["context_lang"] == s["question_lang"]]
    cross = [k for k in languages if k not in mono]
    name = BENCHMARKS.get(benchmark, benchmark)
    average = _mean(languages, list(languages))
    average.pop("pairs")
    summary = _summary(specs, encoders)
    protocol = PROTOCOL.format(benchmark=name, corpus=CORPUS_RULES[layout], embedding=summary, similarity=SIMILARITY)
    search = {}  # with --query-model: which model embeds the questions, and whether that is asymmetric search
    if cfg.query_model is not None:
        kind = "asymmetric" if models.asymmetric(encoders) else "symmetric"
        search = {"query_model": cfg.query_model, "search": kind}
        if kind == "asymmetric":
            protocol = protocol.replace("no fine-tuning", f"no fine-tuning, {ASYMMETRIC.format(**encoders)}", 1)
    doc = {
        "task": "retrieval",
        "benchmark": benchmark,
        "split": cfg.split,
        "protocol": protocol,
        "summary": summary,
        "model": cfg.model,
        **search,
        "embedding": {side: spec.record() for side, spec in specs.items()},
        "data": {"source": str(cfg.data), "files": {k: s.files for k, s in sets.items()}, "unregistered": unregistered},
        "metrics": list(METRICS),
        "languages": languages,
        "average": average,
        "averages": {"monolingual": _mean(languages, mono), "crosslingual": _mean(languages, cross)},
        "truncated": cut,
        "settings": {
            "query_max_length": specs["query"].max_length,
            "passage_max_length": specs["passage"].max_length,
            "batch_size": cfg.batch_size,
            "sorted_by_length": True,
            "similarity": SIMILARITY,
            "pairs": "monolingual" if cfg.monolingual else "every pair present",
        },
        "mlminilm": __version__,
    }
    if cross:
        doc["matrix"] = _matrix(languages)
    return doc


def _matrix(languages: dict[str, dict]) -> dict:
    """nDCG@10 of every passage x question language pair (None where the data has no such pair)."""
    contexts = list(dict.fromkeys(s["context_lang"] for s in languages.values()))
    questions = list(dict.fromkeys(s["question_lang"] for s in languages.values()))
    by_pair = {(s["context_lang"], s["question_lang"]): s["ndcg_at_10"] for s in languages.values()}
    return {
        "metric": "ndcg_at_10",
        "contexts": contexts,
        "questions": questions,
        "values": [[by_pair.get((c, q)) for q in questions] for c in contexts],
    }


def _prediction_writer(sets: dict[str, RetrievalSet], predictions) -> Callable[[Path], None]:
    def write_predictions(pred_dir: Path) -> None:
        # TREC run format (trec_eval, pytrec_eval): query id, Q0, document id, rank from 1, score, run name.
        for key, (ranked, sims) in predictions.items():
            rset = sets[key]
            lines = [
                f"{rset.query_ids[i]} Q0 {rset.doc_ids[d]} {r + 1} {sims[i, r]:.6f} mlminilm"
                for i in range(len(ranked))
                for r, d in enumerate(ranked[i])
            ]
            (pred_dir / f"{key}.trec").write_text("\n".join(lines) + "\n", encoding="utf-8")

    return write_predictions
