"""The rules every command's `--out` follows (README "Reliability"):

- an output is never, never contains and never lies inside one of the command's inputs (`refuse_overlap`);
- `--overwrite` removes only what mlminilm wrote there and refuses a directory holding anything else, naming it
  (`foreign_entries`, `check_replaceable`);
- an output that is a whole product (prepared data, a trimmed model, a report) is built beside the old one and
  swapped in only when complete (`swap_in`), so a failure never costs the data that was there;
- one process at a time writes an output (`OutputLock`: a lock file beside it, holding the holder's pid; a lock
  of a process that died is released by the operating system with it).
"""

from __future__ import annotations

import fcntl
import contextlib
import os
import re
import shutil
import time
from pathlib import Path
from typing import Iterable, Mapping

from mlminilm.errors import CheckpointError, ConfigError
from mlminilm.io.stale import pid_alive

# Names mlminilm's own writers use for temporaries inside an output (`.tmp-<what>-<pid>`, `.<file>.tmp-<pid>`) and
# the previous run an unfinished --overwrite set aside: never the user's, so never "foreign".
_OWN_HIDDEN = re.compile(r"^\.(?:tmp-.+-\d+|.+\.tmp-\d+|previous-run|old-.+-\d+)$")


def _local(path) -> Path | None:
    """A local file or directory as a resolved path; None for what is not on disk (a hub id, nothing)."""
    if path is None or str(path) == "":
        return None
    p = Path(path)
    return p.resolve() if p.exists() else None


def refuse_overlap(out: str | Path, inputs: Mapping[str, object] | Iterable[tuple[str, object]]) -> None:
    """ConfigError when `out` is, contains or lies inside an input ((flag, path) pairs or a mapping; hub ids and
    None are skipped)."""
    target = Path(out).resolve()
    for flag, value in inputs.items() if isinstance(inputs, Mapping) else inputs:
        source = _local(value)
        if source is None:
            continue
        if target == source:
            how = "is"
        elif source in target.parents:
            how = "lies inside"
        elif target in source.parents:
            how = "contains"
        else:
            continue
        raise ConfigError(f"--out {out} {how} the {flag} input {value}; write the output to a directory of its own")


def foreign_entries(out: str | Path, ours: Iterable[str]) -> list[str]:
    """The names at `out`'s root that mlminilm did not write there (sorted): not in `ours`, not our temporaries."""
    out = Path(out)
    if not out.is_dir():
        return []
    known = set(ours)
    return sorted(p.name for p in out.iterdir() if p.name not in known and not _OWN_HIDDEN.match(p.name))


def check_replaceable(out: str | Path, ours: Iterable[str], what: str) -> None:
    """For --overwrite: CheckpointError unless every entry of `out` is one of `ours` (what this command writes)."""
    foreign = foreign_entries(out, ours)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise CheckpointError(
            f"--out {out} holds files that are not {what} ({shown}); --overwrite replaces only what mlminilm "
            f"wrote, so move them away or choose another --out"
        )


def swap_in(new: Path, final: Path) -> None:
    """Put the complete directory `new` at `final`: the old one is renamed aside first and removed only after
    `new` is in place (a crash in between leaves `.old-<name>-<pid>` beside it, which `stale` removes later)."""
    final = Path(final)
    old = final.with_name(f".old-{final.name}-{os.getpid()}")
    if final.exists():
        os.replace(final, old)
    try:
        os.replace(new, final)
    except BaseException:
        if old.exists() and not final.exists():
            os.replace(old, final)  # the previous output, as it was
        raise
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged(final: Path):
    """A temporary sibling path of `final` (the block creates it) to build a whole directory in: swapped in
    (`swap_in`) when the block ends normally, removed when it raises, so a failure never leaves half an output (nor
    the temporary) behind."""
    final = Path(final)
    tmp = final.with_name(f".tmp-{final.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        yield tmp
        swap_in(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone after a swap; the half-built directory after a failure


def recover_swap(final: Path) -> None:
    """After a process died between `swap_in`'s two renames: put the previous output back when nothing took its
    place, and remove set-aside copies whose process is gone."""
    final = Path(final)
    parent = final.parent
    if not parent.is_dir():
        return
    for entry in sorted(parent.glob(f".old-{final.name}-*")):
        pid = entry.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        if not final.exists():
            os.replace(entry, final)
        else:
            shutil.rmtree(entry, ignore_errors=True)


class OutputLock:
    """An exclusive lock on an output path, held by one process from the start of a command to its end.

    The lock file sits beside the output (`.<name>.lock`), so it can guard an output that is created, replaced or
    removed while it is held. `fcntl.flock` ties the lock to the open file: a process that dies, however it dies,
    releases it, and the next command takes it over; the pid written in the file is only for the message."""

    def __init__(self, out: str | Path):
        out = Path(out)
        self.path = out.resolve().parent / f".{out.name}.lock"
        self.out = out
        self._fd: int | None = None

    def __enter__(self) -> "OutputLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise CheckpointError(
                    f"--out {self.out} is being written by another mlminilm process{holder}; wait for it to finish, "
                    "or choose another --out"
                ) from None
            # The holder before us may have removed the file between our open and our lock: then we hold a lock on
            # a name nobody else sees, so start again on the current file.
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        self._fd = fd
        try:  # the pid is for the other process's message only: a full disk must not stop the command here
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode())
        except OSError:
            pass
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            # Removed while still held: a process that opened the old file meanwhile fails its own lock attempt
            # (non-blocking) rather than holding a lock on a name nobody else sees.
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").split()
        pid = int(text[0])
    except (OSError, ValueError, IndexError):
        return ""
    since = f", since {text[1]}" if len(text) > 1 else ""
    return f" (pid {pid}{since})" if pid_alive(pid) else ""
