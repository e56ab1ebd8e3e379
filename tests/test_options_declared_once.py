"""Each command-line option is declared once, on its config field (mlminilm/config/options.py), and the command line
is built from those declarations (commands/_options.py): every option of every command is exactly one field of its
config and back, --help shows the config's defaults, and what --resume and a replayed run record do with a field is
read from the same declarations."""

from __future__ import annotations

import dataclasses
import re

import pytest
import typer
import typer.main

from helpers import command_configs
from mlminilm import config
from mlminilm.commands._options import CLI_ONLY, build
from mlminilm.commands.app import COMMANDS, app
from mlminilm.config.options import GROUPS, option, option_fields, option_flag, spec

# command -> its config class, from the one list of commands (mlminilm.COMMANDS)
CONFIG_OF = command_configs()
ADAM = {"adam_beta1", "adam_beta2", "adam_eps"}
# The config fields that are no option of their command (declared with `setting` or `redeclare(..., cli=False)`):
# AdamW's betas and epsilon (fixed by the recipes; the Python API may set them), and assist's --max-steps (each
# stage has its own steps) and --freeze-embeddings (its assistant starts from random weights).
NOT_OPTIONS = {
    "distill": ADAM,
    "assist": ADAM | {"max_steps", "freeze_embeddings"},
    "finetune": ADAM,
}


def click_command(name: str):
    return typer.main.get_command(app).commands[name]


def config_params(name: str) -> list:
    """The command's parameters that stand for config fields (all but --json and --verbose)."""
    return [p for p in click_command(name).params if p.name not in CLI_ONLY]


def test_every_command_is_checked():
    assert sorted(CONFIG_OF) == sorted(name for name, _ in COMMANDS)


@pytest.mark.parametrize("name", sorted(CONFIG_OF))
def test_every_option_is_one_config_field_and_back(name):
    cls = CONFIG_OF[name]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    params = config_params(name)
    names = [p.name for p in params]
    assert len(names) == len(set(names)), f"{name}: an option given twice"
    assert set(names) <= set(fields), f"{name}: options with no field of {cls.__name__}: {set(names) - set(fields)}"
    assert set(fields) - set(names) == NOT_OPTIONS.get(name, set()), f"{name}: config fields that are no option"
    for param in params:
        f = fields[param.name]
        assert spec(f).cli is not None, f"{cls.__name__}.{f.name} is an option but not declared as one"
        if param.param_type_name == "option":
            assert param.opts[0] == option_flag(f), (name, param.opts, f.name)
    for missing in NOT_OPTIONS.get(name, ()):
        assert spec(fields[missing]).cli is None, f"{cls.__name__}.{missing}: declared as an option, not shown"
    assert [p.name for p in click_command(name).params][-3:] == ["json_out", "quiet", "verbose"]


def _shown_default(f: dataclasses.Field, param) -> str | None:
    """What --help must show as the default of the option of field `f`: the config's default, or the declared text
    for a default decided at run time; None where nothing is shown (no value, a flag that is off, required)."""
    cli = spec(f).cli
    if isinstance(cli.show_default, str):
        return f"({cli.show_default})"
    if cli.required or cli.show_default is False or f.default is dataclasses.MISSING:
        return None
    if f.default is None or f.default is False or f.default in ((), ""):  # `is`: 0 == False
        return None
    if f.default is True:
        return param.opts[0].removeprefix("--")  # a --x/--no-x pair shows the side that is on
    return str(f.default)


@pytest.mark.parametrize("name", sorted(CONFIG_OF))
def test_help_shows_the_config_default(name):
    command = click_command(name)
    context = typer.Context(command, info_name=name)
    fields = {f.name: f for f in dataclasses.fields(CONFIG_OF[name])}
    shown_any = 0
    for param in config_params(name):
        _, text = param.get_help_record(context)
        expected = _shown_default(fields[param.name], param)
        found = re.search(r"\[default: ([^;\]]*)", text)
        if expected is None:
            assert found is None, (name, param.name, text)
            continue
        assert found and found.group(1) == expected, f"{name} {param.opts[0]}: {text!r} should show {expected!r}"
        shown_any += 1
    assert shown_any >= 1 or name == "compare"  # compare's options all default to "not given"


@pytest.mark.parametrize("name", sorted(CONFIG_OF))
def test_choices_and_help_come_from_the_declaration(name):
    command = click_command(name)
    context = typer.Context(command, info_name=name)
    fields = {f.name: f for f in dataclasses.fields(CONFIG_OF[name])}
    for param in config_params(name):
        cli = spec(fields[param.name]).cli
        opts, text = param.get_help_record(context)
        assert text.startswith(cli.help), (name, param.name)
        if cli.choices:
            assert "|".join(cli.choices) in opts, (name, param.name, opts)


def test_init_help_names_the_default_teacher_layers():
    """--init teacher starts from the layers --init-layers picks; the help names its default rule."""
    from mlminilm.config import DEFAULT_INIT_LAYERS

    for name in ("distill", "assist"):
        init = next(p for p in click_command(name).params if p.name == "init")
        assert DEFAULT_INIT_LAYERS in init.help and "every k-th" not in init.help


