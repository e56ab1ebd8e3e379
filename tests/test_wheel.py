"""The wheel is the product: built from the tree, installed into a fresh virtual environment that does not see the
editable install, it holds every package and data file of the source, and `mlminilm export` runs from it.

The editable install the README uses maps `mlminilm` onto the repository, which hid a hand-kept package list that
left `mlminilm.export` and `mlminilm.runtimes` out of the wheel. Here the fresh environment reaches the test
environment's dependencies through a `.pth` path (so nothing is downloaded), but not its editable finder: `.pth`
files are read in site directories only, never in a path another `.pth` added.

Slow (about 45 s: a wheel build, a venv and an ONNX export in a fresh process): `make test-slow`, which CI runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# The folders installed under other names (pyproject.toml's package-dir; setup.py's RENAMED).
RENAMED = {"commands": "mlminilm/commands", "langs": "mlminilm/langs"}


def source_packages() -> set[str]:
    """Every folder with an __init__.py, as the path it has once installed: an independent walk of the tree."""
    found = set()
    for top in ("mlminilm", *RENAMED):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).as_posix()
            head, _, rest = rel.partition("/")
            found.add((RENAMED.get(head, head) + ("/" + rest if rest else "")))
    return found


def source_data_files() -> set[str]:
    """The package data pyproject.toml declares, as installed paths."""
    files = {f"mlminilm/langs/{p.name}" for p in (ROOT / "langs").glob("*.toml")}
    for pattern in ("corpus/*.txt", "nli/*.tsv", "parallel/*.txt", "qa/*.json"):
        files |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "mlminilm/demo").glob(pattern)}
    return files


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # A copy of what the build reads keeps build/ and *.egg-info out of the repository.
    src = out / "src"
    for rel in ("mlminilm", *RENAMED):
        shutil.copytree(ROOT / rel, src / rel, ignore=shutil.ignore_patterns("__pycache__"))
    for rel in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / rel, src / rel)
    # No build isolation: the test environment's setuptools builds it, nothing is downloaded.
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    (built,) = out.glob("mlminilm-*.whl")
    return built


def test_wheel_holds_every_package_and_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {n.rsplit("/", 1)[0] for n in names if n.endswith("/__init__.py")}
    assert packages == source_packages()
    assert source_data_files() <= names
    assert "mlminilm/export/pipeline.py" in names and "mlminilm/runtimes/onnx_runtime.py" in names


def test_export_runs_from_the_installed_wheel(wheel, bert, tmp_path):
    pytest.importorskip("onnxruntime")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
        check=True,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLMINILM_DEBUG")}
    env |= {"HF_HUB_OFFLINE": "1", "MLMINILM_NO_PROGRESS": "1"}
    where = subprocess.run(
        [str(python), "-c", "import mlminilm.export, mlminilm.runtimes; print(mlminilm.export.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(site)  # the wheel's copy, not the repository's
    out = tmp_path / "onnx"
    proc = subprocess.run(
        [str(python), "-m", "mlminilm", "export", "--model", str(bert), "--format", "onnx", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "onnx" / "model.onnx").is_file()
