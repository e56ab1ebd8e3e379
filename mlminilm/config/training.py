"""The options every training command (distill, assist, finetune) shares, and the check across them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import PRECISIONS, Config, device_option, quiet_option
from mlminilm.config.options import CHANGEABLE, FIXED, option, setting

# --report-to: where the metrics records go besides metrics.jsonl, which is always written (--resume and finetune's
# checkpoint selection read it back): jsonl (the default) and none nowhere else; tensorboard also to event files
# in OUT/tb/ (mlminilm.training.tracking).
REPORT_TO = ("jsonl", "tensorboard", "none")


@dataclass(frozen=True)
class TrainConfig(Config):
    """What every training loop shares (distill, assist stages, finetune)."""

    out: Path = option(
        group="output", help="Output directory (created; must be empty unless --resume/--overwrite).", replay=False
    )
    max_steps: int = option(10_000, min=1, group="schedule", help="Optimizer steps.", resume=FIXED)
    batch_size: int = option(32, min=1, group="schedule", help="Sequences per process per micro-batch.", resume=FIXED)
    grad_accum: int = option(
        1, min=1, group="schedule", help="Micro-batches accumulated per optimizer step.", resume=FIXED
    )
    lr: float = option(
        5e-4,
        check="positive",
        resume=CHANGEABLE,
        group="schedule",
        help="Peak learning rate (AdamW). With --resume it may change (recorded in run.json).",
    )
    warmup: float = option(
        0.06,
        check="non-negative",
        resume=CHANGEABLE,
        group="schedule",
        help="Linear warmup: a fraction of --max-steps if below 1, else steps. With --resume it may change.",
    )
    weight_decay: float = option(
        0.01, check="non-negative", group="schedule", help="AdamW weight decay (weight matrices only)."
    )
    # Gradient clipping (max global L2 norm) before each optimizer step; 0 = off. Off for distill / assist: the
    # distillation recipes on record do not clip (METHOD.md section 4). FinetuneConfig clips at 1.0, as XTREME.
    max_grad_norm: float = option(
        0.0,
        check="non-negative",
        group="schedule",
        help="Clip the global gradient norm to this before each step; 0 = no clipping.",
    )
    # Keep the word-embedding matrix fixed. With XLM-R's 250k vocabulary it is 96M of a 6x384 student's ~107M
    # parameters: freezing it saves its gradient and AdamW state (memory, and much of a CPU step), and keeps the
    # teacher's cross-lingual token space when the student starts from the teacher (--init teacher).
    freeze_embeddings: bool = option(
        False,
        resume=FIXED,
        group="student",
        help="Keep the word embeddings fixed (with a 250k vocabulary most of a small model's parameters).",
    )
    # AdamW's betas and epsilon are no options: the recipes fix them (the Python API may set them).
    adam_beta1: float = setting(0.9)
    adam_beta2: float = setting(0.99)
    adam_eps: float = setting(1e-6)
    seed: int = option(0, group="schedule", help="Random seed (init, data order, dropout).", resume=FIXED)
    save_every: int = option(1000, min=1, group="output", help="Checkpoint every N steps (and at the end).")
    keep: int = option(3, min=1, group="output", help="Keep the last K checkpoints.")
    log_every: int = option(
        10,
        min=1,
        group="output",
        help="Write a metrics.jsonl record every N steps (and a log line, when no progress bar shows).",
    )
    resume: bool = option(
        False,
        replay=False,
        group="output",
        help="Continue the run in --out from its latest checkpoint (--lr and --warmup may change).",
    )
    overwrite: bool = option(False, replay=False, group="output", help="Start over, replacing a previous run in --out.")
    precision: str = option(
        "auto",
        choices=PRECISIONS,
        group="machine",
        help="auto (bf16 on CUDA GPUs that have it and on CPUs with native bf16, AVX512-BF16 or AMX; fp16 on older "
        "GPUs; else fp32), fp32, bf16, or fp16 (with a gradient scaler; for GPUs without bf16: V100, T4).",
    )
    device: str = device_option()
    quiet: bool = quiet_option()
    report_to: str = option(
        "jsonl",
        choices=REPORT_TO,
        group="output",
        help="Where the metrics records also go (metrics.jsonl is "
        "always written: --resume reads it): jsonl (nowhere else), tensorboard (also TensorBoard "
        "event files in OUT/tb/; needs pip install 'mlminilm[tensorboard]') or none (no extra "
        "sink, as jsonl). May change on --resume.",
    )

    def problems(self) -> list[str]:
        # Only what no single declaration says; the ranges and choices: Config (options.declared_problems).
        if self.resume and self.overwrite:
            return ["--resume and --overwrite cannot be used together"]
        return []

    def warmup_steps(self) -> int:
        return int(round(self.warmup * self.max_steps)) if self.warmup < 1 else int(self.warmup)
