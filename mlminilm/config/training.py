"""The options every training command (distill, assist, finetune) shares, and their checks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import AUTO, DEVICES, PRECISIONS, check_choice
from mlminilm.config.limits import int_problems

# --report-to: where the metrics records go besides metrics.jsonl, which is always written (--resume and finetune's
# checkpoint selection read it back): jsonl (the default) and none nowhere else; tensorboard also to event files
# in OUT/tb/ (mlminilm.training.tracking).
REPORT_TO = ("jsonl", "tensorboard", "none")


@dataclass(frozen=True)
class TrainConfig:
    """What every training loop shares (distill, assist stages, finetune)."""

    AUTO_BATCH = False  # whether --batch-size auto is accepted (a class attribute, not a field)
    ZERO_STEPS = False  # whether --max-steps 0 is accepted (distill: export the initialised student)

    out: Path
    max_steps: int = 10_000
    batch_size: int = 32  # sequences per process per micro-batch
    grad_accum: int = 1
    lr: float = 5e-4
    warmup: float = 0.06  # below 1: a fraction of max_steps; from 1: a number of steps
    weight_decay: float = 0.01
    # Gradient clipping (max global L2 norm) before each optimizer step; 0 = off. Off for distill / assist: the
    # distillation recipes on record do not clip (METHOD.md section 4). FinetuneConfig clips at 1.0, as XTREME.
    max_grad_norm: float = 0.0
    # Keep the word-embedding matrix fixed. With XLM-R's 250k vocabulary it is 96M of a 6x384 student's ~107M
    # parameters: freezing it saves its gradient and AdamW state (memory, and much of a CPU step), and keeps the
    # teacher's cross-lingual token space when the student starts from the teacher (--init teacher).
    freeze_embeddings: bool = False
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    adam_eps: float = 1e-6
    seed: int = 0
    save_every: int = 1000
    keep: int = 3
    log_every: int = 10
    resume: bool = False
    overwrite: bool = False
    # auto: bf16 on CUDA GPUs that have it and on CPUs with native bf16 (training.cpu_has_native_bf16); fp16 with a
    # gradient scaler on older GPUs (V100, T4); else fp32
    precision: str = "auto"
    device: str = "auto"
    quiet: bool = False
    report_to: str = "jsonl"  # one of REPORT_TO; may change on --resume (only from that step on)

    def _train_problems(self) -> list[str]:
        p: list[str] = []
        if self.max_steps < (0 if self.ZERO_STEPS else 1):
            least = "0 (the initialised student, exported untrained)" if self.ZERO_STEPS else "1"
            p.append(f"--max-steps must be at least {least} (got {self.max_steps})")
        if self.batch_size == AUTO:
            if not self.AUTO_BATCH:
                p.append("--batch-size auto is for distill and assist; give a number of sequences")
        elif not isinstance(self.batch_size, int) or self.batch_size < 1:
            p.append(f"--batch-size must be at least 1 or auto (got {self.batch_size!r})")
        if self.grad_accum < 1:
            p.append(f"--grad-accum must be at least 1 (got {self.grad_accum})")
        # `not x >= 0` and math.isfinite: NaN fails every comparison, and inf would pass a plain one.
        if not (self.lr > 0 and math.isfinite(self.lr)):
            p.append(f"--lr must be positive and finite (got {self.lr})")
        if not (self.warmup >= 0 and math.isfinite(self.warmup)):
            p.append(f"--warmup must be non-negative and finite (got {self.warmup})")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            p.append(f"--weight-decay must be non-negative and finite (got {self.weight_decay})")
        if not (self.max_grad_norm >= 0 and math.isfinite(self.max_grad_norm)):
            p.append(f"--max-grad-norm must be non-negative and finite, 0 to turn clipping off "
                     f"(got {self.max_grad_norm})")
        if self.save_every < 1:
            p.append(f"--save-every must be at least 1 (got {self.save_every})")
        if self.keep < 1:
            p.append(f"--keep must be at least 1 (got {self.keep})")
        if self.log_every < 1:
            p.append(f"--log-every must be at least 1 (got {self.log_every})")
        if self.resume and self.overwrite:
            p.append("--resume and --overwrite cannot be used together")
        check_choice(p, self.precision, PRECISIONS, "--precision")
        check_choice(p, self.device, DEVICES, "--device")
        check_choice(p, self.report_to, REPORT_TO, "--report-to")
        p += int_problems(self)
        return p

    def warmup_steps(self) -> int:
        return int(round(self.warmup * self.max_steps)) if self.warmup < 1 else int(self.warmup)
