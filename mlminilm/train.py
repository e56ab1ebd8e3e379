"""What every training loop shares: devices and precision, DDP, AdamW and its schedule, gradient
accumulation, atomic checkpoints with exact resume, the metrics log and the run record."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import platform
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from mlminilm import __version__
from mlminilm import logging as mlog
from mlminilm.config import TrainConfig
from mlminilm.errors import CheckpointError, TrainingDiverged

log = mlog.get(__name__)

CHECKPOINTS = "checkpoints"
RUN_RECORD = "run.json"  # the run record: not config.json, which from_pretrained(OUT) would take for a model's
LEGACY_RUN_RECORD = "config.json"  # where distill and assist wrote it in earlier versions; still read on --resume
METRICS = "metrics.jsonl"
# Options that --resume may change (the advice after a divergence: lower --lr, longer --warmup), recorded in the run
# record; any other option a command lists as defining its run must stay the same.
RESUME_CHANGEABLE = ("lr", "warmup")
_STEP_DIR = re.compile(r"^step-(\d+)$")


# ---------------------------------------------------------------------------------------------- devices


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    dtype: torch.dtype  # compute dtype of autocast (float32 = no autocast)
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX), so `--precision auto` uses bf16 on it.

    There a distill step under bf16 autocast (teacher weights in bf16, relation logits still fp32) takes about
    half the time of fp32 (benchmarks/distill_step.py, docs/BENCHMARKS.md); without it bf16 is emulated and slower.
    """
    import torch.cpu

    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a torch without these probes: read the CPU flags
        try:
            flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split()
        except OSError:
            return False
        return "avx512_bf16" in flags or "amx_bf16" in flags


def setup_runtime(device: str = "auto", precision: str = "auto") -> Runtime:
    """Pick the device and precision, and join the torchrun process group when launched by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        from mlminilm.errors import ConfigError

        raise ConfigError("--device cuda was asked for but no CUDA device is available; use --device cpu")
    dev = torch.device(device, local_rank) if device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        if dev.type == "cuda":
            # Bound to this process's GPU from the start: NCCL then creates its communicators eagerly on the right
            # device instead of guessing it at the first collective.
            dist.init_process_group(backend="nccl", device_id=dev)
        else:
            dist.init_process_group(backend="gloo")
    if precision == "auto":
        precision = "bf16" if (dev.type == "cuda" and torch.cuda.is_bf16_supported()) or (
            dev.type == "cpu" and cpu_has_native_bf16()) else ("fp16" if dev.type == "cuda" else "fp32")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    return Runtime(dev, dtype, rank, world, local_rank)


def teardown_runtime(rt: Runtime) -> None:
    if rt.distributed and dist.is_initialized():
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------ optimizer, schedule


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on weight matrices only (not biases or LayerNorm), fused on CUDA and CPU.

    The fused CPU kernel is 4x or more faster than the default per-parameter loop (7M parameters: 9 -> 2 ms),
    5 % of the small CPU distill step in benchmarks/distill_step.py (docs/BENCHMARKS.md).
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=cfg.lr,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_eps,
        fused=device.type in ("cuda", "cpu"),
    )


def linear_schedule(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup from 0 to the peak over `warmup` steps, then linear decay to 0 at `total`: the factors of
    `transformers.get_linear_schedule_with_warmup` exactly (step s of warmup 4: 0, .25, .5, .75, then 1.0 and down),
    so the first optimizer step of a run with warmup takes a learning rate of 0, as in transformers."""

    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# ----------------------------------------------------------------------------------------- output dirs


