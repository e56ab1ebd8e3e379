"""`eval-mlqa`: extractive QA on MLQA (and XQuAD / TyDiQA-GoldP) files, scored per file with each benchmark's
scorer, or scoring existing prediction files without any model.

Answers: every window's 20 best start and end logits paired (n-best 20), spans up to 30 tokens, cut from the
original context by character offsets. Scoring, as XTREME does (`--scorer auto`): MLQA files with the official
MLQA scorer (`mlminilm.metrics.mlqa.evaluate_dataset`, with the CONTEXT language of each file: answers are
context spans); XQuAD, TyDiQA-GoldP and any other SQuAD-format file with the plain SQuAD v1.1 scorer
(`mlminilm.metrics.squad_v1`), which takes no language. `--scorer squad|mlqa` uses one scorer for every file.
The report names the scorer. Predictions are saved in the official format, one `{question_id: answer_text}`
JSON file per data file, named like it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from mlminilm import logging as mlog
from mlminilm.config import QA_DOC_STRIDE, QA_MAX_QUERY_LENGTH, TASK_DEFAULTS, EvalMlqaConfig
from mlminilm.errors import ConfigError, DataError, MlminilmError
from mlminilm.evaluation.common import (
    ReportDir,
    card_to_update,
    check_head,
    check_length,
    claims_report,
    length_order,
    pad_batch,
    read_selection,
    run_settings,
    throughput_record,
    to_device,
    write_json,
)
from mlminilm.evaluation.machine import Span
from mlminilm.evaluation.qa_files import (
    find_qa_files,
    prediction_name,
    read_prediction_files,
)
from mlminilm.metrics import mlqa as mlqa_scorer
from mlminilm.metrics import squad_v1
from mlminilm.models.size import model_size
from mlminilm.tasks.qa_features import postprocess_predictions, prepare_eval_features
from mlminilm.tasks.squad import (
    QAExample,
    QAFile,
    read_squad,
)
from mlminilm.version import __version__

log = mlog.get(__name__)

PROTOCOL = (
    "zero-shot cross-lingual transfer: fine-tuned on English extractive QA only, evaluated on each {benchmark} "
    "{split} file; {scorer}; exact_match and f1 in %, average = unweighted mean over {unit}"
)
PREDICTIONS_PROTOCOL = (
    "scoring of given prediction files with the {scorer}; questions without a prediction score 0; "
    "exact_match and f1 in %"
)
# --scorer: name -> (title, what it does). Both take the maximum over the gold answers.
SCORERS = {
    "mlqa": (
        "MLQA",
        "official MLQA scorer (mlqa_evaluation_v1: max over gold answers, normalised with the context language)",
    ),
    "squad": (
        "SQuAD v1.1",
        "SQuAD v1.1 scorer (evaluate-v1.1, as XTREME scores XQuAD and TyDiQA-GoldP: max over "
        "gold answers; lower-case, ASCII punctuation and English articles removed, whitespace "
        "tokens, no language rules)",
    ),
}
_BENCHMARK_FILES = {"mlqa": "MLQA", "xquad": "XQuAD", "tydiqa": "TyDiQA-GoldP", "squad-format": "SQuAD-format"}
_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


# ------------------------------------------------------------------------------------------- scorers


def resolve_scorer(choice: str, benchmark: str) -> dict:
    """The scorer for `benchmark`'s files: `choice` (--scorer) unless "auto", which follows XTREME: MLQA's own
    scorer for MLQA files, SQuAD v1.1 for XQuAD, TyDiQA-GoldP and other SQuAD-format files.
    Returns {"name", "title", "description", "chosen"} as the report records it."""
    if choice == "auto":
        name = "mlqa" if benchmark == "mlqa" else "squad"
        chosen = f"auto ({_BENCHMARK_FILES.get(benchmark, benchmark)} files)"
    else:
        name, chosen = choice, f"--scorer {choice}"
    title, description = SCORERS[name]
    return {"name": name, "title": title, "description": description, "chosen": chosen}


def score_file(scorer: str, dataset: dict, predictions: dict[str, str], context_lang: str) -> dict:
    """EM / F1 (in %), examples and missing of one parsed SQuAD-format file with scorer `scorer` ("mlqa" uses
    the context language; "squad" takes none)."""
    if scorer == "mlqa":
        return mlqa_scorer.evaluate_dataset(dataset, predictions, context_lang)
    return squad_v1.evaluate_dataset(dataset, predictions)


# ------------------------------------------------------------------------------------------- predict


def predict_answers(
    model,
    tokenizer,
    examples: Sequence[QAExample],
    *,
    max_seq_len: int,
    doc_stride: int,
    max_query_length: int,
    batch_size: int,
    rt,
    n_best: int = 20,
    max_answer_length: int = 30,
    on_batch: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, str], int]:
    """({question id: answer text}, number of features): every window through the model, batches sorted by
    length, answers mapped back to the context by offsets. `on_batch(features_done, features_total)`."""
    import torch

    features = prepare_eval_features(
        examples,
        tokenizer,
        max_length=max_seq_len,
        doc_stride=doc_stride,
        max_query_length=max_query_length,
        pad_to_max_length=False,
    )
    rows = {k: features[k] for k in _INPUT_KEYS if k in features}
    lengths = [len(ids) for ids in rows["input_ids"]]
    count, width = len(lengths), max(lengths)
    starts = np.full((count, width), -1e9, dtype=np.float32)
    ends = np.full((count, width), -1e9, dtype=np.float32)
    order = length_order(lengths)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for first in range(0, count, batch_size):
            index = order[first : first + batch_size]
            batch = to_device(pad_batch(rows, index, pad_id), rt.device)
            with rt.autocast():
                output = model(**batch)
            span = batch["input_ids"].shape[1]
            starts[index, :span] = output.start_logits.float().cpu().numpy()
            ends[index, :span] = output.end_logits.float().cpu().numpy()
            if on_batch is not None:
                on_batch(min(first + batch_size, count), count)
    model.train(was_training)
    answers = postprocess_predictions(
        examples, features, starts, ends, n_best=n_best, max_answer_length=max_answer_length
    )
    return answers, count


def load_qa_model(name: str, rt):
    """The question-answering model (eval mode, on the device) and its fast tokenizer."""
    import torch
    from transformers import AutoModelForQuestionAnswering

    from mlminilm.models.loading import check_vocabulary, load_model, load_tokenizer

    tokenizer = load_tokenizer(name)
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"model {name}: QA needs a fast tokenizer (character offsets); its tokenizer.json is missing")
    model, _ = load_model(AutoModelForQuestionAnswering, name, pooler_optional=False, dtype=torch.float32)  # strict
    check_vocabulary(model.config, len(tokenizer), name)
    return model.to(rt.device).eval(), tokenizer


def qa_settings(cfg: EvalMlqaConfig) -> dict:
    """Window settings: the options given, else the fine-tuning run's (run.json), else the QA defaults."""
    run = run_settings(cfg.model) if cfg.model else {}

    def pick(value, key, fallback):
        return int(value if value is not None else (run.get(key) or fallback))

    return {
        "max_seq_len": pick(cfg.max_seq_len, "max_seq_len", TASK_DEFAULTS["qa"].max_seq_len),
        "doc_stride": pick(cfg.doc_stride, "doc_stride", QA_DOC_STRIDE),
        "max_query_length": pick(cfg.max_query_length, "max_query_length", QA_MAX_QUERY_LENGTH),
        "n_best": cfg.n_best,
        "max_answer_length": cfg.max_answer_length,
    }


