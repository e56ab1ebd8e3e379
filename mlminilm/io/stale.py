"""Temporary files and directories left behind by processes that died (killed, out of memory, power loss).

Every writer in mlminilm names its temporary after its own process id: `.tmp-<what>-<pid>` (checkpoints
`.tmp-step-N-<pid>`, exports `.tmp-student-<pid>`, `prepare`'s `.tmp-prepare-<pid>`, reports) or `.<file>.tmp-<pid>`
(run records, manifests). One whose process is no longer alive can never be finished or renamed into place, so a
command cleans those in its output directory when it starts; temporaries of live processes are left alone.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from mlminilm import logging as mlog

log = mlog.get(__name__)

_TEMPORARY = re.compile(r"^\.(?:tmp-.+-|.+\.tmp-)(\d+)$")


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (signal 0 checks without sending anything)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    except OSError:
        return False
    return True


def stale_temporaries(directory: Path, prefix: str | tuple[str, ...] = ".") -> list[Path]:
    """The temporaries in `directory` (not below it) whose writing process is dead; only names that start with
    `prefix` (one or a tuple: where the directory may also hold the user's files, the names mlminilm uses there)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    stale = []
    for entry in directory.iterdir():
        match = _TEMPORARY.match(entry.name)
        if match and entry.name.startswith(prefix) and not pid_alive(int(match.group(1))):
            stale.append(entry)
    return sorted(stale)


def clean_stale(*directories: Path, prefix: str | tuple[str, ...] = ".") -> list[Path]:
    """Remove the stale temporaries of each directory; returns what was removed."""
    removed = []
    for directory in directories:
        for entry in stale_temporaries(directory, prefix):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                try:
                    entry.unlink()
                except FileNotFoundError:  # another process cleaned it first
                    pass
            log.info("removed %s, left behind by a process that is no longer running", entry)
            removed.append(entry)
    return removed
