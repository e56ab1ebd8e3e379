"""The --out lock is held by the process that took it alone: children it forks (DataLoader workers, prepare's
tokenizer workers) do not keep it, so a run SIGKILLed while its loader workers live can be resumed at once
(issue 36 item 3). Before: the orphaned workers held the lock until their watchdog noticed the dead parent (up to
5 s), and `--resume` said "being written by another mlminilm process"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from helpers import REPO, cli, distill_args

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# The CLI, killed (SIGKILL, as a preempted job dies) as step N starts, once that step's checkpoint is whole: the
# seam the other kill tests use (training.loop.step_seed runs once at each step's start).
KILLED_CLI = """
import os, signal, sys, time
from mlminilm.training import loop
step, path = sys.argv[1], sys.argv[2]
real = loop.step_seed
def step_seed(seed, at, rank):
    if at == int(step):
        while not os.path.exists(path):
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGKILL)
    return real(seed, at, rank)
loop.step_seed = step_seed
sys.argv = ["mlminilm", *sys.argv[3:]]
from mlminilm.commands.app import main
main()
"""


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_forked_child_does_not_keep_the_lock_of_its_killed_parent(tmp_path):
    """A process takes the lock, forks a child that lives on, and is SIGKILLed: the lock is free at once."""
    from mlminilm.io.outputs import OutputLock

    out = tmp_path / "out"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, signal, time\nfrom mlminilm.io.outputs import OutputLock\n"
            f"lock = OutputLock({str(out)!r}).__enter__()\n"
            "r, w = os.pipe()\n"
            "if os.fork() == 0:\n    os.write(w, b'up')\n    time.sleep(60)\n    os._exit(0)\n"
            "os.read(r, 2)\n"  # the child runs (as a loader worker does long before its parent is killed)
            "print('forked', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline().strip() == "forked"
        assert holder.wait(timeout=30) == -signal.SIGKILL
        assert group_alive(holder.pid)  # the child lives on, holding the inherited descriptor
        with OutputLock(out):
            pass
    finally:
        kill_group(holder.pid)


# 6 steps of 2 sequences, a checkpoint every 2, two loader worker processes (the ones that outlive the kill).
RUN = ("--batch-size", "2", "--save-every", "2", "--data-workers", "2")


def test_distill_killed_with_live_loader_workers_resumes_at_once(wp_teacher, wp_data, tmp_path):
    from mlminilm.io.outputs import OutputLock

    out = tmp_path / "run"
    whole = out / "checkpoints" / "step-2" / "state.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLMINILM_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    log = tmp_path / "first.log"  # a file, not a pipe: the workers inherit it, and a pipe's end waits for them too
    with open(log, "w") as sink:
        first = subprocess.Popen(
            [sys.executable, "-c", KILLED_CLI, "2", str(whole), *distill_args(wp_teacher, wp_data, out, *RUN, steps=6)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
            start_new_session=True,  # its loader workers share its process group: how this test sees them outlive it
        )
    try:
        assert first.wait(timeout=240) == -signal.SIGKILL, log.read_text()
        assert group_alive(first.pid), "no loader worker outlived the run: the case is not shown"
        # Without `wait` the lock never blocks: it is taken at once or refused (before: "being written by another
        # mlminilm process (pid ...)"), so taking it here is the whole check, with no clock.
        with OutputLock(out):
            pass
        resumed = cli(*distill_args(wp_teacher, wp_data, out, *RUN, "--resume", steps=6), env={"OMP_NUM_THREADS": "1"})
        assert resumed.returncode == 0, resumed.stderr
        assert (out / "checkpoints" / "step-6" / "state.json").is_file()
    finally:
        kill_group(first.pid)