def prepare_output_dir(out: Path, cfg: TrainConfig, artifacts: tuple[str, ...], record_file: str = RUN_RECORD) -> None:
    """Refuse a non-empty output directory unless resuming or overwriting; on overwrite remove only our artifacts.

    Temporaries of dead processes are removed first, and a directory that holds only what a failed run left before
    its first checkpoint (its run record and metrics log) is started over: there is nothing to resume in it."""
    from mlminilm.stale import clean_stale

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"--out {out} is a file, not a directory; name a directory")
    # Our names only at OUT's root (it may be a directory of the user's, refused below); all in checkpoints/.
    clean_stale(out, prefix=(".tmp-student-", *(f".{name}.tmp-" for name in (RUN_RECORD, LEGACY_RUN_RECORD, "selection.json"))))
    clean_stale(out / CHECKPOINTS)
    existing = [p for p in out.iterdir()] if out.exists() else []
    failed = bool(existing) and not cfg.resume and failed_run_leftovers(out, record_file)
    if existing and not (cfg.resume or cfg.overwrite or failed):
        raise CheckpointError(
            f"output directory {out} exists and is not empty; add --resume to continue that run or --overwrite to start over"
        )
    if failed and not cfg.overwrite:
        log.warning("%s holds only the record of a run that saved no checkpoint: starting over", out)
    if cfg.overwrite or failed:
        for name in artifacts:  # every torchrun process does this: another may have removed a file first
            target = out / name
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)


def failed_run_leftovers(out: Path, record_file: str = RUN_RECORD) -> bool:
    """Whether `out` holds nothing but what a run that died before its first checkpoint leaves: its run record,
    its metrics log, and a checkpoints/ directory without a whole checkpoint."""
    out = Path(out)
    if not out.is_dir() or checkpoint_dirs(out):
        return False
    allowed = {record_file, METRICS, CHECKPOINTS}
    names = {p.name for p in out.iterdir()}
    if not names or not names <= allowed | {LEGACY_RUN_RECORD}:
        return False
    if LEGACY_RUN_RECORD in names and LEGACY_RUN_RECORD != record_file and not _is_run_record(out / LEGACY_RUN_RECORD):
        return False  # a model's config.json: this is not a failed run's directory
    root = out / CHECKPOINTS
    return not root.exists() or (root.is_dir() and not any(root.iterdir()))


def _is_run_record(path: Path) -> bool:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "command" in record and "config" in record


def git_revision() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
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


def write_json_atomic(path: Path, obj) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


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


# ----------------------------------------------------------------------------------------- checkpoints


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


def save_checkpoint(out: Path, step: int, model: nn.Module, optimizer, scheduler, state: dict, keep: int) -> Path:
    """Write checkpoints/step-N/ under a temporary name and rename it into place; keep the last `keep`.

    The synchronous form of `checkpoint_writer.AsyncCheckpointer`: the same host snapshot and the same writer, so a
    checkpoint is the same files whichever wrote it."""
    from mlminilm.checkpoint_writer import snapshot, write_snapshot

    return write_snapshot(out, snapshot(model, optimizer, scheduler, state, step), keep)


def load_checkpoint(path: Path, model: nn.Module, optimizer, scheduler) -> dict:
    """Restore model, optimizer, schedule and RNG from `path`; returns its state.json. Every tensor of the model
    must be in the checkpoint (and nothing else): a checkpoint of another shape is an error, never a partial load."""
    from safetensors.torch import load_model

    advice = f"remove {path} to resume from an earlier checkpoint, or start over with --overwrite"
    try:
        missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=False)
    except Exception as exc:  # noqa: BLE001 - unreadable file or a shape that does not fit
        raise CheckpointError(f"checkpoint {path}: model.safetensors cannot be loaded ({_reason(exc)}); {advice}") from exc
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
        raise CheckpointError(f"checkpoint {path} cannot be loaded ({_reason(exc)}); {advice}") from exc


def _reason(exc: Exception) -> str:
    """The first line of an error, without torch's advice to unpickle with weights_only=False (never safe here)."""
    import pickle

    if isinstance(exc, pickle.UnpicklingError):
        return "it holds Python objects other than tensors, which a safe load refuses; it was not written by mlminilm"
    if isinstance(exc, FileNotFoundError):
        return f"{Path(exc.filename).name if exc.filename else 'a file'} is missing"
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first.split(" weights_only")[0].rstrip(" ,;:(") if "weights_only" in first else first


def weights_finite(model: nn.Module) -> bool:
    """Whether every parameter is finite (one device sync for the whole model)."""
    flags = [torch.isfinite(p).all() for p in model.parameters()]
    return bool(torch.stack(flags).all()) if flags else True


