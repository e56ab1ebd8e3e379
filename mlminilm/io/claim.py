"""`Claim`: one command's hold on its `--out` under the output protocol of `mlminilm.io.outputs`: the lock, the
check of what `--out` holds against the own-files record (`OWN_FILES`), the marked temporary (`MARKER`) the output
is built in and swapped in from, and the recovery of what a dead run left. With `claims_report` and
`current_claim`, which hold a Claim for the whole of a command's run."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
import re
import shutil
import stat
import time
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.errors import CheckpointError, ConfigError
from mlminilm.io.output_checks import foreign_entries, resolve_out
from mlminilm.io.output_lock import OutputLock
from mlminilm.io.stale import pid_alive

log = mlog.get(__name__)

MARKER = ".mlminilm-temporary"  # inside a temporary or set-aside output: whose it is (pid, command, start time)
OWN_FILES = ".mlminilm-output.json"  # inside every output: the files mlminilm wrote there, all others the user's
_MARKER_BYTES = 65536


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _tree(root: Path) -> tuple[set[str], set[str]]:
    """The files (symlinks included, never followed) and the directories below `root`, as relative POSIX paths."""
    files, dirs = set(), set()
    for here, subdirs, names in os.walk(root, followlinks=False):
        rel = Path(here).relative_to(root)
        for d in list(subdirs):
            path = rel / d
            if (Path(here) / d).is_symlink():
                files.add(path.as_posix())
                subdirs.remove(d)
            else:
                dirs.add(path.as_posix())
        files.update((rel / n).as_posix() for n in names)
    return files, dirs


def read_marker(entry: Path) -> dict | None:
    """The marker of a temporary or set-aside directory mlminilm made, or None for anything else (a directory of the
    user's with a look-alike name, a link, a file)."""
    try:
        if entry.is_symlink() or not entry.is_dir():
            return None
        marker = entry / MARKER
        info = os.lstat(marker)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MARKER_BYTES:
            return None
        doc = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("pid"), int) else None


