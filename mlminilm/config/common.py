"""What every command's config shares: the device and precision choices, the options every command has (--quiet,
--device), reading a field's default, the base of every config (its declared values checked) and collecting problems
into one ConfigError."""

from __future__ import annotations

import dataclasses

from mlminilm.config.options import AUTO as AUTO  # --batch-size auto (distill / assist), declared there
from mlminilm.config.options import declared_problems, option
from mlminilm.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
COMPILE_MODES = ("auto", "on", "off")  # distill / assist --compile; auto: on for CUDA, off on CPU


def quiet_option():
    """--quiet / -q, a field of every config; a replayed run record leaves it to the command line."""
    return option(
        False, short="-q", group="output", help="Only warnings and errors on stderr; no progress bar.", replay=False
    )


def device_option():
    return option("auto", choices=DEVICES, group="machine", help="auto, cpu or cuda.")


def default(cls, name: str):
    """The default of field `name` of config class `cls` (as its command-line option shows it)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                return f.default_factory()  # type: ignore[misc]
            raise KeyError(f"{cls.__name__}.{name} has no default")
    raise KeyError(f"{cls.__name__} has no field {name}")


class Config:
    """The base of every command's config. Its `__post_init__` refuses, in one ConfigError, every value that the
    field's option declaration rules out (min, max, choices, check: `options.declared_problems`, in the words of
    the command line, which refuses the same values at parse time) and whatever `problems` finds: only what no
    single declaration can say (options that need each other, heads that must divide hidden...)."""

    def __post_init__(self) -> None:
        problems_to_error(declared_problems(self) + self.problems())

    def problems(self) -> list[str]:
        return []


def problems_to_error(problems: list[str]) -> None:
    if problems:
        raise ConfigError("; ".join(problems))


def check_choice(problems: list[str], value: str, choices: tuple[str, ...], flag: str) -> None:
    if value not in choices:
        problems.append(f"{flag} must be one of {', '.join(choices)} (got {value!r})")


def unknown_langs(p: list[str], langs: tuple[str, ...], flag: str) -> None:
    """Codes that cannot be language codes (a code the registry does not know is fine: the run warns once)."""
    from mlminilm.errors import DataError
    from mlminilm.langs import accept_codes

    try:
        accept_codes(langs)
    except DataError as exc:
        p.append(f"{flag}: {exc}")


def unregistered_langs(p: list[str], langs: tuple[str, ...], flag: str, needs: str) -> None:
    """Every code the registry does not know, for options whose work needs the registry's facts (`needs`)."""
    from mlminilm.errors import DataError
    from mlminilm.langs import validate_codes

    try:
        validate_codes(langs, needs)
    except DataError as exc:
        p.append(f"{flag}: {exc}")
