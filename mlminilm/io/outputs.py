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
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import functools
import json
import os
import re
import shutil
import stat
import time
from pathlib import Path
from typing import Iterable, Mapping

from mlminilm import logging as mlog
from mlminilm.errors import CheckpointError, ConfigError
from mlminilm.io.stale import pid_alive

log = mlog.get(__name__)

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


MARKER = ".mlminilm-temporary"  # inside a temporary or set-aside output: whose it is (pid, command, start time)
OWN_FILES = ".mlminilm-output.json"  # inside every output: the files mlminilm wrote there, all others the user's
_MARKER_BYTES = 65536


def resolve_out(out: str | Path) -> Path:
    """`--out` as the directory it names, before any work: absolute, `.` and `..` resolved, and a symlink (at the
    end or on the way) written through to its target, so the output lands where the link points and the link stays
    as it was. The root of the file system is refused."""
    path = Path(os.path.realpath(os.path.expanduser(str(out))))
    if path == path.parent:
        raise ConfigError(f"--out {out} is the root of the file system; name a directory of its own")
    return path


class OutputLock:
    """An exclusive lock on an output path, held by one process from the start of a command to its end.

    The lock file sits beside the output (`.<name>.lock`, beside the directory `--out` resolves to), so it can guard
    an output that is created or replaced while it is held. It is opened without following a symbolic link and must
    be a plain file of its own (no hard link to another), so a planted link can never make mlminilm truncate or
    write into a file of the user's. `fcntl.flock` ties the lock to the open file: a process that dies, however it
    dies, releases it, and the next command takes it over; the pid written in the file is only for the message.
    Directories made to hold the lock file are removed again when they are left empty."""

    def __init__(self, out: str | Path):
        final = Path(os.path.realpath(os.path.expanduser(str(out))))
        self.path = final.parent / f".{final.name}.lock"
        self.out = out
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
                        f"the lock file {self.path} of --out {self.out} is a symbolic link, which mlminilm never "
                        "follows (it did not make it): remove the link, then run again"
                    ) from None
                raise
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                os.close(fd)
                raise CheckpointError(
                    f"the lock file {self.path} of --out {self.out} is not a plain file of its own (a FIFO, a device "
                    "or a hard link to another file), so mlminilm does not write into it: remove it, then run again"
                )
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
                if os.lstat(self.path).st_ino == info.st_ino:
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
    """One command's hold on its `--out` (the protocol in this module's docstring), as a context manager:

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
                files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
                if not all(
                    isinstance(f, str) and f and not f.startswith("/") and ".." not in f.split("/") for f in files
                ):
                    raise ValueError("a path outside the output")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CheckpointError(
                    f"--out {self.given}: its record of mlminilm's own files ({OWN_FILES}) is damaged ({exc}), so "
                    "--overwrite cannot tell them from yours: move the directory away or choose another --out"
                ) from None
            own = set(files) | {OWN_FILES}
            present, dirs = _tree(out)
            parents = {"/".join(f.split("/")[:i]) for f in own for i in range(1, f.count("/") + 1)}
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
        files, _ = _tree(tmp)
        files.discard(MARKER)
        from mlminilm.version import __version__

        (tmp / OWN_FILES).write_text(
            json.dumps({"command": self.command, "mlminilm": __version__, "files": sorted(files)}, indent=1) + "\n",
            encoding="utf-8",
        )  # no time in it: the same inputs give a byte-identical output
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
                recorded = json.loads((out / OWN_FILES).read_text(encoding="utf-8"))["files"]
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
