"""`eval-xnli`: a sequence-classification model on every language's XNLI split, accuracy per language.

Zero-shot cross-lingual transfer as in XTREME: the model was fine-tuned on English only; each language's test
(or dev) set is classified as is. Batches are sorted by length, bf16 autocast on CUDA.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from mlminilm import logging as mlog
from mlminilm.config import TASK_DEFAULTS, EvalXnliConfig
from mlminilm.errors import ConfigError, DataError, MlminilmError
from mlminilm.evaluation import backends
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
)
from mlminilm.evaluation.machine import Span
from mlminilm.langs import warn_unregistered
from mlminilm.models.size import model_size
from mlminilm.tasks.xnli import NLI_LABELS, NLIExample, find_xnli_files, label_id, read_xnli_split
from mlminilm.version import __version__

log = mlog.get(__name__)

PROTOCOL = (
    "zero-shot cross-lingual transfer (XTREME): fine-tuned on English only, evaluated on each language's XNLI "
    "{split} set; accuracy in %, average = unweighted mean over languages"
)


def encode_pairs(tokenizer, examples: Sequence[NLIExample], max_seq_len: int) -> dict[str, list]:
    """Premise/hypothesis pairs as unpadded token lists (longest_first truncation to `max_seq_len`)."""
    encoded = tokenizer(
        [e.premise for e in examples],
        [e.hypothesis for e in examples],
        truncation=True,
        max_length=max_seq_len,
    )
    return {k: v for k, v in encoded.items() if k in ("input_ids", "attention_mask", "token_type_ids")}


def model_label_names(config) -> list[str]:
    """The head's label names in output order, as its config records them (LABEL_i where it records none)."""
    return [str(config.id2label.get(i, f"LABEL_{i}")) for i in range(config.num_labels)]


def _names_nli_classes(config) -> bool:
    try:
        return all(label_id(name) is not None for name in model_label_names(config))
    except DataError:
        return False


def nli_label_map(config, model: str, label_order: Sequence[str] = ()) -> np.ndarray:
    """Model output index -> NLI_LABELS index, from the head's id2label names or, for a head that does not name
    its labels (LABEL_0... or other names), from `label_order` (--label-order: the class of output 0, 1, 2).

    Heads fine-tuned here carry the NLI names; other NLI models name theirs, in any order. A head without names
    is refused without `label_order`: taking its outputs to be in NLI_LABELS order would silently mis-score a
    head saved in another order."""
    n = config.num_labels
    if n != len(NLI_LABELS):
        raise ConfigError(
            f"model {model} has a {n}-label classification head; XNLI needs 3 ({', '.join(NLI_LABELS)}): "
            "fine-tune it with `mlminilm finetune --task xnli`"
        )
    names = model_label_names(config)
    given = [label_id(name) for name in label_order] if label_order else None  # validated by EvalXnliConfig
    try:
        mapping = [label_id(name) for name in names]
    except DataError:
        if given is None:
            raise ConfigError(
                f"model {model} does not name its labels as NLI classes (id2label: {', '.join(names)}), so the "
                f"class of each output is unknown; give it with --label-order, the class of output 0, 1, 2, e.g. "
                f"--label-order {','.join(NLI_LABELS)}"
            ) from None
        return np.asarray(given)
    if sorted(mapping) != list(range(n)):
        raise ConfigError(f"model {model} labels {names} do not name the three NLI classes once each")
    if given is not None and given != mapping:
        raise ConfigError(
            f"--label-order {','.join(label_order)} contradicts the labels model {model} names "
            f"({', '.join(names)}); leave --label-order out for a model whose labels are named"
        )
    return np.asarray(mapping)


