"""The teacher-target cache on disk (`distill --target-cache`): one folder per fingerprint, its part files, and
the rules that keep a part from ever being used for another teacher or read half-written.

Inside the cache root, `<id>/` holds one fingerprint's vectors (`id` and the facts behind it: targets.fingerprint):
`fingerprint.json` (those facts, for people; read back and rewritten when it disagrees with its folder) and
`part-NNNNN.safetensors` (`keys` uint8 [n, 16], `vectors` float32 [n, width]). A part proves what it belongs to:
its metadata names the fingerprint id, and its digest covers that id with the tensors. A part that does not load,
whose digest differs, that names another fingerprint (copied from another teacher's folder) or whose vectors have
another width than the teacher's is never used: the main process removes it with a warning and its sentences are
recomputed.

One process at a time writes a fingerprint's folder: it holds `.<id>.lock` beside it (mlminilm.io.output_lock,
waiting while another run fills the same folder) from reading the folder to its last part, and cleans the
temporaries of writers that died (`.part-*.tmp-<pid>`). A part is written whole (temporary name, then rename);
a write that fails (a full disk) removes its temporary, and the folder when it holds no part yet, and stops the
run with one line naming the cache. A cache that cannot be written (read-only) is read without the lock, and is
an error only when it lacks targets the run needs.

Under DDP the ranks of one run fill the folder together (targets.prepare): rank 0 holds the lock and checks the
folder, and every rank writes the parts of its own share into it. A rank numbers its parts among the numbers left
to it (`rank` modulo `world`), so two ranks writing at once never pick the same name (a rename would replace the
other's part without a word).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

from mlminilm import logging as mlog
from mlminilm.errors import CheckpointError, ConfigError

log = mlog.get(__name__)

KEY_BYTES = 16
FACTS = "fingerprint.json"
# Temporaries this store's writers leave when they die: `.part-00003.safetensors.tmp-<pid>`, the facts' likewise.
_TEMPORARIES = (".part-", f".{FACTS}.tmp-")
# A cache that cannot be written is read as it is (no lock, nothing removed).
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=KEY_BYTES).digest()


def part_digest(fingerprint_id: str, keys: np.ndarray, vectors: np.ndarray) -> str:
    """What a part records of itself: its fingerprint's id and its tensors, so that neither can change alone."""
    h = hashlib.blake2b(digest_size=16)
    h.update(fingerprint_id.encode() + b"|")
    h.update(keys.tobytes())
    h.update(vectors.tobytes())
    return h.hexdigest()


def part_bytes(fingerprint_id: str, keys: np.ndarray, vectors: np.ndarray) -> bytes:
    """A part file's contents (safetensors), metadata included."""
    from safetensors.numpy import save

    metadata = {"fingerprint": fingerprint_id, "digest": part_digest(fingerprint_id, keys, vectors)}
    return save({"keys": keys, "vectors": vectors}, metadata=metadata)


def refuse_place(cache: str | Path, inputs: dict, out: str | Path) -> None:
    """ConfigError unless `cache` (--target-cache) names a directory of its own: not the run's --out (whose files
    --overwrite replaces) and not an input (flag -> path) or a folder inside one, where its parts would be written
    among a teacher's or a corpus's files. Hub ids and inputs that are not on disk are skipped."""
    if not str(cache).strip():
        raise ConfigError("--target-cache '' names no directory; give a directory of its own, or leave it out")
    target = Path(os.path.realpath(os.path.expanduser(str(cache))))
    if target.exists() and not target.is_dir():
        raise ConfigError(f"--target-cache {cache} is a file, not a directory; name a directory")
    places = [("--out", out), *inputs.items()]
    for flag, value in places:
        if value is None or not str(value) or (flag != "--out" and not Path(value).exists()):
            continue
        source = Path(os.path.realpath(os.path.expanduser(str(value))))
        how = "is" if target == source else "lies inside" if source in target.parents and flag != "--out" else None
        if how:
            raise ConfigError(
                f"--target-cache {cache} {how} the {flag} {'directory' if flag == '--out' else 'input'} {value}; "
                "give the cache a directory of its own"
            )