@dataclass
class TrainingState:
    model: nn.Module  # what forward runs through (DDP-wrapped when distributed)
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    start_step: int
    metrics: "MetricsLog"
    scaler: object | None = None  # torch.amp.GradScaler under fp16, else None


def setup_training(cfg: TrainConfig, rt: Runtime, forward: nn.Module, params: nn.Module, out: Path) -> TrainingState:
    """DDP wrapping, AdamW over `params`, the schedule, the resume point and the metrics log, as every loop needs."""
    model: nn.Module = forward
    if rt.distributed:
        # Default buckets: each bucket's all-reduce starts as soon as its gradients are ready, overlapping the rest
        # of the backward. Gradients as views of the buckets save a copy and the memory of a second gradient set.
        model = nn.parallel.DistributedDataParallel(
            forward, device_ids=[rt.device.index] if rt.device.type == "cuda" else None,
            gradient_as_bucket_view=True,
        )
    optimizer = make_optimizer(params, cfg, rt.device)
    scheduler = linear_schedule(optimizer, cfg.warmup_steps(), cfg.max_steps)
    scaler = make_grad_scaler(rt)
    start, saved_state = resume_point(out, cfg, params, optimizer, scheduler)
    if scaler is not None and saved_state.get("grad_scaler"):
        scaler.load_state_dict(saved_state["grad_scaler"])
    metrics = MetricsLog(Path(out) / "metrics.jsonl", enabled=rt.is_main)
    if rt.is_main:
        metrics.truncate_after(start)
    return TrainingState(model, optimizer, scheduler, start, metrics, scaler)


# ------------------------------------------------------------------------------------------ the loop


@dataclass
class StepOutput:
    loss: torch.Tensor  # the micro-batch loss (mean over its sequences), 0-dim
    parts: dict = field(default_factory=dict)  # named loss terms (0-dim tensors)
    tokens: int = 0  # real tokens in this micro-batch on this process, counted on the host (no device read)
    info: dict = field(default_factory=dict)  # anything to aggregate into the log (e.g. language counts)


@dataclass
class LoopResult:
    start_step: int
    end_step: int
    first_loss: float | None
    last_loss: float | None
    tokens_per_s: float
    elapsed_s: float
    history: list[dict]


def step_seed(seed: int, step: int, rank: int) -> int:
    """The seed of the default generators (CPU and CUDA) for optimizer step `step` on process `rank`.

    Dropout draws from these generators. Reseeding them from (seed, step, rank) at every step makes each step's
    noise a pure function of where it is, like the batches: a resumed run draws what the uninterrupted one drew,
    on every rank, without saving or restoring any device's RNG state, and ranks never share noise."""
    import numpy as np

    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1, np.uint64)[0] >> 1)


class _Window:
    """Per-step losses of one log interval, kept on the device: read once, at the interval's end.

    The step itself never reads a device value (no `.item()`, no `bool(tensor)`): on CUDA each read would stall
    the host until the GPU caught up, leaving the GPU idle while the host queues the next step. What the loop
    needs per step, it keeps as tensors: the loss and its parts, and the first step whose loss was not finite."""

    def __init__(self, device: torch.device):
        self.device = device
        self.losses: list[torch.Tensor] = []
        self.parts: dict[str, list[torch.Tensor]] = {}
        self.first_bad = torch.full((), -1, dtype=torch.long, device=device)
        self.steps: list[int] = []

    def add(self, step_number: int, loss: torch.Tensor, parts: dict[str, torch.Tensor]) -> None:
        self.first_bad = torch.where(
            (self.first_bad < 0) & ~torch.isfinite(loss), torch.full_like(self.first_bad, step_number), self.first_bad
        )
        self.losses.append(loss)
        for k, v in parts.items():
            self.parts.setdefault(k, []).append(v)
        self.steps.append(step_number)

    def read(self, rt: Runtime) -> tuple[list[float], dict[str, float], int]:
        """(mean loss of each step over processes, mean of each part over steps and processes, first step with a
        non-finite loss on any process or -1): one all-reduce and one device->host read for the whole interval."""
        n = len(self.losses)
        names = sorted(self.parts)
        values = torch.stack(self.losses + [torch.stack(self.parts[k]).mean() for k in names]).float()
        # The first bad step (-1: none), as a max over processes: any process's non-finite loss stops every one.
        packed = torch.cat([values, self.first_bad.float().reshape(1)])
        if rt.distributed:
            flag = packed[-1:].clone()
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            summed = packed[:-1].clone()
            dist.all_reduce(summed, op=dist.ReduceOp.SUM)
            packed = torch.cat([summed / rt.world, flag])
        host = packed.tolist()
        return host[:n], dict(zip(names, host[n:-1])), int(host[-1])

    def clear(self) -> None:
        self.losses, self.parts, self.steps = [], {}, []