# ------------------------------------------------------------------------------------------------ run


@claims_report("eval-mlqa")
def run(cfg: EvalMlqaConfig) -> dict:
    """Score every requested file (running `cfg.model`, or reading `cfg.predictions`); returns the metrics
    document, and writes the report and the predictions into `cfg.out` when given."""

    report_dir = ReportDir.open(
        cfg.out, cfg.overwrite, protect={"--model": cfg.model, "--data": cfg.data, "--predictions": cfg.predictions}
    )
    card = card_to_update(cfg)
    benchmark, files, datasets, predictions, settings = _check(cfg)

    languages: dict[str, dict] = {}
    throughput = None
    scorer = resolve_scorer(cfg.scorer, benchmark)
    log.info("scoring with the %s scorer (%s)", scorer["title"], scorer["chosen"])
    t_all = time.perf_counter()
    if cfg.predictions is None:
        throughput = _run_model(cfg, files, datasets, settings, predictions, languages)
    for key, info in files.items():
        languages[key] = _score(key, info, scorer["name"], datasets[key], predictions[key], languages.get(key, {}))
    doc = _document(cfg, benchmark, scorer, files, languages, settings, throughput, time.perf_counter() - t_all)

    def write_predictions(pred_dir: Path) -> None:
        for key, info in files.items():
            write_json(pred_dir / prediction_name(info.path), predictions[key])

    return report_dir.publish(doc, write_predictions, card)


