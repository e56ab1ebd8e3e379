"""A `distill` run from its resolved plan (distillation/plan.py): the teacher and the student, the batch, the
parallel pairs' targets, the training loop and the export. mlminilm.distill checks the options and calls `execute`.

What the command's module lets callers and tests replace (the teacher's loading, the step's terms, the export,
the probe) arrives as `Hooks`: this layer does not import the command."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm import training
from mlminilm.config import DistillConfig
from mlminilm.corpus.loader import default_pin_memory, default_workers, make_loader
from mlminilm.corpus.parallel import ParallelSampler, check_same_pairs, pairs_record
from mlminilm.corpus.sampling import BatchSampler
from mlminilm.distillation.batch import resolve_batch
from mlminilm.distillation.objective import EmbeddingHead, StudentQKV
from mlminilm.distillation.plan import DistillPlan, card_info, objective_summary
from mlminilm.distillation.relations import tf32_relations
from mlminilm.distillation.step import DistillStep
from mlminilm.distillation.terms import reads_output, trains_output, uses_running_text
from mlminilm.models.student import (
    build_student,
    freeze_bottom_layers,
    freeze_unused,
    freeze_word_embeddings,
    init_from_teacher,
    student_config,
)
from mlminilm.training.batch_size import BatchPlan
from mlminilm.training.compile_support import resolve_compile

log = mlog.get("mlminilm.distill")  # the command's own logger, as before the split

# The teacher-target cache's default place, inside the run (--target-cache moves it).
TARGET_CACHE = "teacher-targets"


@dataclass
class DistillResult:
    out: Path
    student: Path
    steps: int
    first_loss: float | None
    last_loss: float | None
    tokens_per_s: float
    elapsed_s: float
    language_mix: dict[str, float]

    def to_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Hooks:
    load_teacher: Callable  # models.loading.load_teacher
    distill_terms: Callable  # objective.distill_terms
    export_model: Callable  # models.export.export_model
    make_probe: Callable | None = None  # (student config, tokenizer) -> the in-training probe; None: no probe


@dataclass(frozen=True)
class Where:
    out: Path  # the run directory
    export_dir: Path  # where the student goes
    title: str  # the card's title word
    resume_keys: tuple[str, ...]  # the options --resume must find unchanged (mlminilm.distill.RESUME_KEYS)


@dataclass
class Models:
    teacher: nn.Module
    student: nn.Module
    picked: list[int] | None  # the teacher layers the student started from
    probe: object | None
    pairs: ParallelSampler | None
    record: dict


def execute(plan: DistillPlan, rt: training.Runtime, where: Where, hooks: Hooks) -> DistillResult:
    """The run of `plan` on `rt`: load, train, export (or export the initialised student with --max-steps 0)."""
    cfg = plan.cfg
    record = training.run_record(
        cfg,
        rt,
        {"teacher_model_type": plan.teacher_config.model_type, "data_manifest": plan.data.manifest.get("tokenizer")},
    )
    if plan.pairs is not None:
        record["parallel_pairs"] = pairs_record(plan.pairs)
    if cfg.resume:
        training.check_same_run_everywhere(where.out, rt, training.RUN_RECORD)
        old = (training.read_run_record(where.out) or (None, {}))[1]
        # Exact resume is promised for the pairs the run started on only: checked before the options' check may
        # record a change (another --parallel path is that check's to name).
        if plan.pairs is not None and old.get("config", {}).get("parallel") == record["config"]["parallel"]:
            check_same_pairs(old.get("parallel_pairs"), record["parallel_pairs"], cfg.parallel, where.out)
        training.check_resume_compatible(where.out, record, where.resume_keys, write=rt.is_main)
    models = _load_models(plan, rt, hooks, record)
    if cfg.max_steps == 0:
        return _export_initialised(plan, rt, where, hooks, models)
    return _train(plan, rt, where, hooks, models)


def _load_models(plan: DistillPlan, rt: training.Runtime, hooks: Hooks, record: dict) -> Models:
    """The teacher in the compute dtype, the student built (seeded) and initialised, frozen where no term reaches,
    the probe and the pairs' sampler; the run record completed."""
    cfg = plan.cfg
    # The teacher's weights in the compute dtype (bf16 on CUDA): it only runs forward, truncated at the distilled
    # layer, or whole when an output term needs its last hidden states.
    teacher, _ = hooks.load_teacher(cfg.teacher, -1 if trains_output(cfg) else cfg.teacher_layer, rt.dtype, rt.device)
    s_config = student_config(plan.teacher_config, cfg.shape, cfg.dropout)
    student = build_student(s_config, cfg.seed)
    picked = None
    if plan.init_layers is not None:
        picked = init_from_teacher(student, cfg.teacher, plan.init_layers)
        log.info("student initialised from teacher layers %s (--init-layers %s)", picked, cfg.init_rule)
    frozen = freeze_unused(student, -1, through_output=trains_output(cfg))
    if cfg.freeze_embeddings:
        frozen += freeze_word_embeddings(student)
    frozen += freeze_bottom_layers(student, cfg.freeze_layers)
    student.to(rt.device)
    summary = objective_summary(plan)
    log.info(
        "teacher %s: distilling layer %d (%s); student %dx%d, %d heads, %.1fM trainable parameters (%.1fM unused "
        "by the loss, frozen)",
        cfg.teacher,
        plan.teacher_layer,
        summary,
        cfg.layers,
        cfg.hidden,
        cfg.heads,
        sum(p.numel() for p in student.parameters() if p.requires_grad) / 1e6,
        frozen / 1e6,
    )
    probe = None
    if hooks.make_probe is not None and rt.is_main:
        probe = hooks.make_probe(s_config, plan.tokenizer)
        log.info("%s; every %d steps", probe.describe(), cfg.probe_every)
    pairs = sampler_of_pairs(plan) if plan.pairs is not None else None
    record["init_layers"] = picked
    record["objective"] = summary
    return Models(teacher, student, picked, probe, pairs, record)


