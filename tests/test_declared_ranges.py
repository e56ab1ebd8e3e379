"""One declaration, one check: every value an option's declaration rules out (an integer's range, a float's check,
a choice) is refused by the Python API (the config's `__post_init__`, a ConfigError) and by the command line (a
usage error, exit 2) alike, in the same words (mlminilm.config.options.Rule). Read from the declarations, so a new
option, or a changed bound, is covered without a word here."""

from __future__ import annotations

import pytest

from helpers import assert_usage_error, command_configs, run_main
from mlminilm import config
from mlminilm.config.limits import BATCH_MAX
from mlminilm.config.options import field_of, option_flag, rules
from mlminilm.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# command -> valid required values for the Python API, the same on the command line
REQUIRED = {
    "prepare": ({"teacher": "t", "inputs": ("x",), "out": "o"}, ["--teacher", "t", "--input", "x"]),
    "distill": ({"teacher": "t", "out": "o"}, ["--teacher", "t"]),
    "assist": ({"teacher": "t", "out": "o"}, ["--teacher", "t"]),
    "finetune": ({"model": "m", "train": "t", "out": "o"}, ["--model", "m", "--train", "t"]),
    "eval-xnli": ({"model": "m", "data": "d"}, ["--model", "m", "--data", "d"]),
    "eval-mlqa": ({"model": "m", "data": "d"}, ["--model", "m", "--data", "d"]),
    "eval-tatoeba": ({"model": "m", "data": "d"}, ["--model", "m", "--data", "d"]),
    "eval-retrieval": ({"model": "m", "data": "d"}, ["--model", "m", "--data", "d"]),
    "trim": ({"model": "m", "out": "o", "data": "d"}, ["--model", "m", "--data", "d"]),
    "compare": ({"reports": ("a", "b")}, ["a", "b"]),
    "export": ({"model": "m", "out": "o"}, ["--model", "m"]),
    "retention": ({"teacher": "t", "data": "d"}, ["--teacher", "t", "--data", "d"]),
}
# command -> (its config class, from the one list of commands (mlminilm.COMMANDS), and its REQUIRED values)
CONFIG_OF = command_configs()
COMMANDS = {command: (CONFIG_OF[command], *values) for command, values in REQUIRED.items()}
# Values each named check refuses, on either side of what it takes.
REFUSED_BY_CHECK = {
    "positive": (0.0, float("inf")),
    "non-negative": (-1.0, float("nan")),
    "alpha": (0.0, 1.5),
    "dropout": (-0.5, 1.0),
    "batch-size": (0, BATCH_MAX + 1),
}


def refused(rule) -> tuple:
    """Values just outside what the rule takes."""
    if rule.check is not None:
        return REFUSED_BY_CHECK[rule.check]
    if rule.choices is not None:
        return ("not-a-choice",)
    return (rule.least - 1, rule.most + 1)


CASES = [(command, name) for command, (cls, _, _) in COMMANDS.items() for name in rules(cls)]


def test_every_command_and_every_kind_of_rule_is_covered():
    assert {command: cls for command, (cls, _, _) in COMMANDS.items()} == CONFIG_OF
    kinds = {
        (r.check, r.choices is not None, r.least is not None) for cls in CONFIG_OF.values() for r in rules(cls).values()
    }
    assert {check for check, _, _ in kinds} == {None, *REFUSED_BY_CHECK}
    assert (None, True, False) in kinds and (None, False, True) in kinds


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_required_values_alone_pass(command):
    cls, kwargs, _ = COMMANDS[command]
    cls(**kwargs)


@pytest.mark.parametrize("command, name", CASES, ids=[f"{c} {n}" for c, n in CASES])
def test_python_api_and_command_line_refuse_the_same_values_alike(command, name, tmp_path, monkeypatch, capsys):
    cls, kwargs, args = COMMANDS[command]
    rule = rules(cls)[name]
    flag = option_flag(field_of(cls, name))
    out = [] if command == "compare" else ["--out", str(tmp_path / "out")]
    for bad in refused(rule):
        message = rule.message(bad)
        assert message is not None and flag in message
        with pytest.raises(ConfigError) as info:
            cls(**{**kwargs, name: bad})
        assert message in str(info.value)
        result = run_main(monkeypatch, capsys, command, *args, *out, flag, str(bad))
        assert_usage_error(result, flag)
        assert message in " ".join(result[2].split()), result[2]
    assert not (tmp_path / "out").exists()


def test_a_range_is_checked_whatever_else_the_options_say():
    """The API used to check --relation-heads only under minilm-v2 (0 passed); the command line, always."""
    with pytest.raises(ConfigError, match="'--relation-heads': 0 is not in 1"):
        config.DistillConfig(teacher="t", out="o", relation_heads=0)
