"""The training loop every command shares: DDP wrapping, gradient accumulation, per-step reseeding, losses kept
on the device between log intervals, divergence stops, checkpoints and hooks."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from mlminilm import logging as mlog
from mlminilm.config import TrainConfig
from mlminilm.errors import TrainingDiverged
from mlminilm.training import row_sparse_reduce
from mlminilm.training.checkpoint_layout import checkpoint_dirs
from mlminilm.training.checkpoints import resume_point
from mlminilm.training.optim import linear_schedule, make_optimizer
from mlminilm.training.run_dir import MetricsLog
from mlminilm.training.runtime import Runtime, make_grad_scaler
from mlminilm.training.save_clock import SaveClock
from mlminilm.training.tracking import Tracker, open_tracker

log = mlog.get(__name__)

# The progress bar's ETA: the speed over the last 10 minutes (or 1000 steps), so that steps of a minute or two
# (a large teacher on a CPU) still give two samples to measure it by; the first step (compilation, warm-up) counts
# in no speed, as rich measures from the first update on.
ETA_WINDOW_S = 600.0


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
    metrics: Tracker  # metrics.jsonl and the --report-to sinks
    scaler: object | None = None  # torch.amp.GradScaler under fp16, else None


def setup_training(cfg: TrainConfig, rt: Runtime, forward: nn.Module, params: nn.Module, out: Path) -> TrainingState:
    """DDP wrapping, AdamW over `params`, the schedule, the resume point and the metrics log, as every loop needs."""
    model: nn.Module = forward
    if rt.distributed:
        # Default buckets: each bucket's all-reduce starts as soon as its gradients are ready, overlapping the rest
        # of the backward. Gradients as views of the buckets save a copy and the memory of a second gradient set.
        # No buffer broadcast before each forward (one collective less per micro-batch): the models trained here
        # hold only constant buffers (position and token-type ids, tests/test_ddp_setup.py), alike on every rank.
        model = nn.parallel.DistributedDataParallel(
            forward,
            device_ids=[rt.device.index] if rt.device.type == "cuda" else None,
            gradient_as_bucket_view=True,
            broadcast_buffers=False,
        )
        # On CUDA the word embedding's gradient is all-reduced row-sparse: only the rows some rank looked up (exact).
        row_sparse_reduce.register(model, forward, rt.device)
    optimizer = make_optimizer(params, cfg, rt.device)
    scheduler = linear_schedule(optimizer, cfg.warmup_steps(), cfg.max_steps)
    scaler = make_grad_scaler(rt)
    start, saved_state = resume_point(out, cfg, params, optimizer, scheduler)
    if scaler is not None and saved_state.get("grad_scaler"):
        scaler.load_state_dict(saved_state["grad_scaler"])
    metrics = open_tracker(cfg, out, rt, start)
    if rt.is_main:
        metrics.truncate_after(start)
    return TrainingState(model, optimizer, scheduler, start, metrics, scaler)


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

    def read(self, rt: Runtime, due: bool = False) -> tuple[list[float], dict[str, float], int, bool]:
        """(mean loss of each step over processes, mean of each part over steps and processes, first step with a
        non-finite loss on any process or -1, whether any process said `due`): one all-reduce and one device->host
        read for the whole interval. `due` is rank 0's time-based save decision (save_clock.SaveClock), shared."""
        n = len(self.losses)
        names = sorted(self.parts)
        values = torch.stack(self.losses + [torch.stack(self.parts[k]).mean() for k in names]).float()
        # The first bad step (-1: none) and the save flag, as maxima over processes: any process's non-finite loss
        # stops every one, and rank 0's clock decides every rank's time-based save.
        flags = torch.stack([self.first_bad.float(), torch.full((), float(due), device=self.device)])
        packed = torch.cat([values, flags])
        if rt.distributed:
            flag = packed[-2:].clone()
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            summed = packed[:-2].clone()
            dist.all_reduce(summed, op=dist.ReduceOp.SUM)
            packed = torch.cat([summed / rt.world, flag])
        host = packed.tolist()
        return host[:n], dict(zip(names, host[n:-2])), int(host[-2]), host[-1] > 0

    def clear(self) -> None:
        self.losses, self.parts, self.steps = [], {}, []


@dataclass
class Steps:
    """What the loop computes: optimizer steps `start_step` .. cfg.max_steps-1 of `compute(step, micro)` (one
    micro-batch forward, its loss), through `model` (DDP-wrapped when distributed); `raw_model` is what is saved."""

    cfg: TrainConfig
    rt: Runtime
    model: nn.Module
    raw_model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    compute: Callable[[int, int], StepOutput]
    start_step: int = 0
    scaler: object | None = None  # torch.amp.GradScaler under fp16


