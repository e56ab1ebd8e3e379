"""`finetune`: an encoder (a distilled student, XLM-R, mBERT...) + English task data -> a task model.

XNLI: a 3-way sequence-classification head (NLI_LABELS order). QA: a span-extraction head on windows of the
context (max length 384, doc stride 128, question up to 64 tokens). A model without the head gets a fresh one.

The data order depends only on (seed, step), so `--resume` continues bit for bit. After every checkpoint the
model is scored on the ENGLISH dev set only (strict zero-shot: no target-language data in training or
selection); the best checkpoint is exported and ends up as the plain Hugging Face directory at OUT's root.

OUT/: config.json, model.safetensors, tokenizer files, README.md (the selected model); run.json (the run
record), metrics.jsonl, selection.json (the rule and every dev score), checkpoints/, and tb/ with --report-to
tensorboard.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm import training
from mlminilm.config import FinetuneConfig, resume_keys
from mlminilm.errors import ConfigError, DataError, MlminilmError
from mlminilm.evaluation.common import check_length, pad_batch, to_device
from mlminilm.evaluation.selection import BEST, SELECTION, CheckpointSelection, DevEvaluator, Selection
from mlminilm.models.export import export_model
from mlminilm.models.loading import check_model_config, check_vocabulary, load_config, load_tokenizer
from mlminilm.models.student import freeze_word_embeddings
from mlminilm.models.task_heads import HEAD_NAMES, load_task_model
from mlminilm.tasks.sources import HUB_NAMES, load_examples  # noqa: F401 (the command's names, here too)
from mlminilm.training.stream_order import StreamOrder

log = mlog.get(__name__)

RUN_RECORD = "run.json"  # config.json at OUT's root is the model's
# Files an exported model may have at OUT's root (removed by --overwrite).
MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "README.md",
    "mlminilm.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "sentencepiece.bpe.model",
    "spiece.model",
    "chat_template.jinja",
)
ARTIFACTS = (RUN_RECORD, "metrics.jsonl", training.TENSORBOARD, SELECTION, training.CHECKPOINTS, *MODEL_FILES)
# Options that define a run (declared with resume=FIXED or CHANGEABLE): --resume with any of these changed is
# refused, but for the changeable ones (--lr, --warmup).
RESUME_KEYS = resume_keys(FinetuneConfig)
DEV_METRIC = {"xnli": "dev_accuracy", "qa": "dev_f1"}


@dataclass
class FinetuneResult:
    out: Path
    task: str
    steps: int
    train_examples: int
    train_features: int
    selected_step: int
    selection_metric: str | None
    selected_score: float | None
    rule: str
    first_loss: float | None
    last_loss: float | None
    examples_per_s: float
    elapsed_s: float

    def to_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


# ------------------------------------------------------------------------------------------------ data


def featurise(task: str, examples: list, tokenizer, cfg: FinetuneConfig, max_seq_len: int) -> tuple[dict, dict]:
    """(model-input rows as unpadded token lists, targets as arrays) for training."""
    if task == "xnli":
        from mlminilm.evaluation.xnli import encode_pairs

        rows = encode_pairs(tokenizer, examples, max_seq_len)
        return rows, {"labels": np.asarray([e.label for e in examples], dtype=np.int64)}
    from mlminilm.tasks.qa_features import prepare_train_features

    features = prepare_train_features(
        examples,
        tokenizer,
        max_length=max_seq_len,
        doc_stride=cfg.doc_stride,
        max_query_length=cfg.max_query_length,
        pad_to_max_length=False,
    )
    rows = {k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in features}
    return rows, {
        "start_positions": np.asarray(features["start_positions"], dtype=np.int64),
        "end_positions": np.asarray(features["end_positions"], dtype=np.int64),
    }


# ----------------------------------------------------------------------------------------------- run


@dataclass(frozen=True)
class FinetunePlan:
    """What `validate` found, read once: the model's tokenizer, the examples and the training features."""

    cfg: FinetuneConfig
    tokenizer: object
    train_examples: list
    dev_examples: list | None
    max_seq_len: int