def sampler_of_pairs(plan: DistillPlan) -> ParallelSampler:
    """The parallel term's pairs and their per-step draw (logged: how many, in which languages)."""
    cfg, found = plan.cfg, plan.pairs
    langs = ", ".join(f"{k} {v:,}" for k, v in found.lang_counts().items())
    log.info(
        "parallel term: %s pairs from %s (%s), prefix %r%s",
        f"{len(found):,}",
        cfg.parallel,
        langs,
        plan.prefix,
        f"; {found.skipped} line(s) without a translation skipped" if found.skipped else "",
    )
    return ParallelSampler(found, plan.tokenizer, prefix=plan.prefix, max_length=cfg.parallel_max_length, seed=cfg.seed)


def _prepare_training(plan: DistillPlan, rt: training.Runtime, where: Where, hooks: Hooks, models: Models):
    """The batch decided and recorded, the run record written, DDP, AdamW and the resume point, the pairs'
    targets cached: (the config with the batch decided, the batch, the training state)."""
    cfg = plan.cfg
    forward = StudentQKV(models.student, outputs=reads_output(cfg))
    batch = resolve_batch(plan, rt, models.teacher, forward, hooks.distill_terms)
    if batch.how != "given":
        log.info(
            "batch: %d sequences per step = %d per micro-batch x %d accumulation x %d process(es) (%s)",
            batch.global_batch,
            batch.micro_batch,
            batch.grad_accum,
            rt.world,
            batch.how,
        )
    run_cfg = replace(cfg, batch_size=batch.micro_batch, grad_accum=batch.grad_accum, global_batch=None)
    compiled, warning = resolve_compile(cfg.compile, rt.device.type)  # auto without Triton on CUDA: eager
    if warning and rt.is_main:
        log.warning(warning)
    models.record["batch"] = {
        **batch.to_dict(),
        "tokens_per_process_step": batch.global_batch // rt.world * plan.data.seq_len,
    }
    models.record["compile"] = compiled
    _write_run_record(where.out, models.record, rt)
    rt.barrier()
    state = training.setup_training(run_cfg, rt, forward, models.student, where.out)
    if models.pairs is not None:
        fill_target_cache(models.pairs, models.teacher, plan.head, cfg, rt, where.out, state.start_step, batch)
    return run_cfg, batch, state, compiled


