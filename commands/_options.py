"""A command's options, built from its config class: every field declared with `mlminilm.config.options.option`
becomes a Typer parameter (its flag, help, range, check, choices... from the field's metadata, its default from
the field), listed in --help in the order its declarations give (`options.help_order`: by group, then field order),
and the command's own function receives the config they make.

    def main(cfg: DistillConfig, json_out: bool) -> None:
        '''Distil a teacher encoder ...'''   # the command's help
    command = build(DistillConfig, main)

Typer reads a function's parameters through `inspect.signature` and `typing.get_type_hints`
(typer.utils.get_params_from_function): the built command carries both, as `__signature__` and `__annotations__`.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from mlminilm.commands._params import CHECKS, bound_integer_options, choices, parser, value
from mlminilm.config.options import COMMA, Cli, Rule, help_order, option_fields, rules

JSON_HELP = "Print the result as one JSON document on stdout."
CONFIG_HELP = (
    "Read options from a TOML, YAML or JSON file (keys: this command's option names; a run.json replays its run); "
    "options on the command line win."
)
# Options that steer the command line itself and have no config field: the options file (--config), where the result
# goes (--json) and how much is logged (--verbose; --quiet is a config field: the run reads it too). They close
# every command's options.
CLI_ONLY = ("config", "json_out", "verbose")


def build(cls, main: Callable, *, json_help: str = JSON_HELP) -> Callable:
    """The command function of config class `cls`: its options in their declarations' order (by group, then field
    order), then --config, --json, --quiet, --verbose, calling `main(config, json_out)`; its help is `main`'s
    docstring."""
    fields = {f.name: (f, cli) for f, cli in help_order(cls)}
    names = [name for name in fields if name != "quiet"]
    hints = typing.get_type_hints(cls)
    checked = rules(cls)
    params = [_parameter(name, hints[name], *fields[name], checked.get(name)) for name in names]
    quiet = [_parameter("quiet", bool, *fields["quiet"], None)] if "quiet" in fields else []
    params += _closing(json_help, quiet)

    def command(**options):
        if options.get("config") is not None:
            # The entry point (commands/app.main) turns --config FILE into options before click parses; a value
            # here means something parsed the command line without it, and ignoring the file would be silent.
            from mlminilm.errors import ConfigError

            raise ConfigError("--config is read by the `mlminilm` command line; run the command through it")
        from mlminilm.errors import UsageError

        try:
            config = configure(cls, options)
        except UsageError as exc:  # an option without the one it needs: a usage error, as a missing option is
            # click's UsageError (exit 2), reached through typer, which vendors its own click from 0.2x on
            raise typer.BadParameter.__mro__[1](str(exc)) from None
        main(config, options["json_out"])

    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = main.__doc__
    command.__module__ = main.__module__
    command.config_class = cls  # for --config (commands/_config_file.py); Typer's wrapper keeps it
    bound_integer_options(command)
    return command


def _closing(json_help: str, quiet: list[inspect.Parameter]) -> list[inspect.Parameter]:
    """--config, --json, --quiet (a config field) and --verbose, the last options of every command. --config is
    listed for --help: the entry point has read it before click parses (commands/_config_file.expand)."""
    config = Annotated[Optional[Path], typer.Option("--config", metavar="FILE", help=CONFIG_HELP)]
    json_out = Annotated[bool, typer.Option("--json", help=json_help)]
    verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")]
    kind = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter("config", kind, default=None, annotation=config),
        inspect.Parameter("json_out", kind, default=False, annotation=json_out),
        *quiet,
        inspect.Parameter("verbose", kind, default=False, annotation=verbose),
    ]


def _parameter(name: str, hint, f: dataclasses.Field, cli: Cli, rule: Rule | None) -> inspect.Parameter:
    base, optional = _unoptional(hint)
    if cli.repeat:
        base = list[cli.cli_type or typing.get_args(base)[0]]
    elif cli.choices:
        base = choices(_camel(name), cli.choices)
    elif cli.cli_type is not None:
        base = cli.cli_type
    annotation = Annotated[Optional[base] if optional else base, _info(f, cli, rule, pair=base is bool)]
    default = f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
    if cli.required:
        default = ...
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _info(f: dataclasses.Field, cli: Cli, rule: Rule | None, pair: bool = False):
    """The option's typer.Option. A value its declaration refuses (`rule`) is refused by the rule's own check, as
    the config refuses it: a callback on a `check`ed value, else a parser (integers, choices), min / max and the
    choices' Enum kept for --help."""
    show_default = True if cli.show_default is None else cli.show_default
    if cli.argument:
        return typer.Argument(metavar=cli.metavar, show_default=show_default, help=cli.help)
    flag = cli.flag or "--" + f.name.replace("_", "-")
    if pair and "/" not in flag:
        # Every flag has its negation: one a --config file (or recipe) turns on can be turned off on the command
        # line, which wins over the file (`--no-freeze-embeddings`).
        flag = f"{flag}/--no-{flag[2:]}"
        if f.default is False and cli.show_default is None:
            show_default = False  # off by default: "[default: no-x]" would only repeat that
    decls = [flag, *([cli.short] if cli.short else [])]
    return typer.Option(
        *decls,
        help=cli.help,
        min=cli.min,
        max=cli.max,
        metavar=cli.metavar,
        show_default=show_default,
        callback=CHECKS[cli.check] if cli.check else None,
        parser=parser(rule) if rule is not None and not cli.check else None,
    )


def _unoptional(hint) -> tuple[object, bool]:
    """(X, True) for `X | None`, else (hint, False)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]), True
    return hint, False


def _camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


def configure(cls, options: dict):
    """Set up logging as --quiet / --verbose say, and build `cls` from a command's options: a choice as its plain
    string, a repeatable option as its tuple (COMMA: `--langs de,fr --langs zh` is three codes), any other as
    given."""
    from mlminilm import logging as mlog

    mlog.setup(quiet=options["quiet"], verbose=options["verbose"])
    repeats = {f.name: cli.repeat for f, cli in option_fields(cls) if cli.repeat}
    return cls(**{name: _field_value(x, repeats.get(name)) for name, x in options.items() if name not in CLI_ONLY})


def _field_value(x, repeat: str | None):
    if repeat == COMMA:
        return split_commas(x)
    if repeat:
        return tuple(str(item) if isinstance(item, Path) else item for item in x)
    return value(x)


def split_commas(items: list[str]) -> tuple[str, ...]:
    """`["de,fr", "zh"]` -> `("de", "fr", "zh")`: the items of a repeatable option whose values may list several."""
    return tuple(code.strip() for item in items for code in item.split(",") if code.strip())
