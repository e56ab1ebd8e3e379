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

import json
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
from mlminilm.config import FinetuneConfig
from mlminilm.errors import ConfigError, DataError, MlminilmError
from mlminilm.evaluation.common import check_length, pad_batch, to_device
from mlminilm.models.loading import (_load_error, check_model_config, check_vocabulary, load_config, load_model,
                                      load_tokenizer)
from mlminilm.models.export import export_model
from mlminilm.models.student import freeze_word_embeddings
from mlminilm.tasks.xnli import NLI_LABELS, NLIExample, label_id, read_nli

log = mlog.get(__name__)

RUN_RECORD = "run.json"  # config.json at OUT's root is the model's
SELECTION = "selection.json"
BEST = "best"  # checkpoints/best/: the best model so far, as an HF directory
# Files an exported model may have at OUT's root (removed by --overwrite).
MODEL_FILES = (
    "config.json", "model.safetensors", "README.md", "mlminilm.json", "generation_config.json", "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json",
    "merges.txt", "sentencepiece.bpe.model", "spiece.model", "chat_template.jinja",
)
ARTIFACTS = (RUN_RECORD, "metrics.jsonl", training.TENSORBOARD, SELECTION, training.CHECKPOINTS, *MODEL_FILES)
# Options that define a run: --resume with any of these changed is refused.
RESUME_KEYS = (
    "model", "task", "train", "dev", "max_seq_len", "doc_stride", "max_query_length", "epochs", "max_steps",
    "batch_size", "grad_accum", "lr", "warmup", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "seed",
    "save_every", "group_by_length", "max_grad_norm", "freeze_embeddings",
)
# Hub datasets accepted as bare names (any other Hub dataset: hf:NAME[:SPLIT]).
HUB_NAMES = ("multi_nli", "nyu-mll/multi_nli", "xnli", "facebook/xnli", "squad", "rajpurkar/squad")
DEV_METRIC = {"xnli": "dev_accuracy", "qa": "dev_f1"}
HEAD_NAMES = {"xnli": "sequence classification (3 NLI labels)", "qa": "span extraction (start/end logits)"}


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


def _is_hub(source: str) -> bool:
    return source.startswith("hf:") or (source in HUB_NAMES and not Path(source).exists())


def load_examples(task: str, source: str, role: str) -> list:
    """English examples of a local file (any NLI format; SQuAD JSON) or a Hub dataset (hf:NAME[:SPLIT])."""
    if _is_hub(source):
        return _load_hub(task, source.removeprefix("hf:"), role)
    path = Path(source)
    if not path.is_file():
        raise DataError(f"--{role} {source}: no such file (or name a Hub dataset: hf:multi_nli, hf:squad)")
    if task == "xnli":
        return read_nli(path, "en")  # with a language column (XNLI-1.0), only its English rows
    from mlminilm.tasks.squad import read_squad

    # Training data may repeat question ids (XTREME's TyDiQA-GoldP English train does); dev ids must be unique.
    examples = read_squad(path, unique_ids=role == "dev").examples
    if role == "dev":
        unanswered = [e.id for e in examples if not e.answers]
        if unanswered:
            raise DataError(f"{path}: dev question {unanswered[0]!r} has no gold answer ({len(unanswered)} such)")
        if not any(a["text"].strip() for e in examples for a in e.answers):
            raise DataError(f"{path}: every gold answer is empty (an unlabelled file?); dev needs real answers to select on")
    return examples