def _train(plan: DistillPlan, rt: training.Runtime, where: Where, hooks: Hooks, models: Models) -> DistillResult:
    """Train the student from the resume point to --max-steps, then export it (main process)."""
    cfg = plan.cfg
    run_cfg, batch, state, compiled = _prepare_training(plan, rt, where, hooks, models)
    start = state.start_step
    running_text = uses_running_text(cfg)
    loader = _running_text_loader(plan, rt, batch, start)
    step = DistillStep(
        plan,
        rt,
        models.teacher,
        models.pairs,
        state.model,
        batch,
        iter(loader) if running_text else None,
        # Compiled: the student's forward, the teacher's capture and the loss as graphs (static shapes:
        # packed sequences all have the data's length; a padded batch adds a second graph). Eager otherwise.
        torch.compile(hooks.distill_terms, dynamic=False) if compiled else hooks.distill_terms,
    )
    if start >= cfg.max_steps:
        log.info("already at step %d of %d: nothing to train", start, cfg.max_steps)
    if cfg.probe_tatoeba is not None and start == 0:
        _probe_untrained(models, rt, state.metrics)
    t0 = time.perf_counter()
    with loader, tf32_relations(rt.device, rt.dtype):
        result = _run_steps(plan, rt, where, models, run_cfg, state, step, start)
    mix = step.mix()
    if rt.is_main:
        _export_trained(plan, rt, where, hooks, models, batch, mix, result.last_loss)
    rt.barrier()
    return DistillResult(
        where.out,
        where.export_dir,
        cfg.max_steps,
        result.first_loss,
        result.last_loss,
        result.tokens_per_s,
        time.perf_counter() - t0,
        mix,
    )


def _running_text_loader(plan: DistillPlan, rt: training.Runtime, batch: BatchPlan, start: int):
    """The running text's micro-batches from step `start` on, as a context manager (the loader's workers); with
    only the parallel term on, the running text is not read at all: a null context."""
    cfg = plan.cfg
    if not uses_running_text(cfg):
        return contextlib.nullcontext()
    sampler = BatchSampler(plan.counts, cfg.alpha, cfg.seed)
    workers = cfg.data_workers if cfg.data_workers is not None else default_workers(rt.device.type, rt.local_world)
    return make_loader(
        plan.data,
        sampler,
        batch_size=batch.micro_batch,
        accum=batch.grad_accum,
        rank=rt.rank,
        world=rt.world,
        pad_id=plan.data.tokenizer.get("pad_token_id"),
        start_step=start,
        max_steps=cfg.max_steps,
        workers=workers,
        pin_memory=default_pin_memory(rt.device.type),
    )


def _probe_untrained(models: Models, rt: training.Runtime, metrics) -> None:
    """A fresh run with --probe-tatoeba: the probe of the student before any step, recorded as step 0."""
    found = _run_probe(models.probe, models.student, rt, 0)
    if found:
        metrics.write({"step": 0, **found, "train_s": 0.0})
    rt.barrier()


def _run_steps(
    plan: DistillPlan,
    rt: training.Runtime,
    where: Where,
    models: Models,
    run_cfg: DistillConfig,
    state,
    step: DistillStep,
    start: int,
) -> training.LoopResult:
    """The training loop from `start`: the step's language mix in the logged records, the probe every
    --probe-every steps when there is one."""
    cfg = plan.cfg

    def run_probe(at: int) -> dict | None:
        return _run_probe(models.probe, models.student, rt, at)

    return training.run_steps(
        training.Steps(
            run_cfg,
            rt,
            state.model,
            models.student,
            state.optimizer,
            state.scheduler,
            step.compute,
            start,
            state.scaler,
        ),
        training.Reporting(
            where.out,
            state.metrics,
            description=f"distill {where.title}",
            on_log=step.on_log,
            checkpoint_state=lambda at: {"sampler": "stateless(seed, step)", "seed": cfg.seed},
            probe=run_probe if cfg.probe_tatoeba is not None else None,
            probe_every=cfg.probe_every,
        ),
    )


