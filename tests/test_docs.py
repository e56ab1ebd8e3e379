"""The documentation holds to what it promises (CONTRIBUTING.md "Documentation"): a short README with the two
set-up commands CI runs, no path of one machine in any doc, links between the docs that lead somewhere, and an
exit-code table whose examples exit as it says."""

from __future__ import annotations

import re
import subprocess

import pytest
from typer.testing import CliRunner

from helpers import REPO

# Absolute paths of one machine (a home, a scratch or work folder, a mount). `../shared/data` and `~/.cache` are
# relative to the repository or the user and stay.
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|tmp|home|root|Users|mnt|scratch|data|opt|srv|var)/")
# The one absolute path a doc may name: scripts/gpu_check.py's default --work, the same on every machine.
DEFAULTS = ("/tmp/mlminilm-gpu-check",)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def markdown_files() -> list:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # no git (an unpacked archive): every doc in the tree
        listed = [str(p.relative_to(REPO)) for p in REPO.rglob("*.md") if ".venv" not in p.parts]
    docs = {REPO / name for name in listed} | {REPO / "README.md", REPO / "CONTRIBUTING.md"}
    docs |= set((REPO / "docs").rglob("*.md"))
    return sorted(p for p in docs if p.exists())


def outside_code(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    lines, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            lines.append(line)
    return lines


def anchors(path) -> set[str]:
    """GitHub's heading anchors of a Markdown file (lowercase, punctuation dropped, spaces as hyphens, -N for a
    repeated heading)."""
    seen: dict[str, int] = {}
    for line in outside_code(path.read_text(encoding="utf-8")):
        match = re.match(r"#{1,6} (.+)", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            if count:
                seen[f"{slug}-{count}"] = 1
    return set(seen)


def test_the_readme_is_short_and_its_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    quickstart = readme.split("## Quickstart", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in quickstart.splitlines()] == ["make demo", "make test"]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    # The README's test command first, then the slow tests it skips (CONTRIBUTING.md "Tests and markers").
    assert [line for line in ci.splitlines() if line and not line.startswith(("#", "set ", "cd "))] == [
        "make test",
        "make test-slow",
    ]


def test_the_readme_installs_from_a_clone():
    """mlminilm is not on PyPI (issue 40 item 8): the README's install names `make venv` (a Makefile target) and
    `pip install -e .`, and nowhere says `pip install mlminilm`, which would look for it there."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    install = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    assert "`make venv`" in install and "`pip install -e .`" in install, install
    assert re.search(r"^venv:", (REPO / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
    assert not re.search(r"pip install ['\"]?mlminilm", readme)


def test_no_doc_names_a_path_of_one_machine():
    gpu_check = (REPO / "scripts" / "gpu_check.py").read_text(encoding="utf-8")
    assert all(f'Path("{default}")' in gpu_check for default in DEFAULTS)  # the allowed default is still the code's
    found = []
    for path in markdown_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for default in DEFAULTS:
                line = line.replace(default, "")
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "paths of one machine (use paths relative to the repository, or a placeholder):\n" + "\n".join(
        found
    )


def test_links_between_the_docs_lead_somewhere():
    broken = []
    for path in markdown_files():
        for line in outside_code(path.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                file, _, anchor = target.partition("#")
                dest = (path.parent / file).resolve() if file else path
                if not dest.exists():
                    broken.append(f"{path.relative_to(REPO)}: {target} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{path.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def exit_code_examples() -> list[str]:
    """The bad option values the exit-code table gives for code 2."""
    guide = (REPO / "docs" / "guides" / "reliability.md").read_text(encoding="utf-8")
    row = next(line for line in guide.splitlines() if line.startswith("| 2 |"))
    values = re.findall(r"`(--[\w-]+ \S+)`", row.split("a bad option value (", 1)[1].split(")", 1)[0])
    assert len(values) >= 4
    return values


@pytest.mark.parametrize("value", exit_code_examples())
def test_the_exit_code_tables_bad_values_are_usage_errors(value, tmp_path):
    from mlminilm.commands.app import app

    args = ["distill", "--teacher", str(tmp_path / "none"), "--out", str(tmp_path / "out"), *value.split()]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (value, result.output)


def test_max_steps_0_is_no_bad_value(tmp_path):
    """`distill --max-steps 0` exports the untrained start (the distill guide), so the table must not list it."""
    from mlminilm.commands.app import app
    from mlminilm.errors import MlminilmError

    args = ["distill", "--teacher", str(tmp_path / "none"), "--out", str(tmp_path / "out"), "--max-steps", "0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 2 and isinstance(result.exception, MlminilmError)  # parsed; the teacher is missing
    assert "--max-steps 0" not in exit_code_examples()