# What the groups say of a training run: its inputs, its student and its objective define it; where its results go
# and what it runs on never do. Not compared on --resume (as before the groups): dropout, and assist's --force, which
# lets an assistant be used where its rule says not to and changes no stage's run.
RUN_DEFINING_GROUPS = ("inputs", "student", "objective")
NOT_COMPARED = {"dropout", "force"}
NEVER_RUN_DEFINING_GROUPS = ("output", "machine")


def declared_run_fields(cls, *rules: str) -> set[str]:
    """The fields of `cls` whose declaration gives one of `rules` (FIXED, CHANGEABLE) to --resume."""
    return {f.name for f in dataclasses.fields(cls) if spec(f).resume in rules}


def test_resume_keys_are_the_training_commands_run_defining_fields():
    import mlminilm.distill
    import mlminilm.finetune
    from mlminilm.config.options import CHANGEABLE, FIXED
    from mlminilm.training.run_dir import RESUME_CHANGEABLE

    distill_run = declared_run_fields(config.DistillConfig, FIXED, CHANGEABLE)
    assert set(mlminilm.distill.RESUME_KEYS) == distill_run
    assert declared_run_fields(config.AssistConfig, FIXED, CHANGEABLE) == distill_run  # its stages are distills
    assert set(mlminilm.finetune.RESUME_KEYS) == declared_run_fields(config.FinetuneConfig, FIXED, CHANGEABLE)
    assert set(RESUME_CHANGEABLE) == {"lr", "warmup"}
    for cls in (config.DistillConfig, config.AssistConfig, config.FinetuneConfig):
        assert set(config.resume_changeable(cls)) == declared_run_fields(cls, CHANGEABLE) == set(RESUME_CHANGEABLE)
        for f, cli in option_fields(cls):
            defines = spec(f).resume is not None
            if cli.group in RUN_DEFINING_GROUPS and f.name not in NOT_COMPARED:
                assert defines, f"{cls.__name__}.{f.name} ({cli.group}) must say what --resume does with it"
            if cli.group in NEVER_RUN_DEFINING_GROUPS:
                assert not defines, f"{cls.__name__}.{f.name} ({cli.group}) cannot define the run"


@pytest.mark.parametrize("name", sorted(CONFIG_OF))
def test_a_replayed_run_record_leaves_where_and_how_to_the_command_line(name):
    fields = {f.name for f in dataclasses.fields(CONFIG_OF[name])}
    expected = {"out", "resume", "overwrite", "quiet"} & fields
    assert set(config.replay_skips(CONFIG_OF[name])) == expected


@pytest.mark.parametrize("name", sorted(CONFIG_OF))
def test_help_lists_the_options_by_declared_group_then_field_order(name):
    """No list of names beside the declarations: --help lists a command's options group by group (GROUPS' order),
    within a group in field order; --quiet closes them with the command line's own options."""
    fields = [f.name for f in dataclasses.fields(CONFIG_OF[name])]
    groups = {f.name: cli.group for f, cli in option_fields(CONFIG_OF[name])}
    shown = [p.name for p in config_params(name) if p.name != "quiet"]
    assert shown == sorted(shown, key=lambda n: (GROUPS.index(groups[n]), fields.index(n)))


def test_passages_are_listed_beside_parallel():
    shown = [p.name for p in config_params("distill")]
    # the inputs: each file, then how it is read (between --parallel and --passages: the pairs' prefix and length)
    assert shown[: shown.index("passages") + 1] == [
        "teacher",
        "data",
        "alpha",
        "parallel",
        "parallel_prefix",
        "parallel_max_length",
        "passages",
    ]


def test_no_command_keeps_an_order_by_hand():
    import importlib
    import inspect

    for _, module in COMMANDS:
        assert not hasattr(importlib.import_module(f"mlminilm.commands.{module}"), "ORDER"), module
    assert "order" not in inspect.signature(build).parameters


def test_an_option_names_one_of_the_groups():
    with pytest.raises(ValueError, match="group must be one of"):
        option(1, group="misc", help="An option of no group.")
    with pytest.raises(TypeError, match="group"):
        option(1, help="An option that names no group.")


def test_a_built_command_hands_its_main_the_config(monkeypatch):
    from mlminilm import logging as mlog

    monkeypatch.setattr(mlog, "setup", lambda **kw: None)  # this process's logging stays as the tests set it
    seen = []
    command = build(config.CompareConfig, lambda cfg, json_out: seen.append((cfg, json_out)))
    command(
        reports=["a", "b"],
        baseline=None,
        metric=None,
        out=None,
        overwrite=False,
        json_out=True,
        quiet=True,
        verbose=False,
    )
    assert seen == [(config.CompareConfig(reports=("a", "b"), quiet=True), True)]


def test_every_check_a_field_may_name_has_its_callback():
    from mlminilm.commands import _params
    from mlminilm.config import options

    assert set(_params.CHECKS) == set(options.CHECKS)
