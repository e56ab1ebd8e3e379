"""The CLI surface: help, version, and option defaults that never drift from the config dataclasses."""

from __future__ import annotations

import dataclasses

import pytest
import typer.main

from helpers import cli, command_configs
from mlminilm import __version__
from mlminilm.commands.app import COMMANDS, app


def test_help_lists_the_registered_commands_and_version():
    proc = cli("--help")
    assert proc.returncode == 0
    for name, _ in COMMANDS:
        assert name in proc.stdout
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"mlminilm {__version__}"


@pytest.mark.parametrize("name", [n for n, _ in COMMANDS])
def test_option_defaults_equal_config_defaults(name):
    cls = command_configs()[name]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    command = typer.main.get_command(app).commands[name]
    checked = 0
    for param in command.params:
        field = fields.get(param.name)
        if field is None or field.default is dataclasses.MISSING or param.required:
            continue  # a required option has no default (its field's default is the Python API's "missing")
        expected = field.default
        got = param.default
        if isinstance(expected, tuple):
            got = tuple(got or ())
        if hasattr(expected, "__fspath__"):
            expected, got = str(expected), str(got)
        assert got == expected, (
            f"{name} --{param.name}: option default {got!r} != {cls.__name__}.{param.name} {expected!r}"
        )
        checked += 1
    assert checked >= 3


def test_bad_option_value_exits_2_with_usage():
    proc = cli("distill", "--max-steps", "many")
    assert proc.returncode == 2 and "Usage" in proc.stderr


def test_config_error_names_the_flag(tmp_path):
    # Values each fine alone but not together: the config's check (exit 1), all problems at once.
    proc = cli(
        "distill",
        "--teacher",
        "x",
        "--data",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--hidden",
        "30",
        "--heads",
        "4",
        "--objective",
        "minilm-v2",
        "--relation-heads",
        "7",
    )
    assert proc.returncode == 1
    assert "--heads (4) must divide --hidden (30)" in proc.stderr and "--relation-heads (7)" in proc.stderr


# ------------------------------------------------------------------------------------------ help and shell


@pytest.mark.parametrize("name", [n for n, _ in COMMANDS])
def test_help_ends_with_examples_and_marks_required_options(name, monkeypatch, capsys):
    from helpers import run_main

    code, out, err = run_main(monkeypatch, capsys, name, "--help")
    assert code == 0, err
    lines = [l.strip() for l in out.rstrip().splitlines()]
    start = max(i for i, l in enumerate(lines) if "Examples:" in l)
    tail = lines[start + 1 :]
    assert len(tail) >= 2 and all(l.startswith(f"mlminilm {name} ") for l in tail), out
    command = typer.main.get_command(app).commands[name]
    for param in command.params:
        if getattr(param, "required", False):
            assert f"{param.opts[0]} " in out and "[required]" in out, (param.name, out)


@pytest.mark.parametrize("name", [n for n, _ in COMMANDS])
def test_help_lists_config(name, monkeypatch, capsys):
    """Every command takes --config FILE (read before click parses): its --help says so."""
    from helpers import run_main

    code, out, err = run_main(monkeypatch, capsys, name, "--help")
    assert code == 0, err
    assert "--config FILE" in out and "TOML, YAML or JSON" in out, out


def test_a_config_value_reaching_the_command_is_refused(monkeypatch):
    """Parsed without the entry point (which reads --config first), the file would be ignored: refused instead."""
    from typer.testing import CliRunner

    runner = CliRunner()
    result = runner.invoke(app, ["compare", "a", "b", "--config", "x.toml"])
    assert result.exit_code != 0 and "--config is read by the `mlminilm` command line" in str(result.exception)


def test_choices_are_listed_in_help(monkeypatch, capsys):
    from helpers import run_main

    _, out, _ = run_main(monkeypatch, capsys, "distill", "--help")
    for listed in ("auto|fp32|bf16", "minilm|minilm-v2", "random|teacher", "auto|cpu|cuda"):
        assert listed in out
    _, out, _ = run_main(monkeypatch, capsys, "assist", "--help")
    warmup = out[out.index("--warmup") : out.index("--weight-decay")]
    assert "--max-steps" not in warmup and "--assistant-steps" in warmup