def validate(cfg: FinetuneConfig) -> FinetunePlan:
    """Everything cheap, before anything is written, all problems at once: model, tokenizer, lengths, data."""
    problems: list[str] = []
    data_problems = 0
    tokenizer = None
    max_seq_len = cfg.task_default("max_seq_len")
    try:
        training.check_report_to(cfg.report_to)
    except MlminilmError as exc:
        problems.append(str(exc))
    try:
        model_config = load_config(cfg.model)
        tokenizer = load_tokenizer(cfg.model)
        check_length(model_config, cfg.model, max_seq_len)
        check_model_config(model_config, cfg.model)  # absurd sizes, or a config its weights contradict
        check_vocabulary(model_config, len(tokenizer), cfg.model)
        if cfg.task == "qa" and not getattr(tokenizer, "is_fast", False):
            raise ConfigError(
                f"model {cfg.model}: QA needs a fast tokenizer (character offsets); its tokenizer.json is missing"
            )
    except MlminilmError as exc:
        problems.append(str(exc))
    examples = {}
    for role, source in (("train", cfg.train), ("dev", cfg.dev)):
        if not source:
            continue
        try:
            examples[role] = load_examples(cfg.task, source, role)
        except MlminilmError as exc:
            problems.append(str(exc))
            data_problems += 1
    if problems:
        raise (DataError if data_problems else ConfigError)("; ".join(problems))
    return FinetunePlan(cfg, tokenizer, examples.get("train"), examples.get("dev"), max_seq_len)


def run(cfg: FinetuneConfig) -> FinetuneResult:
    """Fine-tune `cfg.model` on `cfg.train`, select a checkpoint on `cfg.dev`, export the selected model to OUT."""
    out = Path(cfg.out)
    plan = validate(cfg)
    inputs = {"--model": cfg.model, "--train": cfg.train, "--dev": cfg.dev}
    with training.claimed_output(out, cfg, ARTIFACTS, inputs, record_file=RUN_RECORD):
        rows, targets = featurise(cfg.task, plan.train_examples, plan.tokenizer, cfg, plan.max_seq_len)
        rt = training.setup_runtime(cfg.device, cfg.precision)
        try:
            return _finetune(plan, rt, rows, targets, out)
        finally:
            training.teardown_runtime(rt)


def _start(plan: FinetunePlan, rt, n: int, out: Path):
    """The schedule resolved, the run record checked and written: (resolved config, steps per epoch, record)."""
    cfg = plan.cfg
    global_batch = cfg.batch_size * cfg.grad_accum * rt.world
    steps_per_epoch = max(1, math.ceil(n / global_batch))
    rcfg = cfg.resolved(steps_per_epoch)
    record = training.run_record(
        rcfg,
        rt,
        {
            "train_examples": len(plan.train_examples),
            "train_features": n,
            "steps_per_epoch": steps_per_epoch,
            "dev_examples": len(plan.dev_examples) if plan.dev_examples is not None else 0,
        },
    )
    if cfg.resume:
        training.check_same_run_everywhere(out, rt, RUN_RECORD)
        training.check_resume_compatible(out, record, RESUME_KEYS, record_file=RUN_RECORD, write=rt.is_main)
    if rt.is_main:
        out.mkdir(parents=True, exist_ok=True)
        if not (out / RUN_RECORD).exists():
            training.write_json_atomic(out / RUN_RECORD, record)
    rt.barrier()
    return rcfg, steps_per_epoch, record


def _step_function(
    rows: dict, targets: dict, order: StreamOrder, model, label_to_model, rcfg, rt, pad_id: int, global_batch: int
):
    """compute(step, micro): the loss of this process's share of micro-batch `micro` of step `step`."""

    def compute(step: int, micro: int) -> training.StepOutput:
        first = step * global_batch + (micro * rt.world + rt.rank) * rcfg.batch_size
        index = order.indices(first, rcfg.batch_size)
        host = pad_batch(rows, index, pad_id)
        tokens = int(sum(len(rows["input_ids"][i]) for i in index))  # counted on the host: no device read
        batch = to_device(host, rt.device)
        for key, values in targets.items():
            values = values[index]
            if key == "labels":
                values = label_to_model[values]
            batch[key] = torch.from_numpy(values).to(rt.device)
        loss = model(**batch).loss
        return training.StepOutput(loss, {}, tokens, {"examples": len(index)})

    return compute


