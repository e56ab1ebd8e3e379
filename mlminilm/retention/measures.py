"""One row's measurement on one task, by the evaluation command that owns the task (its `run`, its report in the
stage's folder), read back as what the table needs: per language the score and one score per item (a Tatoeba
sentence found or not, a question's nDCG@10), the items the bootstrap resamples."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlminilm.config.retention import RetentionConfig
from mlminilm.errors import DataError


@dataclass(frozen=True)
class Task:
    """How a task's table reads: its metric, what chance scores (0: the share is the plain ratio), whether the
    languages share their items (row-parallel files: one bootstrap draw for all)."""

    name: str
    title: str
    metric: str
    chance: float = 0.0
    shared_items: bool = False


TASKS = {
    "tatoeba": Task("tatoeba", "Tatoeba xx->en accuracy (%), no fine-tuning", "xx_to_en"),
    "tatoeba-more": Task(
        "tatoeba-more", "Tatoeba xx->en accuracy (%) on tatoeba-more's languages, no fine-tuning", "xx_to_en"
    ),
    "retrieval": Task(
        "retrieval", "MLQA dev question -> passage retrieval, monolingual: nDCG@10 (%), no fine-tuning", "ndcg_at_10"
    ),
    "probe": Task(
        "probe", "XNLI zero-shot, frozen-encoder probe: accuracy (%)", "accuracy", chance=100 / 3, shared_items=True
    ),
    "xnli": Task(
        "xnli", "XNLI zero-shot, fine-tuned on English: accuracy (%)", "accuracy", chance=100 / 3, shared_items=True
    ),
    "mlqa": Task("mlqa", "MLQA zero-shot, fine-tuned on English QA: F1 (%)", "f1"),
}


def _eval_options(cfg: RetentionConfig) -> dict:
    """The options an evaluation takes from retention's own (an evaluation's defaults where retention has none)."""
    options = {"precision": cfg.precision, "device": cfg.device, "quiet": cfg.quiet, "langs": cfg.langs}
    if cfg.batch_size is not None:
        options["batch_size"] = cfg.batch_size
    return options


def eval_settings(cfg: RetentionConfig) -> dict:
    """What a stage's result depends on besides its model and data (the stage inputs)."""
    return {k: v for k, v in _eval_options(cfg).items() if k != "quiet"}


def tatoeba(model: str, folder: Path, cfg: RetentionConfig, out: Path, langs: tuple[str, ...] | None = None) -> dict:
    """`eval-tatoeba --model MODEL --data FOLDER --out OUT`; each sentence pair's xx->en item: found (1) or not."""
    from mlminilm.config import EvalTatoebaConfig
    from mlminilm.evaluation import tatoeba as eval_tatoeba

    options = _eval_options(cfg)
    if langs is not None:
        options["langs"] = langs
    doc = eval_tatoeba.run(EvalTatoebaConfig(model=model, data=str(folder), out=out, overwrite=True, **options))
    languages = {}
    for lang, scores in doc["languages"].items():
        predicted = np.loadtxt(out / "predictions" / f"test-{lang}.tsv", dtype=np.int64, ndmin=1)
        found = predicted == np.arange(len(predicted))
        if len(found) != scores["examples"] or abs(100.0 * found.mean() - scores["xx_to_en"]) > 1e-9:
            raise DataError(f"eval-tatoeba's predictions in {out} do not match its scores for {lang}")
        languages[lang] = {"score": scores["xx_to_en"], "items": "".join("1" if f else "0" for f in found)}
    return {"report": str(out), "summary": doc["summary"], "languages": languages}


def retrieval(model: str, folder: Path, cfg: RetentionConfig, out: Path) -> dict:
    """`eval-retrieval --model MODEL --data FOLDER --monolingual --out OUT` (the same model on both sides); each
    question's nDCG@10, read back from its ranking in predictions/ and the qrels of the data."""
    from mlminilm.config import EvalRetrievalConfig
    from mlminilm.evaluation import retrieval as eval_retrieval
    from mlminilm.evaluation.retrieval_files import find_retrieval_sets
    from mlminilm.metrics.retrieval import query_scores

    options = _eval_options(cfg)
    doc = eval_retrieval.run(
        EvalRetrievalConfig(model=model, data=str(folder), monolingual=True, out=out, overwrite=True, **options)
    )
    _, sets, _ = find_retrieval_sets(folder, "dev", list(cfg.langs) or None, None, True)
    languages = {}
    for key, scores in doc["languages"].items():
        rset = sets[key]
        doc_index = {d: i for i, d in enumerate(rset.doc_ids)}
        rankings = _trec_rankings(out / "predictions" / f"{key}.trec")
        if len(rankings) != len(rset.queries):
            raise DataError(f"eval-retrieval's predictions in {out} hold {len(rankings)} questions for {key}")
        items = [
            query_scores([doc_index[d] for d in ranked], relevant)["ndcg_at_10"]
            for ranked, relevant in zip(rankings, rset.qrels)
        ]
        if abs(100.0 * float(np.mean(items)) - scores["ndcg_at_10"]) > 1e-6:
            raise DataError(f"eval-retrieval's predictions in {out} do not match its nDCG@10 for {key}")
        languages[key] = {"score": scores["ndcg_at_10"], "items": items}
    return {"report": str(out), "summary": doc["summary"], "languages": languages}


def _trec_rankings(path: Path) -> list[list[str]]:
    """The ranked document ids of each question of a TREC run file, in the file's question order (a question's
    lines are consecutive, rank 1 first)."""
    rankings: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        if fields[3] == "1":
            rankings.append([])
        rankings[-1].append(fields[2])
    return rankings


def items_of(task: str, language: dict) -> np.ndarray:
    """The item scores of one language of a stage result, as floats in [0, 1]."""
    items = language["items"]
    if isinstance(items, str):
        return np.frombuffer(items.encode(), dtype=np.uint8) == ord("1")
    return np.asarray(items, dtype=np.float64)
