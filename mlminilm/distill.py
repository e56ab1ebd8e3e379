"""`distill`: MiniLM deep self-attention distillation of a teacher encoder into a student of any shape."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm import training
from mlminilm.config import DistillConfig, parse_init_layers, resume_keys
from mlminilm.corpus.dataset import PreparedData
from mlminilm.corpus.manifest import tokenizer_identity
from mlminilm.distillation import plan as plans
from mlminilm.distillation.inputs import optional_kinds
from mlminilm.distillation.inputs.text import TextInput
from mlminilm.distillation.objective import distill_terms
from mlminilm.distillation.plan import DistillPlan
from mlminilm.distillation.run import TARGET_CACHE, DistillResult, DistillRun
from mlminilm.distillation.terms import check_table, trains_output, uses_running_text
from mlminilm.errors import ConfigError, DataError
from mlminilm.models.export import export_model
from mlminilm.models.loading import (
    TeacherShape,
    check_encoder_config,
    load_config,
    load_teacher,
    load_tokenizer,
    resolve_model,
)
from mlminilm.models.sentence_encoder import read_sentence_transformers
from mlminilm.training.batch_size import plan_batch
from mlminilm.training.compile_support import check_compile, device_type_of

# --data when a loss term reads running text and none is given (the default of the option before it was optional)
DEFAULT_DATA = Path("data")

log = mlog.get(__name__)

# OUT/run.json is the run record.
ARTIFACTS = (
    training.RUN_RECORD,
    training.METRICS,
    training.TENSORBOARD,
    training.CHECKPOINTS,
    "student",
    TARGET_CACHE,
)
# What --target-cache may not lie in, inside --out: the run's own entries (but TARGET_CACHE, the default place).
OWN_ENTRIES = (*ARTIFACTS, training.PREVIOUS_RUN)
# Options that define a run (declared with resume=FIXED or CHANGEABLE): --resume with any of these changed is
# refused, but for the changeable ones (--lr, --warmup).
RESUME_KEYS = resume_keys(DistillConfig)


def check_compatibility(
    cfg: DistillConfig, teacher_config, data: PreparedData, teacher_tokenizer: dict, rule: str | list[int] | None = None
) -> None:
    """Everything that can be checked before loading weights, reported at once (`rule`: --init-layers as the
    plan resolved it; parsed here when not given)."""
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
        problems.append(
            f"teacher '{cfg.teacher}' has a tokenizer of {ids} ids but {rows} embedding rows (vocab_size "
            "in config.json): neither it nor its student could embed every id; use a teacher whose "
            "embeddings fit its tokenizer"
        )
    layer = plans.teacher_layer(cfg, t.layers)
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
            rule = rule if rule is not None else parse_init_layers(cfg.init_layers)
            if isinstance(rule, list) and max(rule) >= t.layers:
                problems.append(
                    f"--init-layers {cfg.init_layers} names layer {max(rule)}, but teacher "
                    f"'{cfg.teacher}' has layers 0..{t.layers - 1}"
                )
    if trains_output(cfg) and cfg.hidden != t.hidden:
        # Refused rather than projected (TinyBERT learns a projection): a projection is not part of the exported
        # student, whose outputs would then not be in the teacher's space, which is what these terms are for.
        options = [k.option for k in optional_kinds()]
        problems.append(
            f"--hidden-loss-weight / --embedding-loss-weight / {' / '.join(options)} compare the student's "
            f"outputs with the teacher's and need equal hidden sizes (student {cfg.hidden}, teacher {t.hidden}): use "
            f"--hidden {t.hidden}, or set both weights to 0 and leave out {' and '.join(options)} (or distil "
            "through `mlminilm assist`, whose second stage has equal widths)"
        )
    from mlminilm.evaluation.common import position_limit

    limit = position_limit(teacher_config)
    # each limit once, in the order the inputs that cut at it name it
    lengths = dict(pair for kind in optional_kinds() if kind.reads(cfg) for pair in kind.max_lengths(cfg))
    for name, length in lengths.items() if limit is not None else ():
        if length > limit:
            problems.append(
                f"--{name} {length} is more than the {limit} positions of teacher '{cfg.teacher}'; use --{name} "
                f"{limit} or less"
            )
    if problems:
        raise ConfigError("; ".join(problems))


def vocabulary_mismatch(data_tokenizer: dict, teacher_tokenizer: dict) -> str | None:
    """How the tokenizer recorded in a prepared-data manifest differs from the teacher's, or None when they agree."""
    if data_tokenizer.get("vocab_sha256") == teacher_tokenizer.get("vocab_sha256"):
        return None
    a, b = data_tokenizer.get("vocab_size"), teacher_tokenizer.get("vocab_size")
    if a != b:
        return f"the data's has {a} ids, the teacher's {b}"
    specials = [
        f"{name} {data_tokenizer.get(name)} vs {teacher_tokenizer.get(name)}"
        for name in sorted(set(data_tokenizer) | set(teacher_tokenizer))
        if name.endswith("_token_id") and data_tokenizer.get(name) != teacher_tokenizer.get(name)
    ]
    detail = f"; special ids differ: {', '.join(specials)}" if specials else ""
    return (
        f"both have {a} ids, but different tokens or ids (vocabulary sha256 "
        f"{str(data_tokenizer.get('vocab_sha256'))[:12]} vs {str(teacher_tokenizer.get('vocab_sha256'))[:12]}){detail}"
    )


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
    larger = [
        f"{name} {mine} > {theirs}"
        for name, mine, theirs in (
            ("layers", cfg.layers, t.layers),
            ("hidden", cfg.hidden, t.hidden),
            ("intermediate", cfg.intermediate, t.intermediate),
        )
        if mine > theirs
    ]
    if not larger:
        return None
    return (
        f"the student is larger than teacher '{cfg.teacher}' ({', '.join(larger)}): it will not be smaller or "
        "faster than the teacher; check --layers / --hidden / --intermediate"
    )