def _finetune(plan: FinetunePlan, rt, rows, targets, out) -> FinetuneResult:
    """Train on `rows`, score each checkpoint on dev (keeping the best), move the selected model to OUT's root."""
    cfg = plan.cfg
    n = len(rows["input_ids"])
    global_batch = cfg.batch_size * cfg.grad_accum * rt.world
    rcfg, steps_per_epoch, record = _start(plan, rt, n, out)
    raw_model = _load_trained_model(rcfg, rt)
    label_to_model = _label_to_model(raw_model, cfg.task)
    state = training.setup_training(rcfg, rt, raw_model, raw_model, out)
    start = state.start_step
    _log_schedule(plan, rcfg, n, steps_per_epoch, global_batch)
    lengths = [len(ids) for ids in rows["input_ids"]] if rcfg.group_by_length else None
    order = StreamOrder(n, rcfg.seed, global_batch, lengths)
    pad_id = plan.tokenizer.pad_token_id if plan.tokenizer.pad_token_id is not None else 0
    compute = _step_function(rows, targets, order, state.model, label_to_model, rcfg, rt, pad_id, global_batch)
    checkpoints = _checkpoint_selection(plan, rcfg, rt, raw_model, record, out, start)
    checkpoints.catch_up(start, state.metrics)

    if start >= rcfg.max_steps:
        log.info("already at step %d of %d: nothing to train", start, rcfg.max_steps)
    t0 = time.perf_counter()
    result = training.run_steps(
        training.Steps(
            rcfg, rt, state.model, raw_model, state.optimizer, state.scheduler, compute, start, state.scaler
        ),
        training.Reporting(
            out,
            state.metrics,
            description=f"finetune {cfg.task}",
            after_save=checkpoints.after_save,
            checkpoint_state=lambda step: {"data_order": "stateless(seed, step)", "seed": rcfg.seed},
        ),
    )
    elapsed = time.perf_counter() - t0
    if rt.is_main:
        _select_and_finalize(checkpoints, out)
    rt.barrier()
    trained = (rcfg.max_steps - start) * global_batch
    return _finetune_result(plan, rcfg, out, n, checkpoints.selection, result, trained / max(elapsed, 1e-9), elapsed)


def _load_trained_model(rcfg: FinetuneConfig, rt) -> nn.Module:
    """The model with its task head, on the device, its word embeddings frozen with --freeze-embeddings."""
    raw_model = load_task_model(rcfg.task, rcfg.model, rcfg.seed).to(rt.device)
    if rcfg.freeze_embeddings:
        log.info("word embeddings frozen: %.1fM parameters not trained", freeze_word_embeddings(raw_model) / 1e6)
    return raw_model


def _log_schedule(plan: FinetunePlan, rcfg: FinetuneConfig, n: int, steps_per_epoch: int, global_batch: int) -> None:
    log.info(
        "%s: %s training examples -> %s features; %d steps (%d per epoch, batch %d), lr %g, max length %d",
        rcfg.task,
        f"{len(plan.train_examples):,}",
        f"{n:,}",
        rcfg.max_steps,
        steps_per_epoch,
        global_batch,
        rcfg.lr,
        rcfg.max_seq_len,
    )


def _checkpoint_selection(
    plan: FinetunePlan, rcfg: FinetuneConfig, rt, raw_model, record: dict, out: Path, start: int
) -> CheckpointSelection:
    """The run's selection: with dev, its scores so far (from metrics.jsonl on --resume, main process)."""
    dev_examples = plan.dev_examples
    metric = DEV_METRIC[rcfg.task] if dev_examples is not None else None
    dev = DevEvaluator(rcfg.task, dev_examples, plan.tokenizer, rcfg, rt) if dev_examples is not None else None
    selection = Selection.restore(out, metric, start, rt) if rt.is_main else Selection(metric)

    def export_best() -> None:
        _export(raw_model, plan.tokenizer, out / training.CHECKPOINTS / BEST, rcfg, selection, record)

    return CheckpointSelection(dev, selection, raw_model, export_best, out, rcfg, rt)


