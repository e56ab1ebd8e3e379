"""OpenVINO's tests (tests/openvino_cases.py) in a pytest process of their own: see that file's docstring for why
OpenVINO's runtime must not be loaded into the suite's process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import REPO

pytest.importorskip("openvino")  # a guard only: the test extra installs mlminilm[openvino]


@pytest.mark.slow
def test_openvino_cases_in_their_own_process():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/openvino_cases.py"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
