"""Run configurations: one frozen dataclass per command, the single home of every default.

Typer option defaults are read from these fields (see `default`), and `__post_init__` validates
and names the CLI flag in its message, so a bad option fails before any expensive work starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from mlminilm.errors import ConfigError

OBJECTIVES = ("minilm", "minilm-v2")
INITS = ("random", "teacher")
PRECISIONS = ("auto", "fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")


def default(cls, name: str):
    """The default of field `name` of config class `cls` (for Typer option defaults)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                return f.default_factory()  # type: ignore[misc]
            raise KeyError(f"{cls.__name__}.{name} has no default")
    raise KeyError(f"{cls.__name__} has no field {name}")


def _problems_to_error(problems: list[str]) -> None:
    if problems:
        raise ConfigError("; ".join(problems))


def _choice(problems: list[str], value: str, choices: tuple[str, ...], flag: str) -> None:
    if value not in choices:
        problems.append(f"{flag} must be one of {', '.join(choices)} (got {value!r})")


@dataclass(frozen=True)
class TrainConfig:
    """What every training loop shares (distill, assist stages, finetune)."""

    out: Path
    max_steps: int = 10_000
    batch_size: int = 32  # sequences per process per micro-batch
    grad_accum: int = 1
    lr: float = 5e-4
    warmup: float = 0.06  # below 1: a fraction of max_steps; from 1: a number of steps
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    adam_eps: float = 1e-6
    seed: int = 0
    save_every: int = 1000
    keep: int = 3
    log_every: int = 10
    resume: bool = False
    overwrite: bool = False
    precision: str = "auto"  # auto: bf16 on CUDA, fp32 on CPU
    device: str = "auto"
    quiet: bool = False

    def _train_problems(self) -> list[str]:
        p: list[str] = []
        if self.max_steps < 1:
            p.append(f"--max-steps must be at least 1 (got {self.max_steps})")
        if self.batch_size < 1:
            p.append(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.grad_accum < 1:
            p.append(f"--grad-accum must be at least 1 (got {self.grad_accum})")
        if not self.lr > 0:
            p.append(f"--lr must be positive (got {self.lr})")
        if self.warmup < 0:
            p.append(f"--warmup must be non-negative (got {self.warmup})")
        if self.save_every < 1:
            p.append(f"--save-every must be at least 1 (got {self.save_every})")
        if self.keep < 1:
            p.append(f"--keep must be at least 1 (got {self.keep})")
        if self.log_every < 1:
            p.append(f"--log-every must be at least 1 (got {self.log_every})")
        if self.resume and self.overwrite:
            p.append("--resume and --overwrite cannot be used together")
        _choice(p, self.precision, PRECISIONS, "--precision")
        _choice(p, self.device, DEVICES, "--device")
        return p

    def warmup_steps(self) -> int:
        return int(round(self.warmup * self.max_steps)) if self.warmup < 1 else int(self.warmup)


@dataclass(frozen=True)
class StudentShape:
    layers: int = 6
    hidden: int = 384
    heads: int = 12
    intermediate: int = 1536

    def problems(self, prefix: str = "--") -> list[str]:
        p: list[str] = []
        for name in ("layers", "hidden", "heads", "intermediate"):
            if getattr(self, name) < 1:
                p.append(f"{prefix}{name} must be at least 1 (got {getattr(self, name)})")
        if self.heads >= 1 and self.hidden % self.heads:
            p.append(f"{prefix}heads ({self.heads}) must divide {prefix}hidden ({self.hidden})")
        return p


@dataclass(frozen=True)
class DistillConfig(TrainConfig):
    teacher: str = ""
    data: Path = Path("data")
    layers: int = 6
    hidden: int = 384
    heads: int = 12
    intermediate: int = 1536
    init: str = "random"
    objective: str = "minilm"
    relation_heads: int = 48
    teacher_layer: int = -1  # 0-based, -1 = last
    alpha: float = 0.3
    dropout: float | None = None  # None: the teacher's hidden/attention dropout
    max_steps: int = 10_000

    @property
    def shape(self) -> StudentShape:
        return StudentShape(self.layers, self.hidden, self.heads, self.intermediate)

    def __post_init__(self) -> None:
        p = self._train_problems()
        if not self.teacher:
            p.append("--teacher is required (a hub id or a local model directory)")
        p += self.shape.problems()
        _choice(p, self.init, INITS, "--init")
        _choice(p, self.objective, OBJECTIVES, "--objective")
        if self.objective == "minilm-v2":
            if self.relation_heads < 1:
                p.append(f"--relation-heads must be at least 1 (got {self.relation_heads})")
            elif self.hidden % self.relation_heads:
                p.append(
                    f"--relation-heads ({self.relation_heads}) must divide the student's --hidden ({self.hidden})"
                )
        if not 0 < self.alpha <= 1:
            p.append(f"--alpha must be in (0, 1] (got {self.alpha})")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            p.append(f"--dropout must be in [0, 1) (got {self.dropout})")
        _problems_to_error(p)


@dataclass(frozen=True)
class AssistConfig(DistillConfig):
    """Teacher -> assistant (teacher's depth, student's width) -> student."""

    assistant_steps: int = 10_000
    student_steps: int = 10_000
    force: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        p = []
        if self.assistant_steps < 1:
            p.append(f"--assistant-steps must be at least 1 (got {self.assistant_steps})")
        if self.student_steps < 1:
            p.append(f"--student-steps must be at least 1 (got {self.student_steps})")
        _problems_to_error(p)