def _select_and_finalize(checkpoints: CheckpointSelection, out: Path) -> None:
    """Main process, after the last step: the selected model at OUT's root, selection.json final, the choice logged."""
    if checkpoints.dev is None:
        checkpoints.select_last()
    _finalize(out)
    selection, rcfg = checkpoints.selection, checkpoints.cfg
    selection.write(out, rcfg, rcfg.dev)
    log.info("selected step %d (%s); model at %s", selection.best_step, selection.rule(rcfg), out)


def _finetune_result(
    plan: FinetunePlan,
    rcfg: FinetuneConfig,
    out: Path,
    n: int,
    selection: Selection,
    result,
    examples_per_s: float,
    elapsed: float,
) -> FinetuneResult:
    return FinetuneResult(
        out=out,
        task=rcfg.task,
        steps=rcfg.max_steps,
        train_examples=len(plan.train_examples),
        train_features=n,
        selected_step=selection.best_step,
        selection_metric=selection.metric,
        selected_score=selection.best_score,
        rule=selection.rule(rcfg),
        first_loss=result.first_loss,
        last_loss=result.last_loss,
        examples_per_s=examples_per_s,
        elapsed_s=elapsed,
    )


def _label_to_model(model, task: str) -> np.ndarray | None:
    """NLI_LABELS index -> the head's output index (identity for heads made here)."""
    if task != "xnli":
        return None
    from mlminilm.evaluation.xnli import nli_label_map

    model_to_ours = nli_label_map(model.config, "the model")
    return np.argsort(model_to_ours)


def _export(model, tokenizer, path: Path, cfg: FinetuneConfig, selection: Selection, record: dict) -> None:
    card = {
        "title": f"mlminilm {cfg.task} fine-tune of {Path(cfg.model).name or cfg.model}",
        "base_model": cfg.model,
        "task": cfg.task,
        "head": HEAD_NAMES[cfg.task],
        "train": cfg.train,
        "train_examples": record.get("train_examples"),
        "train_features": record.get("train_features"),
        "dev": cfg.dev,
        "selection": selection.rule(cfg),
        "selected_step": selection.best_step,
        "selected_score": selection.best_score,
        "steps": cfg.max_steps,
        "epochs": cfg.epochs,
        "lr": cfg.lr,
        "max_grad_norm": cfg.max_grad_norm,
        "batch": f"{cfg.batch_size} x {cfg.grad_accum} accumulation x {record.get('world_size', 1)} processes",
        "max_seq_len": cfg.max_seq_len,
        **({"doc_stride": cfg.doc_stride, "max_query_length": cfg.max_query_length} if cfg.task == "qa" else {}),
        "seed": cfg.seed,
    }
    evaluate = "eval-xnli" if cfg.task == "xnli" else "eval-mlqa"
    summary = (
        f"Fine-tuned with mlminilm on English data with a {HEAD_NAMES[cfg.task]} head. Evaluate it zero-shot "
        f"on every language with `mlminilm {evaluate} --model DIR`."
    )
    export_model(model, tokenizer, path, card, summary)


def _finalize(out: Path) -> None:
    """Move the selected model from checkpoints/best/ to OUT's root, one file at a time with os.replace."""
    best = out / training.CHECKPOINTS / BEST
    if not best.is_dir():
        return  # already finalised (a --resume of a finished run)
    for item in best.iterdir():
        target = out / item.name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(item, target)
    shutil.rmtree(best)


# `from mlminilm import finetune` may give this module: calling it runs the command (mlminilm.api).
from mlminilm.api import command_module  # noqa: E402

command_module(__name__, FinetuneConfig)