def predict(
    model,
    rows: dict[str, list],
    *,
    batch_size: int,
    rt,
    pad_id: int,
    on_batch: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Argmax class (the model's own index) of every encoded pair, in input order; batches sorted by length."""
    import torch

    order = length_order([len(ids) for ids in rows["input_ids"]])
    predicted = np.empty(len(order), dtype=np.int64)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            batch = to_device(pad_batch(rows, index, pad_id), rt.device)
            with rt.autocast():
                logits = model(**batch).logits
            predicted[index] = logits.float().argmax(-1).cpu().numpy()
            if on_batch is not None:
                on_batch(len(index))
    model.train(was_training)
    return predicted


def confusion(gold: np.ndarray, predicted: np.ndarray, classes: int = 3) -> list[list[int]]:
    """Rows: gold class, columns: predicted class (NLI_LABELS order)."""
    matrix = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(matrix, (gold, predicted), 1)
    return matrix.tolist()


def language_scores(gold: np.ndarray, predicted: np.ndarray) -> dict:
    matrix = confusion(gold, predicted)
    per_class = {}
    for k, name in enumerate(NLI_LABELS):
        tp = matrix[k][k]
        gold_k, pred_k = sum(matrix[k]), sum(row[k] for row in matrix)
        precision = tp / pred_k if pred_k else 0.0
        recall = tp / gold_k if gold_k else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[name] = {"precision": 100 * precision, "recall": 100 * recall, "f1": 100 * f1, "support": gold_k}
    correct = int((gold == predicted).sum())
    return {
        "accuracy": 100.0 * correct / len(gold),
        "examples": int(len(gold)),
        "correct": correct,
        "confusion": matrix,
        "per_class": per_class,
    }


def resolve_max_seq_len(cfg_value: int | None, model: str) -> int:
    if cfg_value is not None:
        return cfg_value
    return int(run_settings(model).get("max_seq_len") or TASK_DEFAULTS["xnli"].max_seq_len)


@claims_report("eval-xnli")
def run(cfg: EvalXnliConfig) -> dict:
    """Evaluate `cfg.model` on every requested language; returns the metrics document (and writes the report
    into `cfg.out` when given)."""
    report_dir = ReportDir.open(cfg.out, cfg.overwrite, protect={"--model": cfg.model, "--data": cfg.data})
    card = card_to_update(cfg)
    data, skipped, files, max_seq_len, config, label_map, export = _check(cfg)
    warn_unregistered(data, "evaluated under the file's code")

    rt = backends.runtime(cfg)
    model, tokenizer = _load_model(cfg.model, export, rt)
    total = sum(len(v) for v in data.values())
    log.info(
        "XNLI %s: %d languages, %s examples; model %s on %s",
        cfg.split,
        len(data),
        f"{total:,}",
        cfg.model,
        backends.where(export, rt),
    )
    t_all, span = time.perf_counter(), Span()  # the span: CPU time and load beside the wall clock
    classify = _classifier(model, tokenizer, label_map, max_seq_len, cfg.batch_size, rt)
    languages, predictions = _evaluate(classify, data, skipped, files, f"xnli {cfg.split}", total)
    elapsed = time.perf_counter() - t_all
    doc = _document(cfg, files, config, label_map, languages, max_seq_len, total, elapsed, rt, span)
    backends.stamp(doc, export, rt)
    doc["size"] = model_size(cfg.model)
    return report_dir.publish(doc, _prediction_writer(predictions, cfg.split), card)


def _check(cfg: EvalXnliConfig):
    """Everything cheap first, all problems at once: the data (parsed whole), the model's head and length. Returns
    the examples and skipped rows per language, their files, the max length, the model's config and label map,
    and the ONNX export (None: PyTorch)."""
    langs = list(cfg.langs) or None
    problems: list[str] = []
    data: dict[str, list[NLIExample]] = {}
    skipped: dict[str, int] = {}
    files: dict[str, str] = {}
    try:
        data, skipped = read_xnli_split(cfg.data, cfg.split, langs)
        if not str(cfg.data).startswith("hf:"):
            files = {lang: str(src.path) for lang, src in find_xnli_files(cfg.data, cfg.split, langs).items()}
    except MlminilmError as exc:
        problems.append(str(exc))
    data_ok = not problems
    max_seq_len = resolve_max_seq_len(cfg.max_seq_len, cfg.model)
    config = export = None
    try:
        config = check_head(cfg.model, "xnli")
        label_map = nli_label_map(config, cfg.model, cfg.label_order)
        check_length(config, cfg.model, max_seq_len)
        export = backends.check(cfg.backend, cfg.model, "sequence-classification")
    except MlminilmError as exc:
        problems.append(str(exc))
    if problems:
        raise (ConfigError if data_ok else DataError)("; ".join(problems))
    return data, skipped, files, max_seq_len, config, label_map, export


def _load_model(name: str, export, rt):
    """(model, tokenizer): the ONNX graph, called as the PyTorch classifier is, or the classifier itself."""
    if export is not None:
        from mlminilm.models.loading import load_tokenizer

        return backends.onnx_model(export), load_tokenizer(name)
    return load_classifier(name, rt)


def _classifier(model, tokenizer, label_map: np.ndarray, max_seq_len: int, batch_size: int, rt) -> Callable:
    """classify(examples, on_batch): each pair's predicted class as an NLI_LABELS index."""

    def classify(examples: Sequence[NLIExample], on_batch: Callable[[int], None]) -> np.ndarray:
        rows = encode_pairs(tokenizer, examples, max_seq_len)
        raw = predict(model, rows, batch_size=batch_size, rt=rt, pad_id=tokenizer.pad_token_id or 0, on_batch=on_batch)
        return label_map[raw]

    return classify


def _evaluate(
    classify: Callable,
    data: dict[str, list[NLIExample]],
    skipped: dict[str, int],
    files: dict[str, str],
    description: str,
    total: int,
) -> tuple[dict[str, dict], dict[str, list[str]]]:
    """Every language's scores and predicted labels, each language logged, one progress counter for all."""
    languages: dict[str, dict] = {}
    predictions: dict[str, list[str]] = {}
    with mlog.counter(description, total, "ex") as advance:
        for lang, examples in data.items():
            scores, predicted = _evaluate_language(classify, examples, skipped.get(lang, 0), advance)
            if lang in files:
                scores["file"] = files[lang]
            languages[lang] = scores
            predictions[lang] = [NLI_LABELS[k] for k in predicted]
            log.info(
                "%s: accuracy %.2f%% on %s examples (%s ex/s)",
                lang,
                scores["accuracy"],
                f"{len(examples):,}",
                f"{scores['examples_per_s']:,.0f}",
            )
            if scores["skipped"]:
                log.warning(
                    "%s: %d rows without a gold label ('-' or empty) skipped, not scored", lang, scores["skipped"]
                )
    return languages, predictions


def _evaluate_language(
    classify: Callable, examples: list[NLIExample], skipped: int, advance: Callable[[int], None]
) -> tuple[dict, np.ndarray]:
    """One language's scores (with its skipped rows and speed) and predicted classes."""
    t0 = time.perf_counter()
    predicted = classify(examples, advance)
    gold = np.asarray([e.label for e in examples])
    scores = language_scores(gold, predicted)
    scores["skipped"] = skipped
    elapsed = time.perf_counter() - t0
    scores["examples_per_s"] = len(examples) / max(elapsed, 1e-9)
    return scores, predicted


def _document(
    cfg: EvalXnliConfig,
    files: dict[str, str],
    config,
    label_map: np.ndarray,
    languages: dict[str, dict],
    max_seq_len: int,
    total: int,
    elapsed: float,
    rt,
    span=None,
) -> dict:
    """The metrics document (metrics.json)."""
    return {
        "task": "xnli",
        "split": cfg.split,
        "protocol": PROTOCOL.format(split=cfg.split),
        "model": cfg.model,
        "selection": read_selection(cfg.model),
        "data": {"source": str(cfg.data), "files": files},
        "metrics": ["accuracy"],
        "labels": list(NLI_LABELS),
        # How the head's outputs were read as NLI classes: its id2label names, or --label-order.
        "label_order": {
            "source": "model config (id2label)" if _names_nli_classes(config) else "--label-order",
            "model_labels": model_label_names(config),
            "outputs": [NLI_LABELS[k] for k in label_map],
        },
        "skipped_rule": "rows whose gold label is '-' (no annotator majority) or empty are skipped, not scored",
        "languages": languages,
        "average": {
            "accuracy": float(np.mean([s["accuracy"] for s in languages.values()])),
            "examples": int(sum(s["examples"] for s in languages.values())),
            "skipped": int(sum(s["skipped"] for s in languages.values())),
        },
        "settings": {"max_seq_len": max_seq_len, "batch_size": cfg.batch_size, "sorted_by_length": True},
        "throughput": throughput_record(total, elapsed, rt, cfg.batch_size, span=span),
        "mlminilm": __version__,
    }


def _prediction_writer(predictions: dict[str, list[str]], split: str) -> Callable[[Path], None]:
    def write_predictions(pred_dir: Path) -> None:
        for lang, labels in predictions.items():
            # XTREME's submission format: one predicted label per line, in the order of the input file.
            (pred_dir / f"{split}-{lang}.tsv").write_text("\n".join(labels) + "\n", encoding="utf-8")

    return write_predictions


def load_classifier(name: str, rt):
    """The sequence-classification model (eval mode, on the device) and its tokenizer."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from mlminilm.models.loading import check_vocabulary, load_model, load_tokenizer

    tokenizer = load_tokenizer(name)
    # Strict: every tensor from the files, the pooler a BERT classifier reads included.
    model, _ = load_model(AutoModelForSequenceClassification, name, pooler_optional=False, dtype=torch.float32)
    check_vocabulary(model.config, len(tokenizer), name)
    return model.to(rt.device).eval(), tokenizer
