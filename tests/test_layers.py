"""The house as drawn (CONTRIBUTING.md): every module of `mlminilm` sits on a layer and imports only from its
own layer or below, and no modules import each other in a circle. Function-level imports count too: a lazy import
is still a dependency, only a deferred one.

Read from the source with `ast`, so nothing is imported and the check takes well under a second.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers import REPO

ROOT = "mlminilm"  # matches the package's own __init__ only, not every module under it

# Lowest first. A module's layer is that of the longest name below that is it or one of its packages. Within a
# layer, packages may import each other (without circles); across layers, only downwards.
LAYERS = (
    ("foundation", ("mlminilm.version", "mlminilm.errors", "mlminilm.logging", "mlminilm.langs", "mlminilm.api")),
    ("io", ("mlminilm.io",)),
    ("data formats and scorers", ("mlminilm.tasks", "mlminilm.metrics", "mlminilm.report")),
    ("configuration", ("mlminilm.config",)),
    # runtimes: an export directory at run time (its record, the onnxruntime and OpenVINO sessions), which the
    # evaluations' --backend reads and the exporter writes
    ("models", ("mlminilm.models", "mlminilm.runtimes")),
    ("machinery", ("mlminilm.corpus", "mlminilm.distillation", "mlminilm.training")),
    ("evaluation and vocabulary", ("mlminilm.evaluation", "mlminilm.vocab")),
    # the graph, int8, OpenVINO IR, calibration text (corpus) and the fidelity check (evaluation's embeddings)
    ("export", ("mlminilm.export",)),
    (
        "commands' library calls",
        (
            "mlminilm.distill",
            "mlminilm.assist",
            "mlminilm.finetune",
            "mlminilm.demo",
            "mlminilm.compare",
            "mlminilm.compare_checks",
            "mlminilm.retention",
            # the package itself: the public facade, `from mlminilm import distill, ...`
            ROOT,
        ),
    ),
    ("command line", ("mlminilm.commands", "mlminilm.__main__")),
)


def layer_of(module: str) -> int:
    best, found = -1, None
    for number, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            below = module.startswith(prefix + ".") and prefix != ROOT
            if (module == prefix or below) and len(prefix) > best:
                best, found = len(prefix), number
    if found is None:
        raise AssertionError(f"{module} is on no layer: add it to LAYERS in tests/test_layers.py")
    return found


def project_modules() -> dict[str, Path]:
    """Module name -> file, with the installed names of commands/ and langs/ (package-dir in pyproject.toml)."""
    roots = {"mlminilm": REPO / "mlminilm", "mlminilm.commands": REPO / "commands", "mlminilm.langs": REPO / "langs"}
    modules = {}
    for package, root in roots.items():
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `module` imports (an imported name that is a submodule counts as that submodule)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in targets:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    # `from mlminilm.x import y` also names the package mlminilm.x itself: keep only the most specific module.
    return {m for m in found if not any(other.startswith(m + ".") for other in found)}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a, targets in graph.items()
        for b in targets
        if layer_of(b) > layer_of(a)
    )


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def project_graph() -> dict[str, set[str]]:
    modules = project_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def test_every_module_is_on_a_layer_and_imports_only_downwards():
    graph = project_graph()
    assert len(graph) > 80 and "mlminilm.training.loop" in graph and "mlminilm.commands.distill" in graph
    assert upward_imports(graph) == []


def test_layers_name_packages_and_top_level_modules_only():
    # A module deep in a package placed on another layer than its package hides an import that runs upward.
    deep = [prefix for _, prefixes in LAYERS for prefix in prefixes if prefix.count(".") > 1]
    assert deep == []


def test_no_modules_import_each_other_in_a_circle():
    assert circles(project_graph()) == []


def test_the_checks_catch_what_they_are_for():
    # A lower layer reaching up, and a circle within one layer: both are reported.
    graph = {
        "mlminilm.models.loading": {"mlminilm.training.loop"},
        "mlminilm.training.loop": {"mlminilm.corpus.dataset"},
        "mlminilm.corpus.dataset": {"mlminilm.training.loop", "mlminilm.errors"},
        "mlminilm.errors": set(),
    }
    assert upward_imports(graph) == ["mlminilm.models.loading (models) imports mlminilm.training.loop (machinery)"]
    assert circles(graph) == [["mlminilm.corpus.dataset", "mlminilm.training.loop"]]
    assert layer_of("mlminilm.version") == 0 and layer_of("mlminilm.commands.app") == len(LAYERS) - 1
    assert layer_of("mlminilm") == len(LAYERS) - 2  # the facade, above every library module it names
    with pytest.raises(AssertionError, match="on no layer"):
        layer_of("mlminilm.unplaced")  # the root's entry does not catch modules no layer names


def test_imports_are_read_with_their_submodules(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text(
        "from mlminilm.models import cards\nfrom mlminilm.models.loading import resolve_model\n"
        "def f():\n    from mlminilm import training\n    import mlminilm.io.atomic\n"
    )
    known = {
        "mlminilm",
        "mlminilm.models",
        "mlminilm.models.cards",
        "mlminilm.models.loading",
        "mlminilm.training",
        "mlminilm.io",
        "mlminilm.io.atomic",
    }
    assert imports_of("mlminilm.vocab.x", source, known) == {
        "mlminilm.models.cards",
        "mlminilm.models.loading",
        "mlminilm.training",
        "mlminilm.io.atomic",
    }