def _check(cfg: EvalMlqaConfig):
    """Everything cheap first, all problems at once: the data files (read whole, labelled, the scorer's rules for
    their languages), then the prediction files or the model's head and length. Returns the benchmark, its files
    and parsed data by key, the predictions read (empty when a model runs) and the window settings."""
    problems: list[str] = []
    data_problem = False
    benchmark, files, datasets = "mlqa", {}, {}
    try:
        benchmark, files = find_qa_files(cfg.data, cfg.split, cfg.gxlt, list(cfg.langs) or None, cfg.lang)
        if resolve_scorer(cfg.scorer, benchmark)["name"] == "mlqa":  # its rules exist, before any model runs
            mlqa_scorer.require_rules(info.context_lang for info in files.values())
        datasets = {key: read_squad(info.path) for key, info in files.items()}
        _check_labelled(files, datasets)
    except MlminilmError as exc:
        problems.append(str(exc))
        data_problem = True
    predictions: dict[str, dict[str, str]] = {}
    settings = qa_settings(cfg)
    if cfg.predictions is not None:
        predictions = read_prediction_files(cfg.predictions, files, problems)
        data_problem = data_problem or bool(problems)
    else:
        try:
            config = check_head(cfg.model, "qa")
            check_length(config, cfg.model, settings["max_seq_len"])
        except MlminilmError as exc:
            problems.append(str(exc))
    if problems:
        raise (DataError if data_problem else ConfigError)("; ".join(problems))
    return benchmark, files, datasets, predictions, settings


def _check_labelled(files: dict[str, QAFile], datasets: dict) -> None:
    """Refuse files whose gold answers are all empty (unlabelled test files): nothing to score against."""
    unlabelled = [
        key for key, d in datasets.items() if not any(a["text"].strip() for e in d.examples for a in e.answers)
    ]
    if unlabelled:
        raise DataError(
            f"every gold answer is empty in {', '.join(prediction_name(files[k].path) for k in unlabelled)} "
            "(unlabelled files?): there is nothing to score against"
        )


def _score(key: str, info: QAFile, scorer: str, dataset, predicted: dict[str, str], model_record: dict) -> dict:
    """One file's report entry: its scores (with the model's features and speed, `model_record`), logged; a
    warning for questions without a prediction."""
    scores = score_file(scorer, dataset.raw, predicted, info.context_lang)
    known = {e.id for e in dataset.examples}
    scores["unknown_ids"] = sum(1 for qid in predicted if qid not in known)
    if scores["missing"]:
        log.warning(
            "%s: %d of %d questions have no prediction in %s; they score 0",
            key,
            scores["missing"],
            scores["examples"],
            prediction_name(info.path),
        )
    entry = {
        **scores,
        **model_record,
        "context_lang": info.context_lang,
        "question_lang": info.question_lang,
        "file": str(info.path),
    }
    log.info(
        "%s: EM %.2f  F1 %.2f on %s questions", key, scores["exact_match"], scores["f1"], f"{scores['examples']:,}"
    )
    return entry


