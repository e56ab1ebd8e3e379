"""finetune: the task recipes (XTREME's XNLI and QA defaults) and the fine-tuning options."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from mlminilm.config.limits import COUNT_MAX
from mlminilm.config.options import FIXED, option, redeclare
from mlminilm.config.training import TrainConfig
from mlminilm.errors import ConfigError

TASKS = ("xnli", "qa")


@dataclass(frozen=True)
class TaskDefaults:
    """What differs between the two fine-tuning tasks; a FinetuneConfig field left at None takes these."""

    max_seq_len: int
    lr: float
    epochs: float
    warmup: float  # below 1: a fraction of the steps
    weight_decay: float


# XTREME's recipes (google-research/xtreme scripts/train_xnli.sh and scripts/train_qa.sh, METHOD.md section 7):
# XNLI: lr 2e-5, 5 epochs, max length 128, batch 8 x 4 accumulation = 32, no warmup, no weight decay
#   (run_classify.py defaults). QA: lr 3e-5, 2 epochs, max length 384, doc stride 128, max query 64, batch 32,
#   weight decay 1e-4 and 500 warmup steps, which is about 10% of a 2-epoch SQuAD run at batch 32, hence 0.1.
TASK_DEFAULTS = {
    "xnli": TaskDefaults(max_seq_len=128, lr=2e-5, epochs=5.0, warmup=0.0, weight_decay=0.0),
    "qa": TaskDefaults(max_seq_len=384, lr=3e-5, epochs=2.0, warmup=0.1, weight_decay=1e-4),
}
QA_DOC_STRIDE = 128  # context tokens shared by consecutive windows
QA_MAX_QUERY_LENGTH = 64  # question tokens kept
QA_N_BEST = 20
QA_MAX_ANSWER_LENGTH = 30
# The per-task fields of FinetuneConfig that default to TASK_DEFAULTS when None.
_TASK_FIELDS = ("max_seq_len", "lr", "epochs", "warmup", "weight_decay")


@dataclass(frozen=True)
class FinetuneConfig(TrainConfig):
    """`finetune`: an encoder + English task data -> a task model (classification or span-extraction head).

    `max_seq_len`, `lr`, `epochs`, `warmup` and `weight_decay` left at None take the task's XTREME default
    (TASK_DEFAULTS); `max_steps` None means `epochs` worth of steps, `save_every` None once per epoch.
    `resolved(steps_per_epoch)` returns the config with every one of them concrete (what `run.json` records)."""

    model: str = option(
        "",
        required=True,
        resume=FIXED,
        group="inputs",
        help="Encoder: a local directory (e.g. a distilled student) or hub id.",
    )
    task: str = option(
        "xnli",
        choices=TASKS,
        resume=FIXED,
        group="inputs",
        help="xnli (3-way sequence classification) or qa (span extraction).",
    )
    # a file (XNLI/MultiNLI TSV or JSON lines; SQuAD JSON) or hf:multi_nli / hf:squad
    train: str = option(
        "",
        required=True,
        resume=FIXED,
        group="inputs",
        help="English training data: XNLI/MultiNLI TSV, XNLI-1.0 TSV, MultiNLI JSON lines (xnli); "
        "SQuAD v1.1 JSON (qa); or a Hub dataset: hf:multi_nli, hf:squad (hf:NAME[:SPLIT]).",
    )
    # English dev file: checkpoint selection; None selects the last checkpoint
    dev: str | None = option(
        None,
        resume=FIXED,
        group="inputs",
        help="English dev data (same formats) for checkpoint selection; without it the last checkpoint is kept.",
    )
    max_seq_len: int | None = option(
        None,
        min=8,
        resume=FIXED,
        group="inputs",
        help="Tokens per input, specials included (default: 128 xnli, 384 qa).",
    )
    doc_stride: int = option(
        QA_DOC_STRIDE, min=1, resume=FIXED, group="inputs", help="qa: context tokens shared by consecutive windows."
    )
    max_query_length: int = option(
        QA_MAX_QUERY_LENGTH, min=1, group="inputs", help="qa: question tokens kept.", resume=FIXED
    )
    epochs: float | None = option(
        None,
        check="positive",
        resume=FIXED,
        group="schedule",
        help="Passes over the training data (default: 5 xnli, 2 qa).",
    )
    max_steps: int | None = redeclare(  # type: ignore[assignment]
        TrainConfig, "max_steps", None, help="Optimizer steps (default: from --epochs)."
    )
    lr: float | None = redeclare(  # type: ignore[assignment]
        TrainConfig,
        "lr",
        None,
        help="Peak learning rate (default: 2e-5 xnli, 3e-5 qa). With --resume it may change (recorded in run.json).",
    )
    warmup: float | None = redeclare(  # type: ignore[assignment]
        TrainConfig,
        "warmup",
        None,
        help="Linear warmup: a fraction of the steps if below 1, else steps (default: 0 "
        "xnli, 0.1 qa). With --resume it may change.",
    )
    weight_decay: float | None = redeclare(  # type: ignore[assignment]
        TrainConfig, "weight_decay", None, resume=FIXED, help="AdamW weight decay (default: 0 xnli, 1e-4 qa)."
    )
    # XTREME (HF run_* scripts): clip the global gradient norm at 1.0
    max_grad_norm: float = redeclare(TrainConfig, "max_grad_norm", 1.0, resume=FIXED)
    # fine-tuning uses the usual Adam betas and epsilon (XTREME / HF run_* scripts), and they define its run
    adam_beta1: float = redeclare(TrainConfig, "adam_beta1", cli=False, resume=FIXED)
    adam_beta2: float = redeclare(TrainConfig, "adam_beta2", 0.999, cli=False, resume=FIXED)
    adam_eps: float = redeclare(TrainConfig, "adam_eps", 1e-8, cli=False, resume=FIXED)
    save_every: int | None = redeclare(  # type: ignore[assignment]
        TrainConfig,
        "save_every",
        None,
        resume=FIXED,
        group="schedule",  # its dev evaluations select the checkpoint kept: part of the run, not only its output
        help="Checkpoint and English-dev evaluation every N steps (default: once per epoch).",
    )
    # dev evaluation
    eval_batch_size: int = option(128, min=1, group="machine", help="Batch size of the dev evaluation.")
    # resume needs only the latest; the best model so far is exported separately (checkpoints/best)
    keep: int = redeclare(TrainConfig, "keep", 1)
    # batches of similar length (less padding); off: plain shuffling, as XTREME
    group_by_length: bool = option(
        False,
        resume=FIXED,
        group="schedule",
        help="Batches of inputs of similar length (less padding; faster, notably for qa on CPU).",
    )

    def task_default(self, name: str):
        value = getattr(self, name)
        if value is None and self.task in TASK_DEFAULTS:
            return getattr(TASK_DEFAULTS[self.task], name)
        return value

    def resolved(self, steps_per_epoch: int) -> "FinetuneConfig":
        """Every None filled in: task defaults, `max_steps` from `epochs`, `save_every` once per epoch."""
        values = {name: self.task_default(name) for name in _TASK_FIELDS}
        if self.max_steps is None:
            values["max_steps"] = max(1, math.ceil(values["epochs"] * steps_per_epoch))
            if values["max_steps"] > COUNT_MAX:
                raise ConfigError(
                    f"--epochs {values['epochs']:g} makes {values['max_steps']} steps ({steps_per_epoch} "
                    f"per epoch), more than the {COUNT_MAX} a run may have; give fewer --epochs"
                )
        else:  # --max-steps decides; record how many epochs that is
            values["epochs"] = round(self.max_steps / steps_per_epoch, 4)
        if self.save_every is None:
            values["save_every"] = max(1, steps_per_epoch)
        return dataclasses.replace(self, **values)

    def problems(self) -> list[str]:
        # Only what no single declaration says; the ranges and choices: Config (options.declared_problems).
        p = super().problems()
        if not self.model:
            p.append("--model is required (a hub id or a local model directory, e.g. a distilled student)")
        if not self.train:
            p.append("--train is required (a TSV / JSON lines / SQuAD JSON file, or hf:multi_nli / hf:squad)")
        return p