def place_in_out(
    cache: str | Path | None, out: str | Path, outputs: tuple[str, ...], replaced: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The entry of --out that holds the cache, when `cache` (--target-cache) lies inside `out`: it is the run's own
    (an --overwrite keeps it: its parts prove their teacher and text, and recomputing them costs teacher time);
    () when the cache lies elsewhere or in one of `replaced` (the cache's default place, a stage's run directory:
    entries --overwrite replaces whole). ConfigError when it lies in another of the run's `outputs` (its record,
    log, checkpoints, export ...), which the run rewrites or --overwrite sets aside."""
    if cache is None:
        return ()
    target, root = (Path(os.path.realpath(os.path.expanduser(str(p)))) for p in (cache, out))
    if root not in target.parents:
        return ()
    name = target.relative_to(root).parts[0]
    if name in replaced:
        return ()
    if name in outputs:
        raise ConfigError(
            f"--target-cache {cache} {'is' if target.parent == root else 'lies inside'} {name}, which the run "
            f"writes in --out {out}; give the cache a directory of its own (such as {Path(out) / 'cache'})"
        )
    return (name,)


class TargetStore:
    """One fingerprint's vectors: what is on disk, checked, and what this run adds. `advice` says, in an error,
    how to give the run another cache (which option places it)."""

    def __init__(
        self,
        root: Path,
        facts: dict,
        advice: str = "give --target-cache a directory of its own",
        *,
        rank: int = 0,
        world: int = 1,
    ):
        self.root = Path(root)
        self.rank, self.world = rank, world  # which part numbers this process writes (one process: all)
        self.dir = self.root / facts["id"]
        self.facts = facts
        self.width: int | None = facts.get("width")  # None (a caller that does not know it): the first part's
        self.advice = advice
        self.writable = True
        self.index: dict[bytes, int] = {}
        self.rows: list[np.ndarray] = []

    @contextlib.contextmanager
    def locked(self, wait=None):
        """Hold this fingerprint's folder against other writers (waiting for one that holds it: `wait(holder)` is
        called first); a cache that cannot be written is used read-only, without the lock."""
        from mlminilm.io.output_lock import OutputLock

        with contextlib.ExitStack() as held:
            try:
                held.enter_context(OutputLock(self.dir, flag="--target-cache", wait=wait))
            except OSError as exc:
                if exc.errno not in _UNWRITABLE:
                    raise self._error(exc) from None
                log.info("teacher-target cache %s is not writable (%s): read as it is", self.root, exc.strerror)
                self.writable = False
            yield self

    def load(self, repair: bool = True) -> int:
        """Read every part that proves it belongs here; the others are warned about and, with `repair` (the process
        that holds the lock) on a writable cache, removed: their sentences are then recomputed. Returns the number
        of vectors read."""
        if not self.dir.is_dir():
            return 0
        repair = repair and self.writable
        if repair:
            from mlminilm.io.stale import clean_stale

            clean_stale(self.dir, prefix=_TEMPORARIES)
            self._check_facts()
        for part in sorted(self.dir.glob("part-*.safetensors")):
            if part.is_symlink() or not part.is_file():  # not a part mlminilm wrote: never read, never removed
                log.warning("teacher-target cache: %s is not a plain file; not used (move it away)", part)
                continue
            found = self._read_part(part)
            if isinstance(found, str):
                log.warning(
                    "teacher-target cache: %s %s; %s",
                    part,
                    found,
                    "removed, its sentences are recomputed" if repair else "not used",
                )
                if repair:
                    part.unlink(missing_ok=True)
                continue
            self.width = found[1].shape[1]
            self._add(*found)
        return len(self.index)

    def _check_facts(self) -> None:
        """fingerprint.json must describe its folder: one that does not (copied or renamed, damaged) is rewritten."""
        path = self.dir / FACTS
        if not path.exists():
            return
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            recorded = None
        if recorded != self.facts:
            teacher = recorded.get("teacher") if isinstance(recorded, dict) else None
            log.warning(
                "teacher-target cache: %s does not describe its folder (it records %s); rewritten, and only parts "
                "that name this fingerprint are used",
                path,
                f"teacher digest {teacher}" if teacher else "no readable fingerprint",
            )
            self._write_facts()

    def _read_part(self, part: Path) -> tuple[np.ndarray, np.ndarray] | str:
        """(keys, vectors) of a part that belongs here, else why not."""
        from safetensors import safe_open

        try:
            with safe_open(str(part), framework="np") as f:
                meta = f.metadata() or {}
                keys, vectors = f.get_tensor("keys"), f.get_tensor("vectors")
        except Exception:  # safetensors raises its own error types for a truncated or garbled file
            return "is damaged (it does not load)"
        shaped = (
            keys.ndim == 2
            and keys.shape[1] == KEY_BYTES
            and keys.dtype == np.uint8
            and vectors.ndim == 2
            and vectors.dtype == np.float32
            and len(keys) == len(vectors)
        )
        owner = meta.get("fingerprint")
        if owner != self.facts["id"]:
            return f"belongs to {f'fingerprint {owner}' if owner else 'no fingerprint'}, not {self.facts['id']}"
        if not shaped or meta.get("digest") != part_digest(owner, keys, vectors):
            return "is damaged (its digest differs)"
        if self.width is not None and vectors.shape[1] != self.width:
            return f"holds vectors {vectors.shape[1]} wide, the teacher's are {self.width}"
        return keys, vectors

    def _add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        base = sum(len(r) for r in self.rows)
        self.rows.append(vectors)
        for i, key in enumerate(keys):
            self.index.setdefault(bytes(key), base + i)

    def missing(self, texts: list[str]) -> list[str]:
        """The distinct texts of `texts` with no vector yet, in first-seen order."""
        return [t for t in dict.fromkeys(texts) if text_key(t) not in self.index]

    def write(self, texts: list[str], vectors: np.ndarray) -> None:
        """Add `vectors` (float32 [n, width]) for `texts` as one new part file, written whole."""
        keys = np.frombuffer(b"".join(text_key(t) for t in texts), dtype=np.uint8).reshape(len(texts), KEY_BYTES)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.require_writable()
        data = part_bytes(self.facts["id"], keys, vectors)
        tmp = None
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            if not (self.dir / FACTS).exists():
                self._write_facts()
            n = len(list(self.dir.glob("part-*.safetensors")))
            n += (self.rank - n) % self.world  # the first number left to this rank from there
            while (self.dir / f"part-{n:05d}.safetensors").exists():
                n += self.world
            final = self.dir / f"part-{n:05d}.safetensors"
            tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
            with open(tmp, "xb") as handle:
                handle.write(data)
            os.replace(tmp, final)
        except OSError as exc:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            self._remove_if_empty()
            raise self._error(exc) from None
        self.width = vectors.shape[1]
        self._add(keys, vectors)

    def require_writable(self) -> None:
        """CheckpointError when the cache cannot be written (read-only) and the run needs targets it lacks."""
        if not self.writable:
            raise CheckpointError(
                f"teacher-target cache {self.root} cannot be written and lacks targets of sentences this run "
                f"draws; {self.advice}"
            )

    def _write_facts(self) -> None:
        from mlminilm.io.atomic import write_json_atomic

        path = self.dir / FACTS
        try:
            write_json_atomic(path, self.facts)
        except BaseException:
            path.with_name(f".{FACTS}.tmp-{os.getpid()}").unlink(missing_ok=True)
            raise

    def _remove_if_empty(self) -> None:
        """After a failed write: a folder without any part holds nothing worth keeping (its facts only)."""
        if not self.dir.is_dir() or any(self.dir.glob("part-*.safetensors")):
            return
        (self.dir / FACTS).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.dir.rmdir()

    def _error(self, exc: OSError) -> CheckpointError:
        """The one line for a cache that cannot be written: what failed, where, and which option moves it."""
        what = exc.strerror or type(exc).__name__
        space = " free some disk space, or" if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)) else ""
        return CheckpointError(
            f"cannot write the teacher-target cache {self.root} ({what}: {exc.filename or self.dir});{space} "
            f"{self.advice}"
        )

    def table(self) -> TargetTable:
        return TargetTable(self.index, torch.from_numpy(np.concatenate(self.rows)) if self.rows else None)


class TargetTable:
    """The vectors in memory, looked up by text: what a step's ParallelBatch carries instead of the sources."""

    def __init__(self, index: dict[bytes, int], vectors: torch.Tensor | None):
        self.index, self.vectors = index, vectors

    def __call__(self, texts: list[str]) -> torch.Tensor:
        rows = [self.index[text_key(t)] for t in texts]  # KeyError: a text the fill did not embed (a bug)
        return self.vectors[rows]