def _run_model(cfg, files, datasets, settings, predictions, languages) -> dict:
    from mlminilm import training

    rt = training.setup_runtime(cfg.device, cfg.precision)
    model, tokenizer = load_qa_model(cfg.model, rt)
    total = sum(len(d.examples) for d in datasets.values())
    log.info("%d files, %s questions; model %s on %s", len(files), f"{total:,}", cfg.model, rt.device)
    t0, span = time.perf_counter(), Span()  # the span: CPU time and load beside the wall clock
    done_before = 0
    feature_total = 0
    with mlog.progress() as bar:
        task = bar.add_task(f"qa {cfg.split}", total=total, rate="")
        for key, info in files.items():
            examples = datasets[key].examples
            t_file = time.perf_counter()

            def advance(done: int, count: int, n=len(examples)) -> None:
                completed = done_before + n * done / count
                rate = completed / max(time.perf_counter() - t0, 1e-9)
                bar.update(task, completed=completed, rate=f"{rate:,.1f} questions/s")

            answers, features = predict_answers(
                model,
                tokenizer,
                examples,
                batch_size=cfg.batch_size,
                rt=rt,
                on_batch=advance,
                max_seq_len=settings["max_seq_len"],
                doc_stride=settings["doc_stride"],
                max_query_length=settings["max_query_length"],
                n_best=settings["n_best"],
                max_answer_length=settings["max_answer_length"],
            )
            elapsed = time.perf_counter() - t_file
            predictions[key] = answers
            languages[key] = {"features": features, "examples_per_s": len(examples) / max(elapsed, 1e-9)}
            done_before += len(examples)
            feature_total += features
    elapsed = time.perf_counter() - t0
    return throughput_record(total, elapsed, rt, cfg.batch_size, span=span, features=feature_total)


def _document(cfg, benchmark, scorer, files, languages, settings, throughput, elapsed) -> dict:
    unit = "context-question pairs" if cfg.gxlt else "languages"
    doc = {
        "task": benchmark,
        "split": cfg.split,
        "scorer": scorer,
        "protocol": (
            PREDICTIONS_PROTOCOL.format(scorer=scorer["description"])
            if cfg.predictions is not None
            else PROTOCOL.format(
                benchmark=_BENCHMARK_FILES.get(benchmark, benchmark),
                split=cfg.split,
                unit=unit,
                scorer=scorer["description"],
            )
        ),
        "model": cfg.model or None,
        "predictions_from": str(cfg.predictions) if cfg.predictions is not None else None,
        "selection": read_selection(cfg.model) if cfg.model else None,
        "data": {"source": str(cfg.data), "files": {k: str(info.path) for k, info in files.items()}},
        "metrics": ["exact_match", "f1"],
        "languages": languages,
        "average": {
            "exact_match": float(np.mean([s["exact_match"] for s in languages.values()])),
            "f1": float(np.mean([s["f1"] for s in languages.values()])),
            "examples": int(sum(s["examples"] for s in languages.values())),
            "missing": int(sum(s["missing"] for s in languages.values())),
        },
        "settings": settings if cfg.predictions is None else {},
        "throughput": throughput,
        "size": model_size(cfg.model) if cfg.predictions is None else None,
        "elapsed_s": elapsed,
        "mlminilm": __version__,
    }
    if cfg.gxlt:
        contexts = list(dict.fromkeys(info.context_lang for info in files.values()))
        questions = list(dict.fromkeys(info.question_lang for info in files.values()))
        doc["gxlt"] = {
            "contexts": contexts,
            "questions": questions,
            **{
                metric: [[languages[f"{c}-{q}"][metric] for q in questions] for c in contexts]
                for metric in ("exact_match", "f1")
            },
        }
    return doc