class Claim:
    """One command's hold on its `--out` (the protocol in the docstring of mlminilm.io.outputs), as a context manager:

        with Claim(cfg.out, "trim", "a trimmed model", legacy=None) as claim:   # lock first, dead runs cleaned
            claim.check(cfg.overwrite, not_empty="...")                          # then --out checked and claimed
            ... the work ...
            with claim.staging() as tmp:                                         # built beside, swapped in
                write the output into tmp

    `legacy`: what an output written before the own-files manifest holds (top-level names), taken as the command's
    own on --overwrite; None: such an output is refused (remove it by hand)."""

    def __init__(self, out: str | Path, command: str, what: str, legacy: tuple[str, ...] | None = ()):
        self.given = out
        self.out = resolve_out(out)
        self.command = command
        self.what = what
        self.legacy = legacy
        self.own: set[str] = set()  # files of the previous output that --overwrite replaces
        self.own_top: set[str] = set()  # their top-level names at --out
        self.lock = OutputLock(out)
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def __enter__(self) -> "Claim":
        self.lock.__enter__()
        try:
            self.recover()
        except BaseException:
            self.lock.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.lock.__exit__(*exc)

    # ------------------------------------------------------------------------------------------ check and claim

    def check(self, overwrite: bool, not_empty: str, error: type = ConfigError, is_file: str | None = None) -> None:
        """`--out` is a directory or nothing, and empty; or, with `overwrite`, holds only the files the previous
        output recorded as mlminilm's (claimed for replacing). `not_empty`, `is_file`: the command's own messages."""
        out = self.out
        if out.exists() and not out.is_dir():
            raise error(is_file or f"--out {self.given} is a file; name a directory")
        if not out.is_dir() or not any(out.iterdir()):
            return
        if not overwrite:
            raise error(not_empty)
        self.own = self._recorded()
        self.own_top = {rel.split("/", 1)[0] for rel in self.own}

    def _recorded(self) -> set[str]:
        out = self.out
        manifest = out / OWN_FILES
        if manifest.is_file() and not manifest.is_symlink():
            try:
                doc = json.loads(manifest.read_text(encoding="utf-8"))
                files, folders = doc["files"], doc.get("dirs", [])  # older records list files only
                if not all(
                    isinstance(f, str) and f and not f.startswith("/") and ".." not in f.split("/")
                    for f in [*files, *folders]
                ):
                    raise ValueError("a path outside the output")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CheckpointError(
                    f"--out {self.given}: its record of mlminilm's own files ({OWN_FILES}) is damaged ({exc}), so "
                    "--overwrite cannot tell them from yours: move the directory away or choose another --out"
                ) from None
            # The folders it wrote count as its own too, an empty one included (a sentence-transformers model's
            # 2_Normalize/ holds no file): without them an untouched output of its own would be refused.
            own = set(files) | set(folders) | {OWN_FILES}
            present, dirs = _tree(out)
            parents = {"/".join(f.split("/")[:i]) for f in own for i in range(1, f.count("/") + 1)} | set(folders)
            foreign = sorted((present - own) | (dirs - parents))
            foreign = [f for f in foreign if not any(f.startswith(g + "/") for g in foreign)]
        elif self.legacy is None:
            raise CheckpointError(
                f"--out {self.given} holds no record of the files mlminilm wrote there ({OWN_FILES}: an output of "
                f"an older version, or not mlminilm's), so --overwrite cannot tell them from yours: move the "
                "directory away or choose another --out"
            )
        else:
            own = {p.name for p in out.iterdir() if p.name in self.legacy}
            foreign = foreign_entries(out, self.legacy)
        if foreign:
            raise CheckpointError(
                f"--out {self.given} holds files that are not {self.what} ({_shown(foreign)}); --overwrite replaces "
                f"only what mlminilm wrote, so move them away or choose another --out"
            )
        return {f for f in own if (out / f).exists() or (out / f).is_symlink()} | (
            {OWN_FILES} if manifest.is_file() else set()
        )

    # -------------------------------------------------------------------------------------- stage and swap in

    def _temporary(self, kind: str, pid: int | None = None) -> Path:
        return self.out.parent / f".{kind}-{self.out.name}-{os.getpid() if pid is None else pid}"

    def _mark(self, directory: Path, state: str) -> None:
        doc = {
            "pid": os.getpid(),
            "command": self.command,
            "started": self.started,
            "out": str(self.out),
            "state": state,
        }
        tmp = directory / f"{MARKER}.new"
        try:
            tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
            os.replace(tmp, directory / MARKER)
        finally:
            tmp.unlink(missing_ok=True)

    def _fresh(self, kind: str, state: str) -> Path:
        path = self._temporary(kind)
        if path.exists() or path.is_symlink():
            marker = read_marker(path)
            if marker is None or marker.get("pid") != os.getpid():
                raise CheckpointError(
                    f"{path} is in the way of --out {self.given}'s {kind}orary and is not "
                    "mlminilm's: move it away, then run again"
                )
            shutil.rmtree(path)
        path.mkdir(parents=True)
        try:
            self._mark(path, state)
        except BaseException:  # a full disk, say: no unmarked directory left behind
            shutil.rmtree(path, ignore_errors=True)
            raise
        return path

    @contextlib.contextmanager
    def staging(self):
        """A new, marked directory beside `--out` to build the whole output in (it exists): swapped in when the block
        ends normally, removed when it raises, so a failure leaves the previous output (and nothing else)."""
        tmp = self._fresh("tmp", "building")
        try:
            yield tmp
            self._swap(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _swap(self, tmp: Path) -> None:
        out = self.out
        files, folders = _tree(tmp)
        files.discard(MARKER)
        from mlminilm.version import __version__

        doc = {"command": self.command, "mlminilm": __version__, "files": sorted(files), "dirs": sorted(folders)}
        # no time in it: the same inputs give a byte-identical output
        (tmp / OWN_FILES).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        new = sorted(n for n in os.listdir(tmp) if n not in (MARKER, OWN_FILES)) + [OWN_FILES]
        out.mkdir(parents=True, exist_ok=True)
        # What the user put into --out while the command ran: kept where it is; in the way of the new output, the
        # run refuses and changes nothing.
        in_way = [n for n in new if n not in self.own_top and ((out / n).exists() or (out / n).is_symlink())]
        present = set()
        for top in self.own_top:
            if (out / top).is_dir() and not (out / top).is_symlink():
                sub, _ = _tree(out / top)
                present |= {f"{top}/{f}" for f in sub}
        in_way += sorted(present - self.own)
        if in_way:
            raise CheckpointError(
                f"--out {self.given}: {_shown(in_way)} appeared there while this command ran and "
                f"{'is' if len(in_way) == 1 else 'are'} "
                f"not mlminilm's; kept as they are, and the new {self.what} was not written: move them away and "
                "run again"
            )
        self._mark(tmp, "complete")
        old = self._fresh("old", "aside")
        aside = sorted(n for n in self.own_top if n != OWN_FILES and ((out / n).exists() or (out / n).is_symlink()))
        if (out / OWN_FILES).exists():
            aside.append(OWN_FILES)  # last: while it is at --out it tells which files there are mlminilm's
        moved_aside, moved_in = [], []
        try:
            for name in aside:
                os.rename(out / name, old / name)
                moved_aside.append(name)
            for name in new:
                os.rename(tmp / name, out / name)
                moved_in.append(name)
        except BaseException:
            for name in reversed(moved_in):
                with contextlib.suppress(OSError):
                    os.rename(out / name, tmp / name)
            for name in reversed(moved_aside):
                with contextlib.suppress(OSError):
                    os.rename(old / name, out / name)
            shutil.rmtree(old, ignore_errors=True)
            raise
        shutil.rmtree(old, ignore_errors=True)

    # ------------------------------------------------------------------------------------ what dead runs left

    def recover(self) -> None:
        """Under the lock: a dead process's marked temporaries of this `--out` are removed; a swap it left half done
        is finished (its new output was complete). Directories without mlminilm's marker are never touched."""
        parent, name = self.out.parent, self.out.name
        if not parent.is_dir():
            return
        pattern = re.compile(rf"^\.(tmp|old)-{re.escape(name)}-(\d+)$")
        found: dict[int, dict[str, Path]] = {}
        for entry in parent.iterdir():
            match = pattern.match(entry.name)
            if not match:
                continue
            marker = read_marker(entry)
            pid = int(match.group(2))
            if marker is None or marker.get("pid") != pid or marker.get("out") != str(self.out):
                continue
            if pid != os.getpid() and pid_alive(pid):
                continue
            found.setdefault(pid, {})[match.group(1)] = entry
        for pid, entries in sorted(found.items()):
            tmp, old = entries.get("tmp"), entries.get("old")
            if tmp is not None and (read_marker(tmp) or {}).get("state") == "complete" and (tmp / OWN_FILES).exists():
                self._finish_swap(tmp, old or self._fresh("old", "aside"))
                log.warning(
                    "--out %s: finished the swap a %s process (pid %s) left half done",
                    self.given,
                    (read_marker(tmp) or {}).get("command", "mlminilm"),
                    pid,
                )
            for entry in (old, tmp):
                if entry is not None and entry.exists():
                    shutil.rmtree(entry, ignore_errors=True)
                    log.info("removed %s, left behind by a process that is no longer running", entry)
            if old is None:
                shutil.rmtree(self._temporary("old"), ignore_errors=True)

    def _finish_swap(self, tmp: Path, old: Path) -> None:
        out = self.out
        out.mkdir(parents=True, exist_ok=True)
        if (out / OWN_FILES).is_file():  # the previous output's record still in place: setting aside was cut short
            try:
                doc = json.loads((out / OWN_FILES).read_text(encoding="utf-8"))
                recorded = [*doc["files"], *doc.get("dirs", [])]
                tops = sorted({str(f).split("/", 1)[0] for f in recorded} - {OWN_FILES})
            except (OSError, ValueError, KeyError, TypeError):
                tops = []
            for top in [*tops, OWN_FILES]:
                if (out / top).exists() and not (old / top).exists():
                    os.rename(out / top, old / top)
        rest = sorted(n for n in os.listdir(tmp) if n not in (MARKER, OWN_FILES)) + [OWN_FILES]
        for name in rest:
            if (out / name).exists():
                log.warning("--out %s: %s is in the way of the swap being finished; left as it is", self.given, name)
                continue
            os.rename(tmp / name, out / name)


_CLAIM: contextvars.ContextVar = contextvars.ContextVar("mlminilm_report_claim", default=None)


def claims_report(command: str, what: str, legacy: tuple[str, ...] | None):
    """Decorate a command's `run(cfg)` that writes into `cfg.out` through a `Claim` found by `current_claim()`
    (the evaluations' ReportDir): the output's lock is taken first and held for the whole run."""

    def wrap(run):
        @functools.wraps(run)
        def claimed(cfg, *args, **kwargs):
            if getattr(cfg, "out", None) is None:
                return run(cfg, *args, **kwargs)
            with Claim(cfg.out, command, what, legacy=legacy) as claim:
                token = _CLAIM.set(claim)
                try:
                    return run(cfg, *args, **kwargs)
                finally:
                    _CLAIM.reset(token)

        return claimed

    return wrap


def current_claim():
    """The `Claim` of the `claims_report` run in progress (None outside one)."""
    return _CLAIM.get()
