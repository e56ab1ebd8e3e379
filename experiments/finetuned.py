"""Fine-tuned protocols of docs/RETENTION.md and docs/benchmarks/RETENTION_FINETUNED*.md (experiments/).

The fine-tuned protocols of the retention benchmark: what a model keeps after English fine-tuning, zero-shot in
every language (MiniLM's task-agnostic promise, METHOD.md section 4).

- XNLI: `finetune --task xnli` on XNLI test-en's training pairs, the checkpoint chosen on its selection pairs
  (experiments/retention_measures.py splits them by premise groups), then `eval-xnli` on the dev files of all 15
  languages; intervals by the premise-group bootstrap of `mlminilm.metrics.retention`.
- MLQA: `finetune --task qa` on TyDiQA-GoldP's English training set (3,696 questions: the English QA training data
  available offline) less every 10th article, which chooses the checkpoint (the dev files here have no answers;
  MLQA is never seen in training or selection), then `eval-mlqa` with MLQA's official scorer on the dev files of its
  7 languages
  (context and question in the same language); F1 and EM per language with 95 % cluster-bootstrap intervals over
  articles, teacher and student scored on the same draws; retention is the F1 ratio.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
MLQA_LANGS = ("ar", "de", "en", "es", "hi", "vi", "zh")
TYDIQA_TRAIN = SHARED / "tydiqa" / "tydiqa.goldp.en.train.json"
# TyDiQA-GoldP's dev files here carry no gold answers, so every SELECTION_EVERY-th article of the English train
# set is held out to choose the checkpoint; MLQA is never seen before its evaluation.
SELECTION_EVERY = 10
RESAMPLES = 1000


@dataclass(frozen=True)
class XnliProtocol:
    """`finetune --task xnli` settings."""

    epochs: float = 3
    lr: float = 1e-4
    batch: int = 32
    freeze_embeddings: bool = True
    precision: str = "auto"


@dataclass(frozen=True)
class QaProtocol:
    """`finetune --task qa` settings and how much of the data each stage reads (1 = all)."""

    epochs: float = 1
    lr: float = 1e-4
    batch: int = 32
    max_seq_len: int = 256
    freeze_embeddings: bool = True
    precision: str = "auto"  # fine-tuning and its evaluation (bf16 where the CPU has it natively)
    train_every: int = 1  # the training articles: every k-th
    selection_every: int = 1  # the held-out selection articles: every k-th
    mlqa_every: int = 1  # MLQA dev: every k-th article of each language


def slug(name: str) -> str:
    return name.replace(" ", "-").replace("+", "plus")


def _write_squad(doc: dict, articles: list, out: Path) -> int:
    """Write `articles` as a SQuAD-format file (the version of `doc`); the number of questions."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**doc, "data": articles}, ensure_ascii=False), encoding="utf-8")
    return sum(len(p["qas"]) for a in articles for p in a["paragraphs"])


def _numbered(articles: list, tag: str) -> list:
    """The articles with every question given an id of its own (`tag`-article-question): TyDiQA-GoldP's English
    train numbers its questions per article ("0", "1", ...: 89 distinct ids for 3,696 questions), and a selection
    set must name each question once."""
    return [
        {
            **article,
            "paragraphs": [
                {**paragraph, "qas": [{**qa, "id": f"{tag}-{a}-{p}-{q}"} for q, qa in enumerate(paragraph["qas"])]}
                for p, paragraph in enumerate(article["paragraphs"])
            ],
        }
        for a, article in enumerate(articles)
    ]


def finetuned_xnli(work: Path, name: str, model_dir: str, data, p: XnliProtocol) -> dict:
    """Fine-tune `model_dir` on the English XNLI training pairs (checkpoint chosen on the selection pairs), evaluate
    it on the kept dev rows of every language; per-language correct flags in dev order."""
    from retention_measures import LABELS, XNLI_LANGS

    from mlminilm import finetune
    from mlminilm.config import EvalXnliConfig, FinetuneConfig
    from mlminilm.evaluation import xnli

    tuned = finetune.run(
        FinetuneConfig(
            model=model_dir,
            task="xnli",
            train=str(work / "nli-train-en.tsv"),
            dev=str(work / "nli-selection-en.tsv"),
            out=work / f"ft-{slug(name)}",
            epochs=p.epochs,
            batch_size=p.batch,
            lr=p.lr,
            warmup=0.1,
            freeze_embeddings=p.freeze_embeddings,
            group_by_length=True,
            overwrite=True,
            precision=p.precision,
            quiet=True,
        )
    ).to_dict()
    report = work / f"report-xnli-{slug(name)}"
    evaluated = xnli.run(
        EvalXnliConfig(
            model=str(work / f"ft-{slug(name)}"),
            data=str(data.dev_dir),
            split="dev",
            langs=XNLI_LANGS,
            out=report,
            overwrite=True,
            precision=p.precision,
        )
    )
    correct = {}
    for lang, rows in data.dev.items():
        predicted = (report / "predictions" / f"dev-{lang}.tsv").read_text(encoding="utf-8").split()
        correct[lang] = [LABELS.index(label) == r[2] for label, r in zip(predicted, rows)]
    return {"finetune": tuned, "correct": correct, "report": evaluated}  # the report: for compare


