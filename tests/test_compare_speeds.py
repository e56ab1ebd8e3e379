"""compare's speed ratios (issue 55, item 6): by the wall clock, and by the process's CPU time per example, which
leads when the two runs' loads differ or the two ratios disagree by more than 1.25x; figures worked by hand."""

from __future__ import annotations

import json

import pytest
from test_compare import compare, compare_json, with_load, write, xnli_doc


def timed(doc: dict, per_s: float, cpu_s: float, load: float, threads: int = 2) -> dict:
    """`doc` timed at `per_s` examples/s (wall clock) over its 120 examples, with `cpu_s` CPU seconds of the
    process, under `load`."""
    elapsed = 120 / per_s
    with_load(doc, load, round(cpu_s / elapsed, 3))
    doc["throughput"].update(examples_per_s=per_s, elapsed_s=elapsed, cpu_s=cpu_s, threads=threads)
    return doc


def test_speed_ratio_by_cpu_time_when_loads_differ(tmp_path, monkeypatch, capsys):
    """Issue 55, item 6: the student timed on a busy machine (load 7) at 20 examples/s against the idle teacher's
    100 is 0.20x by the wall clock, but it spent 1.2 CPU seconds on the 120 examples where the teacher spent 2.4:
    2.00x by CPU time per example, which leads, saying why."""
    t = write(tmp_path / "t", timed(xnli_doc({"en": 80.0}, "t"), per_s=100.0, cpu_s=2.4, load=2.0))
    s = write(tmp_path / "s", timed(xnli_doc({"en": 60.0}, "s"), per_s=20.0, cpu_s=1.2, load=7.0))
    record = compare_json(monkeypatch, capsys, t, s)["reports"]["s"]
    assert record["speed_ratio"] == pytest.approx(0.2)  # 20 / 100
    assert record["examples_per_cpu_s"] == pytest.approx(100.0)  # 120 / 1.2
    assert record["cpu_speed_ratio"] == pytest.approx(2.0)  # (120 / 1.2) / (120 / 2.4)
    why = record["speed_shown"]["why"]
    assert record["speed_shown"]["by"] == "CPU time" and "loads differ" in why and "disagree by more than 1.25x" in why
    code, out, err = compare(monkeypatch, capsys, t, s)
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("s: "))
    assert "speed 2.00x by CPU time per example (shown because the two runs' loads differ" in line
    assert "wall clock 0.20x" in line and "20.0 examples/s on cpu" in line and "(0.20x)" not in line
    assert line.index("2.00x by CPU time") < line.index("wall clock 0.20x")


def test_speed_ratio_by_cpu_time_when_the_ratios_disagree_under_equal_loads(tmp_path, monkeypatch, capsys):
    """Loads and CPU shares alike (load 1 besides each run, which got all of its threads' time), but the student
    ran on one thread: 50 vs 100 examples/s (0.50x) for the same 2.4 CPU seconds (1.00x by CPU time): apart by
    more than 1.25x."""
    t = write(tmp_path / "t", timed(xnli_doc({"en": 80.0}, "t"), per_s=100.0, cpu_s=2.4, load=3.0))
    s = write(tmp_path / "s", timed(xnli_doc({"en": 60.0}, "s"), per_s=50.0, cpu_s=2.4, load=2.0, threads=1))
    record = compare_json(monkeypatch, capsys, t, s)["reports"]["s"]
    assert record["cpu_speed_ratio"] == pytest.approx(1.0) and record["speed_ratio"] == pytest.approx(0.5)
    assert record["speed_shown"]["by"] == "CPU time"
    assert record["speed_shown"]["why"] == "the wall-clock and CPU-time ratios disagree by more than 1.25x"


def test_speed_ratio_by_wall_clock_when_idle_runs_agree_and_on_a_gpu(tmp_path, monkeypatch, capsys):
    """Idle runs whose ratios agree within 1.25x (2.50x wall, 2.40x CPU) keep the wall-clock ratio; on a GPU the
    process's CPU time is no measure of the model, so there is no CPU-time ratio."""
    t = write(tmp_path / "t", timed(xnli_doc({"en": 80.0}, "t"), per_s=100.0, cpu_s=2.4, load=2.0))
    s = write(tmp_path / "s", timed(xnli_doc({"en": 60.0}, "s"), per_s=250.0, cpu_s=1.0, load=2.2))
    record = compare_json(monkeypatch, capsys, t, s)["reports"]["s"]
    assert record["cpu_speed_ratio"] == pytest.approx(2.4)
    assert record["speed_shown"] == {"by": "wall clock", "why": None}
    code, out, err = compare(monkeypatch, capsys, t, s)
    assert code == 0 and "250.0 examples/s (2.50x) on cpu" in out and "by CPU time" not in out
    gpu = json.loads((s / "metrics.json").read_text())
    gpu["throughput"]["device"] = "NVIDIA H100"
    record = compare_json(monkeypatch, capsys, t, write(tmp_path / "g", gpu))["reports"]["g"]
    assert record["cpu_speed_ratio"] is None and record["speed_shown"]["by"] == "wall clock"
