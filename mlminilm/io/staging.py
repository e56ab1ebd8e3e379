"""Building a whole output beside its place and putting it there in one step (`staged`, `swap_in`: the form
without a `Claim`), and what a failed write of the weights says (`disk_errors`). Part of the output protocol of
`mlminilm.io.outputs`."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from mlminilm.errors import CheckpointError


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


@contextlib.contextmanager
def disk_errors(where: Path):
    """safetensors' SafetensorError for a failed write (a full disk, a read-only one) as the OSError it wraps, so
    the CLI says it in one line with what to do; any other as a CheckpointError naming where it was writing."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - only safetensors' error class is converted
        if type(exc).__name__ != "SafetensorError":
            raise
        found = re.search(r"(?:code: |os error )(\d+)", str(exc))
        if found:
            code = int(found.group(1))
            raise OSError(code, os.strerror(code), str(where)) from None
        raise CheckpointError(f"writing the weights into {where} failed ({str(exc).splitlines()[0]})") from None
