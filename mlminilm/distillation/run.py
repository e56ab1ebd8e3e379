"""A `distill` run from its resolved plan (distillation/plan.py): the teacher and the student, the batch, its inputs
(distillation/inputs) asked for their record, checks, targets and batches, the training loop and the export, as one
object that owns its state (`DistillRun`, as torchtune's recipe classes). mlminilm.distill checks the options, makes
the run and calls `execute`.

What the command's module lets callers and tests replace (the teacher's loading, the step's terms, the export,
the probe) the run is given when it is made: this layer does not import the command."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm import training
from mlminilm.config import DistillConfig
from mlminilm.distillation import run_inputs
from mlminilm.distillation.batch import resolve_batch
from mlminilm.distillation.inputs import InputContext, StepRange
from mlminilm.distillation.objective import StudentForward
from mlminilm.distillation.plan import DistillPlan, card_info, objective_summary
from mlminilm.distillation.relations import tf32_relations
from mlminilm.distillation.step import DistillStep
from mlminilm.distillation.terms import reads_output, trains_output
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
    language_mix: dict[str, float]  # the running text's
    mixes: dict[str, dict[str, float]] = field(default_factory=dict)  # every other input's, by its key

    def to_dict(self) -> dict:
        found = {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items() if k != "mixes"}
        return {**found, **self.mixes}


class DistillRun:
    """One run of `plan` on `rt`, into `out` (the student into `export_dir`, its card titled `title`): `execute` loads
    the teacher and the student, trains from the resume point and exports. `resume_keys`: the options --resume must
    find unchanged (mlminilm.distill.RESUME_KEYS). Given by the command: `load_teacher` (models.loading),
    `distill_terms` (objective.distill_terms), `export_model` (the export) and `make_probe` ((student config,
    tokenizer) -> the in-training probe; None: no probe).

    What it builds as it goes is its own: the run record, the teacher, the student (and the teacher layers it
    started from), the probe, the batch and the training state. Its inputs (`inputs`, the plan's) make their own
    draws, with their targets, once the batch is known."""

    def __init__(
        self,
        plan: DistillPlan,
        rt: training.Runtime,
        out: Path,
        *,
        export_dir: Path,
        title: str,
        resume_keys: tuple[str, ...],
        load_teacher: Callable,
        distill_terms: Callable,
        export_model: Callable,
        make_probe: Callable | None = None,
    ):
        self.plan, self.cfg, self.rt = plan, plan.cfg, rt
        self.out, self.export_dir, self.title, self.resume_keys = out, export_dir, title, resume_keys
        self.load_teacher, self.distill_terms, self.export_model = load_teacher, distill_terms, export_model
        self.make_probe = make_probe
        self.record: dict = {}
        self.teacher: nn.Module | None = None
        self.student: nn.Module | None = None
        self.picked: list[int] | None = None  # the teacher layers the student started from
        self.probe = None
        self.inputs = list(plan.inputs)  # the running text first (distillation/inputs)
        self.batch: BatchPlan | None = None
        self.state: training.TrainingState | None = None
        self.compiled = False  # whether the step runs compiled (--compile, decided with the device)
        self.teacher_digest: str | None = None  # targets.module_digest of the loaded teacher, computed once
        self.resumed: tuple[dict, dict] | None = None  # --resume: the recorded run, and the options it changes

    def execute(self) -> DistillResult:
        """Load, train, export (or export the initialised student with --max-steps 0)."""
        self._check_resume()
        self._load_models()
        self._check_teacher()
        if self.cfg.max_steps == 0:
            return self._export_initialised()
        return self._train()

    def _check_resume(self) -> None:
        """The run record begun, each input's entries in it; with --resume, each input and the options checked
        against the recorded run (nothing written: the teacher is checked once loaded, `_check_teacher`)."""
        plan, cfg, rt = self.plan, self.cfg, self.rt
        extra = {"teacher_model_type": plan.teacher_config.model_type}
        for inp in self.inputs:
            extra.update(inp.record())
        self.record = training.run_record(cfg, rt, extra)
        if cfg.resume:
            training.check_same_run_everywhere(self.out, rt, training.RUN_RECORD)
            old = (training.read_run_record(self.out) or (None, {}))[1]
            # Exact resume is promised for the inputs the run started on only: checked before the options' check
            # may record a change (another path is that check's to name).
            for inp in self.inputs:
                inp.check_resume(old, self.record, self.out)
            self.resumed = old, training.check_resume_compatible(self.out, self.record, self.resume_keys, write=False)

    def _check_teacher(self) -> None:
        """With --resume, the loaded teacher checked against the recorded run's (run_inputs), then what the resume
        changes written to the run record (main process): a refused resume writes nothing."""
        if self.resumed is None:
            return
        old, changes = self.resumed
        cfg, rt = self.cfg, self.rt

        def digest_in(dtype: str) -> str:
            from mlminilm.distillation.targets import module_digest

            layer = -1 if trains_output(cfg) else cfg.teacher_layer
            return module_digest(self.load_teacher(cfg.teacher, layer, getattr(torch, dtype), torch.device("cpu"))[0])

        run_inputs.check_same_teacher(old, self.record, self.out, digest_in)
        added = run_inputs.unrecorded(old, self.record, self.out) if old else {}
        if rt.is_main:
            training.record_resume(self.out, changes, added)

    def _load_models(self) -> None:
        """The teacher in the compute dtype, the student built (seeded) and initialised, frozen where no term
        reaches, the probe; the inputs logged; the run record completed."""
        plan, cfg, rt = self.plan, self.cfg, self.rt
        # The teacher's weights in the compute dtype (bf16 on CUDA): it only runs forward, truncated at the distilled
        # layer, or whole when an output term needs its last hidden states.
        whole = trains_output(cfg)
        self.teacher, _ = self.load_teacher(cfg.teacher, -1 if whole else cfg.teacher_layer, rt.dtype, rt.device)
        from mlminilm.distillation.targets import module_digest

        self.teacher_digest = module_digest(self.teacher)  # the run record's and the target cache's, hashed once
        self.record[run_inputs.TEACHER_KEY] = run_inputs.teacher_record(self.teacher_digest, rt.dtype)
        s_config = student_config(plan.teacher_config, cfg.shape, cfg.dropout)
        student = build_student(s_config, cfg.seed)
        if plan.init_layers is not None:
            self.picked = init_from_teacher(student, cfg.teacher, plan.init_layers)
            log.info("student initialised from teacher layers %s (--init-layers %s)", self.picked, cfg.init_rule)
        frozen = freeze_unused(student, -1, through_output=whole)
        if cfg.freeze_embeddings:
            frozen += freeze_word_embeddings(student)
        frozen += freeze_bottom_layers(student, cfg.freeze_layers)
        student.to(rt.device)
        self.student = student
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
        if self.make_probe is not None and rt.is_main:
            self.probe = self.make_probe(s_config, plan.tokenizer)
            log.info("%s; every %d steps", self.probe.describe(), cfg.probe_every)
        for inp in self.inputs:
            inp.log()
        self.record["init_layers"] = self.picked
        self.record["objective"] = summary

    def _prepare_training(self) -> DistillConfig:
        """The batch decided and recorded, the run record written, DDP, AdamW and the resume point, each input's
        draw made with its targets: the config with the batch decided."""
        plan, cfg, rt = self.plan, self.cfg, self.rt
        forward = StudentForward(self.student, outputs=reads_output(cfg))
        batch = self.batch = resolve_batch(plan, rt, self.teacher, forward, self.distill_terms)
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
        self.compiled, warning = resolve_compile(cfg.compile, rt.device.type)  # auto without Triton on CUDA: eager
        if warning and rt.is_main:
            log.warning(warning)
        self.record["batch"] = {
            **batch.to_dict(),
            "tokens_per_process_step": batch.global_batch // rt.world * plan.data.seq_len,
        }
        self.record["compile"] = self.compiled
        self._write_run_record()
        rt.barrier()
        self.state = training.setup_training(run_cfg, rt, forward, self.student, self.out)
        ctx = InputContext(plan, rt, self.teacher, self.teacher_digest, *self._target_cache())
        steps = StepRange(self.state.start_step, cfg.max_steps, batch.micro_batch, batch.grad_accum, rt.world)
        for inp in self.inputs:
            inp.prepare(ctx, steps)
        return run_cfg

    def _train(self) -> DistillResult:
        """Train the student from the resume point to --max-steps, then export it (main process)."""
        cfg, rt = self.cfg, self.rt
        run_cfg = self._prepare_training()
        start = self.state.start_step
        # Compiled: the student's forward, the teacher's capture and the loss as graphs (static shapes: packed
        # sequences all have the data's length; a padded batch adds a second graph). Eager otherwise.
        terms_fn = torch.compile(self.distill_terms, dynamic=False) if self.compiled else self.distill_terms
        step = DistillStep(self, self.state.model, terms_fn)
        if start >= cfg.max_steps:
            log.info("already at step %d of %d: nothing to train", start, cfg.max_steps)
        if cfg.probe_tatoeba is not None and start == 0:
            self._probe_untrained()
        t0 = time.perf_counter()
        try:
            with tf32_relations(rt.device, rt.dtype):
                result = self._run_steps(run_cfg, step, start)
        finally:
            for inp in self.inputs:
                inp.close()  # the running text's loader workers
        mixes = step.mixes()
        mix = mixes.pop(self.inputs[0].mix_key)
        if rt.is_main:
            self._export_trained(mix, result.last_loss, mixes)
        rt.barrier()
        return DistillResult(
            self.out,
            self.export_dir,
            cfg.max_steps,
            result.first_loss,
            result.last_loss,
            result.tokens_per_s,
            time.perf_counter() - t0,
            mix,
            mixes,
        )

    def _probe_untrained(self) -> None:
        """A fresh run with --probe-tatoeba: the probe of the student before any step, recorded as step 0."""
        found = self._run_probe(0)
        if found:
            self.state.metrics.write({"step": 0, **found, "train_s": 0.0})
        self.rt.barrier()

    def _run_steps(self, run_cfg: DistillConfig, step: DistillStep, start: int) -> training.LoopResult:
        """The training loop from `start`: the step's language mix in the logged records, the probe every
        --probe-every steps when there is one."""
        cfg, state = self.cfg, self.state
        return training.run_steps(
            training.Steps(
                run_cfg,
                self.rt,
                state.model,
                self.student,
                state.optimizer,
                state.scheduler,
                step.compute,
                start,
                state.scaler,
            ),
            training.Reporting(
                self.out,
                state.metrics,
                description=f"distill {self.title}",
                on_log=step.on_log,
                checkpoint_state=lambda at: {"sampler": "stateless(seed, step)", "seed": cfg.seed},
                probe=self._run_probe if cfg.probe_tatoeba is not None else None,
                probe_every=cfg.probe_every,
            ),
        )

    def _export_trained(self, mix: dict[str, float], final_loss: float | None, mixes: dict) -> None:
        """Main process: the realised language mixes logged, the trained student exported with its card."""
        if mix:
            log.info("realised language mix: %s", ", ".join(f"{k} {v:.1%}" for k, v in mix.items()))
        for inp in self.inputs[1:]:
            if mixes.get(inp.mix_key):
                shares = ", ".join(f"{k} {v:.1%}" for k, v in mixes[inp.mix_key].items())
                log.info("realised %s language mix: %s", inp.describes, shares)
        batch = self.batch
        card = card_info(self.plan, self.title, self.picked)
        card.update(
            {
                "batch": f"{batch.micro_batch} x {batch.grad_accum} accumulation x {self.rt.world} processes",
                "final_loss": final_loss,
            }
        )
        self.export_model(self.student, self.plan.tokenizer, self.export_dir, card, sentence_teacher=self.cfg.teacher)
        log.info("student exported to %s", self.export_dir)

    def _target_cache(self) -> tuple[Path, str]:
        """The teacher-target cache's folder, and how an error writing it says to move it (naming the option that
        places it)."""
        cfg = self.cfg
        root = Path(cfg.target_cache) if cfg.target_cache is not None else self.out / TARGET_CACHE
        if cfg.target_cache is not None:
            return root, "give --target-cache a writable directory (on a disk with space)"
        return root, f"choose another --out, or place the cache elsewhere with --target-cache DIR (it is {root})"

    def _write_run_record(self) -> None:
        """The run record, once the inputs have loaded (main process; kept when it exists, as on --resume): a run
        that fails before this leaves nothing to block its retry."""
        if self.rt.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            if not (self.out / training.RUN_RECORD).exists():
                training.write_json_atomic(self.out / training.RUN_RECORD, self.record)

    def _run_probe(self, step: int) -> dict | None:
        """The probe's record for the student as it is at `step`, logged; None without a probe (or off rank 0)."""
        if self.probe is None:
            return None
        found = self.probe(self.student, self.rt)
        log.info(
            "probe at step %d: Tatoeba xx->en %.2f (%s)",
            step,
            found["probe_tatoeba_xx_to_en"],
            ", ".join(f"{k} {v['xx_to_en']:.1f}" for k, v in found["probe_tatoeba"].items()),
        )
        return found

    def _export_initialised(self) -> DistillResult:
        """--max-steps 0: the initialised student, exported untrained (to evaluate a starting point before spending
        compute), with its run record, and the step-0 probe when one is asked for."""
        t0 = time.perf_counter()
        self._write_run_record()
        if self.rt.is_main:
            found = self._run_probe(0)
            with training.open_tracker(self.cfg, self.out, self.rt) as metrics:
                if found:
                    metrics.write({"step": 0, **found, "train_s": 0.0})
            card = card_info(self.plan, self.title, self.picked)
            self.export_model(
                self.student,
                self.plan.tokenizer,
                self.export_dir,
                card,
                sentence_teacher=self.cfg.teacher,
                summary="Initialised only (--max-steps 0): no distillation step was taken.",
            )
            log.info("initialised student (no training) exported to %s", self.export_dir)
        self.rt.barrier()
        return DistillResult(self.out, self.export_dir, 0, None, None, 0.0, time.perf_counter() - t0, {})
