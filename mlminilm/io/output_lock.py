"""`OutputLock`: one process at a time writes an output, the lock taken before `--out` is looked at. Part of the
output protocol of `mlminilm.io.outputs`."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from pathlib import Path
from typing import Callable

from mlminilm.errors import CheckpointError
from mlminilm.io.stale import pid_alive

# The locks this process holds. A forked child (a DataLoader worker, a `prepare` tokenizer worker, any other fork)
# inherits their descriptors, and a flock lasts until the last descriptor of its open file is closed: the orphaned
# loader workers of a SIGKILLed `distill` held --out for seconds after it died (up to their 5 s watchdog), so a job
# requeued at once was told "being written by another mlminilm process". O_CLOEXEC covers exec, not fork. So every
# child closes them right after the fork, whichever Python code forks (os.register_at_fork runs in the child before
# it runs anything else, in its first time slice, also when the parent is already dead), and the lock is held by the
# process that took it alone.
# Chosen over judging the lock by the pid written in it and taking it over when that pid is dead: a pid names a
# process on one machine only (another node's holder of an --out on a shared filesystem looks dead here), pids are
# reused, and a takeover must replace a file that another process may be locking at that moment; closing in the
# child keeps flock's own rule, "a lock dies with its holder", true whatever forks, with no guess about liveness.
_HELD: set["OutputLock"] = set()


class LockTimeout(CheckpointError):
    """The lock was still held by another process when an `OutputLock`'s `timeout` ran out."""


def _close_inherited_locks() -> None:
    for lock in list(_HELD):
        if lock._fd is not None:
            try:
                os.close(lock._fd)
            except OSError:
                pass
            lock._fd = None  # and this child's __exit__, if it ever ran, leaves the parent's lock file alone
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


class OutputLock:
    """An exclusive lock on an output path, held by one process from the start of a command to its end.

    The lock file sits beside the output (`.<name>.lock`, beside the directory `--out` resolves to), so it can guard
    an output that is created or replaced while it is held. It is opened without following a symbolic link and must
    be a plain file of its own (no hard link to another), so a planted link can never make mlminilm truncate or
    write into a file of the user's. `fcntl.flock` ties the lock to the open file: a process that dies, however it
    dies, releases it, and the next command takes it over (forked children never keep it: `_HELD`); the pid written
    in the file is only for the message.
    Directories made to hold the lock file are removed again when they are left empty.

    `flag` is how messages name the output (`--target-cache` for the teacher-target cache); `wait`, when given, is
    called with the holder's description and the lock is then waited for instead of refused: a shared cache is
    filled by one run after another, each computing only what the one before left out. `timeout` (seconds, with
    `wait`) bounds that wait: still held then, `LockTimeout` (a CheckpointError) is raised."""

    def __init__(
        self,
        out: str | Path,
        *,
        flag: str = "--out",
        wait: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ):
        final = Path(os.path.realpath(os.path.expanduser(str(out))))
        self.path = final.parent / f".{final.name}.lock"
        self.out = out
        self.flag = flag
        self.wait = wait
        self.timeout = timeout
        self._fd: int | None = None
        self._made: list[Path] = []

    def __enter__(self) -> "OutputLock":
        missing = [p for p in (self.path.parent, *self.path.parent.parents) if not p.exists()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._made = missing  # innermost first
        try:
            self._take()
        except BaseException:
            self._remove_made()
            raise
        return self

    def _take(self) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        while True:
            try:
                fd = os.open(self.path, flags, 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise CheckpointError(
                        f"the lock file {self.path} of {self.flag} {self.out} is a symbolic link, which mlminilm never "
                        "follows (it did not make it): remove the link, then run again"
                    ) from None
                raise
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                os.close(fd)
                raise CheckpointError(
                    f"the lock file {self.path} of {self.flag} {self.out} is not a plain file of its own (a FIFO, a "
                    "device or a hard link to another file), so mlminilm does not write into it: remove it, then run "
                    "again"
                )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                if self.wait is None:
                    os.close(fd)
                    raise CheckpointError(
                        f"{self.flag} {self.out} is being written by another mlminilm process{holder}; wait for it "
                        f"to finish, or choose another {self.flag}"
                    ) from None
                try:
                    self.wait(holder)
                    self._wait_for(fd, holder)
                except BaseException:  # interrupted while waiting, or waited too long
                    os.close(fd)
                    raise
            # The holder before us may have removed the file between our open and our lock: then we hold a lock on
            # a name nobody else sees, so start again on the current file.
            try:
                if os.lstat(self.path).st_ino == info.st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        self._fd = fd
        _HELD.add(self)
        try:  # the pid is for the other process's message only: a full disk must not stop the command here
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode())
        except OSError:
            pass

    def _wait_for(self, fd: int, holder: str) -> None:
        """Block until the lock is ours; with `timeout`, poll until then and raise `LockTimeout`."""
        if self.timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LockTimeout(
                        f"{self.flag} {self.out} is still being written by another mlminilm process{holder} after "
                        f"{self.timeout:g} s of waiting; run again once it has finished"
                    ) from None
                time.sleep(min(0.05, left))

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            # Removed while still held: a process that opened the old file meanwhile fails its own lock attempt
            # (non-blocking) rather than holding a lock on a name nobody else sees.
            try:
                if os.lstat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    self.path.unlink()
            except FileNotFoundError:
                pass
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
            _HELD.discard(self)
        self._remove_made()

    def _remove_made(self) -> None:
        for directory in self._made:  # innermost first; only while empty
            try:
                directory.rmdir()
            except OSError:
                break
        self._made = []


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").split()
        pid = int(text[0])
    except (OSError, ValueError, IndexError):
        return ""
    since = f", since {text[1]}" if len(text) > 1 else ""
    return f" (pid {pid}{since})" if pid_alive(pid) else ""
