"""Paths read from files a stranger may have written (a model's `modules.json`, a manifest's shard list) stay inside
the directory that holds them.

A relative name is joined to its directory and resolved (symlinks followed): a name that is absolute, climbs out
with `..`, or reaches outside through a symlink is refused before anything is read or written through it.
Models come from the Hub and from other people; without this a crafted `modules.json` makes an export write
files wherever it points.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath

from mlminilm.errors import DataError


def confined(base: str | Path, name: str, where: str) -> Path:
    """`base / name`, refused (DataError naming `where`, the file the name came from) unless it stays inside
    `base` once resolved."""
    if not isinstance(name, str):
        raise DataError(f"{where}: expected a relative path (a string), got {type(name).__name__} {name!r}")
    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute():
        raise DataError(f"{where}: path {name!r} is absolute; a path there must be relative to {base}")
    root = Path(base).resolve()
    target = (root / name).resolve()
    if target != root and root not in target.parents:
        raise DataError(f"{where}: path {name!r} leads outside {base} (to {target}); refusing to follow it")
    return target
