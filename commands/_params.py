"""What the CLI checks itself, so that a bad option value exits 2 with a usage error naming the option: the choices
of every choice option (as str Enums built from the field's `choices`, listed in --help and completed by the
shell) and the range of every number: the floats by the callbacks below (CHECKS, named by the field's `check`),
the integers by their `min` and the bounds of mlminilm.config.limits, which `bound_integer_options` gives every
command's integer options as it is built (commands/_options.py) and registered. The config dataclasses keep their
own checks for Python API users; these only make the CLI fail at parse time, before any work."""

from __future__ import annotations

import math
import typing
from enum import Enum

import typer

from mlminilm import config
from mlminilm.config.limits import BATCH_MAX, int_limits


def choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    """A str Enum whose members are `values` (member name = value), e.g. choices("Precision", ("auto", "fp32"))."""
    return Enum(name, {value: value for value in values}, type=str)  # type: ignore[return-value]


def value(x):
    """The plain value of a choice option (commands hand plain strings to the configs)."""
    return x.value if isinstance(x, Enum) else x


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
    if not 1 <= n <= BATCH_MAX:
        raise typer.BadParameter(f"{n} is not in 1..{BATCH_MAX}")
    return n


# The checks a config field names (`option(check=...)`, mlminilm.config.options.CHECKS), by that name.
CHECKS = {
    "positive": POSITIVE,
    "non-negative": NON_NEGATIVE,
    "alpha": ALPHA,
    "dropout": DROPOUT,
    "batch-size": BATCH_SIZE,
}


def bound_integer_options(command) -> None:
    """Bound every integer option of a command function (`int` or `Optional[int]`, by its parameter name) with
    `mlminilm.config.limits.int_limits`, where the option declares no stricter bound: a huge or negative integer
    is then a usage error at parse time, never a traceback (or a process killed for memory) later. Sets the
    options' `min` / `max`, so --help shows the range."""
    from typer.models import ParameterInfo

    for name, hint in typing.get_type_hints(command, include_extras=True).items():
        if typing.get_origin(hint) is not typing.Annotated:
            continue
        base, *metadata = typing.get_args(hint)
        if int not in (base, *typing.get_args(base)):  # int, Optional[int]; bool is not int here
            continue
        least, most = int_limits(name)
        for info in metadata:
            if isinstance(info, ParameterInfo):
                info.min = least if info.min is None else max(info.min, least)
                info.max = most if info.max is None else min(info.max, most)
        # Under `from __future__ import annotations` an annotation written in the signature is a string that Typer
        # would evaluate again into a new, unbounded option: keep the evaluated one.
        command.__annotations__[name] = hint