def qa_data(work: Path, p: QaProtocol) -> dict:
    """The QA files the protocol reads, thinned as it says, under WORK/qa/; their question counts."""
    root = work / "qa"
    doc = json.loads(TYDIQA_TRAIN.read_text(encoding="utf-8"))
    held = [a for i, a in enumerate(doc["data"]) if i % SELECTION_EVERY == SELECTION_EVERY - 1]
    kept = [a for i, a in enumerate(doc["data"]) if i % SELECTION_EVERY != SELECTION_EVERY - 1]
    counts = {
        "train": _write_squad(doc, kept[:: p.train_every], root / "train.json"),
        "selection": _write_squad(doc, _numbered(held[:: p.selection_every], "selection"), root / "selection.json"),
    }
    for lang in MLQA_LANGS:
        name = f"dev-context-{lang}-question-{lang}.json"
        mlqa = json.loads((SHARED / "mlqa" / "dev" / name).read_text(encoding="utf-8"))
        counts[f"mlqa-{lang}"] = _write_squad(mlqa, mlqa["data"][:: p.mlqa_every], root / "mlqa" / name)
    return counts


def finetuned_mlqa(work: Path, name: str, model_dir: str, p: QaProtocol) -> dict:
    """Fine-tune `model_dir` on English QA, evaluate it on MLQA dev; per-question EM and F1 with their articles."""
    from mlminilm import finetune
    from mlminilm.config import EvalMlqaConfig, FinetuneConfig
    from mlminilm.evaluation import mlqa

    root = work / "qa"
    tuned_dir = work / f"ft-qa-{slug(name)}"
    tuned = finetune.run(
        FinetuneConfig(
            model=model_dir,
            task="qa",
            train=str(root / "train.json"),
            dev=str(root / "selection.json"),
            out=tuned_dir,
            epochs=p.epochs,
            batch_size=p.batch,
            lr=p.lr,
            max_seq_len=p.max_seq_len,
            freeze_embeddings=p.freeze_embeddings,
            group_by_length=True,
            overwrite=True,
            precision=p.precision,
            quiet=True,
        )
    ).to_dict()
    report = work / f"report-mlqa-{slug(name)}"
    evaluated = mlqa.run(
        EvalMlqaConfig(
            model=str(tuned_dir),
            data=str(root / "mlqa"),
            langs=MLQA_LANGS,
            out=report,
            overwrite=True,
            precision=p.precision,
        )
    )
    return {"finetune": tuned, "questions": question_scores(root / "mlqa", report / "predictions"), "report": evaluated}


def question_scores(data_dir: Path, predictions_dir: Path) -> dict[str, dict]:
    """Per language: each question's EM and F1 (0/1 and 0..1, MLQA's official scorer, the context language's
    rules) and the index of its article, from the predictions eval-mlqa wrote (the `retention` command's scoring,
    mlminilm.retention.finetuned.question_scores)."""
    from mlminilm.retention.finetuned import question_scores as scores_of

    out = {}
    for lang in MLQA_LANGS:
        name = f"dev-context-{lang}-question-{lang}.json"
        out[lang] = scores_of(data_dir / name, predictions_dir / name, lang)
    return out