def _prepared(cfg: DistillConfig, tokenizer):
    """The prepared running text of `cfg.data`; with no --data (only the parallel terms on, which never read it) a
    stand-in that holds none (distillation.plan.NoRunningText). A folder that is not prepared data is one error
    whose fix names the whole `prepare` command, and that --data can be left out when only the parallel terms are
    on."""
    if cfg.data is None:
        return plans.NoRunningText(cfg.parallel_max_length, tokenizer_identity(tokenizer))
    try:
        return PreparedData.open(cfg.data)
    except DataError as exc:
        raise DataError(
            f"{str(exc).replace('TEACHER', cfg.teacher)}; or, with only the parallel terms on (relation, hidden and "
            "embedding weights 0, --parallel), leave out --data: they never read running text"
        ) from None


def validate(cfg: DistillConfig) -> DistillPlan:
    """Every cheap check of a run, before anything is written or loaded; what they find, resolved once, is the
    run's plan (distillation.plan.DistillPlan)."""
    training.check_report_to(cfg.report_to)
    check_table(cfg)  # every loss term weighed by a field of the config, every loss weight by a term
    teacher_config = load_config(cfg.teacher)
    check_encoder_config(teacher_config, cfg.teacher)
    sentence = read_sentence_transformers(resolve_model(cfg.teacher))
    cfg = plans.resolve_output_terms(cfg, teacher_config, sentence)
    if not uses_running_text(cfg) and not any(kind.reads(cfg) for kind in optional_kinds()):
        raise ConfigError(
            "--relation-loss-weight 0 with the output terms off (auto turns them off for this teacher) "
            f"leaves nothing to train: keep a term, or give {' or '.join(f'{k.option} FILE' for k in optional_kinds())}"
        )
    if cfg.data is None and uses_running_text(cfg):
        cfg = replace(cfg, data=DEFAULT_DATA)
    tokenizer = load_tokenizer(cfg.teacher)
    data = _prepared(cfg, tokenizer)
    check_compile(cfg.compile, device_type_of(cfg.device))  # --compile on without Triton on CUDA: refused now
    rule = plans.init_rule(cfg)
    check_compatibility(cfg, teacher_config, data, tokenizer_identity(tokenizer), rule)
    # The batch options' arithmetic, before anything loads (the processes torchrun starts are in WORLD_SIZE); a
    # --batch-size left out is decided with the device, and checked then (distillation/batch.py).
    if cfg.batch_size is not None:
        plan_batch(cfg.batch_size, cfg.grad_accum, cfg.global_batch, int(os.environ.get("WORLD_SIZE", "1")))
    if cfg.data is not None and sum(data.num_sequences(lang) for lang in data.languages) == 0:
        raise DataError(f"--data {cfg.data} holds no sequences; run `mlminilm prepare` on a non-empty corpus")
    head = plans.embedding_head(cfg, sentence)
    if cfg.target_cache is not None:
        from mlminilm.distillation.target_store import place_in_out, refuse_place

        inputs = {"--teacher": cfg.teacher, "--data": cfg.data}
        inputs.update({k.option: getattr(cfg, k.field) for k in optional_kinds()})
        inputs["--probe-tatoeba"] = cfg.probe_tatoeba
        refuse_place(cfg.target_cache, inputs, cfg.out)  # before anything is written: never into an input
        place_in_out(cfg.target_cache, cfg.out, OWN_ENTRIES, (TARGET_CACHE,))  # nor into the run's checkpoints ...
    # Every input given is read and checked, even one no term on reads; the run keeps those a term reads.
    found = {kind: kind.read(cfg, tokenizer, sentence) for kind in optional_kinds()}
    # The export copies the teacher's sentence-transformers files: a damaged one stops the run now, not after it.
    from mlminilm.models.sentence_encoder import check_sentence_transformers_files

    check_sentence_transformers_files(resolve_model(cfg.teacher))
    if cfg.probe_tatoeba is not None:
        from mlminilm.tasks.tatoeba import find_tatoeba_files

        find_tatoeba_files(cfg.probe_tatoeba, list(cfg.probe_langs) or None)
    return DistillPlan(
        cfg=cfg,
        data=data,
        teacher_config=teacher_config,
        tokenizer=tokenizer,
        sentence=sentence,
        head=head,
        teacher_layer=plans.teacher_layer(cfg, teacher_config.num_hidden_layers),
        init_layers=rule,
        terms=plans.terms_with_weights(cfg),
        inputs=(
            TextInput(cfg, data, sentence),
            *(kind(cfg, read, sentence) for kind, read in found.items() if kind.reads(cfg)),
        ),
    )