def make_grad_scaler(rt: Runtime):
    """fp16 needs loss scaling (its range is too small for small gradients); bf16 and fp32 do not. With the fused
    AdamW, GradScaler hands the optimizer its inf flag as a tensor, so a step with scaling reads nothing on the host.
    """
    if rt.dtype != torch.float16:
        return None
    return torch.amp.GradScaler(rt.device.type)


def train_loop(
    *,
    cfg: TrainConfig,
    rt: Runtime,
    model: nn.Module,
    raw_model: nn.Module,
    optimizer,
    scheduler,
    compute: Callable[[int, int], StepOutput],
    out: Path,
    metrics: MetricsLog,
    start_step: int = 0,
    checkpoint_state: Callable[[int], dict] | None = None,
    on_log: Callable[[int, dict], None] | None = None,
    after_save: Callable[[int], dict | None] | None = None,
    description: str = "training",
    scaler=None,
    checkpointer=None,
    probe: Callable[[int], dict | None] | None = None,
    probe_every: int = 0,
) -> LoopResult:
    """Run optimizer steps start_step .. cfg.max_steps-1.

    `compute(step, micro)` runs one micro-batch forward and returns its loss; the loop does backward
    (averaged over accumulation), the optimizer and schedule steps, logging and checkpoints. `model` is what
    forward runs through (DDP-wrapped when distributed), `raw_model` what is saved.

    Between log and save steps nothing is read from the device: losses and the finiteness flag stay on it
    (`_Window`) and are read at the end of each log interval and before every checkpoint. A non-finite loss
    therefore stops the run at the next such boundary (at most `log_every` steps later), always before a
    checkpoint could be written from it; the last good checkpoint is named.

    `probe(step)`, when given, runs after every `probe_every`-th step and the last (on every process; it returns
    a record on the main one): the record goes to the metrics log with `train_s`, the training time so far
    without the probes, whose time is also left out of tokens/s.
    """
    accum = cfg.grad_accum
    history: list[dict] = []
    first_loss = last_loss = None
    total_tokens = 0
    t_start = t_window = time.perf_counter()
    window_tokens = 0
    window_info: dict = {}
    window = _Window(rt.device)
    # Checkpoints are written in a background thread from a host copy (checkpoint_writer.AsyncCheckpointer): the
    # steps go on while the files are written, one checkpoint at a time, each still atomic.
    from mlminilm.checkpoint_writer import AsyncCheckpointer

    writer = checkpointer if checkpointer is not None else AsyncCheckpointer(out, cfg.keep)
    # Without a progress bar (stderr not a terminal: a batch job, a pipe), a log line per metrics record instead.
    log_lines = rt.is_main and not mlog.progress_enabled()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    probe_time = 0.0

    with writer, mlog.progress() as bar:  # on any exit, a write in flight is finished first
        task = bar.add_task(description, total=cfg.max_steps, completed=start_step, rate="")
        model.train()
        for step in range(start_step, cfg.max_steps):
            torch.manual_seed(step_seed(cfg.seed, step, rt.rank))
            optimizer.zero_grad(set_to_none=True)
            step_loss = torch.zeros((), device=rt.device)
            step_parts: dict[str, torch.Tensor] = {}
            for micro in range(accum):
                sync = micro == accum - 1 or not rt.distributed
                ctx = contextlib.nullcontext() if sync else model.no_sync()
                with ctx:
                    with rt.autocast():
                        res = compute(step, micro)
                    loss = res.loss / accum
                    (scaler.scale(loss) if scaler is not None else loss).backward()
                step_loss += res.loss.detach().float() / accum
                for k, v in res.parts.items():
                    step_parts[k] = step_parts.get(k, 0.0) + v.detach().float() / accum
                window_tokens += int(res.tokens)
                for k, v in res.info.items():
                    window_info[k] = window_info.get(k, 0) + v
            if cfg.max_grad_norm > 0:
                # After the (DDP-averaged) gradients are complete, before the update: the global L2 norm over
                # every parameter the optimizer steps (unscaled first under fp16).
                if scaler is not None:
                    scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            if scaler is not None:
                scaler.step(optimizer)  # skipped, on the device, when a gradient overflowed
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            done = step + 1
            window.add(done, step_loss, step_parts)

            log_now = done % cfg.log_every == 0 or done == cfg.max_steps
            save_now = done % cfg.save_every == 0 or done == cfg.max_steps
            probe_now = probe is not None and (done % probe_every == 0 or done == cfg.max_steps)
            if not (log_now or save_now or probe_now):
                continue
            losses, parts, bad = window.read(rt)
            if bad >= 0:
                value = losses[window.steps.index(bad)]
                writer.wait()  # the last good checkpoint, named below, is on disk
                raise _diverged(out, f"loss became {value} at step {bad}")
            first_loss = losses[0] if first_loss is None else first_loss
            last_loss = losses[-1]
            if log_now:
                now = time.perf_counter()
                tokens = window_tokens * rt.world  # each process counts its own share
                rate = tokens / max(now - t_window, 1e-9)
                total_tokens += tokens
                record = {
                    "step": done,
                    "loss": sum(losses) / len(losses),
                    **parts,
                    "lr": scheduler.get_last_lr()[0],
                    "tokens_per_s": rate,
                    "elapsed_s": now - t_start,
                }
                if scaler is not None:
                    record["loss_scale"] = scaler.get_scale()
                if on_log is not None:
                    on_log(done, {"info": window_info, "record": record})
                history.append(record)
                metrics.write(record)
                bar.update(task, completed=done, rate=f"loss {record['loss']:.4f} · {rate:,.0f} tok/s")
                if log_lines:
                    per_step = (now - t_start) / max(done - start_step, 1)
                    log.info(
                        "%s: step %d/%d  loss %.4f  lr %.3g  %s tok/s  eta %s", description, done, cfg.max_steps,
                        record["loss"], record["lr"], f"{rate:,.0f}", _duration(per_step * (cfg.max_steps - done)),
                    )
                else:
                    log.debug("step %d loss %.5f", done, record["loss"])
                t_window, window_tokens, window_info = now, 0, {}
                window.clear()

            if save_now:
                # A finite loss does not prove finite weights (an inf or NaN gradient, an overflowing update):
                # never save, and never call "good", a checkpoint that holds NaN.
                if not weights_finite(raw_model):
                    writer.wait()
                    raise _diverged(out, f"the weights became NaN or infinite at step {done} (the loss was still finite)")
                state = checkpoint_state(done) if checkpoint_state else {}
                if scaler is not None:
                    state = {**state, "grad_scaler": scaler.state_dict()}
                if rt.is_main:
                    writer.save(done, raw_model, optimizer, scheduler, state)
                if after_save is not None:
                    writer.wait()  # what runs after a save may read the checkpoint
                    rt.barrier()
                    extra = after_save(done)
                    if extra:
                        metrics.write({"step": done, **extra})
                        history.append({"step": done, **extra})
            if probe_now:
                t_probe = time.perf_counter()
                found = probe(done)
                rt.barrier()
                spent = time.perf_counter() - t_probe
                probe_time += spent
                t_window += spent  # the next tokens/s is the training's alone
                if found:
                    found = {"step": done, **found, "train_s": round(t_probe - t_start - probe_time + spent, 2)}
                    metrics.write(found)
                    history.append(found)
        writer.wait()
        rt.barrier()
    elapsed = time.perf_counter() - t_start
    return LoopResult(
        start_step, cfg.max_steps, first_loss, last_loss,
        total_tokens / max(elapsed - probe_time, 1e-9), elapsed, history,
    )