@dataclass
class Reporting:
    """How the loop logs and checkpoints: the records go to `metrics` (closed when the loop ends, however it
    ends), checkpoints under `out` (by `checkpointer`, default a background AsyncCheckpointer), with
    `checkpoint_state(step)` in their state; `on_log(step, {"info", "record"})` may add to each log record,
    `after_save(step)` runs after each checkpoint (its record logged), `probe(step)` every `probe_every` steps."""

    out: Path
    metrics: Tracker | MetricsLog
    description: str = "training"
    on_log: Callable[[int, dict], None] | None = None
    checkpoint_state: Callable[[int], dict] | None = None
    after_save: Callable[[int], dict | None] | None = None
    checkpointer: object | None = None
    probe: Callable[[int], dict | None] | None = None
    probe_every: int = 0


def run_steps(steps: Steps, reporting: Reporting) -> LoopResult:
    """Run optimizer steps steps.start_step .. cfg.max_steps-1.

    The loop does backward (averaged over accumulation), the optimizer and schedule steps, logging and
    checkpoints around `steps.compute`.

    Between log and save steps nothing is read from the device: losses and the finiteness flag stay on it
    (`_Window`) and are read at the end of each log interval and before every checkpoint. A non-finite loss
    therefore stops the run at the next such boundary (at most `log_every` steps later), always before a
    checkpoint could be written from it; the last good checkpoint is named.

    `probe(step)`, when given, runs after every `probe_every`-th step and the last (on every process; it returns
    a record on the main one): the record goes to the metrics log with `train_s`, the training time so far
    without the probes, whose time is also left out of tokens/s.

    Every record goes to `metrics` (metrics.jsonl and any --report-to sink: `tracking.Tracker`), closed when the
    loop ends, however it ends.
    """
    # Checkpoints are written in a background thread from a host copy (checkpoint_writer.AsyncCheckpointer): the
    # steps go on while the files are written, one checkpoint at a time, each still atomic.
    from mlminilm.training.checkpoint_writer import AsyncCheckpointer

    cfg, rt = steps.cfg, steps.rt
    writer = (
        reporting.checkpointer if reporting.checkpointer is not None else AsyncCheckpointer(reporting.out, cfg.keep)
    )
    # On any exit, a checkpoint write in flight is finished first, and the metrics sinks are closed.
    with writer, contextlib.closing(reporting.metrics), mlog.progress(window_s=ETA_WINDOW_S) as bar:
        loop = _Loop(steps, reporting, writer, bar)
        steps.model.train()
        for step in range(steps.start_step, cfg.max_steps):
            loop.step(step)
        writer.wait()
        rt.barrier()
    return loop.result()


