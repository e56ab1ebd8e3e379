"""`--compile` where inductor has no Triton (a CUDA box without it): `auto` falls back to eager with one warning,
`on` stops at start-up with one `Error:` line and writes nothing. Proven on the CPU by replacing the Triton check
and the device-type rules of mlminilm.training.compile_support (the CPU's inductor needs no Triton)."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import run_main

ARGS = ("--layers", "2", "--hidden", "32", "--heads", "4", "--intermediate", "64", "--max-steps", "2")
ARGS += ("--batch-size", "4", "--save-every", "2", "--log-every", "1", "--precision", "fp32", "--quiet")


@pytest.fixture
def no_triton(monkeypatch):
    from mlminilm.training import compile_support

    monkeypatch.setattr(compile_support, "triton_works", lambda: False)
    return compile_support


@pytest.mark.parametrize(
    "mode,device,triton,expected",
    [
        ("off", "cuda", True, (False, False)),
        ("auto", "cuda", True, (True, False)),
        ("auto", "cuda", False, (False, True)),
        ("auto", "cpu", True, (False, False)),
        ("auto", "cpu", False, (False, False)),
        ("on", "cpu", False, (True, False)),  # the CPU's inductor writes C++
        ("on", "cuda", True, (True, False)),
    ],
)
def test_resolve_compile_table(monkeypatch, mode, device, triton, expected):
    from mlminilm.training import compile_support

    monkeypatch.setattr(compile_support, "triton_works", lambda: triton)
    compiled, warning = compile_support.resolve_compile(mode, device)
    assert (compiled, warning is not None) == expected
    if warning is not None:
        assert "\n" not in warning and "eager" in warning


def test_compile_on_without_triton_on_cuda_is_refused(no_triton):
    from mlminilm.errors import ConfigError

    with pytest.raises(ConfigError, match="--compile on needs a working Triton"):
        no_triton.resolve_compile("on", "cuda")
    no_triton.check_compile("on", "cpu")  # no error
    no_triton.check_compile("auto", "cuda")  # auto falls back instead


def test_triton_works_is_false_when_the_package_is_missing_or_broken(monkeypatch):
    import torch.utils._triton as helpers

    from mlminilm.training.compile_support import triton_works

    monkeypatch.setattr(helpers, "has_triton_package", lambda: False)
    assert triton_works() is False

    def broken():
        raise ImportError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(helpers, "has_triton_package", lambda: True)
    monkeypatch.setattr(helpers, "has_triton", broken)
    assert triton_works() is False


def test_cli_compile_on_without_triton_is_one_error_line_before_anything_is_written(
    wp_teacher, wp_data, tmp_path, monkeypatch, capsys, no_triton
):
    """`--device auto` on a (pretended) CUDA box: the device type comes from torch.cuda.is_available, as
    setup_runtime resolves it; the check runs in `validate`, before the output directory exists."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    out = tmp_path / "run"
    code, _, err = run_main(
        monkeypatch, capsys, "distill", "--teacher", str(wp_teacher), "--data", str(wp_data), "--out", str(out),
        *ARGS, "--compile", "on",
    )  # fmt: skip
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    assert code == 1 and len(errors) == 1, err
    assert "--compile on needs a working Triton" in errors[0] and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("triton", [False, True], ids=["no-triton", "triton"])
def test_distill_compile_auto_falls_back_to_eager_with_one_warning(
    wp_teacher, wp_data, tmp_path, monkeypatch, capsys, triton
):
    """The run's own call site: with the CPU standing in for CUDA (auto compiles here, through Triton), no Triton
    means an eager run and one warning line; a working one means a compiled run (aot_eager: no C++ build)."""
    from mlminilm.training import compile_support

    monkeypatch.setattr(compile_support, "compiles_by_default", lambda device_type: True)
    monkeypatch.setattr(compile_support, "needs_triton", lambda device_type: True)
    monkeypatch.setattr(compile_support, "triton_works", lambda: triton)
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn=None, **kw: real_compile(fn, **{**kw, "backend": "aot_eager"}))
    out = tmp_path / "run"
    code, _, err = run_main(
        monkeypatch, capsys, "distill", "--teacher", str(wp_teacher), "--data", str(wp_data), "--out", str(out),
        *ARGS, "--compile", "auto", "--device", "cpu",
    )  # fmt: skip
    torch._dynamo.reset()
    assert code == 0, err
    assert json.loads((out / "run.json").read_text())["compile"] is triton
    warnings = [line for line in err.splitlines() if "no working Triton" in line]
    assert len(warnings) == (0 if triton else 1), err
