"""Not collected by a plain pytest run (its name is no test_*.py): tests/test_gpu_check.py runs it in a pytest
process whose torch says a CUDA device is available, the way a GPU box's does, and checks that conftest keeps a
plain test on the CPU (in this process and in the subprocesses it starts) and leaves a `gpu` test its CUDA."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


def test_a_plain_test_resolves_to_the_cpu():
    from mlminilm.training import setup_runtime
    from mlminilm.training.compile_support import device_type_of

    assert torch.cuda.is_available() is False
    assert setup_runtime("auto", "auto").device.type == "cpu"
    assert device_type_of("auto") == "cpu"  # so --compile auto stays off
    seen = subprocess.run(
        [sys.executable, "-c", "import os; print(repr(os.environ.get('CUDA_VISIBLE_DEVICES')))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert seen == "''", seen  # a CLI subprocess sees no device


@pytest.mark.gpu
def test_a_gpu_test_keeps_cuda():
    assert torch.cuda.is_available() is True
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != ""
