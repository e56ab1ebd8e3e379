"""Each command-line option is declared once, on its config field: `option(default, help=..., ...)` is a
`dataclasses.field` whose metadata says how the command line spells, checks and shows it, and what `--resume` and a
replayed run record do with it. The command line (commands/_options.py) builds every command's options from these;
this module is plain data, so the configuration layer stays free of Typer and click.

    max_steps: int = option(10_000, min=1, help="Optimizer steps.", resume=FIXED)

A field declared with `setting(...)` (or a plain default) is no option: the Python API sets it, the command line
does not (AdamW's betas). A subclass whose command says a field differently declares it again, usually with
`redeclare(Base, "name", ...)`, which keeps what it does not change (Python puts a redeclared field where the base
had it, so positional construction is unchanged).
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass
from typing import Any

# What --resume does with a field: FIXED, it defines the run and --resume refuses a change; CHANGEABLE, it defines
# the run but may change on --resume (the change is logged and recorded); None, it is not compared.
FIXED = "fixed"
CHANGEABLE = "changeable"
RESUME_RULES = (FIXED, CHANGEABLE, None)
# The command line's own value checks (commands/_params.py), by name: floats that click's FloatRange would let
# through as inf or nan, and distill's `N|auto` batch size.
CHECKS = ("positive", "non-negative", "alpha", "dropout", "batch-size")
# How a repeatable option becomes its tuple field: COMMA, each value may hold several, comma-separated
# (`--langs de,fr --langs zh`); EACH, each value is one item (`--input a --input b=c`).
COMMA = "comma"
EACH = "each"

_KEY = "mlminilm"  # the key of dataclasses.field metadata that holds a field's Spec


@dataclass(frozen=True)
class Cli:
    """How the command line spells, checks and shows one option."""

    help: str
    flag: str | None = None  # None: --field-name (a bool field: --field-name/--no-field-name, always a pair)
    short: str | None = None  # e.g. "-q"
    min: int | None = None  # integers; mlminilm.config.limits adds its bounds to every integer option
    max: int | None = None
    check: str | None = None  # one of CHECKS
    choices: tuple[str, ...] | None = None  # listed in --help, completed by the shell
    metavar: str | None = None
    show_default: bool | str | None = None  # None: shown (click's rule); a string is shown in parentheses
    repeat: str | None = None  # COMMA or EACH: a repeatable option, into a tuple field
    required: bool = False  # required on the command line although the Python field has a default
    argument: bool = False  # a positional argument, not an --option
    cli_type: Any = None  # what the command line parses when it is not the field's type (per item when repeated)

    def __post_init__(self) -> None:
        if self.check not in (None, *CHECKS):
            raise ValueError(f"check must be one of {CHECKS} (got {self.check!r})")
        if self.repeat not in (None, COMMA, EACH):
            raise ValueError(f"repeat must be {COMMA!r} or {EACH!r} (got {self.repeat!r})")


@dataclass(frozen=True)
class Spec:
    """Everything a field's metadata says: its option (None: not on the command line), what --resume does with
    it, and whether a replayed run record sets it (False: the command line says it anew: --out, --resume...)."""

    cli: Cli | None = None
    resume: str | None = None
    replay: bool = True

    def __post_init__(self) -> None:
        if self.resume not in RESUME_RULES:
            raise ValueError(f"resume must be one of {RESUME_RULES} (got {self.resume!r})")


def _field(default, default_factory, spec: Spec):
    return dataclasses.field(default=default, default_factory=default_factory, metadata={_KEY: spec})


def option(
    default: Any = MISSING,
    *,
    help: str,
    resume: str | None = None,
    replay: bool = True,  # noqa: A002
    default_factory: Any = MISSING,
    **cli: Any,
):
    """A config field that is a command-line option; `cli` takes the fields of `Cli` (flag, short, min, max,
    check, choices, metavar, show_default, repeat, required, argument, cli_type). No default: a required field."""
    return _field(default, default_factory, Spec(Cli(help=help, **cli), resume, replay))


def setting(default: Any = MISSING, *, resume: str | None = None):
    """A config field that is no command-line option (the Python API and run records set it)."""
    return _field(default, MISSING, Spec(None, resume))


def spec(f: dataclasses.Field) -> Spec:
    """The field's Spec; a field declared without one is no option and not compared on --resume."""
    return f.metadata.get(_KEY) or Spec()


def field_of(cls, name: str) -> dataclasses.Field:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f
    raise KeyError(f"{cls.__name__} has no field {name}")


def redeclare(base, name: str, default: Any = MISSING, *, cli: bool = True, resume: Any = MISSING, **changes: Any):
    """Field `name` of config class `base` declared again in a subclass: `default` (else the base's), `resume`
    (else the base's), the option's `changes` (help, min, ...); `cli=False`: no option in the subclass's command."""
    f = field_of(base, name)
    old = spec(f)
    if default is MISSING and f.default_factory is MISSING:
        default = f.default
    factory = f.default_factory if default is MISSING else MISSING
    option_spec = dataclasses.replace(old.cli, **changes) if cli and old.cli else None
    if cli and option_spec is None:
        raise ValueError(f"{base.__name__}.{name} is no option: declare it with option(...)")
    return _field(default, factory, Spec(option_spec, old.resume if resume is MISSING else resume, old.replay))


def option_fields(cls) -> list[tuple[dataclasses.Field, Cli]]:
    """The fields of `cls` that are command-line options, with their options, in field order."""
    return [(f, spec(f).cli) for f in dataclasses.fields(cls) if spec(f).cli is not None]


def option_flag(f: dataclasses.Field) -> str:
    """The option's long flag (its first, for a "--x/--no-x" pair)."""
    cli = spec(f).cli
    flag = cli.flag if cli is not None and cli.flag else "--" + f.name.replace("_", "-")
    return flag.split("/")[0]


def resume_keys(cls) -> tuple[str, ...]:
    """The fields that define a run of `cls`: `--resume` compares them with the run record (RESUME_KEYS)."""
    return tuple(f.name for f in dataclasses.fields(cls) if spec(f).resume in (FIXED, CHANGEABLE))


def resume_changeable(cls) -> tuple[str, ...]:
    """The run-defining fields that `--resume` may change (the change is logged and recorded)."""
    return tuple(f.name for f in dataclasses.fields(cls) if spec(f).resume == CHANGEABLE)


def replay_skips(cls) -> tuple[str, ...]:
    """The fields a replayed run record (`--config run.json`) leaves to the command line."""
    return tuple(f.name for f in dataclasses.fields(cls) if not spec(f).replay)
