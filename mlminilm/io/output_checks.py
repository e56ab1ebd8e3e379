"""`--out` before any work: resolved to the directory it names (`resolve_out`), refused when it is, contains or lies
inside an input (`refuse_overlap`), and, for --overwrite, replaceable only when it holds nothing but what mlminilm
wrote (`foreign_entries`, `check_replaceable`). Part of the output protocol of `mlminilm.io.outputs`."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Mapping

from mlminilm.errors import CheckpointError, ConfigError

# Names mlminilm's own writers use for temporaries inside an output (`.tmp-<what>-<pid>`, `.<file>.tmp-<pid>`) and
# the previous run an unfinished --overwrite set aside, and the lock of a model card's --update-card (left by a
# process killed while it held it): never the user's, so never "foreign".
_OWN_HIDDEN = re.compile(r"^\.(?:tmp-.+-\d+|.+\.tmp-\d+|previous-run|old-.+-\d+|README\.md\.lock)$")


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


def resolve_out(out: str | Path) -> Path:
    """`--out` as the directory it names, before any work: absolute, `.` and `..` resolved, and a symlink (at the
    end or on the way) written through to its target, so the output lands where the link points and the link stays
    as it was. The root of the file system is refused."""
    path = Path(os.path.realpath(os.path.expanduser(str(out))))
    if path == path.parent:
        raise ConfigError(f"--out {out} is the root of the file system; name a directory of its own")
    return path
