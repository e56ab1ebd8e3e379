"""Checkpoints off the training loop's critical path: a host copy now, the files later, still atomic.

A checkpoint is taken in two parts. `snapshot` copies everything a checkpoint holds to host memory while the loop
waits (training updates parameters and optimizer state in place, so the files must come from copies); it costs a
device->host copy. `write_snapshot` then writes the files with the layout and atomicity
`checkpoints.save_checkpoint` has always had (a `.tmp-step-N-<pid>` directory, state.json last, one `os.replace`,
pruning to `keep`), and it can run in a background thread while training goes on: `AsyncCheckpointer`.

A thread, not a process: the snapshot is already in this process's memory (a process would copy it again through
a pipe or shared memory), the file writers spend their time in C code and system calls, and forking a process that
holds CUDA is unsafe.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

# save_model's own choice of the names it drops (private, but it is what save_model runs: the same file, and the
# equality with save_model's output is tested).
from safetensors.torch import _remove_duplicate_names, save_file
from torch import nn

from mlminilm import logging as mlog
from mlminilm.errors import CheckpointError
from mlminilm.io.atomic import write_json_atomic
from mlminilm.training.checkpoint_layout import CHECKPOINTS, checkpoint_dirs
from mlminilm.training.checkpoints import load_error_reason

log = mlog.get(__name__)


@dataclass
class Snapshot:
    """A host copy of one checkpoint, independent of the live model and optimizer."""

    step: int
    model: dict[str, torch.Tensor]  # model.safetensors: each shared tensor once, under the name save_model keeps
    model_metadata: dict[str, str] | None  # save_model's record of the names it dropped (dropped -> kept)
    optimizer: dict  # optimizer.pt
    trainer: dict  # trainer.pt: scheduler state and RNG states
    state: dict  # state.json, less "step"


def snapshot(model: nn.Module, optimizer, scheduler, state: dict, step: int) -> Snapshot:
    """Copy model, optimizer state, schedule, RNG states and `state` to host memory, synchronously.

    The model's tensors are chosen as `safetensors.torch.save_model` chooses them (tied weights, such as input and
    output embeddings, once, under the same name and with the same metadata), so the file loads with
    `load_model` / `checkpoints.load_checkpoint` exactly as a file save_model writes. On CUDA the copies go into pinned
    memory without blocking and the device is synchronised once; elsewhere they are plain clones."""
    model_state = model.state_dict()
    metadata: dict[str, str] | None = None
    for kept, dropped in _remove_duplicate_names(model_state).items():  # what save_model drops, and how it says so
        for name in dropped:
            metadata = metadata or {}
            metadata.setdefault(name, kept)
            del model_state[name]
    devices: set[torch.device] = set()
    tensors = {name: _host_copy(t, devices) for name, t in model_state.items()}
    optimizer_state = _copy_tree(optimizer.state_dict(), devices)
    trainer = {
        "scheduler": _copy_tree(scheduler.state_dict(), devices),
        "cpu_rng": torch.get_rng_state(),  # a new tensor each call
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    for device in devices:  # the non-blocking copies are complete only after this
        torch.cuda.synchronize(device)
    # state.json's content as it will be written (default=str, as write_json_atomic does): a copy that later changes
    # to the caller's dict cannot reach.
    state_copy = json.loads(json.dumps(state, default=str))
    return Snapshot(step, tensors, metadata, optimizer_state, trainer, state_copy)


def _host_copy(t: torch.Tensor, devices: set) -> torch.Tensor:
    """A contiguous host tensor with t's values, never sharing memory with t."""
    t = t.detach()
    if t.device.type == "cuda":
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)  # pinned: the copy can run asynchronously
        host.copy_(t, non_blocking=True)
        devices.add(t.device)
        return host
    if t.device.type == "cpu":
        return t.clone(memory_format=torch.contiguous_format)
    return t.to("cpu").contiguous()  # another accelerator: a blocking copy


def _copy_tree(obj, devices: set):
    """A deep copy of a state_dict-like tree with its tensors copied to the host."""
    if isinstance(obj, torch.Tensor):
        return _host_copy(obj, devices)
    if isinstance(obj, dict):
        return {k: _copy_tree(v, devices) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy_tree(v, devices) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_copy_tree(v, devices) for v in obj)
    return copy.deepcopy(obj)