def _export_trained(
    plan: DistillPlan,
    rt: training.Runtime,
    where: Where,
    hooks: Hooks,
    models: Models,
    batch: BatchPlan,
    mix: dict[str, float],
    final_loss: float | None,
) -> None:
    """Main process: the realised language mix logged, the trained student exported with its card."""
    if mix:
        log.info("realised language mix: %s", ", ".join(f"{k} {v:.1%}" for k, v in mix.items()))
    card = card_info(plan, where.title, models.picked)
    card.update(
        {
            "batch": f"{batch.micro_batch} x {batch.grad_accum} accumulation x {rt.world} processes",
            "final_loss": final_loss,
        }
    )
    hooks.export_model(models.student, plan.tokenizer, where.export_dir, card, sentence_teacher=plan.cfg.teacher)
    log.info("student exported to %s", where.export_dir)


def fill_target_cache(
    pairs: ParallelSampler,
    teacher: nn.Module,
    head: EmbeddingHead,
    cfg: DistillConfig,
    rt: training.Runtime,
    out: Path,
    start: int,
    plan: BatchPlan,
) -> None:
    """The teacher's embedding of every source sentence steps [start, max_steps) will draw, from the cache or
    computed once now (rank 0; the other ranks read what it wrote), so that no step runs the teacher on pairs."""
    from mlminilm.distillation import targets

    root = Path(cfg.target_cache) if cfg.target_cache is not None else out / TARGET_CACHE
    # An error writing the cache names the option that places it.
    if cfg.target_cache is not None:
        advice = "give --target-cache a writable directory (on a disk with space)"
    else:
        advice = f"choose another --out, or place the cache elsewhere with --target-cache DIR (it is {root})"
    texts = pairs.drawn_sources(start, cfg.max_steps, plan.micro_batch, plan.grad_accum, rt.world)
    pairs.target_table = targets.prepare(
        root,
        teacher,
        pairs.tokenizer,
        texts,
        head.modes,
        head.normalize,
        prefix=pairs.prefix,
        max_length=pairs.max_length,
        device=rt.device,
        is_main=rt.is_main,
        barrier=rt.barrier,
        advice=advice,
    )


def _write_run_record(out: Path, record: dict, rt: training.Runtime) -> None:
    """The run record, once the inputs have loaded (main process; kept when it exists, as on --resume): a run
    that fails before this leaves nothing to block its retry."""
    if rt.is_main:
        out.mkdir(parents=True, exist_ok=True)
        if not (out / training.RUN_RECORD).exists():
            training.write_json_atomic(out / training.RUN_RECORD, record)


def _run_probe(probe, student: nn.Module, rt: training.Runtime, step: int) -> dict | None:
    """The probe's record for the student as it is at `step`, logged; None without a probe (or off rank 0)."""
    if probe is None:
        return None
    found = probe(student, rt)
    log.info(
        "probe at step %d: Tatoeba xx->en %.2f (%s)",
        step,
        found["probe_tatoeba_xx_to_en"],
        ", ".join(f"{k} {v['xx_to_en']:.1f}" for k, v in found["probe_tatoeba"].items()),
    )
    return found


def _export_initialised(
    plan: DistillPlan, rt: training.Runtime, where: Where, hooks: Hooks, models: Models
) -> DistillResult:
    """--max-steps 0: the initialised student, exported untrained (to evaluate a starting point before spending
    compute), with its run record, and the step-0 probe when one is asked for."""
    t0 = time.perf_counter()
    _write_run_record(where.out, models.record, rt)
    if rt.is_main:
        found = _run_probe(models.probe, models.student, rt, 0)
        with training.open_tracker(plan.cfg, where.out, rt) as metrics:
            if found:
                metrics.write({"step": 0, **found, "train_s": 0.0})
        card = card_info(plan, where.title, models.picked)
        hooks.export_model(
            models.student,
            plan.tokenizer,
            where.export_dir,
            card,
            sentence_teacher=plan.cfg.teacher,
            summary="Initialised only (--max-steps 0): no distillation step was taken.",
        )
        log.info("initialised student (no training) exported to %s", where.export_dir)
    rt.barrier()
    return DistillResult(where.out, where.export_dir, 0, None, None, 0.0, time.perf_counter() - t0, {})
