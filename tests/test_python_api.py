"""The public Python API: `from mlminilm import distill, DistillConfig` (and the same for every command), called
with a config or with keyword options, logging shown where nobody configured it, progress in a notebook."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest

import mlminilm
from helpers import REPO, distill_config

# Every command of the Python API and the config it takes, from the one list of commands (mlminilm.COMMANDS; the
# CLI is registered from it too, in commands/app.py).
EXPECTED = {name.replace("-", "_"): config_name for name, _, config_name in mlminilm.COMMANDS}


def python(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (fresh logging and import state), from the repository root."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "MLMINILM_NO_PROGRESS": "1"},
    )


def test_every_cli_command_has_its_function_and_config():
    from mlminilm import config
    from mlminilm.commands.app import COMMANDS

    assert sorted(EXPECTED) == sorted(name.replace("-", "_") for name, _ in COMMANDS)
    for name, config_name in EXPECTED.items():
        assert callable(getattr(mlminilm, name)), name
        assert getattr(mlminilm, config_name) is getattr(config, config_name)
        assert name in mlminilm.__all__ and config_name in mlminilm.__all__
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        mlminilm.nothing  # noqa: B018


def test_a_command_module_is_the_command_and_keeps_its_attributes():
    import mlminilm.distill as module
    from mlminilm import distill

    assert distill is module and callable(distill)  # whichever import came first, the name is the command
    assert callable(distill.run) and callable(distill.validate)


def test_import_mlminilm_loads_no_torch():
    found = python(
        "import sys, mlminilm; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'transformers', 'mlminilm'))))".replace("json.", "__import__('json').")
    )
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout) == ["mlminilm", "mlminilm.version"]


def test_distill_by_config_and_by_options_are_the_same_run(wp_teacher, wp_data, tmp_path):
    from mlminilm import DistillConfig, distill

    by_config = distill(distill_config(wp_teacher, wp_data, tmp_path / "a"))
    fields = {k: v for k, v in distill_config(wp_teacher, wp_data, tmp_path / "b").__dict__.items()}
    by_options = distill(**fields)
    replaced = distill(DistillConfig(**fields), out=tmp_path / "c")  # options replace a config's fields

    def losses(out):
        return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]

    assert by_config.student == tmp_path / "a" / "student" and by_options.student == tmp_path / "b" / "student"
    assert replaced.student == tmp_path / "c" / "student"
    assert losses(tmp_path / "a") == losses(tmp_path / "b") == losses(tmp_path / "c")
    assert len(losses(tmp_path / "a")) == 6


def test_wrong_arguments_are_refused(wp_teacher, wp_data, tmp_path):
    from mlminilm import distill, trim
    from mlminilm.errors import ConfigError

    with pytest.raises(TypeError, match="expected a DistillConfig, got str"):
        distill("runs/x")
    with pytest.raises(TypeError, match="expected a TrimConfig"):
        trim(distill_config(wp_teacher, wp_data, tmp_path / "x"))
    with pytest.raises(ConfigError, match="--max-steps"):
        distill(distill_config(wp_teacher, wp_data, tmp_path / "x"), max_steps=-1)
    with pytest.raises(TypeError, match="no_such_option"):
        distill(no_such_option=1)
    assert not (tmp_path / "x").exists()


LOGGING_RUN = """
    import logging, sys
    {configure}
    from mlminilm import distill
    sys.path.insert(0, "tests")
    from helpers import distill_config, prepare_data, save_tiny_teacher
    from pathlib import Path
    import tempfile
    tmp = Path(tempfile.mkdtemp())
    corpus = tmp / "corpus"; corpus.mkdir()
    (corpus / "en.txt").write_text("\\n".join(f"the dog {{i}} runs to the house and back" for i in range(40)))
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]")); tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator((corpus / "en.txt").read_text().splitlines(), trainers.WordPieceTrainer(
        vocab_size=60, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    from transformers import BertTokenizerFast
    tdir = tmp / "tok"; BertTokenizerFast(tokenizer_object=tok).save_pretrained(tdir)
    teacher = save_tiny_teacher(tdir, tmp / "teacher")
    data = prepare_data(teacher, corpus, tmp / "data")
    logging.getLogger("mlminilm").handlers.clear() if {clear} else None
    distill(distill_config(teacher, data, tmp / "run", max_steps=2))
    print("handlers:", len(logging.getLogger("mlminilm").handlers))
"""


def test_logs_show_when_nobody_configured_logging():
    # helpers.prepare_data calls the library directly (no logging set up); clearing mlminilm's handlers before
    # the API call leaves a process where nobody configured logging, as in a fresh notebook.
    found = python(LOGGING_RUN.format(configure="", clear=True))
    assert found.returncode == 0, found.stderr
    assert "handlers: 1" in found.stdout
    assert "student exported to" in found.stderr, found.stderr


def test_a_callers_own_logging_configuration_wins():
    found = python(
        LOGGING_RUN.format(
            configure="logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format='OWN %(message)s')",
            clear=True,
        )
    )
    assert found.returncode == 0, found.stderr
    assert "handlers: 0" in found.stdout  # no handler of ours added: records go to the caller's root handler
    assert "exported" not in found.stderr  # INFO is below the caller's WARNING


@pytest.mark.filterwarnings('ignore:install "ipywidgets":UserWarning')  # rich's hint, where ipywidgets is absent
def test_a_notebook_gets_rich_logs_and_progress(monkeypatch):
    from rich.console import Console
    from rich.logging import RichHandler

    from mlminilm import logging as mlog

    monkeypatch.delenv("MLMINILM_NO_PROGRESS", raising=False)
    monkeypatch.setattr(mlog, "stderr_console", Console(stderr=True, force_jupyter=True, force_terminal=False))
    monkeypatch.setattr(mlog, "_QUIET", mlog._QUIET)  # restored after, as are the handlers and the level
    logger = logging.getLogger("mlminilm")
    saved = logger.handlers[:], logger.level
    try:
        mlog.setup()
        assert mlog.progress_enabled()
        assert isinstance(logging.getLogger("mlminilm").handlers[0], RichHandler)
        with mlog.progress() as bar:
            assert type(bar).__name__ == "Progress"
        mlog.setup(quiet=True)
        assert not mlog.progress_enabled()
    finally:
        logger.handlers[:], _ = saved
        logger.setLevel(saved[1])