def run(cfg: DistillConfig, *, export_to: Path | None = None, title: str = "student") -> DistillResult:
    """Distil `cfg.teacher` into a new student on the `prepare` output in `cfg.data`; export it."""

    out = Path(cfg.out)
    export_dir = Path(export_to) if export_to is not None else out / "student"

    # Validate everything cheap before anything is written or loaded.
    plan = validate(cfg)
    cfg = plan.cfg
    inputs = {"--teacher": cfg.teacher, "--data": cfg.data, "--probe-tatoeba": cfg.probe_tatoeba}
    inputs.update({k.option: getattr(cfg, k.field) for k in optional_kinds()})
    from mlminilm.distillation.target_store import place_in_out

    # A --target-cache inside --out is the run's own: --overwrite keeps it (docs/guides/reliability.md).
    layout = training.RunLayout(ARTIFACTS, kept=place_in_out(cfg.target_cache, out, OWN_ENTRIES, (TARGET_CACHE,)))
    with training.claimed_output(out, cfg, layout, inputs):
        if export_dir.parent != out:
            from mlminilm.io.stale import clean_stale

            clean_stale(export_dir.parent, prefix=f".tmp-{export_dir.name}-")  # an export's temporary sits beside it
        warning = student_size_warning(cfg, plan.teacher_config)
        if warning:
            log.warning(warning)

        rt = training.setup_runtime(cfg.device, cfg.precision)
        try:
            return _make_run(plan, rt, out, export_dir, title).execute()
        finally:
            training.teardown_runtime(rt)


def _make_run(plan: DistillPlan, rt: training.Runtime, out: Path, export_dir: Path, title: str) -> DistillRun:
    """The run, with this module's names as it calls them, read when it starts (tests and launchers replace them
    here)."""
    cfg = plan.cfg
    make_probe = None
    if cfg.probe_tatoeba is not None:

        def make_probe(s_config, tokenizer):
            from mlminilm.evaluation.probe import TatoebaProbe

            return TatoebaProbe(
                cfg.probe_tatoeba, cfg.probe_langs, cfg.probe_pairs, resolve_model(cfg.teacher), s_config, tokenizer
            )

    return DistillRun(
        plan,
        rt,
        out,
        export_dir=export_dir,
        title=title,
        resume_keys=RESUME_KEYS,
        load_teacher=load_teacher,
        distill_terms=distill_terms,
        export_model=export_model,
        make_probe=make_probe,
    )


# `from mlminilm import distill` may give this module: calling it runs the command (mlminilm.api).
from mlminilm.api import command_module  # noqa: E402

command_module(__name__, DistillConfig)