def _load_hub(task: str, spec: str, role: str) -> list:
    from mlminilm.io import hub

    name, _, split = spec.partition(":")
    local = "an XNLI/MultiNLI TSV or JSON lines file" if task == "xnli" else "a SQuAD v1.1 JSON file"
    datasets = hub.import_datasets()
    if datasets is None:
        raise DataError(f"cannot load --{role} hf:{spec} from the Hugging Face Hub: {hub.MISSING_DATASETS}; "
                        f"{hub.HUB_EXTRA}, or pass {local} instead")
    try:
        if task == "xnli":
            bare = name.split("/")[-1]
            split = split or ("train" if role == "train" else "validation_matched" if bare == "multi_nli" else "validation")
            rows = datasets.load_dataset(name, "en", split=split) if bare == "xnli" else datasets.load_dataset(name, split=split)
            names = rows.features["label"].names
            return [
                NLIExample(r["premise"], r["hypothesis"], label_id(names[r["label"]]), "en") for r in rows if r["label"] >= 0
            ]
        from mlminilm.tasks.squad import QAExample

        rows = datasets.load_dataset(name, split=split or ("train" if role == "train" else "validation"))
        return [
            QAExample(
                r["id"], r["question"], r["context"],
                [{"text": t, "answer_start": s} for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"])],
                r.get("title"),
            )
            for r in rows
        ]
    except MlminilmError:
        raise
    except Exception as exc:  # offline, unknown dataset or split: all end the same way for the user
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot load --{role} hf:{spec} from the Hugging Face Hub: {reason} ({hub.unreachable_hint()}); "
                        f"pass {local} instead") from None


