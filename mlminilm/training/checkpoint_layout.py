"""Where checkpoints live in an output directory and which of them are whole: the names both the writer and
the loader use."""

from __future__ import annotations

import re
from pathlib import Path

from mlminilm import logging as mlog

log = mlog.get(__name__)
CHECKPOINTS = "checkpoints"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_dirs(out: Path) -> list[tuple[int, Path]]:
    root = Path(out) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / "state.json").exists():  # state.json is written last: its presence marks a whole checkpoint
            found.append((int(m.group(1)), p))
    return sorted(found)
