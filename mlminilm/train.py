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
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    if precision == "auto":
        precision = "bf16" if dev.type == "cuda" or cpu_has_native_bf16() else "fp32"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
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


def prepare_output_dir(out: Path, cfg: TrainConfig, artifacts: tuple[str, ...]) -> None:
    """Refuse a non-empty output directory unless resuming or overwriting; on overwrite remove only our artifacts."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"output path {out} exists and is not a directory")
    existing = [p for p in out.iterdir()] if out.exists() else []
    if existing and not (cfg.resume or cfg.overwrite):
        raise CheckpointError(
            f"output directory {out} exists and is not empty; add --resume to continue that run or --overwrite to start over"
        )
    if cfg.overwrite:
        for name in artifacts:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()


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
        """On resume, drop records past the checkpoint so the log reads like the uninterrupted run."""
        if not self.enabled or not self.path.exists():
            return
        kept = [l for l in self.path.read_text(encoding="utf-8").splitlines() if l.strip() and json.loads(l).get("step", 0) <= step]
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
    """Write checkpoints/step-N/ under a temporary name and rename it into place; keep the last `keep`."""
    from safetensors.torch import save_model

    root = Path(out) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(
        {"scheduler": scheduler.state_dict(), "cpu_rng": torch.get_rng_state(),
         "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
        tmp / "trainer.pt",
    )
    write_json_atomic(tmp / "state.json", {"step": step, **state})
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for _, old in checkpoint_dirs(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, model: nn.Module, optimizer, scheduler) -> dict:
    """Restore model, optimizer, schedule and RNG from `path`; returns its state.json."""
    from safetensors.torch import load_model

    try:
        load_model(model, str(path / "model.safetensors"), strict=False)
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True, map_location="cpu"))
        trainer = torch.load(path / "trainer.pt", weights_only=True, map_location="cpu")
        scheduler.load_state_dict(trainer["scheduler"])
        torch.set_rng_state(trainer["cpu_rng"])
        if trainer["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(trainer["cuda_rng"])
        return json.loads((path / "state.json").read_text(encoding="utf-8"))
    except Exception as exc:
        raise CheckpointError(f"checkpoint {path} cannot be loaded: {exc}; remove it to resume from an earlier one") from exc


@dataclass
class TrainingState:
    model: nn.Module  # what forward runs through (DDP-wrapped when distributed)
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    start_step: int
    metrics: "MetricsLog"


def setup_training(cfg: TrainConfig, rt: Runtime, forward: nn.Module, params: nn.Module, out: Path) -> TrainingState:
    """DDP wrapping, AdamW over `params`, the schedule, the resume point and the metrics log, as every loop needs."""
    model: nn.Module = forward
    if rt.distributed:
        model = nn.parallel.DistributedDataParallel(
            forward, device_ids=[rt.device.index] if rt.device.type == "cuda" else None
        )
    optimizer = make_optimizer(params, cfg, rt.device)
    scheduler = linear_schedule(optimizer, cfg.warmup_steps(), cfg.max_steps)
    start = resume_point(out, cfg, params, optimizer, scheduler)
    metrics = MetricsLog(Path(out) / "metrics.jsonl", enabled=rt.is_main)
    if rt.is_main:
        metrics.truncate_after(start)
    return TrainingState(model, optimizer, scheduler, start, metrics)


# ------------------------------------------------------------------------------------------ the loop


@dataclass
class StepOutput:
    loss: torch.Tensor  # the micro-batch loss (mean over its sequences), 0-dim
    parts: dict = field(default_factory=dict)  # named loss terms (0-dim tensors)
    tokens: int = 0  # real tokens in this micro-batch on this process
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


def _reduce_mean(values: torch.Tensor, rt: Runtime) -> torch.Tensor:
    if rt.distributed:
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        values /= rt.world
    return values


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
) -> LoopResult:
    """Run optimizer steps start_step .. cfg.max_steps-1.

    `compute(step, micro)` runs one micro-batch forward and returns its loss; the loop does backward
    (averaged over accumulation), the finiteness check, the optimizer and schedule steps, logging and
    checkpoints. `model` is what forward runs through (DDP-wrapped when distributed), `raw_model` what is saved.
    """
    accum = cfg.grad_accum
    history: list[dict] = []
    first_loss = last_loss = None
    total_tokens = 0
    t_start = t_window = time.perf_counter()
    window_tokens = 0
    window_info: dict = {}
    window_loss = torch.zeros(())
    window_parts: dict[str, float] = {}
    window_steps = 0
    last_saved = start_step if checkpoint_dirs(out) else None

    with mlog.progress() as bar:
        task = bar.add_task(description, total=cfg.max_steps, completed=start_step, rate="")
        model.train()
        for step in range(start_step, cfg.max_steps):
            optimizer.zero_grad(set_to_none=True)
            step_loss = torch.zeros((), device=rt.device)
            step_parts: dict[str, torch.Tensor] = {}
            for micro in range(accum):
                sync = micro == accum - 1 or not rt.distributed
                ctx = contextlib.nullcontext() if sync else model.no_sync()
                with ctx:
                    with rt.autocast():
                        res = compute(step, micro)
                    (res.loss / accum).backward()
                step_loss += res.loss.detach().float() / accum
                for k, v in res.parts.items():
                    step_parts[k] = step_parts.get(k, 0.0) + v.detach().float() / accum
                window_tokens += res.tokens
                for k, v in res.info.items():
                    window_info[k] = window_info.get(k, 0) + v
            global_loss = _reduce_mean(step_loss, rt)
            if not torch.isfinite(global_loss):
                saved = checkpoint_dirs(out)
                where = f"the last good checkpoint is {saved[-1][1]}" if saved else "no checkpoint was saved yet"
                raise TrainingDiverged(
                    f"loss became {global_loss.item()} at step {step + 1}; stopped, {where}; "
                    "try a lower --lr or longer --warmup (add --resume to continue from the checkpoint)"
                )
            if cfg.max_grad_norm > 0:
                # After the (DDP-averaged) gradients are complete, before the update: the global L2 norm over
                # every parameter the optimizer steps.
                torch.nn.utils.clip_grad_norm_(
                    [p for group in optimizer.param_groups for p in group["params"]], cfg.max_grad_norm
                )
            optimizer.step()
            scheduler.step()
            done = step + 1
            loss_value = global_loss.item()
            first_loss = loss_value if first_loss is None else first_loss
            last_loss = loss_value
            window_loss = window_loss + loss_value
            for k, v in step_parts.items():
                window_parts[k] = window_parts.get(k, 0.0) + _reduce_mean(v, rt).item()
            window_steps += 1

            if done % cfg.log_every == 0 or done == cfg.max_steps:
                now = time.perf_counter()
                tokens = window_tokens * rt.world  # each process counts its own share
                rate = tokens / max(now - t_window, 1e-9)
                total_tokens += tokens
                record = {
                    "step": done,
                    "loss": float(window_loss) / window_steps,
                    **{k: v / window_steps for k, v in window_parts.items()},
                    "lr": scheduler.get_last_lr()[0],
                    "tokens_per_s": rate,
                    "elapsed_s": now - t_start,
                }
                if on_log is not None:
                    on_log(done, {"info": window_info, "record": record})
                history.append(record)
                metrics.write(record)
                bar.update(task, completed=done, rate=f"loss {record['loss']:.4f} · {rate:,.0f} tok/s")
                log.debug("step %d loss %.5f", done, record["loss"])
                t_window, window_tokens, window_info = now, 0, {}
                window_loss, window_parts, window_steps = torch.zeros(()), {}, 0

            if done % cfg.save_every == 0 or done == cfg.max_steps:
                state = checkpoint_state(done) if checkpoint_state else {}
                if rt.is_main:
                    save_checkpoint(out, done, raw_model, optimizer, scheduler, state, cfg.keep)
                rt.barrier()
                last_saved = done
                if after_save is not None:
                    extra = after_save(done)
                    if extra:
                        metrics.write({"step": done, **extra})
                        history.append({"step": done, **extra})
    elapsed = time.perf_counter() - t_start
    return LoopResult(
        start_step, cfg.max_steps, first_loss, last_loss,
        total_tokens / max(elapsed, 1e-9), elapsed, history,
    )


def resume_point(out: Path, cfg: TrainConfig, raw_model, optimizer, scheduler) -> int:
    """The step to start from: 0, or the latest whole checkpoint's when --resume."""
    if not cfg.resume:
        return 0
    found = checkpoint_dirs(out)
    if not found:
        log.warning("--resume: no checkpoint in %s, starting from step 0", Path(out) / CHECKPOINTS)
        return 0
    step, path = found[-1]
    if step > cfg.max_steps:
        raise CheckpointError(f"checkpoint {path} is past --max-steps {cfg.max_steps}; raise --max-steps")
    load_checkpoint(path, raw_model, optimizer, scheduler)
    log.info("resumed from %s", path)
    return step


def check_resume_compatible(out: Path, record: dict, keys: tuple[str, ...], record_file: str = "config.json") -> None:
    """On --resume, the run's defining options must equal those recorded in OUT/<record_file>."""
    path = Path(out) / record_file
    if not path.exists():
        return
    old = json.loads(path.read_text(encoding="utf-8")).get("config", {})
    new = record["config"]
    diff = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]
    if diff:
        raise CheckpointError(
            f"--resume with options that differ from the run in {out} ({'; '.join(diff)}); use the same options or a new --out"
        )


def is_finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