class StreamOrder:
    """Position p of the training stream -> example index: epoch p // n in a permutation seeded by (seed, epoch).

    Only (seed, step) decide a batch, so a resumed run draws exactly the batches the uninterrupted one would.
    With `lengths` (--group-by-length), each epoch's permutation is regrouped so that a batch holds inputs of
    similar length (less padding, much faster on CPU): shuffled chunks of 50 batches are sorted by length, cut into
    batches, and the batches shuffled."""

    GROUP = 50  # batches per sorted chunk

    def __init__(self, n: int, seed: int, batch: int = 1, lengths=None):
        self.n, self.seed, self.batch = n, seed, batch
        self.lengths = None if lengths is None else np.asarray(lengths)
        self._cache: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._cache:
            if len(self._cache) > 2:
                self._cache.clear()
            rng = np.random.default_rng([self.seed, epoch])
            perm = rng.permutation(self.n)
            if self.lengths is not None:
                size = self.batch * self.GROUP
                chunks = [perm[i : i + size] for i in range(0, self.n, size)]
                perm = np.concatenate([c[np.argsort(-self.lengths[c], kind="stable")] for c in chunks])
                batches = [perm[i : i + self.batch] for i in range(0, self.n, self.batch)]
                perm = np.concatenate([batches[i] for i in rng.permutation(len(batches))])
            self._cache[epoch] = perm
        return self._cache[epoch]

    def indices(self, start: int, count: int) -> np.ndarray:
        positions = np.arange(start, start + count)
        return np.asarray([self._perm(int(p // self.n))[p % self.n] for p in positions])


def featurise(task: str, examples: list, tokenizer, cfg: FinetuneConfig, max_seq_len: int) -> tuple[dict, dict]:
    """(model-input rows as unpadded token lists, targets as arrays) for training."""
    if task == "xnli":
        from mlminilm.evaluation.xnli import encode_pairs

        rows = encode_pairs(tokenizer, examples, max_seq_len)
        return rows, {"labels": np.asarray([e.label for e in examples], dtype=np.int64)}
    from mlminilm.tasks.qa_features import prepare_train_features

    features = prepare_train_features(
        examples, tokenizer, max_length=max_seq_len, doc_stride=cfg.doc_stride,
        max_query_length=cfg.max_query_length, pad_to_max_length=False,
    )
    rows = {k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in features}
    return rows, {
        "start_positions": np.asarray(features["start_positions"], dtype=np.int64),
        "end_positions": np.asarray(features["end_positions"], dtype=np.int64),
    }


# ----------------------------------------------------------------------------------------------- model


def load_task_model(task: str, name: str, seed: int) -> nn.Module:
    """The encoder with the task's head; a head that is missing (or of another size) is freshly initialised,
    reproducibly for `seed`."""
    from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification

    torch.manual_seed(seed)
    try:
        if task == "xnli":
            config = load_config(name)
            kwargs = {}
            if not _has_nli_head(config):
                kwargs = dict(num_labels=len(NLI_LABELS), id2label=dict(enumerate(NLI_LABELS)),
                              label2id={label: i for i, label in enumerate(NLI_LABELS)})
            # Strict (load_model): only the head may be new (and the pooler the files never had).
            return load_model(AutoModelForSequenceClassification, name, what=f"model (with a {HEAD_NAMES[task]} head)",
                              new_head=True, dtype=torch.float32, **kwargs)[0]
        # fp32 weights whatever the checkpoint stores: the run's --precision decides the compute dtype.
        return load_model(AutoModelForQuestionAnswering, name, what=f"model (with a {HEAD_NAMES[task]} head)",
                          new_head=True, dtype=torch.float32)[0]
    except MlminilmError:
        raise
    except Exception as exc:
        raise _load_error(f"model (with a {HEAD_NAMES[task]} head)", name, exc) from exc


def _has_nli_head(config) -> bool:
    """A 3-label classification head whose labels are the NLI classes (in whatever order): keep it as is."""
    archs = config.architectures or []
    if not any(a.endswith("ForSequenceClassification") for a in archs) or config.num_labels != len(NLI_LABELS):
        return False
    try:
        return sorted(label_id(str(config.id2label[i])) for i in range(3)) == [0, 1, 2]
    except (DataError, KeyError):
        return False


# ----------------------------------------------------------------------------------------------- run


def run(cfg: FinetuneConfig) -> FinetuneResult:
    """Fine-tune `cfg.model` on `cfg.train`, select a checkpoint on `cfg.dev`, export the selected model to OUT."""
    out = Path(cfg.out)
    # Everything cheap first, before anything is written, all problems at once: model, tokenizer, lengths, data.
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
    train_examples = dev_examples = None
    for role, source in (("train", cfg.train), ("dev", cfg.dev)):
        if not source:
            continue
        try:
            examples = load_examples(cfg.task, source, role)
        except MlminilmError as exc:
            problems.append(str(exc))
            data_problems += 1
            continue
        if role == "train":
            train_examples = examples
        else:
            dev_examples = examples
    if problems:
        raise (DataError if data_problems else ConfigError)("; ".join(problems))
    inputs = {"--model": cfg.model, "--train": cfg.train, "--dev": cfg.dev}
    with training.claimed_output(out, cfg, ARTIFACTS, inputs, record_file=RUN_RECORD):
        rows, targets = featurise(cfg.task, train_examples, tokenizer, cfg, max_seq_len)
        rt = training.setup_runtime(cfg.device, cfg.precision)
        try:
            return _finetune(cfg, rt, tokenizer, train_examples, dev_examples, rows, targets, out)
        finally:
            training.teardown_runtime(rt)


def _finetune(cfg, rt, tokenizer, train_examples, dev_examples, rows, targets, out) -> FinetuneResult:
    n = len(rows["input_ids"])
    global_batch = cfg.batch_size * cfg.grad_accum * rt.world
    steps_per_epoch = max(1, math.ceil(n / global_batch))
    rcfg = cfg.resolved(steps_per_epoch)
    metric = DEV_METRIC[cfg.task] if dev_examples is not None else None
    record = training.run_record(rcfg, rt, {
        "train_examples": len(train_examples), "train_features": n, "steps_per_epoch": steps_per_epoch,
        "dev_examples": len(dev_examples) if dev_examples is not None else 0,
    })
    if cfg.resume:
        training.check_resume_compatible(out, record, RESUME_KEYS, record_file=RUN_RECORD, write=rt.is_main)
    if rt.is_main:
        out.mkdir(parents=True, exist_ok=True)
        if not (out / RUN_RECORD).exists():
            training.write_json_atomic(out / RUN_RECORD, record)
    rt.barrier()

    raw_model = load_task_model(cfg.task, cfg.model, rcfg.seed).to(rt.device)
    if cfg.freeze_embeddings:
        log.info("word embeddings frozen: %.1fM parameters not trained", freeze_word_embeddings(raw_model) / 1e6)
    label_to_model = _label_to_model(raw_model, cfg.task)
    state = training.setup_training(rcfg, rt, raw_model, raw_model, out)
    model, optimizer, scheduler, start, metrics = (
        state.model, state.optimizer, state.scheduler, state.start_step, state.metrics
    )
    log.info(
        "%s: %s training examples -> %s features; %d steps (%d per epoch, batch %d), lr %g, max length %d",
        cfg.task, f"{len(train_examples):,}", f"{n:,}", rcfg.max_steps, steps_per_epoch, global_batch, rcfg.lr,
        rcfg.max_seq_len,
    )

    lengths = [len(ids) for ids in rows["input_ids"]] if rcfg.group_by_length else None
    order = StreamOrder(n, rcfg.seed, global_batch, lengths)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

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

    dev = DevEvaluator(cfg.task, dev_examples, tokenizer, rcfg, rt) if dev_examples is not None else None
    selection = Selection.restore(out, metric, start, rt) if rt.is_main else Selection(metric)

    def score_and_select(step: int) -> dict:
        """Main process: score checkpoint `step` on dev, export it when it is the best so far."""
        scores = dev.score(raw_model)
        if selection.offer(step, scores[metric]):
            _export(raw_model, tokenizer, out / training.CHECKPOINTS / BEST, rcfg, selection, record)
        selection.write(out, rcfg, cfg.dev)
        log.info("step %d: %s %.2f (best %.2f at step %d)", step, metric, scores[metric], selection.best_score,
                 selection.best_step)
        return {**scores, "best_step": selection.best_step}

    def after_save(step: int) -> dict | None:
        if dev is None:
            return None
        result = score_and_select(step) if rt.is_main else None
        rt.barrier()
        return result

    if dev is not None and start > 0:
        # Stopped between checkpoint `start` and its dev evaluation: evaluate it now, as the full run did.
        if rt.is_main and start not in selection.scores:
            metrics.write({"step": start, **score_and_select(start)})
        rt.barrier()

    if start >= rcfg.max_steps:
        log.info("already at step %d of %d: nothing to train", start, rcfg.max_steps)
    t0 = time.perf_counter()
    result = training.train_loop(
        cfg=rcfg, rt=rt, model=model, raw_model=raw_model, optimizer=optimizer, scheduler=scheduler,
        compute=compute, out=out, metrics=metrics, start_step=start,
        checkpoint_state=lambda step: {"data_order": "stateless(seed, step)", "seed": rcfg.seed},
        after_save=after_save, description=f"finetune {cfg.task}", scaler=state.scaler,
    )
    elapsed = time.perf_counter() - t0
    if rt.is_main:
        if dev is None:
            selection.offer(rcfg.max_steps, None)
            _export(raw_model, tokenizer, out / training.CHECKPOINTS / BEST, rcfg, selection, record)
        _finalize(out)
        selection.write(out, rcfg, cfg.dev)
        log.info("selected step %d (%s); model at %s", selection.best_step, selection.rule(rcfg), out)
    rt.barrier()
    trained = (rcfg.max_steps - start) * global_batch
    return FinetuneResult(
        out=out, task=cfg.task, steps=rcfg.max_steps, train_examples=len(train_examples), train_features=n,
        selected_step=selection.best_step, selection_metric=metric, selected_score=selection.best_score,
        rule=selection.rule(rcfg), first_loss=result.first_loss, last_loss=result.last_loss,
        examples_per_s=trained / max(elapsed, 1e-9), elapsed_s=elapsed,
    )


def _label_to_model(model, task: str) -> np.ndarray | None:
    """NLI_LABELS index -> the head's output index (identity for heads made here)."""
    if task != "xnli":
        return None
    from mlminilm.evaluation.xnli import nli_label_map

    model_to_ours = nli_label_map(model.config, "the model")
    return np.argsort(model_to_ours)


class DevEvaluator:
    """English dev scores of the model being trained: accuracy (XNLI) or EM/F1 (QA), in %."""

    def __init__(self, task: str, examples: list, tokenizer, cfg: FinetuneConfig, rt):
        self.task, self.examples, self.tokenizer, self.cfg, self.rt = task, examples, tokenizer, cfg, rt
        if task == "xnli":
            from mlminilm.evaluation.xnli import encode_pairs

            self.rows = encode_pairs(tokenizer, examples, cfg.max_seq_len)
            self.gold = np.asarray([e.label for e in examples])

    def score(self, model) -> dict:
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        if self.task == "xnli":
            from mlminilm.evaluation.xnli import nli_label_map, predict

            raw = predict(model, self.rows, batch_size=self.cfg.eval_batch_size, rt=self.rt, pad_id=pad_id)
            predicted = nli_label_map(model.config, "the model")[raw]
            return {"dev_accuracy": 100.0 * float((predicted == self.gold).mean()), "dev_examples": len(self.gold)}
        from mlminilm.evaluation.mlqa import predict_answers
        from mlminilm.metrics.mlqa import evaluate_questions

        answers, _ = predict_answers(
            model, self.tokenizer, self.examples, max_seq_len=self.cfg.max_seq_len, doc_stride=self.cfg.doc_stride,
            max_query_length=self.cfg.max_query_length, batch_size=self.cfg.eval_batch_size, rt=self.rt,
        )
        scores = evaluate_questions(((e.id, [a["text"] for a in e.answers]) for e in self.examples), answers, "en")
        return {"dev_exact_match": scores["exact_match"], "dev_f1": scores["f1"], "dev_examples": scores["examples"]}


class Selection:
    """Checkpoint selection: the best dev score so far (ties keep the earlier step), or the last step without dev."""

    def __init__(self, metric: str | None):
        self.metric = metric
        self.scores: dict[int, float | None] = {}
        self.best_step = 0
        self.best_score: float | None = None

    def offer(self, step: int, score: float | None) -> bool:
        self.scores[step] = score
        if score is None or self.best_score is None or score > self.best_score:
            self.best_step, self.best_score = step, score
            return True
        return False

    @classmethod
    def restore(cls, out: Path, metric: str | None, start: int, rt) -> "Selection":
        """The dev scores of checkpoints up to `start` from metrics.jsonl (already truncated to `start`)."""
        selection = cls(metric)
        path = out / "metrics.jsonl"
        if metric is None or start == 0 or not path.exists():
            return selection
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.strip() else {}
            if metric in record:
                selection.offer(int(record["step"]), float(record[metric]))
        # The exported best model: in checkpoints/best/ during the run, at OUT's root once the run has finished.
        best = out / training.CHECKPOINTS / BEST / "mlminilm.json"
        best = best if best.exists() else out / "mlminilm.json"
        saved = json.loads(best.read_text(encoding="utf-8")).get("selected_step") if best.exists() else None
        if selection.scores and saved != selection.best_step:
            log.warning(
                "the exported best model (step %s) does not match the dev scores logged up to step %d (best at step %d); "
                "selection starts again from the next checkpoint", saved, start, selection.best_step,
            )
            selection = cls(metric)
        return selection

    def rule(self, cfg: FinetuneConfig) -> str:
        if self.metric is None:
            return (f"last checkpoint (step {cfg.max_steps}): no --dev given; strict zero-shot "
                    "(no target-language data used)")
        what = "accuracy" if self.metric == "dev_accuracy" else "F1"
        return (
            f"best English-dev {what} over checkpoints every {cfg.save_every} steps and at the last step "
            f"({cfg.max_steps}), ties keep the earlier one; strict zero-shot (no target-language data used "
            "for training or selection)"
        )

    def write(self, out: Path, cfg: FinetuneConfig, dev: str | None) -> None:
        training.write_json_atomic(out / SELECTION, {
            "rule": self.rule(cfg),
            "strict_zero_shot": True,
            "metric": self.metric,
            "dev": dev,
            "selected_step": self.best_step,
            "selected_score": self.best_score,
            "scores": {str(k): v for k, v in sorted(self.scores.items())},
            "checkpoint_every": cfg.save_every,
            "max_steps": cfg.max_steps,
        })


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
