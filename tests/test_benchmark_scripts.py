"""benchmarks/ holds timing benchmarks (issue 52): every file there is imported here and every script answers
--help in this process (its module-level imports and its options stand; a subprocess each would cost seconds),
every file is in benchmarks/README.md, and the scripts import each other in one direction only and never the
answered experiments of experiments/."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys

import pytest

from helpers import REPO

BENCHMARKS = REPO / "benchmarks"
FILES = sorted(BENCHMARKS.glob("*.py"))
NAMES = [p.stem for p in FILES]
# What the scripts set for themselves when imported (offline hub, no progress bars): set here first, so that the
# test restores them and the rest of the session sees the environment it had.
SCRIPT_ENV = {"HF_HUB_OFFLINE": "1", "MLMINILM_NO_PROGRESS": "1"}


def imported_modules(path) -> set[str]:
    """The top-level names of every module `path` imports, at module level or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@pytest.fixture
def benchmark(monkeypatch):
    """Import a benchmark module by name with benchmarks/ on sys.path (appended: it shadows no other module), the
    path, the environment and sys.modules restored afterwards."""
    monkeypatch.setattr(sys, "path", [*sys.path, str(BENCHMARKS)])
    for key, value in SCRIPT_ENV.items():
        monkeypatch.setenv(key, value)
    before = set(sys.modules)
    yield importlib.import_module
    for name in set(sys.modules) - before:
        if name in NAMES:
            del sys.modules[name]


@pytest.mark.parametrize("name", NAMES)
def test_every_benchmark_imports_and_its_script_answers_help(benchmark, name, monkeypatch, capsys):
    module = benchmark(name)
    if not hasattr(module, "main"):  # a piece of distill_step.py or onnx_speed.py: importing it is its check
        return
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    takes_argv = bool(inspect.signature(module.main).parameters)  # else it reads sys.argv
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"]) if takes_argv else module.main()
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


def test_every_file_is_in_the_readme():
    readme = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    assert len(FILES) > 10
    assert [p.name for p in FILES if f"`{p.name}" not in readme] == []


def test_the_benchmarks_import_in_one_direction_and_never_an_experiment():
    experiments = {p.stem for p in (REPO / "experiments").glob("*.py")}
    assert experiments and not experiments & set(NAMES)  # a name in both would hide one behind the other
    edges = {p.stem: imported_modules(p) & set(NAMES) for p in FILES}
    assert {p.stem: sorted(imported_modules(p) & experiments) for p in FILES if imported_modules(p) & experiments} == {}
    assert edges["distill_step"] >= {"step_paths", "step_timing"}  # the graph is read (not empty by mistake)
    done: set[str] = set()

    def visit(name: str, stack: tuple[str, ...]) -> None:
        assert name not in stack, "import circle: " + " -> ".join([*stack, name])
        if name not in done:
            for other in sorted(edges[name]):
                visit(other, (*stack, name))
            done.add(name)

    for name in NAMES:
        visit(name, ())
