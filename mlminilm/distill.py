"""`distill`: MiniLM deep self-attention distillation of a teacher encoder into a student of any shape."""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm import training
from mlminilm.config import DistillConfig
from mlminilm.errors import ConfigError, DataError
from mlminilm.corpus.dataset import PreparedData
from mlminilm.corpus.manifest import tokenizer_identity
from mlminilm.distillation.objective import EmbeddingHead, StudentQKV, distill_terms, uses_running_text, weighted_loss
from mlminilm.corpus.parallel import ParallelBatch, ParallelPairs, ParallelSampler, read_parallel
from mlminilm.models.loading import TeacherShape, check_encoder_config, load_config, load_teacher, load_tokenizer, resolve_model
from mlminilm.models.student import (build_student, freeze_bottom_layers, freeze_unused, freeze_word_embeddings,
                                     init_from_teacher, student_config)
from mlminilm.models.export import export_model
from mlminilm.config import OUTPUT_TERMS_WEIGHT, parse_init_layers
from mlminilm.training.batch_size import CPU_AUTO_LIMIT, CUDA_MEMORY_SHARE, BatchPlan, plan_batch
from mlminilm.corpus.loader import default_pin_memory, default_workers, make_loader
from mlminilm.corpus.sampling import BatchSampler

log = mlog.get(__name__)

# The teacher-target cache's default place, inside the run (--target-cache moves it).
TARGET_CACHE = "teacher-targets"

# OUT/run.json is the run record (config.json in earlier versions: removed by --overwrite, read by --resume).
ARTIFACTS = (training.RUN_RECORD, training.LEGACY_RUN_RECORD, training.METRICS, training.TENSORBOARD,
             training.CHECKPOINTS, "student", TARGET_CACHE)
