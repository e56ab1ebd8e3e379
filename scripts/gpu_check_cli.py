"""The CLI as scripts/gpu_check.py runs it: `python scripts/gpu_check_cli.py distill ARGS` is `mlminilm distill ARGS`
(also under torchrun), and it records what a run does not record itself, per process, under the path prefix in
$MLMINILM_GPU_CHECK_PROBE:

- PREFIX-rankN.recompiles: one line per dynamo recompile (the function, the first guard that failed), appended as
  it happens (a killed run keeps them);
- PREFIX-rankN.json, at exit (a killed run: just before the kill): compiled graphs (dynamo's unique_graphs), peak
  CUDA memory, the device's name.

$MLMINILM_GPU_CHECK_KILL_AT=N:PATH kills the process as step N starts, once PATH exists (`kill_at`).
$MLMINILM_GPU_CHECK_BACKEND (the CPU toy run: aot_eager) replaces torch.compile's backend: the same graphs are
traced and recompile alike, without inductor's minute of C++ code generation on a CPU.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import sys
import time

import torch

PREFIX = os.environ["MLMINILM_GPU_CHECK_PROBE"]
RANK = os.environ.get("RANK", "0")
RECOMPILE_LOG = "torch._dynamo.guards.__recompiles"  # torch._logging's artifact logger for recompiles


class RecompileCounter(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Recompiling function"):
            lines = message.splitlines()  # the function, "triggered by ...", then the guards that failed
            reason = lines[2].strip().removeprefix("- ") if len(lines) > 2 else "?"
            with open(f"{PREFIX}-rank{RANK}.recompiles", "a", encoding="utf-8") as f:
                f.write(f"{lines[0]}: {' '.join(reason.split())[:160]}\n")


def write_probe() -> None:
    from torch._dynamo.utils import counters

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    probe = {
        "rank": int(RANK),
        "unique_graphs": int(counters["stats"].get("unique_graphs", 0)),
        "peak_memory_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
    }
    with open(f"{PREFIX}-rank{RANK}.json", "w", encoding="utf-8") as f:
        json.dump(probe, f)


def kill_at(spec: str) -> None:
    """`N:PATH`: kill this process (SIGKILL, no clean-up, as a preempted job dies) as step N starts, once PATH (the
    step-N checkpoint's state.json, written last) exists: a kill at a known point, however fast the steps are (the
    seam tests/test_ddp.py and tests/test_gpu_runs.py use: training.loop.step_seed runs once at each step's start)."""
    from mlminilm.training import loop

    step, path = spec.split(":", 1)
    real_seed = loop.step_seed

    def step_seed(seed: int, at: int, rank: int) -> int:
        if at == int(step):
            while not os.path.exists(path):
                time.sleep(0.05)
            write_probe()  # SIGKILL runs no atexit: the killed run's graphs and memory are recorded here
            os.kill(os.getpid(), signal.SIGKILL)
        return real_seed(seed, at, rank)

    loop.step_seed = step_seed


def main() -> None:
    torch._logging.set_logs(recompiles=True)  # dynamo logs a recompile only when asked to
    logging.getLogger(RECOMPILE_LOG).addHandler(RecompileCounter())
    backend = os.environ.get("MLMINILM_GPU_CHECK_BACKEND")
    if backend:
        real_compile = torch.compile
        torch.compile = lambda fn=None, **kw: real_compile(fn, **{**kw, "backend": backend})
    if os.environ.get("MLMINILM_GPU_CHECK_KILL_AT"):
        kill_at(os.environ["MLMINILM_GPU_CHECK_KILL_AT"])
    atexit.register(write_probe)
    sys.argv = ["mlminilm", *sys.argv[1:]]
    from mlminilm.commands.app import main as cli

    cli()


if __name__ == "__main__":
    main()