class _Loop:
    """The running state of `run_steps`: the window of losses, the counters, the progress bar."""

    def __init__(self, steps: Steps, reporting: Reporting, writer, bar):
        self.s, self.r, self.writer, self.bar = steps, reporting, writer, bar
        self.history: list[dict] = []
        self.first_loss = self.last_loss = None
        self.total_tokens = 0
        self.t_start = self.t_window = time.perf_counter()
        self.window_tokens = 0
        self.window_info: dict = {}
        self.window = _Window(steps.rt.device)
        # distill / assist --save-every-minutes; finetune has none: its saves are its model selection's cadence.
        self.clock = SaveClock(getattr(steps.cfg, "save_every_minutes", None), steps.rt.is_main)
        # Without a progress bar (stderr not a terminal: a batch job, a pipe), a log line per metrics record instead.
        self.log_lines = steps.rt.is_main and not mlog.progress_enabled()
        self.params = [p for group in steps.optimizer.param_groups for p in group["params"]]
        self.probe_time = 0.0
        self.task = bar.add_task(reporting.description, total=steps.cfg.max_steps, completed=steps.start_step, rate="")

    def step(self, step: int) -> None:
        """Optimizer step `step`, then what its end calls for (a log record, a checkpoint, a probe)."""
        s, cfg = self.s, self.s.cfg
        self._update(step)
        # Every step moves the bar and its ETA, read on the host alone (no device value): the loss and tokens/s
        # beside it change at log steps.
        self.bar.advance(self.task)
        done = step + 1
        log_now = done % cfg.log_every == 0 or done == cfg.max_steps
        save_now = (cfg.save_every is not None and done % cfg.save_every == 0) or done == cfg.max_steps
        probe_now = self.r.probe is not None and (done % self.r.probe_every == 0 or done == cfg.max_steps)
        if not (log_now or save_now or probe_now):
            return
        losses, parts, bad, due = self.window.read(s.rt, self.clock.due())
        save_now = save_now or due  # one save at a step, whichever cadence asked for it
        if bad >= 0:
            value = losses[self.window.steps.index(bad)]
            self.writer.wait()  # the last good checkpoint, named below, is on disk
            raise _diverged(self.r.out, f"loss became {value} at step {bad}")
        self.first_loss = losses[0] if self.first_loss is None else self.first_loss
        self.last_loss = losses[-1]
        if log_now:
            self._log(done, losses, parts)
        if save_now:
            self._save(done)
            self.clock.saved()
        if probe_now:
            self._probe(done)

    def _update(self, step: int) -> None:
        """The micro-batches' forward and backward, the clipping, the optimizer and schedule steps."""
        s = self.s
        rt, accum, scaler, optimizer = s.rt, s.cfg.grad_accum, s.scaler, s.optimizer
        torch.manual_seed(step_seed(s.cfg.seed, step, rt.rank))
        optimizer.zero_grad(set_to_none=True)
        step_loss = torch.zeros((), device=rt.device)
        step_parts: dict[str, torch.Tensor] = {}
        for micro in range(accum):
            sync = micro == accum - 1 or not rt.distributed
            ctx = contextlib.nullcontext() if sync else s.model.no_sync()
            with ctx:
                with rt.autocast():
                    res = s.compute(step, micro)
                loss = res.loss / accum
                (scaler.scale(loss) if scaler is not None else loss).backward()
            step_loss += res.loss.detach().float() / accum
            for k, v in res.parts.items():
                step_parts[k] = step_parts.get(k, 0.0) + v.detach().float() / accum
            self.window_tokens += int(res.tokens)
            for k, v in res.info.items():
                self.window_info[k] = self.window_info.get(k, 0) + v
        if s.cfg.max_grad_norm > 0:
            # After the (DDP-averaged) gradients are complete, before the update: the global L2 norm over
            # every parameter the optimizer steps (unscaled first under fp16).
            if scaler is not None:
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(self.params, s.cfg.max_grad_norm)
        if scaler is not None:
            scaler.step(optimizer)  # skipped, on the device, when a gradient overflowed
            scaler.update()
        else:
            optimizer.step()
        s.scheduler.step()
        self.window.add(step + 1, step_loss, step_parts)

    def _log(self, done: int, losses: list[float], parts: dict[str, float]) -> None:
        s, cfg, description = self.s, self.s.cfg, self.r.description
        now = time.perf_counter()
        tokens = self.window_tokens * s.rt.world  # each process counts its own share
        rate = tokens / max(now - self.t_window, 1e-9)
        self.total_tokens += tokens
        record = {
            "step": done,
            "loss": sum(losses) / len(losses),
            **parts,
            "lr": s.scheduler.get_last_lr()[0],
            "tokens_per_s": rate,
            "elapsed_s": now - self.t_start,
        }
        if s.scaler is not None:
            record["loss_scale"] = s.scaler.get_scale()
        if self.r.on_log is not None:
            self.r.on_log(done, {"info": self.window_info, "record": record})
        self.history.append(record)
        self.r.metrics.write(record)
        self.bar.update(self.task, completed=done, rate=f"loss {record['loss']:.4f} · {rate:,.0f} tok/s")
        if self.log_lines:
            per_step = (now - self.t_start) / max(done - s.start_step, 1)
            log.info(
                "%s: step %d/%d  loss %.4f  lr %.3g  %s tok/s  eta %s",
                description,
                done,
                cfg.max_steps,
                record["loss"],
                record["lr"],
                f"{rate:,.0f}",
                _duration(per_step * (cfg.max_steps - done)),
            )
        else:
            log.debug("step %d loss %.5f", done, record["loss"])
        self.t_window, self.window_tokens, self.window_info = now, 0, {}
        self.window.clear()

    def _save(self, done: int) -> None:
        s, r, writer = self.s, self.r, self.writer
        # A finite loss does not prove finite weights (an inf or NaN gradient, an overflowing update):
        # never save, and never call "good", a checkpoint that holds NaN.
        if not weights_finite(s.raw_model):
            writer.wait()
            raise _diverged(r.out, f"the weights became NaN or infinite at step {done} (the loss was still finite)")
        state = r.checkpoint_state(done) if r.checkpoint_state else {}
        if s.scaler is not None:
            state = {**state, "grad_scaler": s.scaler.state_dict()}
        if s.rt.is_main:
            writer.save(done, s.raw_model, s.optimizer, s.scheduler, state)
        if r.after_save is not None:
            writer.wait()  # what runs after a save may read the checkpoint
            s.rt.barrier()
            extra = r.after_save(done)
            if extra:
                r.metrics.write({"step": done, **extra})
                self.history.append({"step": done, **extra})

    def _probe(self, done: int) -> None:
        t_probe = time.perf_counter()
        found = self.r.probe(done)
        self.s.rt.barrier()
        spent = time.perf_counter() - t_probe
        self.probe_time += spent
        self.t_window += spent  # the next tokens/s is the training's alone
        if found:
            found = {"step": done, **found, "train_s": round(t_probe - self.t_start - self.probe_time + spent, 2)}
            self.r.metrics.write(found)
            self.history.append(found)

    def result(self) -> LoopResult:
        elapsed = time.perf_counter() - self.t_start
        return LoopResult(
            self.s.start_step,
            self.s.cfg.max_steps,
            self.first_loss,
            self.last_loss,
            self.total_tokens / max(elapsed - self.probe_time, 1e-9),
            elapsed,
            self.history,
        )


def _diverged(out: Path, what: str) -> TrainingDiverged:
    saved = checkpoint_dirs(out)
    if saved:
        where = (
            f"the last good checkpoint is {saved[-1][1]}: rerun the same command with --resume and a lower --lr "
            "or a longer --warmup to continue from it"
        )
    else:
        where = "no checkpoint was saved yet: rerun with a lower --lr or a longer --warmup"
    return TrainingDiverged(f"{what}; stopped, {where}")


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"