def article_bootstrap(scores: dict[str, dict], teacher: str, seed: int = 0, level: float = 0.95) -> dict:
    """Per model and language, and for the average over languages: F1 and EM (%) with percentile intervals from a
    cluster bootstrap over articles, and the F1 ratio to `teacher` with its interval. Every model is scored on the
    same draws (a language draws its articles once, languages in MLQA_LANGS order from one generator), so the
    shared difficulty of a resample cancels in the ratio. `scores`: model -> question_scores(...)."""
    rng = np.random.default_rng(seed)
    tail = (1 - level) / 2
    per_lang: dict[str, dict[str, np.ndarray]] = {m: {} for m in scores}
    point: dict[str, dict[str, dict]] = {m: {} for m in scores}
    for lang in MLQA_LANGS:
        article = np.asarray(scores[teacher][lang]["article"])
        count = int(article.max()) + 1
        size = np.bincount(article, minlength=count).astype(np.float64)
        draws = rng.integers(0, count, size=(RESAMPLES, count))
        for model, by_lang in scores.items():
            q = by_lang[lang]
            if q["article"] != scores[teacher][lang]["article"]:
                raise SystemExit(f"Error: {model} was scored on other MLQA {lang} questions than {teacher}")
            for metric in ("f1", "em"):
                sums = np.bincount(article, weights=np.asarray(q[metric], dtype=np.float64), minlength=count)
                per_lang[model][(lang, metric)] = 100 * sums[draws].sum(axis=1) / size[draws].sum(axis=1)
                point[model].setdefault(lang, {})[metric] = 100 * float(np.mean(q[metric]))

    def interval(samples: np.ndarray) -> list[float]:
        return [float(v) for v in np.quantile(samples, [tail, 1 - tail])]

    out = {}
    for model in scores:
        rows = {}
        for lang in [*MLQA_LANGS, "avg"]:
            if lang == "avg":
                f1 = np.mean([per_lang[model][(x, "f1")] for x in MLQA_LANGS], axis=0)
                em = np.mean([per_lang[model][(x, "em")] for x in MLQA_LANGS], axis=0)
                t1 = np.mean([per_lang[teacher][(x, "f1")] for x in MLQA_LANGS], axis=0)
                pf = float(np.mean([point[model][x]["f1"] for x in MLQA_LANGS]))
                pe = float(np.mean([point[model][x]["em"] for x in MLQA_LANGS]))
                pt = float(np.mean([point[teacher][x]["f1"] for x in MLQA_LANGS]))
            else:
                f1, em = per_lang[model][(lang, "f1")], per_lang[model][(lang, "em")]
                t1 = per_lang[teacher][(lang, "f1")]
                pf, pe, pt = point[model][lang]["f1"], point[model][lang]["em"], point[teacher][lang]["f1"]
            rows[lang] = {
                "f1": pf,
                "f1_ci": interval(f1),
                "em": pe,
                "em_ci": interval(em),
                "f1_ratio": pf / pt if pt else float("nan"),
                "f1_ratio_ci": interval(f1 / np.where(t1 == 0, np.nan, t1)),
            }
        out[model] = rows
    return out


def mlqa_table(res: dict, names: list[str], teacher: str, baseline: str | None) -> list[str]:
    """The report's MLQA section: F1 / EM per language with intervals, F1 kept of the teacher, and whether each
    language is above `baseline` (the cut teacher)."""
    scores = {n: res[n]["mlqa"]["questions"] for n in names if "mlqa" in res[n]}
    if teacher not in scores:
        return []
    stats = article_bootstrap(scores, teacher)
    header = ["model", *MLQA_LANGS, "avg F1 [95 %]", "avg EM", "F1 of teacher [95 %]", "above cut teacher"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for n in scores:
        s = stats[n]
        cells = [f"{s[lang]['f1']:.1f} / {s[lang]['em']:.1f}" for lang in MLQA_LANGS]
        avg = s["avg"]
        above = "-"
        if baseline in stats and n not in (baseline,):
            wins = sum(s[lang]["f1"] > stats[baseline][lang]["f1"] for lang in MLQA_LANGS)
            above = f"{wins}/{len(MLQA_LANGS)}"
        lo, hi = avg["f1_ci"]
        rlo, rhi = avg["f1_ratio_ci"]
        cells += [
            f"**{avg['f1']:.1f}** [{lo:.1f}, {hi:.1f}]",
            f"{avg['em']:.1f}",
            f"{100 * avg['f1_ratio']:.0f} % [{100 * rlo:.0f}, {100 * rhi:.0f}]",
            above,
        ]
        lines.append("| " + " | ".join([n, *cells]) + " |")
    return lines


def mlqa_notes(res: dict, names: list[str], p: dict, counts: dict) -> list[str]:
    """What the MLQA section ran, in words."""
    tuned = {n: res[n]["mlqa"]["finetune"] for n in names if "mlqa" in res[n]}
    picked = ", ".join(f"{n} step {t['selected_step']} ({t['selected_score'] or 0:.1f})" for n, t in tuned.items())
    per_lang = ", ".join(f"{lang} {counts[f'mlqa-{lang}']}" for lang in MLQA_LANGS)
    return [
        f"`finetune --task qa` on TyDiQA-GoldP English train ({counts['train']:,} questions), {p['epochs']:g} "
        f"epoch(s), batch {p['batch']}, lr {p['lr']}, warmup 10 %, max length {p['max_seq_len']} (stride 128), "
        f"word embeddings "
        f"{'frozen' if p['freeze_embeddings'] else 'trained'}, precision {p['precision']}; the checkpoint (one per "
        f"epoch) chosen by F1 on every {SELECTION_EVERY}th article of that set, held out ({counts['selection']} "
        f"questions; TyDiQA's dev files here have no answers; MLQA is never seen before its evaluation): {picked}.",
        f"`eval-mlqa` on MLQA dev, context and question in the same language ({per_lang} questions), MLQA's official "
        "scorer (mlqa_evaluation_v1.py's normalisation per answer language). Cells: F1 / EM (%). Intervals: 95 % "
        f"percentile cluster bootstrap over articles ({RESAMPLES} resamples, the same draws for every model); the "
        "ratio is F1 / teacher F1 per resample.",
    ]