def _diverged(out: Path, what: str) -> TrainingDiverged:
    saved = checkpoint_dirs(out)
    if saved:
        where = (f"the last good checkpoint is {saved[-1][1]}: rerun the same command with --resume and a lower --lr "
                 "or a longer --warmup to continue from it")
    else:
        where = "no checkpoint was saved yet: rerun with a lower --lr or a longer --warmup"
    return TrainingDiverged(f"{what}; stopped, {where}")


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


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


def _set_peak_lr(optimizer, scheduler, lr: float) -> None:
    """After loading a schedule's state (which holds the saved run's peak), make `lr` the peak and recompute the
    current rate with this run's warmup: the same numbers LambdaLR computes, so an unchanged run is bit-exact."""
    scheduler.base_lrs = [lr for _ in optimizer.param_groups]
    rates = [base * factor(scheduler.last_epoch) for factor, base in zip(scheduler.lr_lambdas, scheduler.base_lrs)]
    for group, rate in zip(optimizer.param_groups, rates):
        group["initial_lr"] = lr
        group["lr"] = rate
    scheduler._last_lr = rates


def read_run_record(out: Path, record_file: str = RUN_RECORD) -> tuple[Path, dict] | None:
    """The run record of the run in `out` (`record_file`, or the name distill used before, config.json, when it
    holds a run record), or None when there is none. A damaged record is an error that says what to do."""
    out = Path(out)
    candidates = [out / record_file]
    if record_file != LEGACY_RUN_RECORD:
        candidates.append(out / LEGACY_RUN_RECORD)
    for path in candidates:
        if not path.exists():
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(record, dict) or not isinstance(record.get("config", {}), dict):
                raise ValueError("not a run record object")
        except FileNotFoundError:  # another torchrun process moved the old name to the new one just now
            continue
        except (UnicodeDecodeError, ValueError) as exc:
            if path.name == LEGACY_RUN_RECORD and path.name != record_file:
                continue  # a model's config.json, say: not ours
            raise CheckpointError(
                f"run record {path} is damaged ({str(exc).splitlines()[0]}): it cannot tell which options made this "
                f"run; delete it to resume without that check (it is written again), or start over with --overwrite"
            ) from None
        if path.name == LEGACY_RUN_RECORD and path.name != record_file and "command" not in record:
            continue
        return path, record
    return None


