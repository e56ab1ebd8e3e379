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

from mlminilm import config
from mlminilm.commands._options import CLI_ONLY, build
from mlminilm.commands.app import COMMANDS, app
from mlminilm.config.options import option_flag, spec

CONFIG_OF = {
    "prepare": config.PrepareConfig,
    "distill": config.DistillConfig,
    "assist": config.AssistConfig,
    "finetune": config.FinetuneConfig,
    "eval-xnli": config.EvalXnliConfig,
    "eval-mlqa": config.EvalMlqaConfig,
    "eval-tatoeba": config.EvalTatoebaConfig,
    "eval-retrieval": config.EvalRetrievalConfig,
    "trim": config.TrimConfig,
    "compare": config.CompareConfig,
    "retention": config.RetentionConfig,
    "export": config.ExportConfig,
}
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


# What defined a run before the rules were declared on the fields (the hand-written RESUME_KEYS of 0.1.0): the
# declarations must give exactly these.
DISTILL_RUN = {
    "teacher",
    "data",
    "layers",
    "hidden",
    "heads",
    "intermediate",
    "init",
    "objective",
    "relation_heads",
    "teacher_layer",
    "alpha",
    "batch_size",
    "grad_accum",
    "global_batch",
    "lr",
    "warmup",
    "seed",
    "max_steps",
    "freeze_embeddings",
    "init_layers",
    "hidden_loss_weight",
    "hidden_distance",
    "embedding_loss_weight",
    "relation_loss_weight",
    "parallel",
    "parallel_loss_weight",
    "parallel_prefix",
    "parallel_max_length",
    "parallel_contrastive_weight",
    "parallel_temperature",
    "passages",
    "passage_embedding_weight",
    "passage_loss_weight",
    "passage_temperature",
    "passage_max_length",
    "passage_neighbours",
    "passage_hidden_weight",
    "freeze_layers",
}
FINETUNE_RUN = {
    "model",
    "task",
    "train",
    "dev",
    "max_seq_len",
    "doc_stride",
    "max_query_length",
    "epochs",
    "max_steps",
    "batch_size",
    "grad_accum",
    "lr",
    "warmup",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_eps",
    "seed",
    "save_every",
    "group_by_length",
    "max_grad_norm",
    "freeze_embeddings",
}


def test_resume_keys_are_the_training_commands_run_defining_fields():
    import mlminilm.distill
    import mlminilm.finetune
    from mlminilm.training.run_dir import RESUME_CHANGEABLE

    assert set(mlminilm.distill.RESUME_KEYS) == DISTILL_RUN
    assert set(config.resume_keys(config.AssistConfig)) == DISTILL_RUN  # its stages are distills
    assert set(mlminilm.finetune.RESUME_KEYS) == FINETUNE_RUN
    for cls in (config.DistillConfig, config.AssistConfig, config.FinetuneConfig):
        assert set(config.resume_changeable(cls)) == set(RESUME_CHANGEABLE) == {"lr", "warmup"}


@pytest.mark.parametrize("name", sorted(CONFIG_OF))
def test_a_replayed_run_record_leaves_where_and_how_to_the_command_line(name):
    fields = {f.name for f in dataclasses.fields(CONFIG_OF[name])}
    expected = {"out", "resume", "overwrite", "quiet"} & fields
    assert set(config.replay_skips(CONFIG_OF[name])) == expected


def test_an_order_naming_no_option_is_refused():
    with pytest.raises(ValueError, match="order names no option field: adam_beta1"):
        build(config.DistillConfig, lambda cfg, json_out: None, order=("teacher", "adam_beta1"))


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
