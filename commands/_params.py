"""What the CLI checks itself, so that a bad option value exits 2 with a usage error naming the option: every value
a field's declaration rules out (its choices, an integer's range, a float's `check`; mlminilm.config.options.Rule),
refused by the same check, in the same words, as the config dataclass refuses it for Python API users. Integers and
choices through a parser (the option keeps its min / max and its Enum for --help and shell completion), the checks
by a callback on the parsed value. `bound_integer_options` gives every command's integer options the bounds of
mlminilm.config.limits (as the rules do), for --help."""

from __future__ import annotations

import typing
from enum import Enum

import typer

from mlminilm.config import options
from mlminilm.config.options import Rule


def choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    """A str Enum whose members are `values` (member name = value), e.g. choices("Precision", ("auto", "fp32"))."""
    return Enum(name, {value: value for value in values}, type=str)  # type: ignore[return-value]


def value(x):
    """The plain value of a choice option (commands hand plain strings to the configs)."""
    return x.value if isinstance(x, Enum) else x


def _refuse(rule: Rule, x):
    refusal = rule.refusal(x)
    if refusal is not None:
        raise typer.BadParameter(refusal)  # click names the option: "Invalid value for '--lr': ..."
    return x


def _integer(word):
    """The integer a word says, else the word (which the rule then refuses)."""
    if isinstance(word, int):
        return word
    try:
        return int(str(word).strip())
    except ValueError:
        return word


def parser(rule: Rule):
    """The parser of an integer or choice option: the word as its field holds it, refused as its rule says."""

    def parse(word):
        return _refuse(rule, _integer(word) if rule.least is not None else value(word))

    return parse


def _batch_size(word):
    """--batch-size of distill / assist, `N|auto`: a number of sequences, or auto."""
    if isinstance(word, str) and word.strip().lower() == options.AUTO:
        return options.AUTO
    return word if word is None else _integer(word)


def _check(name: str):
    rule = Rule("", check=name)
    read = _batch_size if name == "batch-size" else (lambda x: x)
    return lambda x: _refuse(rule, read(x))


# The checks a config field names (`option(check=...)`, mlminilm.config.options.CHECKS), by that name: callbacks
# on the parsed value (a float: click's number parsing lets inf and nan through), exit 2 with usage.
CHECKS = {name: _check(name) for name in options.CHECKS}


def bound_integer_options(command) -> None:
    """Bound every integer option of a command function (`int` or `Optional[int]`, by its parameter name) with
    `mlminilm.config.limits.int_limits`, where the option declares no stricter bound: a huge or negative integer
    is then a usage error at parse time, never a traceback (or a process killed for memory) later. Sets the
    options' `min` / `max`, so --help shows the range."""
    from typer.models import ParameterInfo

    from mlminilm.config.limits import int_limits

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
