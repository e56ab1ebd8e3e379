"""`make gpu-check` (scripts/gpu_check.py) without a GPU: on this machine it is one line and a non-zero exit; its
`pytest -m gpu` stage fails on a skip; its checks, MFU and summaries are computed right; the whole pipeline runs on
the CPU at toy shape (slow). Also: the default test run stays on the CPU on a GPU box (conftest), and the
benchmarks name the GPU part behind a device name."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

SCRIPT = REPO / "scripts" / "gpu_check.py"
sys.path += [str(REPO / "scripts"), str(REPO / "benchmarks")]  # appended: they shadow no other test's imports

import gpu_check_report as report  # noqa: E402


def script_env(**extra) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("MLMINILM_GPU_CHECK_TOY", None)
    return {**env, **extra}


# ------------------------------------------------------------------------------ on a machine without CUDA


def test_gpu_check_without_cuda_is_one_line_and_a_nonzero_exit(tmp_path):
    """conftest hides CUDA from this test's subprocesses (CUDA_VISIBLE_DEVICES=""), so this holds on a GPU box too."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=script_env(),
        timeout=120,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: gpu-check cannot run here: no CUDA device"), proc.stderr
    assert not (tmp_path / "out").exists()  # no stage ran (each writes under --out): it stopped at the look for CUDA


def test_the_oneshot_without_cuda_is_one_line_and_a_nonzero_exit(tmp_path):
    """scripts/gpu_oneshot.sh on this machine (conftest hides CUDA from subprocesses): one line on stderr, exit 2,
    nothing installed, nothing written to $OUT."""
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_oneshot.sh")],
        capture_output=True,
        text=True,
        env=script_env(PYTHON=sys.executable, OUT=str(out)),
        timeout=120,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("Error: gpu_oneshot.sh needs a CUDA device"), proc.stderr
    assert not out.exists()


def test_the_canary_without_cuda_is_one_line_and_exit_2():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_canary.py")], capture_output=True, text=True, env=script_env()
    )
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("Error: the canary needs a CUDA device") and len(proc.stderr.splitlines()) == 1


