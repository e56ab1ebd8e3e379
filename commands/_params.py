"""What the CLI checks itself, so that a bad option value exits 2 with a usage error naming the option: the choices
of every choice option (as str Enums built from the tuples in mlminilm.config, listed in --help and completed by
the shell) and the range of every number. The config dataclasses keep their own checks for Python API users;
these only make the CLI fail at parse time, before any work."""

from __future__ import annotations

import math
from enum import Enum

import typer

from mlminilm import config


def choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    """A str Enum whose members are `values` (member name = value), e.g. choices("Precision", ("auto", "fp32"))."""
    return Enum(name, {value: value for value in values}, type=str)  # type: ignore[return-value]


def value(x):
    """The plain value of a choice option (commands hand plain strings to the configs)."""
    return x.value if isinstance(x, Enum) else x


Precision = choices("Precision", config.PRECISIONS)
Device = choices("Device", config.DEVICES)
Objective = choices("Objective", config.OBJECTIVES)
Init = choices("Init", config.INITS)
HiddenDistance = choices("HiddenDistance", config.HIDDEN_DISTANCES)
Task = choices("Task", config.TASKS)
EvalSplit = choices("EvalSplit", config.EVAL_SPLITS)
QaScorer = choices("QaScorer", config.QA_SCORERS)
Pooling = choices("Pooling", config.TATOEBA_POOLINGS)
Compile = choices("Compile", config.COMPILE_MODES)


def _real(what: str, ok) -> callable:
    def check(x: float | None) -> float | None:
        if x is not None and not (math.isfinite(x) and ok(x)):
            raise typer.BadParameter(f"{x} is not {what}")
        return x

    return check


# Float checks (click's FloatRange lets inf and nan through): callbacks raising BadParameter, exit 2 with usage.
POSITIVE = _real("a positive finite number", lambda x: x > 0)
NON_NEGATIVE = _real("a non-negative finite number", lambda x: x >= 0)
ALPHA = _real("in (0, 1]", lambda x: 0 < x <= 1)
DROPOUT = _real("in [0, 1)", lambda x: 0 <= x < 1)


def BATCH_SIZE(x):
    """--batch-size of distill / assist: a positive number of sequences, or auto."""
    if x is None or isinstance(x, int):
        return x
    if str(x).strip().lower() == config.AUTO:
        return config.AUTO
    try:
        n = int(x)
    except ValueError:
        raise typer.BadParameter(f"{x!r} is neither a number of sequences nor auto") from None
    if n < 1:
        raise typer.BadParameter(f"{n} is not at least 1")
    return n
