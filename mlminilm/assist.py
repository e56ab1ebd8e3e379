"""`assist`: teacher -> teacher assistant (teacher's depth, student's width) -> student (METHOD.md section 2)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from mlminilm import distill, training
from mlminilm import logging as mlog
from mlminilm.config import AssistConfig, DistillConfig
from mlminilm.corpus.manifest import tokenizer_identity
from mlminilm.distillation.inputs import optional_kinds
from mlminilm.errors import CheckpointError, ConfigError
from mlminilm.io.stale import clean_stale
from mlminilm.models.loading import TeacherShape, check_encoder_config, load_config
from mlminilm.models.student import student_config

log = mlog.get(__name__)

STAGES = ("assistant", "student")


@dataclass
class AssistResult:
    out: Path
    assistant: Path
    student: Path
    stages: dict

    def to_dict(self) -> dict:
        return {
            "out": str(self.out),
            "assistant": str(self.assistant),
            "student": str(self.student),
            "stages": self.stages,
        }


def assistant_rule(teacher: TeacherShape, layers: int, hidden: int) -> str | None:
    """Why the assistant rule (M <= L/2 and d' <= d/2) does not apply, or None when it does."""
    reasons = []
    if layers > teacher.layers / 2:
        reasons.append(f"the student's {layers} layers are more than half the teacher's {teacher.layers}")
    if hidden > teacher.hidden / 2:
        reasons.append(f"the student's hidden size {hidden} is more than half the teacher's {teacher.hidden}")
    return "; ".join(reasons) or None


def stage_configs(cfg: AssistConfig, teacher: TeacherShape) -> tuple[DistillConfig, DistillConfig]:
    out = Path(cfg.out)
    common = {f: getattr(cfg, f) for f in DistillConfig.__dataclass_fields__}
    common.pop("out")
    common.pop("max_steps")
    # The output terms compare hidden states of equal width: the assistant stage (teacher -> student width) has
    # them only when the widths already agree (else auto, which turns them off there); the student stage
    # (assistant -> student) always can. The terms of the other inputs (distillation/inputs), which compare
    # embeddings, follow the same rule.
    same_width = cfg.hidden == teacher.hidden
    assistant = DistillConfig(
        **{
            **common,
            "out": out / "assistant-run",
            "max_steps": cfg.assistant_steps,
            "layers": teacher.layers,
            "init": "random",
            "init_layers": None,
            "freeze_layers": 0,
            "hidden_loss_weight": cfg.hidden_loss_weight if same_width else None,
            "embedding_loss_weight": cfg.embedding_loss_weight if same_width else None,
            **{kind.field: getattr(cfg, kind.field) if same_width else None for kind in optional_kinds()},
        },
    )
    student = DistillConfig(
        **{
            **common,
            "out": out / "student-run",
            "max_steps": cfg.student_steps,
            "teacher": str(out / "assistant"),
            "teacher_layer": -1,
        },
    )
    return assistant, student


def _stage_done(export: Path, steps: int) -> bool:
    card = export / "mlminilm.json"
    return card.exists() and json.loads(card.read_text(encoding="utf-8")).get("steps") == steps


def validate(cfg: AssistConfig) -> tuple[DistillConfig, DistillConfig]:
    """Every check of both stages that can run before anything is written: the rule, the data, the teacher and
    its tokenizer, both stages' shapes and the output directory. Returns the stage configs."""
    teacher_config = load_config(cfg.teacher)
    check_encoder_config(teacher_config, cfg.teacher)
    teacher = TeacherShape.of(teacher_config)
    why_not = assistant_rule(teacher, cfg.layers, cfg.hidden)
    if why_not and not cfg.force:
        raise ConfigError(
            f"a teacher assistant helps when the student has at most half the teacher's layers and hidden size; "
            f"here {why_not}: use `mlminilm distill` directly, or add --force"
        )
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"--out {out} is a file, not a directory; name a directory")
    first, second = stage_configs(replace(cfg, overwrite=False), teacher)
    plan = distill.validate(first)
    data, tokenizer = plan.data, plan.tokenizer
    # The second stage's teacher (the assistant) does not exist yet: check the student against its shape.
    assistant_config = student_config(teacher_config, first.shape)
    distill.check_compatibility(second, assistant_config, data, tokenizer_identity(tokenizer))
    _cache_entry(cfg, out)  # a --target-cache inside --out: never in an export or where a run is set aside
    clean_stale(out, prefix=tuple(f".tmp-{stage}-" for stage in STAGES))  # exports of a run that died
    if out.is_dir() and any(out.iterdir()) and not (cfg.resume or cfg.overwrite or _failed_stages(out)):
        raise CheckpointError(
            f"output directory {out} exists and is not empty; add --resume to continue that run or --overwrite to "
            "start over"
        )
    return first, second


STAGE_DIRS = ("assistant-run", "assistant", "student-run", "student")


def _failed_stages(out: Path) -> bool:
    """Whether `out` holds only stage run directories that a failed run left before any checkpoint."""
    entries = list(out.iterdir())
    return all(e.name in ("assistant-run", "student-run") and training.failed_run_leftovers(e) for e in entries)


def _any_checkpoint(out: Path) -> bool:
    return any(training.checkpoint_dirs(out / run) for run in ("assistant-run", "student-run"))


LAYOUT = training.RunLayout(STAGE_DIRS, what="an assist run", leftovers=_failed_stages, checkpointed=_any_checkpoint)


def _cache_entry(cfg: AssistConfig, out: Path) -> tuple[str, ...]:
    """The entry of --out that holds a --target-cache placed inside it, which --overwrite keeps (as distill's);
    in a stage's run directory it goes with that run. ConfigError in an export (the assistant is the second stage's
    teacher) or in what --overwrite sets aside."""
    from mlminilm.distillation.target_store import place_in_out

    return place_in_out(cfg.target_cache, out, (*STAGES, training.PREVIOUS_RUN), ("assistant-run", "student-run"))


def run(cfg: AssistConfig) -> AssistResult:
    first, second = validate(cfg)
    out = Path(cfg.out)
    inputs = {"--teacher": cfg.teacher, "--data": cfg.data, "--probe-tatoeba": cfg.probe_tatoeba}
    # The claim every training command makes (training.claimed_output): with --overwrite the previous stages are
    # kept aside until the new run has finished, and put back if it fails before any stage's first checkpoint.
    with training.claimed_output(out, cfg, replace(LAYOUT, kept=_cache_entry(cfg, out)), inputs):
        return _run_stages(cfg, out, first, second)


def _run_stages(cfg: AssistConfig, out: Path, first: DistillConfig, second: DistillConfig) -> AssistResult:
    stages = {}
    for name, stage in zip(STAGES, (first, second)):
        export = out / name
        if cfg.resume and _stage_done(export, stage.max_steps):
            log.info("%s stage already complete in %s: skipped", name, export)
            stages[name] = {"skipped": True, "export": str(export)}
            continue
        log.info("stage %s: %s -> %dx%d (%d steps)", name, stage.teacher, stage.layers, stage.hidden, stage.max_steps)
        result = distill.run(replace(stage, resume=cfg.resume), export_to=export, title=name)
        stages[name] = result.to_dict()
    return AssistResult(out, out / "assistant", out / "student", stages)


# `from mlminilm import assist` may give this module: calling it runs the command (mlminilm.api).
from mlminilm.api import command_module  # noqa: E402

command_module(__name__, AssistConfig)