def test_the_generated_tokenizer_has_xlm_rs_ids_and_splits_the_generated_text(tmp_path):
    """What the lent machine uses (no network, no ../shared): XLM-R's 250,002 ids and special ids, made in-process."""
    import random

    from gpu_check_inputs import SCRIPTS, generate_tokenizer
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(generate_tokenizer(tmp_path / "tok"))
    assert len(tok) == 250_002
    assert (tok.cls_token_id, tok.pad_token_id, tok.sep_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert tok.mask_token_id == 250_001
    rng = random.Random(1)  # words as write_text generates them (the lent machine has no ../shared text)
    line = " ".join("".join(rng.choices(SCRIPTS["ru"], k=rng.randint(2, 8))) for _ in range(12))
    ids = tok(line)["input_ids"][1:-1]
    assert ids and tok.unk_token_id not in ids and len(ids) < len(line)


def test_make_gpu_check_calls_the_script():
    """The Makefile target runs scripts/gpu_check.py (make -n: what it would run, with this venv's python)."""
    bin_dir = Path(sys.executable).parent
    # Under `make test` the environment says this is a sub-make (MAKELEVEL, MAKEFLAGS): make would then print
    # "Entering directory" lines around the commands.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    proc = subprocess.run(
        ["make", "--no-print-directory", "-n", "gpu-check", f"BIN={bin_dir}", "-o", f"{bin_dir}/.installed"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"{bin_dir}/python scripts/gpu_check.py"


# --------------------------------------------------------------------------------- pytest -m gpu: no skips


def test_the_pytest_stage_fails_on_a_skip_and_passes_without_one(tmp_path, monkeypatch):
    """The stage runs pytest -m gpu for real on a generated test file: one passing gpu test passes; a skipped one
    fails the check (as every gpu test does on a CPU build, where plain pytest exits 0)."""
    import gpu_check

    (tmp_path / "logs").mkdir()
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_probe.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.gpu\n"
        "def test_runs():\n    assert True\n"
        "@pytest.mark.gpu\n"
        "@pytest.mark.skipif(os.environ.get('PROBE_SKIP') == '1', reason='no device')\n"
        "def test_maybe_skipped():\n    assert True\n"
        "def test_not_gpu():\n    assert False\n",  # deselected by -m gpu
        encoding="utf-8",
    )
    (tests / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n", encoding="utf-8")
    monkeypatch.setenv("PROBE_SKIP", "1")
    skipped = gpu_check.run_pytest(tmp_path, [str(tests)])
    monkeypatch.delenv("PROBE_SKIP")
    passed = gpu_check.run_pytest(tmp_path, [str(tests)])
    assert not skipped.ok and "1 skipped" in skipped.detail and "(exit 0)" in skipped.detail, skipped
    assert passed.ok and passed.detail.startswith("2 passed, 0 failed, 0 errors, 0 skipped"), passed


def test_a_module_without_gpu_tests_that_skips_at_collection_does_not_fail_the_stage(tmp_path):
    """As tests/test_openvino.py does without openvino: `pytest -m gpu tests/` counted its collection skip as a
    skipped GPU test and failed the stage; the stage now runs the files that hold GPU tests only."""
    import gpu_check

    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_gpu_probe.py").write_text("import pytest\n@pytest.mark.gpu\ndef test_runs():\n    pass\n")
    (tests / "test_optional.py").write_text("import pytest\npytest.importorskip('no_such_runtime')\n")
    (tests / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n", encoding="utf-8")
    assert gpu_check.gpu_test_files(tests) == [str(tests / "test_gpu_probe.py")]
    whole = gpu_check.run_pytest(tmp_path, [str(tests)])
    assert not whole.ok and "1 skipped" in whole.detail, whole  # what the old stage ran
    check = gpu_check.run_pytest(tmp_path, gpu_check.gpu_test_files(tests))
    assert check.ok and check.detail.startswith("1 passed, 0 failed, 0 errors, 0 skipped"), check
    assert gpu_check.gpu_test_files(REPO / "tests") and all(
        "mark.gpu" in Path(f).read_text() for f in gpu_check.gpu_test_files(REPO / "tests")
    )
    # The GPU tests live in several files (test_gpu.py was split by what it proves, issue 38): every one is found.
    found = {Path(f).name for f in gpu_check.gpu_test_files(REPO / "tests")}
    assert {"test_gpu_numerics.py", "test_gpu_runs.py"} <= found, found
    assert {p.name for p in (REPO / "tests").glob("test_gpu_*.py")} - {"test_gpu_check.py"} <= found, found


def test_the_cli_stage_judges_pytest_from_the_earlier_pytest_stage(tmp_path):
    """The oneshot runs `--stage pytest`, then `--stage cli` in the same --work: the summary's pytest check comes from
    the first one's JUnit file, and without one it fails (never passes unseen)."""
    import argparse

    import gpu_check

    args = argparse.Namespace(stage="cli", skip_pytest=False, pytest_timeout=60)
    missing = gpu_check.pytest_stage(args, tmp_path)
    assert not missing.ok and "no earlier `--stage pytest`" in missing.detail
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_gpu_probe.py").write_text("import pytest\n@pytest.mark.gpu\ndef test_runs():\n    pass\n")
    (tests / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n", encoding="utf-8")
    assert gpu_check.run_pytest(tmp_path, [str(tests)]).ok
    judged = gpu_check.pytest_stage(args, tmp_path)
    assert judged.ok and judged.detail.startswith("1 passed"), judged


def test_a_budget_stops_each_process_in_time_for_the_summaries(monkeypatch):
    """Under gpu_oneshot.sh's `timeout` a killed gpu_check.py writes no summary: its processes are stopped first."""
    import gpu_check_stages as stages

    monkeypatch.setattr(stages, "BUDGET_S", 60.0)
    monkeypatch.setattr(stages, "STARTED", 1000.0)
    assert stages.seconds_left(300, clock=lambda: 1000.0) == 40.0  # 60 s less the 20 kept for the summaries
    assert stages.seconds_left(300, clock=lambda: 1002.5) == 37.5  # less what has run
    assert stages.seconds_left(10, clock=lambda: 1002.5) == 10  # a cap inside the budget
    assert stages.seconds_left(300, clock=lambda: 1039.5) == 1.0  # the floor: a stage still starts and fails
    assert stages.seconds_left(300, clock=lambda: 1100.0) == 1.0  # past the budget


def test_a_pytest_stage_that_hangs_is_a_failed_check(tmp_path):
    import gpu_check

    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_hang.py").write_text(
        "import time, pytest\n@pytest.mark.gpu\ndef test_hangs():\n    time.sleep(60)\n", encoding="utf-8"
    )
    (tests / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n", encoding="utf-8")
    check = gpu_check.run_pytest(tmp_path, [str(tests)], timeout_s=5)
    assert not check.ok and check.detail.startswith("timed out after 5 s"), check


def test_the_pytest_check_needs_tests_and_a_report():
    ok = {"tests": 3, "failures": 0, "errors": 0, "skipped": 0}
    assert report.pytest_check(0, ok).ok
    assert not report.pytest_check(1, ok).ok
    assert not report.pytest_check(5, {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}).ok  # none collected
    assert not report.pytest_check(0, {**ok, "errors": 1}).ok
    assert not report.pytest_check(2, None).ok


# ------------------------------------------------------------------------------------ checks and figures


def test_loss_checks():
    falling = [(s, 1.0 / s) for s in range(10, 310, 10)]
    assert all(c.ok for c in report.loss_checks(falling, 300))
    flat = [(s, 0.5) for s in range(10, 310, 10)]
    names = {c.name: c.ok for c in report.loss_checks(flat, 300)}
    assert names == {"loss finite": True, "loss falls": False, "all steps logged": True}
    nan = falling[:-1] + [(300, math.nan)]
    assert not {c.name: c.ok for c in report.loss_checks(nan, 300)}["loss finite"]
    assert not {c.name: c.ok for c in report.loss_checks(falling[:-1], 300)}["all steps logged"]
    assert not any(c.ok for c in report.loss_checks([], 300))


def test_loss_records_keep_the_last_record_of_a_step_and_skip_other_records():
    records = [{"step": 10, "loss": 2.0}, {"step": 20, "loss": 1.5}, {"step": 20, "loss": 1.4}, {"step": 0, "x": 1}]
    assert report.loss_records(records) == [(10, 2.0), (20, 1.4)]


def test_steady_rate_leaves_out_the_compiling_windows():
    records = [{"step": s, "tokens_per_s": r} for s, r in ((10, 5.0), (20, 100.0), (30, 110.0), (210, 1.0))]
    assert report.steady_rate(records, {10, 210}) == 105.0
    assert report.steady_rate(records[:1], {10}) is None


def test_mfu_against_the_datasheet_and_a_measured_gemm_each_peak_named_once():
    # 1e5 tokens/s x 1e9 FLOP/token = 1e14 FLOP/s: 13.2 % of an H100 PCIe (756), 12.5 % of a measured 800.
    got = report.mfu(1e5, 1e9, ("H100 PCIe", 756e12), 800e12)
    assert got == pytest.approx(
        {"datasheet H100 PCIe (756 TFLOP/s)": 1e14 / 756e12, "measured bf16 GEMM (800 TFLOP/s)": 0.125}
    )
    sxm = report.mfu(1e5, 1e9, ("H100 SXM", 989.4e12), None)
    assert list(sxm) == ["datasheet H100 SXM (989 TFLOP/s)"]  # once (it was printed as the part and the reference)
    assert list(report.mfu(1e5, 1e9, None, None)) == ["datasheet H100 SXM (989 TFLOP/s)"]  # a name that says no part
    assert report.mfu(None, 1e9, None, 800e12) == {}


def test_mfu_below_the_floor_fails():
    part = ("H100 SXM", 989.4e12)
    at_floor = report.MFU_FLOOR * 989.4e12 / 1e9  # tokens/s at 1e9 FLOP/token
    assert report.mfu_check(at_floor * 1.01, 1e9, part).ok
    low = report.mfu_check(at_floor * 0.99, 1e9, part)
    assert not low.ok and "of H100 SXM's 989 TFLOP/s" in low.detail and "goal 40%" in low.detail
    assert not report.mfu_check(None, 1e9, part).ok


def test_compiled_is_read_from_the_graphs_dynamo_compiled():
    assert report.compiled_check([{"unique_graphs": 2}], [{"unique_graphs": 1}]).ok
    assert not report.compiled_check([{"unique_graphs": 2}], [{"unique_graphs": 0}]).ok  # the resume ran eager
    assert not report.compiled_check([], []).ok


def test_a_toy_run_never_says_passed():
    s = report.summary({"toy": True, "checks": [report.Check("a", True, "")]})
    assert s["ok"] and report.verdict(s).startswith("TOY RUN on the CPU, not a GPU result")
    assert "PASSED" not in report.verdict(s)
    assert report.verdict(report.summary({"checks": [report.Check("a", True, "")]})) == "PASSED"


def test_ddp_checks():
    one = [(10, 2.0), (20, 1.5)]
    files = {"run.json", "metrics.jsonl"}
    assert all(c.ok for c in report.ddp_checks(one, [(10, 2.01), (20, 1.51)], (files, set(files))))
    off = {c.name: c.ok for c in report.ddp_checks(one, [(10, 2.1), (20, 1.5)], (files, files | {"rank1.json"}))}
    assert off == {"2 processes = 1 process (losses)": False, "only rank 0 writes": False}
    assert not report.ddp_checks(one, [(10, 2.0)], (files, files))[0].ok  # a step missing


def test_summary_and_markdown(tmp_path):
    doc = {
        "date": "2026-11-27",
        "device": "NVIDIA H100 80GB HBM3",
        "part": ("H100 SXM", 989.4e12),
        "torch": "2.13.0",
        "cuda": "12.8",
        "triton": "3.5.0",
        "gpus": 1,
        "shape": {
            "teacher": "12x768",
            "student": "6x384",
            "vocab": 250002,
            "batch": 32,
            "seq": 128,
            "steps": 300,
            "compile": "on",
            "device": "cuda",
        },  # fmt: skip
        "figures": {
            "tokens_per_s": 123456.0,
            "flops_per_token": 2.5e8,
            "mfu": {"H100 SXM (989 TFLOP/s)": 0.3},
            "peak_memory_gib": 12.5,
            "recompiles": 1,
            "recompile_reasons": ["f: mask is None"],
        },  # fmt: skip
        "checks": [report.Check("a", True, "fine"), report.Check("b", False, "broken")],
        "stages": {"prepare": 12.0},
        "wall_s": 400.0,
    }
    s = report.summary(doc)
    assert (s["ok"], s["passed"]) == (False, 1)
    json_path, md_path = report.write(tmp_path, s)
    assert json.loads(json_path.read_text())["checks"][1] == {"name": "b", "ok": False, "detail": "broken"}
    md = md_path.read_text()
    assert md.startswith("### `make gpu-check` on NVIDIA H100 80GB HBM3 (2026-11-27)")
    assert "FAILED: 1 of 2 checks" in md and "| b | FAIL | broken |" in md
    assert "| tokens/s (median of the logged windows, compiling left out) | 123,456 |" in md
    assert "30.0% of H100 SXM (989 TFLOP/s)" in md and "12.50 GiB" in md and "- recompiled: f: mask is None" in md
    assert report.summary({**doc, "checks": []})["ok"] is False  # nothing checked is no pass


# ------------------------------------------------------------------------------------- naming the GPU part


@pytest.mark.parametrize(
    "name,part,tflops",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756),
        ("NVIDIA H100 NVL", "H100 NVL", 835),
        ("NVIDIA H200", "H200 SXM", 989.4),
        ("NVIDIA H200 NVL", "H200 NVL", 835),
        ("NVIDIA A100-SXM4-80GB", "A100", 312),
        ("NVIDIA A10", "A10", 125),
        ("NVIDIA H100", None, None),  # which H100? no guess
        ("NVIDIA A10G", None, None),
        ("Tesla T4", None, None),
    ],
)
def test_gpu_part_names_the_part_behind_a_device_name(name, part, tflops):
    from step_hardware import gpu_part

    got = gpu_part(name)
    if part is None:
        assert got is None
    else:
        assert got[0] == part and got[1] == pytest.approx(tflops * 1e12)


# ----------------------------------------------------------------------------- the default run is CPU-only


def test_plain_tests_run_on_the_cpu_on_a_gpu_box():
    """tests/gpu_pinning_probe.py in a pytest process whose torch.cuda.is_available() says True (as on a GPU box):
    its plain test resolves `--device auto` to the CPU and hides CUDA from subprocesses; its gpu test keeps CUDA."""
    code = (
        "import sys, torch, pytest\n"
        "torch.cuda.is_available = lambda: True\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/gpu_pinning_probe.py']))\n"
    )
    env = script_env()
    env.pop("CUDA_VISIBLE_DEVICES", None)  # this test's own process is pinned; the probe's must start unpinned
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout, proc.stdout


def test_a_checkout_in_a_folder_named_gpu_keeps_plain_tests_plain(tmp_path):
    """The project's conftest in a folder named `gpu`: a plain test runs (on this CPU box it was skipped as "needs
    a CUDA device", and on a GPU box it kept CUDA), a `gpu` test is still skipped without CUDA."""
    import shutil

    tests = tmp_path / "gpu" / "tests"
    tests.mkdir(parents=True)
    for name in ("conftest.py", "helpers.py"):
        shutil.copy(REPO / "tests" / name, tests / name)
    (tests / "test_probe.py").write_text(
        "import pytest, torch\n"
        "def test_plain():\n    assert torch.cuda.is_available() is False\n"
        "@pytest.mark.gpu\ndef test_gpu():\n    pass\n",
        encoding="utf-8",
    )
    (tmp_path / "gpu" / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
        capture_output=True,
        text=True,
        cwd=tmp_path / "gpu",
        env=script_env(),
        timeout=180,
    )
    assert "1 passed, 1 skipped" in proc.stdout, proc.stdout + proc.stderr


def test_this_plain_test_sees_no_cuda():
    import torch

    assert torch.cuda.is_available() is False
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""


# --------------------------------------------------------------------------------- the pipeline, CPU toy


def test_fewer_than_2_gpus_skip_the_2_process_stage_in_one_line(tmp_path, monkeypatch, capsys):
    """The 2-process stage runs with 2+ GPUs (or the toy's MLMINILM_GPU_CHECK_TOY_DDP=1), else one line says why
    and the run goes on without it. The other stages are stubs here: the toy run below runs each for real (a toy
    run without the 2-process stage, 65 s, was a slow test of its own for this branch alone)."""
    import argparse

    import gpu_check

    ran = []
    monkeypatch.setenv("MLMINILM_GPU_CHECK_TOY", "1")
    prepared = report.Check("prepare", True, "stub")
    monkeypatch.setattr(gpu_check, "inputs", lambda st, tok, where: (300, tmp_path / "t", tmp_path / "d", prepared))
    seen = {"tokens_per_s": 100.0, "peak_memory_gib": None, "recompiles": 1, "batch": None}
    monkeypatch.setattr(gpu_check, "distill_stage", lambda st, teacher, data: ([], dict(seen)))
    monkeypatch.setattr(gpu_check, "ddp_stage", lambda st, teacher, data: ran.append(data) or [])
    args = argparse.Namespace(stage="all", skip_pytest=False, pytest_timeout=60)
    skipped = "2-process (DDP) stage skipped: 0 GPU(s) here, it needs 2 or more"

    monkeypatch.setenv("MLMINILM_GPU_CHECK_TOY_DDP", "0")
    doc = gpu_check.pipeline(args, tmp_path / "work", tmp_path, "stub")
    assert ran == [] and doc["gpus"] == 0 and doc["notes"] == [skipped], doc
    assert capsys.readouterr().out == f"gpu-check: {skipped}\n"
    assert f"- {skipped}" in report.markdown(report.summary({**doc, "wall_s": 1.0}))
    monkeypatch.setenv("MLMINILM_GPU_CHECK_TOY_DDP", "1")
    doc = gpu_check.pipeline(args, tmp_path / "work", tmp_path, "stub")
    assert ran == [tmp_path / "d"] and doc["notes"] == [] and capsys.readouterr().out == ""


@pytest.mark.slow
def test_the_pipeline_at_toy_shape_on_the_cpu(tiny_sentencepiece_dir, tmp_path):
    """Every stage but pytest, for real on the CPU: a tiny XLM-R teacher, prepare, distill killed at its checkpoint
    and resumed, compiled with aot_eager (recompiles counted), 2 gloo processes against 1; the JSON and Markdown
    summaries. About 2 minutes on 2 busy cores. Without 2 processes: the test above."""
    out = tmp_path / "out"
    env = script_env(MLMINILM_GPU_CHECK_TOY="1", MLMINILM_GPU_CHECK_TOY_DDP="1")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--work", str(tmp_path / "work")]
        + ["--tokenizer", str(tiny_sentencepiece_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    s = json.loads((out / "gpu-check.json").read_text())
    failed = [c for c in s["checks"] if not c["ok"]]
    assert proc.returncode == 0 and s["ok"] and not failed, (failed, proc.stdout[-3000:], proc.stderr[-3000:])
    names = {c["name"] for c in s["checks"]}
    assert {"--resume continues", "at most 2 recompiles", "checkpoint + export written", "loss falls"} <= names
    assert "2 processes = 1 process (losses)" in names
    assert 1 <= s["figures"]["recompiles"] <= 2  # packed and padded micro-batches: two graphs
    assert any("distill_terms" in r and "mask is None" in r for r in s["figures"]["recompile_reasons"]), s["figures"]
    assert s["figures"]["tokens_per_s"] > 0 and s["shape"]["vocab"] < 1000
    assert {"compiled", "--resume continues"} <= names and sorted(p.name for p in out.iterdir()) == [
        "gpu-check.json",
        "gpu-check.md",
    ]  # scratch and logs stay in --work: OUT gets the summaries only
    md = (out / "gpu-check.md").read_text()
    assert md.startswith("### `make gpu-check` on cpu (toy run, not a GPU result)") and "PASSED" not in md
    assert proc.stdout.strip().splitlines()[-1].startswith("gpu-check: TOY RUN on the CPU, not a GPU result")
    assert "DDP) stage skipped" not in proc.stdout
    compiled = next(c for c in s["checks"] if c["name"] == "compiled")
    assert compiled["ok"] and compiled["detail"].count(",") >= 1, compiled  # the killed run and the resume