def write_snapshot(out: Path, snap: Snapshot, keep: int) -> Path:
    """Write checkpoints/step-N/ from `snap` under a temporary name and rename it into place; keep the last `keep`.

    state.json is written last (its presence marks a whole checkpoint, see `checkpoint_dirs`). A write that
    fails removes its temporary directory; one that is killed leaves `.tmp-step-N-<pid>`, which `mlminilm.io.stale`
    removes when the next command starts."""
    root = Path(out) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{snap.step}"
    tmp = root / f".tmp-step-{snap.step}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        save_file(snap.model, str(tmp / "model.safetensors"), metadata=snap.model_metadata)
        torch.save(snap.optimizer, tmp / "optimizer.pt")
        torch.save(snap.trainer, tmp / "trainer.pt")
        write_json_atomic(tmp / "state.json", {"step": snap.step, **snap.state})
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # this process is alive: stale.py would never remove it
        raise
    for _, old in checkpoint_dirs(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def save_checkpoint(out: Path, step: int, model: nn.Module, optimizer, scheduler, state: dict, keep: int) -> Path:
    """Write checkpoints/step-N/ under a temporary name and rename it into place; keep the last `keep`.

    The synchronous form of `AsyncCheckpointer` below: the same host snapshot and the same writer, so a
    checkpoint is the same files whichever wrote it."""
    return write_snapshot(out, snapshot(model, optimizer, scheduler, state, step), keep)


class AsyncCheckpointer:
    """Checkpoints written in a background thread, one at a time, while training goes on.

    `save` waits for the write in flight (never two at once: they would compete for memory and disk, and pruning
    assumes one writer), takes the snapshot synchronously, starts its write and returns. A failed write is raised,
    as a CheckpointError, by the next `save`, `wait`, `check` or `close`; it is also logged when it happens, since the
    next save may be far away. Call `close` (or `wait`) before anything needs the checkpoint on disk, and before the
    process exits normally.

    The writer thread is not a daemon: at interpreter exit (even one caused by an exception in the loop) Python joins
    it, so a checkpoint that was taken is finished rather than cut off. A daemon would be killed mid-write, leaving
    a temporary directory and losing the checkpoint. A kill (SIGKILL, SIGTERM, OOM) stops it either way, which is safe:
    the rename into place is atomic, and the temporary is cleaned by the next command.

    `background=False` writes in the calling thread with the same code, and raises a failure from `save` itself."""

    def __init__(self, out: Path, keep: int, background: bool = True):
        self.out = Path(out)
        self.keep = keep
        self.background = background
        self.last_written: int | None = None  # the step of the last completed write
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._in_flight: int | None = None
        self._failure: CheckpointError | None = None
        self._closed = False

    @property
    def in_flight(self) -> int | None:
        """The step being written, or None."""
        with self._lock:
            return self._in_flight

    def save(self, step: int, model: nn.Module, optimizer, scheduler, state: dict) -> None:
        """Snapshot now, write in the background; raises the failure of an earlier write."""
        if self._closed:
            raise RuntimeError("AsyncCheckpointer.save after close")
        self.wait()
        snap = snapshot(model, optimizer, scheduler, state, step)
        with self._lock:
            self._in_flight = step
        if not self.background:
            self._write(snap)
            self.check()
            return
        self._thread = threading.Thread(target=self._write, args=(snap,), name=f"checkpoint-step-{step}", daemon=False)
        self._thread.start()

    def _write(self, snap: Snapshot) -> None:
        try:
            path = write_snapshot(self.out, snap, self.keep)
        except Exception as exc:  # noqa: BLE001 - reported to the training thread, never lost
            where = self.out / CHECKPOINTS / f"step-{snap.step}"
            error = CheckpointError(
                f"checkpoint {where} could not be written ({load_error_reason(exc)}); nothing of it was kept and "
                "earlier "
                "checkpoints are intact: fix the cause, then rerun the same command with --resume"
            )
            error.__cause__ = exc
            if self.background:  # the next save may be far away: say so now (in the foreground it is raised now)
                log.error("%s", error)
            with self._lock:
                self._failure, self._in_flight = error, None
            return
        log.debug("checkpoint written: %s", path)
        with self._lock:
            self.last_written, self._in_flight = snap.step, None

    def check(self) -> None:
        """Raise the failure of a finished write, if any, without waiting (cheap enough to call every step)."""
        with self._lock:
            failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def wait(self) -> None:
        """Block until no write is in flight; raise the failure of a write, if any."""
        thread = self._thread
        if thread is not None:
            thread.join()
            self._thread = None
        self.check()

    def close(self) -> None:
        """Wait for the last write (raising its failure) and accept no more saves."""
        self._closed = True
        self.wait()

    def __enter__(self) -> "AsyncCheckpointer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        # Leaving on an error: finish the write, but do not hide the original error behind one of the checkpoint's
        # (that one was logged when it happened).
        self._closed = True
        try:
            self.wait()
        except CheckpointError:
            pass
