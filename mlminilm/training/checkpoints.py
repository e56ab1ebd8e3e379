"""Save a checkpoint (through the same writer the asynchronous path uses), load one strictly, and find the
point a --resume run starts from."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm.config import TrainConfig
from mlminilm.errors import CheckpointError
from mlminilm.training.checkpoint_layout import CHECKPOINTS, checkpoint_dirs
from mlminilm.training.runtime import Runtime

log = mlog.get(__name__)


def load_checkpoint(path: Path, model: nn.Module, optimizer, scheduler) -> dict:
    """Restore model, optimizer, schedule and RNG from `path`; returns its state.json. Every tensor of the model
    must be in the checkpoint (and nothing else): a checkpoint of another shape is an error, never a partial load."""
    from safetensors.torch import load_model

    advice = f"remove {path} to resume from an earlier checkpoint, or start over with --overwrite"
    try:
        missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=False)
    except Exception as exc:  # noqa: BLE001 - unreadable file or a shape that does not fit
        raise CheckpointError(
            f"checkpoint {path}: model.safetensors cannot be loaded ({load_error_reason(exc)}); {advice}"
        ) from exc
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} tensor(s) of the model missing (e.g. {sorted(missing)[0]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (e.g. {sorted(unexpected)[0]})")
        raise CheckpointError(
            f"checkpoint {path} does not match this model: {', '.join(parts)}; it is damaged or from another "
            f"run: {advice}"
        )
    try:
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True, map_location="cpu"))
        trainer = torch.load(path / "trainer.pt", weights_only=True, map_location="cpu")
        scheduler.load_state_dict(trainer["scheduler"])
        # The RNG states saved beside it are not restored: the loop reseeds every step from (seed, step, rank)
        # (`step_seed`), so no process's state, and never rank 0's on every rank, decides what a resumed run draws.
        return json.loads((path / "state.json").read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - missing or damaged files: one remedy
        raise CheckpointError(f"checkpoint {path} cannot be loaded ({load_error_reason(exc)}); {advice}") from exc


def load_error_reason(exc: Exception) -> str:
    """The first line of an error, without torch's advice to unpickle with weights_only=False (never safe here)."""
    import pickle

    if isinstance(exc, pickle.UnpicklingError):
        return "it holds Python objects other than tensors, which a safe load refuses; it was not written by mlminilm"
    if isinstance(exc, FileNotFoundError):
        return f"{Path(exc.filename).name if exc.filename else 'a file'} is missing"
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first.split(" weights_only")[0].rstrip(" ,;:(") if "weights_only" in first else first


def resume_point(out: Path, cfg: TrainConfig, raw_model, optimizer, scheduler) -> tuple[int, dict]:
    """The step to start from and the checkpoint's state.json: (0, {}), or the latest whole checkpoint's when
    --resume. The peak learning rate and the warmup are this run's (`cfg`), so --resume may change them;
    unchanged, the schedule continues exactly."""
    if not cfg.resume:
        return 0, {}
    found = checkpoint_dirs(out)
    if not found:
        log.warning("--resume: no checkpoint in %s, starting from step 0", Path(out) / CHECKPOINTS)
        return 0, {}
    step, path = found[-1]
    if step > cfg.max_steps:
        raise CheckpointError(f"checkpoint {path} is past --max-steps {cfg.max_steps}; raise --max-steps")
    state = load_checkpoint(path, raw_model, optimizer, scheduler)
    _set_peak_lr(optimizer, scheduler, cfg.lr)
    log.info("resumed from %s", path)
    return step, state


def check_same_run_everywhere(out: Path, rt: Runtime, record_file: str) -> None:
    """Under torchrun, before --resume reads anything of the run in `out`: every rank must see it as rank 0 does
    (the same newest whole checkpoint, the run record or none), else every rank raises the same CheckpointError.

    A rank reads `out` through its own node's filesystem. Where that is not shared, ranks of other nodes find
    another checkpoint or none, start from other steps and run other numbers of steps: their collectives no longer
    pair up, and the run hangs or trains on wrong gradients. One all_gather of what each rank sees, before any
    rank acts on it, lets each compare all of them alike, so they all stop, at once, with the same line."""
    if not rt.distributed:
        return
    import torch.distributed as dist

    found = checkpoint_dirs(out)
    mine = {"checkpoint": found[-1][0] if found else None, "record": (Path(out) / record_file).is_file()}
    views: list = [None] * rt.world
    dist.all_gather_object(views, (socket.gethostname(), mine))
    if all(view == views[0][1] for _, view in views):
        return
    seen = "; ".join(f"rank {r} on {host}: {_describe(view, record_file)}" for r, (host, view) in enumerate(views))
    raise CheckpointError(
        f"--resume: the ranks do not see the same run in {out} ({seen}); --out must be one directory that every "
        "node sees (a shared filesystem), or a copy of the same run on each node"
    )


def _describe(view: dict, record_file: str) -> str:
    checkpoint = f"checkpoint step-{view['checkpoint']}" if view["checkpoint"] is not None else "no checkpoint"
    return f"{checkpoint}, {record_file if view['record'] else 'no ' + record_file}"


def _set_peak_lr(optimizer, scheduler, lr: float) -> None:
    """After loading a schedule's state (which holds the saved run's peak), make `lr` the peak and recompute the
    current rate with this run's warmup: the same numbers LambdaLR computes, so an unchanged run is bit-exact."""
    scheduler.base_lrs = [lr for _ in optimizer.param_groups]
    rates = [base * factor(scheduler.last_epoch) for factor, base in zip(scheduler.lr_lambdas, scheduler.base_lrs)]
    for group, rate in zip(optimizer.param_groups, rates):
        group["initial_lr"] = lr
        group["lr"] = rate
    scheduler._last_lr = rates