def check_resume_compatible(out: Path, record: dict, keys: tuple[str, ...], record_file: str = RUN_RECORD,
                            write: bool = True) -> dict:
    """On --resume, the run's defining options (`keys`) must equal those recorded in OUT/<record_file>.

    Options in RESUME_CHANGEABLE may differ: each change is logged and recorded (the record's "config" takes the
    new value, "resumes" keeps what changed and when), when `write` (the main process). Returns the changes."""
    found = read_run_record(out, record_file)
    if found is None:
        return {}
    path, old_record = found
    old = old_record.get("config", {})
    new = record["config"]
    diff = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys
            if k not in RESUME_CHANGEABLE and old.get(k) != new.get(k)]
    if diff:
        raise CheckpointError(
            f"--resume with options that differ from the run in {out} ({'; '.join(diff)}); use the same options "
            f"(only {', '.join('--' + k for k in RESUME_CHANGEABLE)} may change) or a new --out"
        )
    changes = {k: [old[k], new.get(k)] for k in RESUME_CHANGEABLE if k in old and old[k] != new.get(k)}
    if changes:
        log.warning("--resume with %s (recorded in %s)",
                    ", ".join(f"--{k.replace('_', '-')} {a} -> {b}" for k, (a, b) in changes.items()),
                    Path(out) / record_file)
    if write and (changes or path.name != record_file):
        updated = dict(old_record)
        updated["config"] = {**old, **{k: b for k, (a, b) in changes.items()}}
        if changes:
            updated["resumes"] = [*old_record.get("resumes", []),
                                  {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "changed": changes}]
        write_json_atomic(Path(out) / record_file, updated)
        if path.name != record_file:  # the old name: the record moves to its new one
            path.unlink(missing_ok=True)
    return changes


def is_finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
