"""A training command's output directory: refusing or cleaning it, the run record (what made the run) and its
--resume check, and the metrics log."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

import torch

from mlminilm import logging as mlog
from mlminilm.config import TrainConfig, resume_changeable
from mlminilm.errors import CheckpointError
from mlminilm.io.atomic import write_json_atomic
from mlminilm.training.checkpoint_layout import CHECKPOINTS, checkpoint_dirs
from mlminilm.training.runtime import Runtime
from mlminilm.version import __version__

log = mlog.get(__name__)
RUN_RECORD = "run.json"  # the run record: not config.json, which from_pretrained(OUT) would take for a model's
METRICS = "metrics.jsonl"
TENSORBOARD = "tb"  # --report-to tensorboard: the event files (mlminilm.training.tracking)
# Options that --resume may change (the advice after a divergence: lower --lr, longer --warmup), recorded in the run
# record; any other option a command lists as defining its run must stay the same.
RESUME_CHANGEABLE = resume_changeable(TrainConfig)  # declared on the fields (resume=CHANGEABLE): lr, warmup


PREVIOUS_RUN = ".previous-run"  # where --overwrite keeps the run it replaces until the new one has finished


@dataclasses.dataclass(frozen=True)
class RunLayout:
    """What a training command keeps in its --out, as its claim on the directory needs to know it: the entries it
    writes (`artifacts`: all that --overwrite may replace), its run record, how the refusal names a run of it, and
    how to tell a run that died before its first checkpoint (`leftovers`: nothing in it to resume) from one that
    saved one (`checkpointed`). The defaults are a single run's (distill, finetune); assist's runs its stages in
    sub-directories. `kept`: entries of the run's own that --overwrite leaves in place (not refused as another's,
    not set aside): a teacher-target cache the user placed inside --out, which proves its own contents."""

    artifacts: tuple[str, ...]
    record_file: str = RUN_RECORD
    what: str = "a run of this command"
    leftovers: Callable[[Path], bool] | None = None  # None: failed_run_leftovers(out, record_file)
    checkpointed: Callable[[Path], bool] | None = None  # None: whether out/checkpoints/ holds one
    kept: tuple[str, ...] = ()

    def died_early(self, out: Path) -> bool:
        return self.leftovers(out) if self.leftovers else failed_run_leftovers(out, self.record_file)

    def has_checkpoint(self, out: Path) -> bool:
        return self.checkpointed(out) if self.checkpointed else bool(checkpoint_dirs(out))


@contextlib.contextmanager
def claimed_output(
    out: Path, cfg: TrainConfig, artifacts: tuple[str, ...] | RunLayout, inputs: dict, record_file: str = RUN_RECORD
):
    """A training command's hold on its --out for the whole run (README "Reliability"):

    - refused when it is, contains or lies inside an input (`inputs`: flag -> path);
    - locked against a second command writing it at the same time (the main process holds the lock);
    - with --overwrite, the previous run's files (`artifacts`, nothing else: a directory holding other files is
      refused) are set aside in OUT/.previous-run and removed only when the new run has finished; a new run that
      fails before its first checkpoint puts them back, one that fails later keeps both (and says so).
    """
    from mlminilm.io.outputs import OutputLock, refuse_overlap

    layout = artifacts if isinstance(artifacts, RunLayout) else RunLayout(tuple(artifacts), record_file)
    out = Path(out)
    refuse_overlap(out, inputs)
    main = mlog.is_main_process()
    with OutputLock(out) if main else contextlib.nullcontext():
        aside = prepare_output_dir(out, cfg, layout, set_aside=main)
        try:
            yield
        except BaseException:
            if main and aside is not None:
                _after_failed_overwrite(out, aside, layout)
            raise
        if main and (out / PREVIOUS_RUN).exists():
            shutil.rmtree(out / PREVIOUS_RUN, ignore_errors=True)


def prepare_output_dir(
    out: Path,
    cfg: TrainConfig,
    artifacts: tuple[str, ...] | RunLayout,
    record_file: str = RUN_RECORD,
    set_aside: bool = True,
) -> Path | None:
    """Refuse a non-empty output directory unless resuming or overwriting; on overwrite set only our artifacts
    aside (in OUT/.previous-run, returned; None when nothing was set aside), refusing a directory with other files.

    Temporaries of dead processes are removed first, and a directory that holds only what a failed run left before
    its first checkpoint (its run record and metrics log) is started over: there is nothing to resume in it.
    Under torchrun every process checks, and only the main one (`set_aside`) moves files."""
    from mlminilm.io.outputs import check_replaceable
    from mlminilm.io.stale import clean_stale

    layout = artifacts if isinstance(artifacts, RunLayout) else RunLayout(tuple(artifacts), record_file)
    artifacts = layout.artifacts
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"--out {out} is a file, not a directory; name a directory")
    # Our names only at OUT's root (it may be a directory of the user's, refused below); all in checkpoints/.
    clean_stale(out, prefix=(".tmp-student-", *(f".{name}.tmp-" for name in (RUN_RECORD, "selection.json"))))
    clean_stale(out / CHECKPOINTS)
    existing = [p for p in out.iterdir()] if out.exists() else []
    failed = bool(existing) and not cfg.resume and layout.died_early(out)
    if existing and not (cfg.resume or cfg.overwrite or failed):
        kept = (
            f" ({out / PREVIOUS_RUN} holds the run an unfinished --overwrite replaced)"
            if (out / PREVIOUS_RUN).exists()
            else ""
        )
        raise CheckpointError(
            f"output directory {out} exists and is not empty{kept}; add --resume to continue that run or "
            "--overwrite to start over"
        )
    if cfg.overwrite:
        check_replaceable(out, layout.artifacts + layout.kept, layout.what)
    if failed and not cfg.overwrite:
        log.warning("%s holds only the record of a run that saved no checkpoint: starting over", out)
    if not set_aside or not (cfg.overwrite or failed):
        return None
    present = [name for name in artifacts if (out / name).exists()]
    if failed or not present:
        _remove(out, artifacts)  # a failed run's record and log: nothing to keep
        return None
    aside = out / PREVIOUS_RUN
    if aside.exists():
        # An earlier --overwrite did not finish: what is here is its unfinished run; the finished one stays aside.
        _remove(out, artifacts)
        log.warning(
            "%s: removed the unfinished run of an earlier --overwrite; the run it replaced is still in %s", out, aside
        )
        return aside
    aside.mkdir()
    for name in present:
        os.replace(out / name, aside / name)
    log.info("--overwrite: the previous run is kept in %s until this one finishes", aside)
    return aside


def _remove(out: Path, names) -> None:
    for name in names:
        target = out / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


def _after_failed_overwrite(out: Path, aside: Path, layout: RunLayout) -> None:
    """The new run failed: with no checkpoint of its own, the previous run goes back in place; otherwise both
    stay (the new one can be resumed) and the log says where the previous one is."""
    if layout.has_checkpoint(out):
        log.warning(
            "the run failed after saving a checkpoint (resume it with --resume); the run --overwrite "
            "replaced is kept in %s",
            aside,
        )
        return
    _remove(out, layout.artifacts)
    for entry in aside.iterdir():
        os.replace(entry, out / entry.name)
    aside.rmdir()
    log.warning("the run failed before its first checkpoint: the previous run in %s is restored", out)


def failed_run_leftovers(out: Path, record_file: str = RUN_RECORD) -> bool:
    """Whether `out` holds nothing but what a run that died before its first checkpoint leaves: its run record,
    its metrics log (and TensorBoard files), and a checkpoints/ directory without a whole checkpoint."""
    out = Path(out)
    if not out.is_dir() or checkpoint_dirs(out):
        return False
    allowed = {record_file, METRICS, TENSORBOARD, CHECKPOINTS}
    names = {p.name for p in out.iterdir()}
    if not names or not names <= allowed:
        return False
    root = out / CHECKPOINTS
    return not root.exists() or (root.is_dir() and not any(root.iterdir()))


def git_revision() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        rev = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return rev.stdout.strip() or None
    except Exception:
        return None


def run_record(cfg, rt: Runtime, extra: dict | None = None) -> dict:
    """The resolved config with versions, device, seed and git revision: written before work starts."""
    import transformers

    record = {
        "command": type(cfg).__name__.replace("Config", "").lower(),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()},
        "mlminilm": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": str(rt.device) if rt.device.type == "cpu" else torch.cuda.get_device_name(rt.device),
        "world_size": rt.world,
        "precision": str(rt.dtype).replace("torch.", ""),
        "git_revision": git_revision(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    record.update(extra or {})
    return record


class MetricsLog:
    """JSON lines, one object per logged step, flushed as they happen (main process only)."""

    def __init__(self, path: Path, enabled: bool = True):
        self.path = Path(path)
        self.enabled = enabled

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def close(self) -> None:
        """Nothing to do: every record is appended and closed as it is written (a tracking sink's interface)."""

    def truncate_after(self, step: int) -> None:
        """On resume, drop records past the checkpoint so the log reads like the uninterrupted run.

        A half-written last line (the process died while appending it) is dropped; a damaged line before it is an
        error that names the line."""
        if not self.enabled or not self.path.exists():
            return
        lines = [l for l in self.path.read_text(encoding="utf-8", errors="replace").splitlines() if l.strip()]
        kept = []
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
            except ValueError:
                if number == len(lines):
                    log.warning("%s: dropped a half-written last line (the run stopped while writing it)", self.path)
                    break
                raise CheckpointError(
                    f"{self.path}:{number}: not a metrics record (the log is damaged); delete that line, or the "
                    "whole file, to resume"
                ) from None
            if record.get("step", 0) <= step:
                kept.append(line)
        self.path.write_text("".join(l + "\n" for l in kept), encoding="utf-8")


def read_run_record(out: Path, record_file: str = RUN_RECORD) -> tuple[Path, dict] | None:
    """The run record of the run in `out` (`record_file`), or None when there is none. A damaged record is an
    error that says what to do."""
    path = Path(out) / record_file
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not isinstance(record.get("config", {}), dict):
            raise ValueError("not a run record object")
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(
            f"run record {path} is damaged ({str(exc).splitlines()[0]}): it cannot tell which options made this "
            f"run; delete it to resume without that check (it is written again), or start over with --overwrite"
        ) from None
    return path, record


def check_resume_compatible(
    out: Path, record: dict, keys: tuple[str, ...], record_file: str = RUN_RECORD, write: bool = True
) -> dict:
    """On --resume, the run's defining options (`keys`) must equal those recorded in OUT/<record_file>.

    Options in RESUME_CHANGEABLE may differ: each change is logged and recorded (the record's "config" takes the
    new value, "resumes" keeps what changed and when), when `write` (the main process). Returns the changes."""
    found = read_run_record(out, record_file)
    if found is None:
        return {}
    path, old_record = found
    old = old_record.get("config", {})
    new = record["config"]
    diff = [
        f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
        for k in keys
        if k not in RESUME_CHANGEABLE and old.get(k) != new.get(k)
    ]
    if diff:
        raise CheckpointError(
            f"--resume with options that differ from the run in {out} ({'; '.join(diff)}); use the same options "
            f"(only {', '.join('--' + k for k in RESUME_CHANGEABLE)} may change) or a new --out"
        )
    changes = {k: [old[k], new.get(k)] for k in RESUME_CHANGEABLE if k in old and old[k] != new.get(k)}
    if changes:
        log.warning(
            "--resume with %s (recorded in %s)",
            ", ".join(f"--{k.replace('_', '-')} {a} -> {b}" for k, (a, b) in changes.items()),
            Path(out) / record_file,
        )
    if write:
        record_resume(out, changes, record_file=record_file)
    return changes


def record_resume(out: Path, changes: dict, added: dict | None = None, record_file: str = RUN_RECORD) -> None:
    """A --resume's entry in the run record in `out`: the changed options (`changes`, option -> [old, new], as
    check_resume_compatible found them) into its "config" and "resumes", and `added`, entries an older record
    lacks (kept as they are where present). Written only when something changes (the main process calls it)."""
    found = read_run_record(out, record_file)
    if found is None or not (changes or added):
        return
    path, old_record = found
    updated = {**old_record, **{k: v for k, v in (added or {}).items() if k not in old_record}}
    if changes:
        updated["config"] = {**old_record.get("config", {}), **{k: b for k, (a, b) in changes.items()}}
        updated["resumes"] = [
            *old_record.get("resumes", []),
            {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "changed": changes},
        ]
    if updated != old_record:
        write_json_atomic(path, updated)
