"""The benchmark and helper scripts import mlminilm inside their functions (so that `--help` is fast), where no
test run reaches until the script itself runs: a rename in the library would break them silently. Every
`from mlminilm... import name` they hold must name something that exists."""

from __future__ import annotations

import ast
import importlib

import pytest

from helpers import REPO

SCRIPTS = sorted([*REPO.glob("benchmarks/*.py"), *REPO.glob("scripts/*.py")])


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mlminilm":
            yield node.lineno, node.module, [a.name for a in node.names]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_library_name_a_script_imports_exists(path):
    missing = []
    for line, module, names in _imports(path):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] != "mlminilm":
                continue  # an optional extra that is not installed here, not a renamed module
            missing.append(f"line {line}: no module {module}")
            continue
        for name in names:
            if not hasattr(mod, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ModuleNotFoundError:
                    missing.append(f"line {line}: {module} has no {name}")
    assert not missing, f"{path.relative_to(REPO)}: " + "; ".join(missing)
