"""`distill`: MiniLM deep self-attention distillation of a teacher encoder into a student of any shape."""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm import train
from mlminilm.capture import layer_qkv
from mlminilm.config import DistillConfig
from mlminilm.errors import ConfigError, DataError
from mlminilm.corpus.dataset import PreparedData
from mlminilm.corpus.manifest import tokenizer_identity
from mlminilm.losses import minilm_v1_terms, minilm_v2_terms
from mlminilm.models import (
    TeacherShape, build_student, check_encoder_config, export_model, freeze_unused, freeze_word_embeddings,
    init_from_teacher,
    load_config, load_teacher, load_tokenizer, student_config,
)
from mlminilm.batch_size import CPU_AUTO_LIMIT, CUDA_MEMORY_SHARE, BatchPlan, plan_batch
from mlminilm.corpus.loader import default_pin_memory, default_workers, make_loader
from mlminilm.sampling import BatchSampler

log = mlog.get(__name__)

# OUT/run.json is the run record (config.json in earlier versions: removed by --overwrite, read by --resume).
ARTIFACTS = (train.RUN_RECORD, train.LEGACY_RUN_RECORD, train.METRICS, train.CHECKPOINTS, "student")
# Options that define a run: --resume with any of these changed is refused.
RESUME_KEYS = (
    "teacher", "data", "layers", "hidden", "heads", "intermediate", "init", "objective", "relation_heads",
    "teacher_layer", "alpha", "batch_size", "grad_accum", "global_batch", "lr", "warmup", "seed", "max_steps",
    "freeze_embeddings",
)


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


class StudentQKV(nn.Module):
    """The student's forward for distillation: Q, K, V of its top layer. A module, so DDP can wrap it."""

    def __init__(self, student: nn.Module):
        super().__init__()
        self.student = student

    def forward(self, input_ids, attention_mask):
        return layer_qkv(self.student, input_ids, attention_mask, -1)


def distill_terms(teacher: nn.Module, teacher_layer: int, student_forward: nn.Module, input_ids: torch.Tensor,
                  mask: torch.Tensor | None, cfg: DistillConfig) -> dict[str, torch.Tensor]:
    """The loss terms of one micro-batch: the teacher's Q/K/V (no gradient) against the student's.

    `mask` is None for a batch without padding (then nothing is masked anywhere).

    A module-level function so that benchmarks/distill_step.py times exactly what `distill` runs.
    """
    # The teacher runs in its weights' dtype (bf16 / fp16 when the run computes in them) with autocast off: under
    # autocast its layer norms and softmaxes would run in fp32 and every matmul recast its input back, for targets
    # that are bf16 projections anyway. The relations built from them are fp32 (mlminilm/relations.py).
    with torch.no_grad(), torch.autocast(input_ids.device.type, enabled=False):
        t_qkv = layer_qkv(teacher, input_ids, mask, teacher_layer)
    s_qkv = student_forward(input_ids, mask)
    if cfg.objective == "minilm":
        return minilm_v1_terms(t_qkv, s_qkv, mask, cfg.heads)
    return minilm_v2_terms(t_qkv, s_qkv, mask, cfg.relation_heads)


