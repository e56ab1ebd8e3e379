"""Each command-line option is declared once, on its config field: `option(default, help=..., ...)` is a
`dataclasses.field` whose metadata says how the command line spells, checks and shows it, and what `--resume` and a
replayed run record do with it. The command line (commands/_options.py) builds every command's options from these;
this module is plain data, so the configuration layer stays free of Typer and click.

    max_steps: int = option(10_000, min=1, group="schedule", help="Optimizer steps.", resume=FIXED)

Every option names its group (one of GROUPS): `--help` lists a command's options group by group, in the order of
GROUPS, and within a group in field order (`help_order`), so options that work together stand together
(`--passages` beside `--parallel`) with no list of names kept by hand beside the declarations.

What a declaration rules out (an integer's min / max, within mlminilm.config.limits; a float's `check`; the
`choices`) is checked once, by its `Rule`: on the value a config holds (`declared_problems`, from every config's
`__post_init__`) and on the value the command line parses, in the same words.

A field declared with `setting(...)` (or a plain default) is no option: the Python API sets it, the command line
does not (AdamW's betas). A subclass whose command says a field differently declares it again, usually with
`redeclare(Base, "name", ...)`, which keeps what it does not change (Python puts a redeclared field where the base
had it, so positional construction is unchanged).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import typing
from dataclasses import MISSING, dataclass
from typing import Any

from mlminilm.config.limits import BATCH_MAX, int_limits

# What --resume does with a field: FIXED, it defines the run and --resume refuses a change; CHANGEABLE, it defines
# the run but may change on --resume (the change is logged and recorded); None, it is not compared.
FIXED = "fixed"
CHANGEABLE = "changeable"
RESUME_RULES = (FIXED, CHANGEABLE, None)
# The value checks a field may name (`check=`): floats, finite and within a range (a number range would let inf and
# nan through), by what such a value is, and distill's `N|auto` batch size. `Rule.refusal` applies them.
REAL_CHECKS = {
    "positive": ("a positive finite number", lambda x: x > 0),
    "non-negative": ("a non-negative finite number", lambda x: x >= 0),
    "alpha": ("in (0, 1]", lambda x: 0 < x <= 1),
    "dropout": ("in [0, 1)", lambda x: 0 <= x < 1),
}
CHECKS = (*REAL_CHECKS, "batch-size")
AUTO = "auto"  # --batch-size auto (distill / assist): the largest micro-batch that fits, the global batch kept
# The groups an option may name (`group=`), in the order `--help` lists them; each command has those that apply.
GROUPS = (
    "inputs",  # what the command reads: the teacher or model, the data and how it is read, the languages
    "student",  # the model a training run trains: its shape, where it starts, what stays frozen
    "objective",  # what a training run optimises: its loss terms, their weights and settings
    "method",  # how a command that trains nothing makes its result: a protocol, trim's rules, export's format
    "schedule",  # the course of a training run: steps, batches, learning rate, seed
    "output",  # what is written where: the output directory, checkpoints, logs, probes, --resume, --overwrite
    "machine",  # what it runs on and how fast: device, precision, compile, workers, an inference batch size
)
# How a repeatable option becomes its tuple field: COMMA, each value may hold several, comma-separated
# (`--langs de,fr --langs zh`); EACH, each value is one item (`--input a --input b=c`).
COMMA = "comma"
EACH = "each"

_KEY = "mlminilm"  # the key of dataclasses.field metadata that holds a field's Spec


@dataclass(frozen=True)
class Cli:
    """How the command line spells, checks and shows one option."""

    help: str
    group: str  # one of GROUPS: where --help lists it
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
        if self.group not in GROUPS:
            raise ValueError(f"group must be one of {GROUPS} (got {self.group!r})")
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
    group: str,
    resume: str | None = None,
    replay: bool = True,  # noqa: A002
    default_factory: Any = MISSING,
    **cli: Any,
):
    """A config field that is a command-line option of `group` (GROUPS); `cli` takes the other fields of `Cli`
    (flag, short, min, max, check, choices, metavar, show_default, repeat, required, argument, cli_type). No
    default: a required field."""
    return _field(default, default_factory, Spec(Cli(help=help, group=group, **cli), resume, replay))


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


def help_order(cls) -> list[tuple[dataclasses.Field, Cli]]:
    """The option fields of `cls` in the order `--help` lists them: by group (GROUPS), then in field order."""
    return sorted(option_fields(cls), key=lambda item: GROUPS.index(item[1].group))  # sorted() is stable


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


# ------------------------------------------------------------------- what a declaration lets its field hold


@dataclass(frozen=True)
class Rule:
    """What one option's declaration lets its field hold: its `check`, its `choices`, or (an integer) the range
    of its `min` / `max` within mlminilm.config.limits' bounds. The one check of a declared value: the config's
    `__post_init__` applies it to the value it holds (`declared_problems`), the command line to the value it parses
    (commands/_params.py), in the same words."""

    hint: str  # the option as an error names it, as click does: '--lr'
    check: str | None = None
    choices: tuple[str, ...] | None = None
    least: int | None = None  # integers only (both set, or neither)
    most: int | None = None

    def refusal(self, value: Any) -> str | None:
        """Why the declaration refuses `value` (e.g. "-1.0 is not a positive finite number"), or None. None is
        always taken: an optional field's "not given"."""
        if value is None:
            return None
        if self.check == "batch-size":
            if value == AUTO:
                return None
            if not _integer(value):
                return f"{value!r} is neither a number of sequences nor auto"
            return None if 1 <= value <= BATCH_MAX else f"{value} is not in 1..{BATCH_MAX}"
        if self.check is not None:
            what, ok = REAL_CHECKS[self.check]
            if not _real(value):
                return f"{value!r} is not a number"
            return None if math.isfinite(value) and ok(value) else f"{value} is not {what}"
        if self.choices is not None:
            if value in self.choices:
                return None
            return f"{value!r} is not one of {', '.join(map(repr, self.choices))}"
        if self.least is not None:
            if not _integer(value):
                return f"{value!r} is not an integer"
            return None if self.least <= value <= self.most else f"{value} is not in {self.least}..{self.most}"
        return None

    def message(self, value: Any) -> str | None:
        """The refusal as the command line reports it (click's "Invalid value for '--lr': ..."), or None."""
        refusal = self.refusal(value)
        return None if refusal is None else f"Invalid value for {self.hint}: {refusal}"