# Options that define a run: --resume with any of these changed is refused.
RESUME_KEYS = (
    "teacher", "data", "layers", "hidden", "heads", "intermediate", "init", "objective", "relation_heads",
    "teacher_layer", "alpha", "batch_size", "grad_accum", "global_batch", "lr", "warmup", "seed", "max_steps",
    "freeze_embeddings", "init_layers", "hidden_loss_weight", "hidden_distance", "embedding_loss_weight",
    "relation_loss_weight", "parallel", "parallel_loss_weight", "parallel_prefix", "parallel_max_length",
    "parallel_contrastive_weight", "parallel_temperature", "freeze_layers",
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


def resolve_output_terms(cfg: DistillConfig, teacher_config) -> DistillConfig:
    """The config with --hidden-loss-weight / --embedding-loss-weight auto (None) decided: OUTPUT_TERMS_WEIGHT for
    a sentence-transformers teacher of the student's width (what its users use it for is its embedding), else 0,
    the pure MiniLM objective. Explicit weights are kept as given (and checked later)."""
    if cfg.hidden_loss_weight is not None and cfg.embedding_loss_weight is not None:
        return cfg
    from mlminilm.models.sentence_encoder import read_sentence_transformers

    sentence_teacher = read_sentence_transformers(resolve_model(cfg.teacher)) is not None
    on = sentence_teacher and cfg.hidden == teacher_config.hidden_size
    weight = OUTPUT_TERMS_WEIGHT if on else 0.0
    resolved = replace(
        cfg,
        hidden_loss_weight=weight if cfg.hidden_loss_weight is None else cfg.hidden_loss_weight,
        embedding_loss_weight=weight if cfg.embedding_loss_weight is None else cfg.embedding_loss_weight,
    )
    if on:
        log.info("output terms on (auto: a sentence-transformers teacher of the student's width): hidden %g, "
                 "embedding %g", resolved.hidden_loss_weight, resolved.embedding_loss_weight)
    return resolved


def embedding_head(cfg: DistillConfig) -> EmbeddingHead | None:
    """The teacher's sentence-embedding head when the embedding or the parallel term is on, else None. The
    embedding term needs a sentence-transformers teacher (ConfigError otherwise); the parallel term pools a plain
    encoder's last hidden states by their mean over real tokens."""
    if not cfg.embedding_loss_weight and not cfg.parallel_term:
        return None
    from mlminilm.models.pooling import POOLING_MODES
    from mlminilm.models.sentence_encoder import read_sentence_transformers

    st = read_sentence_transformers(resolve_model(cfg.teacher))
    if st is None and not cfg.embedding_loss_weight:
        return MEAN_POOLING
    if st is None:
        raise ConfigError(
            f"--embedding-loss-weight needs a sentence-transformers teacher (modules.json with a Pooling module); "
            f"teacher '{cfg.teacher}' has none: use --hidden-loss-weight instead, or set --embedding-loss-weight 0")
    bad = [m for m in st.pooling if m not in POOLING_MODES]
    if bad:
        raise ConfigError(f"teacher '{cfg.teacher}' pools with {'+'.join(bad)}, which the embedding and parallel "
                          f"terms do not implement ({', '.join(POOLING_MODES)}); set --embedding-loss-weight 0 and "
                          "leave out --parallel")
    if st.not_applied:
        log.warning("teacher %s has %s after its pooling: the embedding term compares the pooled (and normalised) "
                    "vectors before them", cfg.teacher, ", ".join(st.not_applied))
    return EmbeddingHead(tuple(st.pooling), st.normalize)


# How the parallel term embeds sentences with a teacher that has no sentence-transformers Pooling module.
MEAN_POOLING = EmbeddingHead(("mean",), False)


def resolve_batch(cfg: DistillConfig, rt: training.Runtime, teacher: nn.Module, teacher_layer: int,
                  forward: nn.Module, seq_len: int, vocab_size: int | None,
                  head: EmbeddingHead | None = None) -> BatchPlan:
    """The run's micro-batch and accumulation (mlminilm/training/batch_size.py); on CUDA `--batch-size auto` tries real
    distill steps (teacher, student forward and backward) at growing micro-batches until one does not fit."""
    if cfg.batch_size != "auto" or rt.device.type != "cuda":
        return plan_batch(cfg.batch_size, cfg.grad_accum, cfg.global_batch, rt.world, cap=CPU_AUTO_LIMIT)
    trained = sum(p.numel() for p in forward.parameters() if p.requires_grad)
    optimizer_bytes = 2 * 4 * trained  # AdamW's two fp32 moments, allocated at the first step
    total = torch.cuda.get_device_properties(rt.device).total_memory
    generator = torch.Generator(device="cpu").manual_seed(cfg.seed)

    def fits(size: int) -> bool:
        ids = torch.randint(0, vocab_size or 2, (size, seq_len), generator=generator).to(rt.device)
        pairs = None
        if cfg.parallel_term:  # the longest pairs the term can draw, beside the running text
            src = torch.randint(0, vocab_size or 2, (size, cfg.parallel_max_length), generator=generator).to(rt.device)
            both = torch.cat([src, src])
            pairs = ParallelBatch(src, torch.ones_like(src), both, torch.ones_like(both), {})
        if not uses_running_text(cfg):
            ids = None
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(rt.device)
        try:
            with rt.autocast():
                loss = weighted_loss(distill_terms(teacher, teacher_layer, forward, ids, None, cfg, head, pairs), cfg)
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
    ids, rows = teacher_tokenizer.get("vocab_size"), getattr(teacher_config, "vocab_size", None)
    if isinstance(ids, int) and isinstance(rows, int) and ids > rows:  # the student gets the teacher's rows
        problems.append(f"teacher '{cfg.teacher}' has a tokenizer of {ids} ids but {rows} embedding rows (vocab_size "
                        "in config.json): neither it nor its student could embed every id; use a teacher whose "
                        "embeddings fit its tokenizer")
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
        elif cfg.init_layers is not None:
            rule = parse_init_layers(cfg.init_layers)
            if isinstance(rule, list) and max(rule) >= t.layers:
                problems.append(f"--init-layers {cfg.init_layers} names layer {max(rule)}, but teacher "
                                f"'{cfg.teacher}' has layers 0..{t.layers - 1}")
    if cfg.trains_output and cfg.hidden != t.hidden:
        # Refused rather than projected (TinyBERT learns a projection): a projection is not part of the exported
        # student, whose outputs would then not be in the teacher's space, which is what these terms are for.
        problems.append(
            f"--hidden-loss-weight / --embedding-loss-weight / --parallel compare the student's outputs with the "
            f"teacher's and need equal hidden sizes (student {cfg.hidden}, teacher {t.hidden}): use --hidden "
            f"{t.hidden}, or set both weights to 0 and leave out --parallel (or distil through `mlminilm assist`, "
            "whose second stage has equal widths)"
        )
    if cfg.parallel_term:
        from mlminilm.evaluation.common import position_limit

        limit = position_limit(teacher_config)
        if limit is not None and cfg.parallel_max_length > limit:
            problems.append(f"--parallel-max-length {cfg.parallel_max_length} is more than the {limit} positions of "
                            f"teacher '{cfg.teacher}'; use --parallel-max-length {limit} or less")
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
    """Every cheap check of a run, before anything is written or loaded: (the config with auto choices decided,
    data, teacher config, tokenizer)."""
    training.check_report_to(cfg.report_to)
    data = PreparedData.open(cfg.data)
    teacher_config = load_config(cfg.teacher)
    check_encoder_config(teacher_config, cfg.teacher)
    cfg = resolve_output_terms(cfg, teacher_config)
    if not uses_running_text(cfg) and not cfg.parallel_term:
        raise ConfigError("--relation-loss-weight 0 with the output terms off (auto turns them off for this teacher) "
                          "leaves nothing to train: keep a term, or give --parallel FILE")
    tokenizer = load_tokenizer(cfg.teacher)
    check_compatibility(cfg, teacher_config, data, tokenizer_identity(tokenizer))
    # The batch options' arithmetic, before anything loads (the processes torchrun starts are in WORLD_SIZE).
    plan_batch(cfg.batch_size, cfg.grad_accum, cfg.global_batch, int(os.environ.get("WORLD_SIZE", "1")))
    if sum(data.num_sequences(lang) for lang in data.languages) == 0:
        raise DataError(f"--data {cfg.data} holds no sequences; run `mlminilm prepare` on a non-empty corpus")
    embedding_head(cfg)
    if cfg.parallel is not None:
        read_parallel(cfg.parallel)  # read again by the run: a check here leaves nothing behind when it fails
    # The export copies the teacher's sentence-transformers files: a damaged one stops the run now, not after it.
    from mlminilm.models.sentence_encoder import check_sentence_transformers_files

    check_sentence_transformers_files(resolve_model(cfg.teacher))
    if cfg.probe_tatoeba is not None:
        from mlminilm.tasks.tatoeba import find_tatoeba_files

        find_tatoeba_files(cfg.probe_tatoeba, list(cfg.probe_langs) or None)
    return cfg, data, teacher_config, tokenizer


def run(cfg: DistillConfig, *, export_to: Path | None = None, title: str = "student") -> DistillResult:
    """Distil `cfg.teacher` into a new student on the `prepare` output in `cfg.data`; export it."""

    out = Path(cfg.out)
    export_dir = Path(export_to) if export_to is not None else out / "student"

    # Validate everything cheap before anything is written or loaded.
    cfg, data, teacher_config, tokenizer = validate(cfg)
    inputs = {"--teacher": cfg.teacher, "--data": cfg.data, "--probe-tatoeba": cfg.probe_tatoeba,
              "--parallel": cfg.parallel}
    with training.claimed_output(out, cfg, ARTIFACTS, inputs):
        if export_dir.parent != out:
            from mlminilm.io.stale import clean_stale

            clean_stale(export_dir.parent, prefix=f".tmp-{export_dir.name}-")  # an export's temporary sits beside it
        warning = student_size_warning(cfg, teacher_config)
        if warning:
            log.warning(warning)
        counts = {lang: data.num_sequences(lang) for lang in data.languages}

        rt = training.setup_runtime(cfg.device, cfg.precision)
        try:
            return _distill(cfg, rt, data, counts, teacher_config, tokenizer, out, export_dir, title)
        finally:
            training.teardown_runtime(rt)


def _distill(cfg, rt, data, counts, teacher_config, tokenizer, out, export_dir, title) -> DistillResult:
    record = training.run_record(cfg, rt, {"teacher_model_type": teacher_config.model_type, "data_manifest": data.manifest.get("tokenizer")})
    if cfg.resume:
        training.check_resume_compatible(out, record, RESUME_KEYS, write=rt.is_main)

    # The teacher's weights in the compute dtype (bf16 on CUDA): it only runs forward, truncated at the distilled
    # layer, or whole when an output term needs its last hidden states.
    head = embedding_head(cfg)
    teacher, _ = load_teacher(cfg.teacher, -1 if cfg.trains_output else cfg.teacher_layer, rt.dtype, rt.device)
    depth = teacher_config.num_hidden_layers  # the whole teacher's: --teacher-layer counts from its top
    teacher_layer = cfg.teacher_layer + depth if cfg.teacher_layer < 0 else cfg.teacher_layer
    s_config = student_config(teacher_config, cfg.shape, cfg.dropout)
    student = build_student(s_config, cfg.seed)
    picked = None
    if cfg.init == "teacher":
        picked = init_from_teacher(student, cfg.teacher, parse_init_layers(cfg.init_rule))
        log.info("student initialised from teacher layers %s (--init-layers %s)", picked, cfg.init_rule)
    frozen = freeze_unused(student, -1, through_output=cfg.trains_output)
    if cfg.freeze_embeddings:
        frozen += freeze_word_embeddings(student)
    frozen += freeze_bottom_layers(student, cfg.freeze_layers)
    student.to(rt.device)
    log.info(
        "teacher %s: distilling layer %d (%s); student %dx%d, %d heads, %.1fM trainable parameters (%.1fM unused "
        "by the loss, frozen)", cfg.teacher, teacher_layer, objective_summary(cfg, head), cfg.layers, cfg.hidden,
        cfg.heads, sum(p.numel() for p in student.parameters() if p.requires_grad) / 1e6, frozen / 1e6,
    )
    probe = None
    if cfg.probe_tatoeba is not None and rt.is_main:
        from mlminilm.evaluation.probe import TatoebaProbe

        probe = TatoebaProbe(cfg.probe_tatoeba, cfg.probe_langs, cfg.probe_pairs, resolve_model(cfg.teacher),
                             s_config, tokenizer)
        log.info("%s; every %d steps", probe.describe(), cfg.probe_every)
    pairs = sampler_of_pairs(cfg, tokenizer) if cfg.parallel_term else None
    record["init_layers"] = picked
    record["objective"] = objective_summary(cfg, head)
    if pairs is not None:
        record["parallel_pairs"] = {"pairs": len(pairs.pairs), "skipped_lines": pairs.pairs.skipped,
                                    "languages": pairs.pairs.lang_counts()}
    if cfg.max_steps == 0:
        return _export_initialised(cfg, rt, data, student, tokenizer, out, export_dir, title, record, picked,
                                   teacher_layer, head, probe)
    forward = StudentQKV(student, outputs=cfg.output_terms)
    plan = resolve_batch(cfg, rt, teacher, teacher_layer, forward, data.seq_len, data.tokenizer.get("vocab_size"),
                         head)
    if plan.how != "given":
        log.info("batch: %d sequences per step = %d per micro-batch x %d accumulation x %d process(es) (%s)",
                 plan.global_batch, plan.micro_batch, plan.grad_accum, rt.world, plan.how)
    run_cfg = replace(cfg, batch_size=plan.micro_batch, grad_accum=plan.grad_accum, global_batch=None)
    compiled = cfg.compile == "on" or (cfg.compile == "auto" and rt.device.type == "cuda")
    record["batch"] = plan.to_dict()
    record["compile"] = compiled
    _write_run_record(out, record, rt)
    rt.barrier()

    state = training.setup_training(run_cfg, rt, forward, student, out)
    model, optimizer, scheduler, start, metrics = (
        state.model, state.optimizer, state.scheduler, state.start_step, state.metrics
    )
    if pairs is not None:
        fill_target_cache(pairs, teacher, head, cfg, rt, out, start, plan)

    sampler = BatchSampler(counts, cfg.alpha, cfg.seed)
    mix_total: Counter = Counter()
    workers = cfg.data_workers if cfg.data_workers is not None else default_workers(rt.device.type, rt.world)
    running_text = uses_running_text(cfg)
    # With only the parallel term on, the running text is not read at all.
    loader = contextlib.nullcontext() if not running_text else make_loader(
        data, sampler, batch_size=plan.micro_batch, accum=plan.grad_accum, rank=rt.rank, world=rt.world,
        pad_id=data.tokenizer.get("pad_token_id"), start_step=start, max_steps=cfg.max_steps, workers=workers,
        pin_memory=default_pin_memory(rt.device.type),
    )
    batches = iter(loader) if running_text else None
    # Compiled: the student's forward, the teacher's capture and the loss as graphs (static shapes: packed
    # sequences all have the data's length; a padded batch adds a second graph). Eager otherwise.
    terms_fn = torch.compile(distill_terms, dynamic=False) if compiled else None

    def compute(step: int, micro: int) -> training.StepOutput:
        tokens, info, batch = 0, {}, None
        if running_text:
            batch = next(batches)
            if (batch.step, batch.micro) != (step, micro):  # the loader and the loop must never drift apart
                raise RuntimeError(f"data loader gave step {batch.step}.{batch.micro} for step {step}.{micro}")
            batch = batch.to(rt.device, non_blocking=True)
            tokens, info = batch.tokens, {f"lang:{k}": v for k, v in batch.langs.items()}
        pair_batch = None
        if pairs is not None:
            pair_batch = pairs.batch(step, micro, plan.micro_batch, plan.grad_accum, rt.rank, rt.world)
            tokens += int(pair_batch.both_mask.sum())  # counted on the host, before the copy
            info.update({f"pair:{k}": v for k, v in pair_batch.langs.items()})
            pair_batch = pair_batch.to(rt.device, non_blocking=True)
        # attention_mask is None unless the batch holds padding (a language's last sequence): known on the host,
        # so no step reads the device to find out, and unpadded steps skip every masking pass.
        parts = (terms_fn or distill_terms)(teacher, teacher_layer, model, batch and batch.input_ids,
                                            batch and batch.attention_mask, cfg, head, pair_batch)
        loss = weighted_loss(parts, cfg)
        return training.StepOutput(loss, parts, tokens, info)

    def on_log(step: int, payload: dict) -> None:
        info = payload["info"]
        drawn = {k[5:]: v for k, v in info.items() if k.startswith("lang:")}
        total = sum(drawn.values()) or 1
        if drawn:
            payload["record"]["language_mix"] = {k: round(v / total, 4) for k, v in sorted(drawn.items())}
        mix_total.update(drawn)

    if start >= cfg.max_steps:
        log.info("already at step %d of %d: nothing to train", start, cfg.max_steps)

    def run_probe(step: int) -> dict | None:
        return _run_probe(probe, student, rt, step)

    if cfg.probe_tatoeba is not None and start == 0:
        found = run_probe(0)
        if found:
            metrics.write({"step": 0, **found, "train_s": 0.0})
        rt.barrier()
    t0 = time.perf_counter()
    with loader:
        result = training.train_loop(
            cfg=run_cfg, rt=rt, model=model, raw_model=student, optimizer=optimizer, scheduler=scheduler,
            compute=compute, out=out, metrics=metrics, start_step=start,
            checkpoint_state=lambda step: {"sampler": "stateless(seed, step)", "seed": cfg.seed},
            on_log=on_log, description=f"distill {title}", scaler=state.scaler,
            probe=run_probe if cfg.probe_tatoeba is not None else None, probe_every=cfg.probe_every,
        )
    total = sum(mix_total.values()) or 1
    mix = {k: round(v / total, 4) for k, v in sorted(mix_total.items())}
    if rt.is_main:
        if mix:
            log.info("realised language mix: %s", ", ".join(f"{k} {v:.1%}" for k, v in mix.items()))
        card = card_info(cfg, data, title, teacher_layer, picked, head)
        card.update({
            "batch": f"{plan.micro_batch} x {plan.grad_accum} accumulation x {rt.world} processes",
            "final_loss": result.last_loss,
        })
        export_model(student, tokenizer, export_dir, card, sentence_teacher=cfg.teacher)
        log.info("student exported to %s", export_dir)
    rt.barrier()
    return DistillResult(
        out, export_dir, cfg.max_steps, result.first_loss, result.last_loss, result.tokens_per_s,
        time.perf_counter() - t0, mix,
    )


def sampler_of_pairs(cfg: DistillConfig, tokenizer) -> ParallelSampler:
    """The parallel term's pairs and their per-step draw (logged: how many, in which languages)."""
    found: ParallelPairs = read_parallel(cfg.parallel)
    langs = ", ".join(f"{k} {v:,}" for k, v in found.lang_counts().items())
    prefix = parallel_prefix(cfg)
    log.info("parallel term: %s pairs from %s (%s), prefix %r%s", f"{len(found):,}", cfg.parallel, langs, prefix,
             f"; {found.skipped} line(s) without a translation skipped" if found.skipped else "")
    return ParallelSampler(found, tokenizer, prefix=prefix, max_length=cfg.parallel_max_length, seed=cfg.seed)


def fill_target_cache(pairs: ParallelSampler, teacher: nn.Module, head: EmbeddingHead, cfg: DistillConfig,
                      rt: training.Runtime, out: Path, start: int, plan: BatchPlan) -> None:
    """The teacher's embedding of every source sentence steps [start, max_steps) will draw, from the cache or
    computed once now (rank 0; the other ranks read what it wrote), so that no step runs the teacher on pairs."""
    from mlminilm.distillation import targets

    root = Path(cfg.target_cache) if cfg.target_cache is not None else out / TARGET_CACHE
    texts = pairs.drawn_sources(start, cfg.max_steps, plan.micro_batch, plan.grad_accum, rt.world)
    pairs.target_table = targets.prepare(root, teacher, pairs.tokenizer, texts, head.modes, head.normalize,
                                         prefix=pairs.prefix, max_length=pairs.max_length, device=rt.device,
                                         is_main=rt.is_main, barrier=rt.barrier)


def parallel_prefix(cfg: DistillConfig) -> str:
    """--parallel-prefix, or by default the teacher's sentence-transformers "query" prompt (what eval-tatoeba puts
    before each sentence), else none."""
    if cfg.parallel_prefix is not None:
        return cfg.parallel_prefix
    from mlminilm.models.sentence_encoder import read_sentence_transformers

    st = read_sentence_transformers(resolve_model(cfg.teacher))
    return (st.query_prompt or "") if st is not None else ""


def objective_summary(cfg: DistillConfig, head: EmbeddingHead | None) -> str:
    """The loss in words, for the log, run.json and the model card."""
    parts = []
    if cfg.relation_loss_weight > 0:
        relations = ("MiniLM attention + value relations" if cfg.objective == "minilm"
                     else f"MiniLMv2 Q-Q/K-K/V-V relations over {cfg.relation_heads} heads")
        parts.append(relations if cfg.relation_loss_weight == 1 else f"{cfg.relation_loss_weight:g} x {relations}")
    if cfg.hidden_loss_weight:
        parts.append(f"{cfg.hidden_loss_weight:g} x last hidden states ({cfg.hidden_distance})")
    how = head and "+".join(head.modes) + (" pooling, normalised" if head.normalize else " pooling")
    if cfg.embedding_loss_weight and head is not None:
        parts.append(f"{cfg.embedding_loss_weight:g} x sentence embedding MSE ({how})")
    if cfg.parallel_term and head is not None and cfg.parallel_loss_weight > 0:
        parts.append(f"{cfg.parallel_loss_weight:g} x parallel embedding MSE (sentence and translation to the "
                     f"teacher's sentence; {how}; prefix {parallel_prefix(cfg)!r})")
    if cfg.parallel_term and head is not None and cfg.parallel_contrastive_weight > 0:
        parts.append(f"{cfg.parallel_contrastive_weight:g} x in-batch translation ranking (both directions, "
                     f"temperature {cfg.parallel_temperature:g}; {how})")
    return " + ".join(parts)


def card_info(cfg: DistillConfig, data: PreparedData, title: str, teacher_layer: int, picked: list[int] | None,
              head: EmbeddingHead | None) -> dict:
    """What the model card (and mlminilm.json) records about how the student was made."""
    return {
        "title": f"mlminilm {title} {cfg.layers}x{cfg.hidden}",
        "teacher": cfg.teacher,
        "teacher_layer": teacher_layer,
        "objective": cfg.objective,
        "loss": objective_summary(cfg, head),
        "relation_heads": cfg.relation_heads if cfg.objective == "minilm-v2" else None,
        "shape": f"{cfg.layers} layers x {cfg.hidden} hidden, {cfg.heads} heads, FFN {cfg.intermediate}",
        "init": cfg.init,
        "init_layers": (f"{cfg.init_rule}: teacher layers {','.join(map(str, picked))}" if picked is not None
                        else None),
        "data": str(cfg.data),
        "languages": ", ".join(data.languages),
        "alpha": cfg.alpha,
        "parallel": str(cfg.parallel) if cfg.parallel_term else None,
        "steps": cfg.max_steps,
        "seq_len": data.seq_len,
    }


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
    log.info("probe at step %d: Tatoeba xx->en %.2f (%s)", step, found["probe_tatoeba_xx_to_en"],
             ", ".join(f"{k} {v['xx_to_en']:.1f}" for k, v in found["probe_tatoeba"].items()))
    return found


def _export_initialised(cfg, rt, data, student, tokenizer, out, export_dir, title, record, picked, teacher_layer,
                        head, probe) -> DistillResult:
    """--max-steps 0: the initialised student, exported untrained (to evaluate a starting point before spending
    compute), with its run record, and the step-0 probe when one is asked for."""
    t0 = time.perf_counter()
    _write_run_record(out, record, rt)
    if rt.is_main:
        found = _run_probe(probe, student, rt, 0)
        with training.open_tracker(cfg, out, rt) as metrics:
            if found:
                metrics.write({"step": 0, **found, "train_s": 0.0})
        card = card_info(cfg, data, title, teacher_layer, picked, head)
        export_model(student, tokenizer, export_dir, card, sentence_teacher=cfg.teacher,
                     summary="Initialised only (--max-steps 0): no distillation step was taken.")
        log.info("initialised student (no training) exported to %s", export_dir)
    rt.barrier()
    return DistillResult(out, export_dir, 0, None, None, 0.0, time.perf_counter() - t0, {})


# `from mlminilm import distill` may give this module: calling it runs the command (mlminilm.api).
from mlminilm.api import command_module  # noqa: E402

command_module(__name__, DistillConfig)
