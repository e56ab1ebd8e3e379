"""The CLI surface: help, version, and option defaults that never drift from the config dataclasses."""

from __future__ import annotations

import dataclasses

import pytest
import typer.main

from helpers import cli
from mlminilm import __version__, config
from mlminilm.commands.app import COMMANDS, app

CONFIG_OF = {
    "prepare": "PrepareConfig",
    "distill": "DistillConfig",
    "assist": "AssistConfig",
    "finetune": "FinetuneConfig",
    "eval-xnli": "EvalXnliConfig",
    "eval-mlqa": "EvalMlqaConfig",
    "eval-tatoeba": "EvalTatoebaConfig",
}


def test_help_lists_the_registered_commands_and_version():
    proc = cli("--help")
    assert proc.returncode == 0
    for name, _ in COMMANDS:
        assert name in proc.stdout
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"mlminilm {__version__}"


@pytest.mark.parametrize("name", [n for n, _ in COMMANDS])
def test_option_defaults_equal_config_defaults(name):
    cls = getattr(config, CONFIG_OF[name])
    fields = {f.name: f for f in dataclasses.fields(cls)}
    command = typer.main.get_command(app).commands[name]
    checked = 0
    for param in command.params:
        field = fields.get(param.name)
        if field is None or field.default is dataclasses.MISSING:
            continue
        expected = field.default
        got = param.default
        if isinstance(expected, tuple):
            got = tuple(got or ())
        if hasattr(expected, "__fspath__"):
            expected, got = str(expected), str(got)
        assert got == expected, f"{name} --{param.name}: option default {got!r} != {cls.__name__}.{param.name} {expected!r}"
        checked += 1
    assert checked >= 3


def test_bad_option_value_exits_2_with_usage():
    proc = cli("distill", "--max-steps", "many")
    assert proc.returncode == 2 and "Usage" in proc.stderr


def test_config_error_names_the_flag(tmp_path):
    proc = cli("distill", "--teacher", "x", "--data", str(tmp_path), "--out", str(tmp_path / "o"), "--max-steps", "0",
               "--alpha", "2")
    assert proc.returncode == 1
    assert "--max-steps must be at least 1" in proc.stderr and "--alpha" in proc.stderr