def _real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _integer(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@functools.cache
def rules(cls) -> dict[str, Rule]:
    """The Rule of every option field of config class `cls` that declares something to check, by field name.
    An integer field (`int` or `int | None`, parsed as such) is bounded by its `min` / `max` and by
    mlminilm.config.limits.int_limits, as the command line bounds it."""
    hints = typing.get_type_hints(cls)
    found = {}
    for f, cli in option_fields(cls):
        hint = " / ".join(f"'{flag}'" for flag in (option_flag(f), cli.short) if flag)
        choices = None if cli.repeat else cli.choices
        least = most = None
        if cli.cli_type is None and not cli.repeat and not choices and _int_hint(hints[f.name]):
            least, most = int_limits(f.name)
            least = least if cli.min is None else max(cli.min, least)
            most = most if cli.max is None else min(cli.max, most)
        if cli.check or choices or least is not None:
            found[f.name] = Rule(hint, cli.check, choices, least, most)
    return found


def _int_hint(hint) -> bool:
    """`int` or `int | None`: what the command line parses as an integer."""
    return hint is int or set(typing.get_args(hint)) == {int, type(None)}


def declared_problems(config) -> list[str]:
    """One message for each field of `config` whose value its option's declaration refuses, in the words the
    command line uses for the same value: the Python API and the command line refuse the same values alike."""
    found = (rule.message(getattr(config, name)) for name, rule in rules(type(config)).items())
    return [message for message in found if message is not None]
