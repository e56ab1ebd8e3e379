"""The one output protocol of every command that writes a directory (README "Reliability"):

- an output is never, never contains and never lies inside one of the command's inputs (`refuse_overlap`);
- `--out` is resolved before any work (`resolve_out`: `.`, `..`, and a symlink written through to its target);
- one process at a time writes an output (`OutputLock`: a lock file beside it, opened without following links,
  holding the holder's pid; taken FIRST, before `--out` is looked at);
- under the lock, `--out` is checked and claimed (`Claim.check`): empty, or with `--overwrite` holding only the
  files mlminilm recorded as its own in the output's own-files manifest (`OWN_FILES`), anything else refused by name;
- the output is built in a temporary beside it (`Claim.staging`) and swapped in entry by entry when complete: only
  the files the previous output recorded as its own are replaced; a file the user wrote into `--out` meanwhile is
  kept (or, if it is in the way, the run refuses and changes nothing);
- temporaries and set-aside outputs (`.tmp-<name>-<pid>`, `.old-<name>-<pid>`) are mlminilm's only when they hold
  its marker file (`MARKER`: pid, command, start time): a name alone never makes a user's directory a temporary.
  A dead process's marked ones are removed, or its swap finished, by the next command on that `--out`.

The protocol's parts live in modules of their own: `output_checks` (resolve_out, refuse_overlap, check_replaceable),
`output_lock` (OutputLock), `claim` (Claim, the markers and own-files record, claims_report) and `staging` (staged,
swap_in, disk_errors). Their names are gathered here so that a command imports the protocol from one place.
"""

from __future__ import annotations

from mlminilm.io.claim import MARKER, OWN_FILES, Claim, claims_report, current_claim, read_marker
from mlminilm.io.output_checks import check_replaceable, foreign_entries, refuse_overlap, resolve_out
from mlminilm.io.output_lock import OutputLock
from mlminilm.io.staging import disk_errors, staged, swap_in

__all__ = [
    "MARKER",
    "OWN_FILES",
    "Claim",
    "OutputLock",
    "check_replaceable",
    "claims_report",
    "current_claim",
    "disk_errors",
    "foreign_entries",
    "read_marker",
    "refuse_overlap",
    "resolve_out",
    "staged",
    "swap_in",
]
