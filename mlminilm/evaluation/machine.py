"""What a speed was measured under: the machine, its load, and how much CPU time the evaluation's process itself got.

Sentences per second are wall-clock: on a shared machine they measure the neighbours too (a student timed at
0.03x its teacher on a busy machine was 1.92x on an idle one). A report therefore records, beside the rate, the
process's CPU time over the same span (user + system, every thread: torch's, onnxruntime's, OpenVINO's), the CPU
seconds it got per wall second, and the 1-minute load average at the start and the end; `compare` warns when two
reports' machines or loads differ (mlminilm.compare_checks)."""

from __future__ import annotations

import os
import platform
import time


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on every platform
        return None


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    return {"host": platform.node(), "cpu": cpu_model(), "cores": os.cpu_count()}


class Span:
    """The wall and process CPU clocks and the load, from its creation to `record()`."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        self.load = _load()

    def record(self) -> dict:
        wall = max(time.perf_counter() - self.wall, 1e-9)
        cpu = time.process_time() - self.cpu
        return {
            "cpu_s": round(cpu, 3),
            "cpu_per_wall_s": round(cpu / wall, 3),
            "load_average_1min": {"start": self.load, "end": _load()},
            "machine": machine(),
        }
