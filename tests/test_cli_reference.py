"""docs/CLI.md is the command reference as the code gives it: regenerated in memory from the Typer app (every
option's declaration), it must equal the committed file."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from helpers import REPO


def cli_reference():
    """scripts/cli_reference.py as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_current():
    module = cli_reference()
    committed = module.TARGET.read_text(encoding="utf-8")
    assert committed == module.render(), f"docs/CLI.md is stale: run `{module.REGENERATE}` and commit it"


def test_the_reference_covers_every_command_and_option():
    from typer.main import get_command

    from mlminilm.commands.app import COMMANDS, app

    text = cli_reference().render()
    root = get_command(app)
    for name, _ in COMMANDS:
        assert f"\n## mlminilm {name}\n" in text, name
        section = text.split(f"\n## mlminilm {name}\n", 1)[1].split("\n## ", 1)[0]
        for param in root.commands[name].params:
            if param.param_type_name == "argument":
                assert f"`{param.metavar}" in section, (name, param.name)
                continue
            for flag in param.opts:
                assert f"`{flag}" in section or f", {flag}" in section or f"/ {flag}" in section, (name, flag)


def test_the_rendering_ignores_the_terminal(tmp_path):
    """No width, colour or home directory changes a byte: the same file from a narrow dumb terminal."""
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "20", "TERM": "dumb", "NO_COLOR": "1", "HOME": str(tmp_path)}
    out = tmp_path / "CLI.md"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "cli_reference.py"), "--out", str(out)],
        check=True,
        env=env,
        cwd=tmp_path,
    )
    assert out.read_text(encoding="utf-8") == cli_reference().render()


def test_check_mode_names_the_command_to_run(tmp_path, capsys):
    module = cli_reference()
    stale = tmp_path / "CLI.md"
    stale.write_text("# old\n", encoding="utf-8")
    assert module.main(["--check", "--out", str(stale)]) == 1
    assert "python scripts/cli_reference.py" in capsys.readouterr().err
    assert module.main(["--out", str(stale)]) == 0 and module.main(["--check", "--out", str(stale)]) == 0