def test_shell_completion(monkeypatch, capsys):
    from helpers import run_main

    # The shell named, not detected: detection reads this process's ancestors, which differ between a terminal,
    # CI and a pytest-xdist worker (typer's own switch for tests turns it off).
    no_detection = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    code, out, err = run_main(monkeypatch, capsys, "--show-completion", "bash", env=no_detection)
    assert code == 0 and "_MLMINILM_COMPLETE=complete_bash" in out and "complete " in out, (code, out, err)
    _, out, _ = run_main(monkeypatch, capsys, "--help")
    assert "--install-completion" in out
    # The shell asks the program for candidates: the choices of --precision.
    code, out, _ = run_main(
        monkeypatch,
        capsys,
        env={"_MLMINILM_COMPLETE": "complete_bash", "COMP_WORDS": "mlminilm distill --precision ", "COMP_CWORD": "3"},
    )
    assert code == 0 and out.split() == ["auto", "fp32", "bf16", "fp16"]


# ------------------------------------------------------------------------------------------- dependencies


def test_dependencies_datasets_is_an_extra_and_evaluate_is_gone():
    import ast

    import tomllib

    from helpers import REPO

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("=")[0].split(";")[0].strip() for d in project["dependencies"]]
    assert "datasets" not in names and "evaluate" not in names
    assert {"sentencepiece", "protobuf"} <= set(names)
    assert any(d.startswith("datasets") for d in project["optional-dependencies"]["hub"])
    # No module imports evaluate; datasets only inside functions (hf: inputs), never at import time.
    for path in [*(REPO / "mlminilm").rglob("*.py"), *(REPO / "commands").rglob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(m.split(".")[0] == "evaluate" for m in modules), path
                if any(m.split(".")[0] == "datasets" for m in modules):
                    assert node.col_offset > 0, f"{path}: datasets imported at module level"
    from mlminilm.metrics import accuracy, mlqa

    assert not hasattr(mlqa, "MLQA") and not hasattr(accuracy, "Accuracy")


@pytest.mark.realdata
def test_teacher_with_only_a_sentencepiece_model_prepares(shared_data, tmp_path):
    """sentencepiece (with protobuf) earns its place: a teacher directory whose tokenizer is only
    sentencepiece.bpe.model (no tokenizer.json) prepares data with exactly XLM-R's vocabulary."""
    import json
    import shutil

    from helpers import prepare_data

    source = shared_data / "tokenizers" / "xlm-roberta"
    teacher = tmp_path / "teacher"
    teacher.mkdir()
    shutil.copy(source / "sentencepiece.bpe.model", teacher)
    (teacher / "config.json").write_text(
        json.dumps(
            {
                "model_type": "xlm-roberta",
                "architectures": ["XLMRobertaModel"],
                "vocab_size": 250002,
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 64,
                "max_position_embeddings": 514,
                "pad_token_id": 1,
                "bos_token_id": 0,
                "eos_token_id": 2,
                "type_vocab_size": 1,
            }
        )
    )
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "de.txt").write_text(
        "Der Hund läuft jeden Morgen durch den Park.\nDas Haus ist groß.\n", encoding="utf-8"
    )
    (corpus / "zh.txt").write_text("我们每天早上去公园。\n", encoding="utf-8")
    out = prepare_data(teacher, corpus, tmp_path / "data", seq_len=16)
    manifest = json.loads((out / "manifest.json").read_text())
    reference = prepare_data(source, corpus, tmp_path / "reference", seq_len=16)
    expected = json.loads((reference / "manifest.json").read_text())
    assert manifest["tokenizer"]["vocab_size"] == 250002
    assert manifest["tokenizer"]["vocab_sha256"] == expected["tokenizer"]["vocab_sha256"]
    for lang in ("de", "zh"):
        name = f"shards/{lang}-00000.bin"
        assert (out / name).read_bytes() == (reference / name).read_bytes()
