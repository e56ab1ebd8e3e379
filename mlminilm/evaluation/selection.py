"""`finetune`'s checkpoint selection: the English dev score of the model being trained (`DevEvaluator`), the
best checkpoint so far (`Selection`, written to selection.json), and both at work during a run
(`CheckpointSelection`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

from mlminilm import logging as mlog
from mlminilm import training
from mlminilm.config import FinetuneConfig

log = mlog.get("mlminilm.finetune")  # the command's own logger, as before the split

SELECTION = "selection.json"
BEST = "best"  # checkpoints/best/: the best model so far, as an HF directory


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
            model,
            self.tokenizer,
            self.examples,
            max_seq_len=self.cfg.max_seq_len,
            doc_stride=self.cfg.doc_stride,
            max_query_length=self.cfg.max_query_length,
            batch_size=self.cfg.eval_batch_size,
            rt=self.rt,
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
                "the exported best model (step %s) does not match the dev scores logged up to step %d (best at "
                "step %d); "
                "selection starts again from the next checkpoint",
                saved,
                start,
                selection.best_step,
            )
            selection = cls(metric)
        return selection

    def rule(self, cfg: FinetuneConfig) -> str:
        if self.metric is None:
            return (
                f"last checkpoint (step {cfg.max_steps}): no --dev given; strict zero-shot "
                "(no target-language data used)"
            )
        what = "accuracy" if self.metric == "dev_accuracy" else "F1"
        return (
            f"best English-dev {what} over checkpoints every {cfg.save_every} steps and at the last step "
            f"({cfg.max_steps}), ties keep the earlier one; strict zero-shot (no target-language data used "
            "for training or selection)"
        )

    def write(self, out: Path, cfg: FinetuneConfig, dev: str | None) -> None:
        training.write_json_atomic(
            out / SELECTION,
            {
                "rule": self.rule(cfg),
                "strict_zero_shot": True,
                "metric": self.metric,
                "dev": dev,
                "selected_step": self.best_step,
                "selected_score": self.best_score,
                "scores": {str(k): v for k, v in sorted(self.scores.items())},
                "checkpoint_every": cfg.save_every,
                "max_steps": cfg.max_steps,
            },
        )


class CheckpointSelection:
    """Selection while a run trains: the main process scores each saved checkpoint on English dev and, when it is
    the best so far, exports it (`export_best()`: the model as it is now, to checkpoints/best/); selection.json is
    rewritten after every score. Without dev (`dev` None) nothing is scored until `select_last`."""

    def __init__(
        self,
        dev: DevEvaluator | None,
        selection: Selection,
        model,
        export_best: Callable[[], None],
        out: Path,
        cfg: FinetuneConfig,
        rt,
    ):
        self.dev, self.selection, self.model, self.export_best = dev, selection, model, export_best
        self.out, self.cfg, self.rt = out, cfg, rt

    def score(self, step: int) -> dict:
        """Main process: score checkpoint `step` on dev, export it when it is the best so far."""
        metric = self.selection.metric
        scores = self.dev.score(self.model)
        if self.selection.offer(step, scores[metric]):
            self.export_best()
        self.selection.write(self.out, self.cfg, self.cfg.dev)
        log.info(
            "step %d: %s %.2f (best %.2f at step %d)",
            step,
            metric,
            scores[metric],
            self.selection.best_score,
            self.selection.best_step,
        )
        return {**scores, "best_step": self.selection.best_step}

    def after_save(self, step: int) -> dict | None:
        """The training loop's hook after each checkpoint: its dev scores (main process), every process waiting."""
        if self.dev is None:
            return None
        result = self.score(step) if self.rt.is_main else None
        self.rt.barrier()
        return result

    def catch_up(self, start: int, metrics) -> None:
        """A run resumed at checkpoint `start` that stopped before its dev evaluation: evaluate it now, as the full
        run did."""
        if self.dev is not None and start > 0:
            if self.rt.is_main and start not in self.selection.scores:
                metrics.write({"step": start, **self.score(start)})
            self.rt.barrier()

    def select_last(self) -> None:
        """Without dev (main process): the last step is the selected model, exported now."""
        self.selection.offer(self.cfg.max_steps, None)
        self.export_best()
