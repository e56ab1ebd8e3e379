"""Files that appear whole or not at all: written under a temporary name beside the target, then renamed over it
(a rename within a directory is atomic on POSIX file systems)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mlminilm import logging as mlog

log = mlog.get(__name__)


def write_json_atomic(path: Path, obj) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    """`text` as UTF-8, line breaks as given (no newline translation); an existing file's permissions are kept.
    On any error the temporary file is removed and `path` is as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(text.encode("utf-8"))
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