def resolve_batch(cfg: DistillConfig, rt: train.Runtime, teacher: nn.Module, teacher_layer: int,
                  forward: nn.Module, seq_len: int, vocab_size: int | None) -> BatchPlan:
    """The run's micro-batch and accumulation (mlminilm/batch_size.py); on CUDA `--batch-size auto` tries real
    distill steps (teacher, student forward and backward) at growing micro-batches until one does not fit."""
    if cfg.batch_size != "auto" or rt.device.type != "cuda":
        return plan_batch(cfg.batch_size, cfg.grad_accum, cfg.global_batch, rt.world, cap=CPU_AUTO_LIMIT)
    trained = sum(p.numel() for p in forward.parameters() if p.requires_grad)
    optimizer_bytes = 2 * 4 * trained  # AdamW's two fp32 moments, allocated at the first step
    total = torch.cuda.get_device_properties(rt.device).total_memory
    generator = torch.Generator(device="cpu").manual_seed(cfg.seed)

    def fits(size: int) -> bool:
        ids = torch.randint(0, vocab_size or 2, (size, seq_len), generator=generator).to(rt.device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(rt.device)
        try:
            with rt.autocast():
                loss = sum(distill_terms(teacher, teacher_layer, forward, ids, None, cfg).values())
            loss.backward()
            peak = torch.cuda.max_memory_allocated(rt.device)
            ok = peak + optimizer_bytes <= CUDA_MEMORY_SHARE * total
            log.debug("--batch-size auto: %d sequences, peak %.2f GiB", size, peak / 2**30)
        except torch.cuda.OutOfMemoryError:
            ok = False
        finally:
            forward.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
        return ok

    return plan_batch(cfg.batch_size, cfg.grad_accum, cfg.global_batch, rt.world, fits=fits)


def check_compatibility(cfg: DistillConfig, teacher_config, data: PreparedData, teacher_tokenizer: dict) -> None:
    """Everything that can be checked before loading weights, reported at once."""
    t = TeacherShape.of(teacher_config)
    problems = []
    mismatch = vocabulary_mismatch(data.tokenizer, teacher_tokenizer)
    if mismatch:
        problems.append(
            f"--data {cfg.data} was prepared with another tokenizer than the one of teacher '{cfg.teacher}' "
            f"({mismatch}); "
            f"run `mlminilm prepare --teacher {cfg.teacher}` again"
        )
    else:
        problems += _embedding_problems(cfg, teacher_config, data)
    layer = cfg.teacher_layer + t.layers if cfg.teacher_layer < 0 else cfg.teacher_layer
    if not 0 <= layer < t.layers:
        problems.append(f"--teacher-layer {cfg.teacher_layer} is out of range for a {t.layers}-layer teacher")
    if cfg.objective == "minilm" and cfg.heads != t.heads:
        problems.append(
            f"--objective minilm needs the teacher's head count: --heads {cfg.heads} != {t.heads} "
            f"(use --heads {t.heads}, or --objective minilm-v2 with --relation-heads)"
        )
    if cfg.objective == "minilm-v2" and t.hidden % cfg.relation_heads:
        problems.append(
            f"--relation-heads ({cfg.relation_heads}) must divide the teacher's hidden size ({t.hidden}) "
            f"and the student's ({cfg.hidden})"
        )
    if cfg.init == "teacher":
        if (cfg.hidden, cfg.heads, cfg.intermediate) != (t.hidden, t.heads, t.intermediate):
            problems.append(
                f"--init teacher needs the teacher's widths: hidden {t.hidden}, heads {t.heads}, "
                f"intermediate {t.intermediate} (got {cfg.hidden}, {cfg.heads}, {cfg.intermediate})"
            )
        if cfg.layers > t.layers:
            problems.append(f"--init teacher needs --layers <= the teacher's {t.layers}")
    if problems:
        raise ConfigError("; ".join(problems))


def vocabulary_mismatch(data_tokenizer: dict, teacher_tokenizer: dict) -> str | None:
    """How the tokenizer recorded in a prepared-data manifest differs from the teacher's, or None when they agree."""
    if data_tokenizer.get("vocab_sha256") == teacher_tokenizer.get("vocab_sha256"):
        return None
    a, b = data_tokenizer.get("vocab_size"), teacher_tokenizer.get("vocab_size")
    if a != b:
        return f"the data's has {a} ids, the teacher's {b}"
    specials = [f"{name} {data_tokenizer.get(name)} vs {teacher_tokenizer.get(name)}"
                for name in sorted(set(data_tokenizer) | set(teacher_tokenizer))
                if name.endswith("_token_id") and data_tokenizer.get(name) != teacher_tokenizer.get(name)]
    detail = f"; special ids differ: {', '.join(specials)}" if specials else ""
    return (f"both have {a} ids, but different tokens or ids (vocabulary sha256 "
            f"{str(data_tokenizer.get('vocab_sha256'))[:12]} vs {str(teacher_tokenizer.get('vocab_sha256'))[:12]}){detail}")


def _embedding_problems(cfg: DistillConfig, teacher_config, data: PreparedData) -> list[str]:
    """The data's token ids must index the teacher's embedding rows, and its sequences fit its positions."""
    from mlminilm.evaluation.common import position_limit

    problems = []
    rows = getattr(teacher_config, "vocab_size", None)
    highest = data.highest_token_id()
    if rows is not None and highest is not None and highest >= rows:
        problems.append(
            f"--data {cfg.data} holds token id {highest}, but teacher '{cfg.teacher}' has only {rows} embedding rows "
            "(its config's vocab_size does not cover its tokenizer); use a teacher whose embeddings fit its tokenizer"
        )
    limit = position_limit(teacher_config)
    if limit is not None and data.seq_len > limit:
        problems.append(
            f"--data {cfg.data} holds sequences of {data.seq_len} tokens, but teacher '{cfg.teacher}' has only "
            f"{limit} positions; run `mlminilm prepare --seq-len {limit}` (or less) again"
        )
    return problems


def student_size_warning(cfg: DistillConfig, teacher_config) -> str | None:
    """A student deeper or wider than its teacher works, but compresses nothing: say so."""
    t = TeacherShape.of(teacher_config)
    larger = [f"{name} {mine} > {theirs}" for name, mine, theirs in (
        ("layers", cfg.layers, t.layers), ("hidden", cfg.hidden, t.hidden), ("intermediate", cfg.intermediate, t.intermediate))
        if mine > theirs]
    if not larger:
        return None
    return (f"the student is larger than teacher '{cfg.teacher}' ({', '.join(larger)}): it will not be smaller or "
            "faster than the teacher; check --layers / --hidden / --intermediate")


def validate(cfg: DistillConfig):
    """Every cheap check of a run, before anything is written or loaded: (data, teacher config, tokenizer)."""
    data = PreparedData.open(cfg.data)
    teacher_config = load_config(cfg.teacher)
    check_encoder_config(teacher_config, cfg.teacher)
    tokenizer = load_tokenizer(cfg.teacher)
    check_compatibility(cfg, teacher_config, data, tokenizer_identity(tokenizer))
    # The batch options' arithmetic, before anything loads (the processes torchrun starts are in WORLD_SIZE).
    plan_batch(cfg.batch_size, cfg.grad_accum, cfg.global_batch, int(os.environ.get("WORLD_SIZE", "1")))
    if sum(data.num_sequences(lang) for lang in data.languages) == 0:
        raise DataError(f"--data {cfg.data} holds no sequences; run `mlminilm prepare` on a non-empty corpus")
    return data, teacher_config, tokenizer


def run(cfg: DistillConfig, *, export_to: Path | None = None, title: str = "student") -> DistillResult:
    """Distil `cfg.teacher` into a new student on the `prepare` output in `cfg.data`; export it."""

    out = Path(cfg.out)
    export_dir = Path(export_to) if export_to is not None else out / "student"

    # Validate everything cheap before anything is written or loaded.
    data, teacher_config, tokenizer = validate(cfg)
    train.prepare_output_dir(out, cfg, ARTIFACTS)
    if export_dir.parent != out:
        from mlminilm.stale import clean_stale

        clean_stale(export_dir.parent, prefix=f".tmp-{export_dir.name}-")  # an export's temporary sits beside it
    warning = student_size_warning(cfg, teacher_config)
    if warning:
        log.warning(warning)
    counts = {lang: data.num_sequences(lang) for lang in data.languages}

    rt = train.setup_runtime(cfg.device, cfg.precision)
    try:
        return _distill(cfg, rt, data, counts, teacher_config, tokenizer, out, export_dir, title)
    finally:
        train.teardown_runtime(rt)


def _distill(cfg, rt, data, counts, teacher_config, tokenizer, out, export_dir, title) -> DistillResult:
    record = train.run_record(cfg, rt, {"teacher_model_type": teacher_config.model_type, "data_manifest": data.manifest.get("tokenizer")})
    if cfg.resume:
        train.check_resume_compatible(out, record, RESUME_KEYS, write=rt.is_main)

    # The teacher's weights in the compute dtype (bf16 on CUDA): it only runs forward.
    teacher, teacher_layer = load_teacher(cfg.teacher, cfg.teacher_layer, rt.dtype, rt.device)
    s_config = student_config(teacher_config, cfg.shape, cfg.dropout)
    student = build_student(s_config, cfg.seed)
    if cfg.init == "teacher":
        picked = init_from_teacher(student, cfg.teacher)
        log.info("student initialised from teacher layers %s", picked)
    frozen = freeze_unused(student, -1)
    if cfg.freeze_embeddings:
        frozen += freeze_word_embeddings(student)
    student.to(rt.device)
    log.info(
        "teacher %s: distilling layer %d; student %dx%d, %d heads, %.1fM trainable parameters (%.1fM unused by the loss, frozen)",
        cfg.teacher, teacher_layer, cfg.layers, cfg.hidden, cfg.heads,
        sum(p.numel() for p in student.parameters() if p.requires_grad) / 1e6, frozen / 1e6,
    )
    forward = StudentQKV(student)
    plan = resolve_batch(cfg, rt, teacher, teacher_layer, forward, data.seq_len, data.tokenizer.get("vocab_size"))
    if plan.how != "given":
        log.info("batch: %d sequences per step = %d per micro-batch x %d accumulation x %d process(es) (%s)",
                 plan.global_batch, plan.micro_batch, plan.grad_accum, rt.world, plan.how)
    run_cfg = replace(cfg, batch_size=plan.micro_batch, grad_accum=plan.grad_accum, global_batch=None)
    compiled = cfg.compile == "on" or (cfg.compile == "auto" and rt.device.type == "cuda")
    record["batch"] = plan.to_dict()
    record["compile"] = compiled
    # The run record, once the inputs have loaded: a run that fails before this leaves nothing to block its retry.
    if rt.is_main:
        out.mkdir(parents=True, exist_ok=True)
        if not (out / train.RUN_RECORD).exists():
            train.write_json_atomic(out / train.RUN_RECORD, record)
    rt.barrier()

    state = train.setup_training(run_cfg, rt, forward, student, out)
    model, optimizer, scheduler, start, metrics = (
        state.model, state.optimizer, state.scheduler, state.start_step, state.metrics
    )

    sampler = BatchSampler(counts, cfg.alpha, cfg.seed)
    mix_total: Counter = Counter()
    workers = cfg.data_workers if cfg.data_workers is not None else default_workers(rt.device.type, rt.world)
    loader = make_loader(
        data, sampler, batch_size=plan.micro_batch, accum=plan.grad_accum, rank=rt.rank, world=rt.world,
        pad_id=data.tokenizer.get("pad_token_id"), start_step=start, max_steps=cfg.max_steps, workers=workers,
        pin_memory=default_pin_memory(rt.device.type),
    )
    batches = iter(loader)
    # Compiled: the student's forward, the teacher's capture and the loss as graphs (static shapes: packed
    # sequences all have the data's length; a padded batch adds a second graph). Eager otherwise.
    terms_fn = torch.compile(distill_terms, dynamic=False) if compiled else None

    def compute(step: int, micro: int) -> train.StepOutput:
        batch = next(batches)
        if (batch.step, batch.micro) != (step, micro):  # the loader and the loop must never drift apart
            raise RuntimeError(f"data loader gave step {batch.step}.{batch.micro} for step {step}.{micro}")
        batch = batch.to(rt.device, non_blocking=True)
        # attention_mask is None unless the batch holds padding (a language's last sequence): known on the host,
        # so no step reads the device to find out, and unpadded steps skip every masking pass.
        parts = (terms_fn or distill_terms)(teacher, teacher_layer, model, batch.input_ids, batch.attention_mask, cfg)
        loss = sum(parts.values())
        return train.StepOutput(loss, parts, batch.tokens, {f"lang:{k}": v for k, v in batch.langs.items()})

    def on_log(step: int, payload: dict) -> None:
        info = payload["info"]
        drawn = {k[5:]: v for k, v in info.items() if k.startswith("lang:")}
        total = sum(drawn.values()) or 1
        payload["record"]["language_mix"] = {k: round(v / total, 4) for k, v in sorted(drawn.items())}
        mix_total.update(drawn)

    if start >= cfg.max_steps:
        log.info("already at step %d of %d: nothing to train", start, cfg.max_steps)
    t0 = time.perf_counter()
    with loader:
        result = train.train_loop(
            cfg=run_cfg, rt=rt, model=model, raw_model=student, optimizer=optimizer, scheduler=scheduler,
            compute=compute, out=out, metrics=metrics, start_step=start,
            checkpoint_state=lambda step: {"sampler": "stateless(seed, step)", "seed": cfg.seed},
            on_log=on_log, description=f"distill {title}", scaler=state.scaler,
        )
    total = sum(mix_total.values()) or 1
    mix = {k: round(v / total, 4) for k, v in sorted(mix_total.items())}
    if rt.is_main:
        log.info("realised language mix: %s", ", ".join(f"{k} {v:.1%}" for k, v in mix.items()))
        card = {
            "title": f"mlminilm {title} {cfg.layers}x{cfg.hidden}",
            "teacher": cfg.teacher,
            "teacher_layer": teacher_layer,
            "objective": cfg.objective,
            "relation_heads": cfg.relation_heads if cfg.objective == "minilm-v2" else None,
            "shape": f"{cfg.layers} layers x {cfg.hidden} hidden, {cfg.heads} heads, FFN {cfg.intermediate}",
            "init": cfg.init,
            "data": str(cfg.data),
            "languages": ", ".join(data.languages),
            "alpha": cfg.alpha,
            "steps": cfg.max_steps,
            "batch": f"{plan.micro_batch} x {plan.grad_accum} accumulation x {rt.world} processes",
            "seq_len": data.seq_len,
            "final_loss": result.last_loss,
        }
        export_model(student, tokenizer, export_dir, card, sentence_teacher=cfg.teacher)
        log.info("student exported to %s", export_dir)
    rt.barrier()
    return DistillResult(
        out, export_dir, cfg.max_steps, result.first_loss, result.last_loss, result.tokens_per_s,
        time.perf_counter() - t0, mix,
    )
