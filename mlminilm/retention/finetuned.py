"""The fine-tuned protocols: what a row keeps after English fine-tuning, zero-shot in every language (MiniLM's
task-agnostic promise), by the commands themselves: `finetune`, then `eval-xnli` / `eval-mlqa`.

- xnli: `finetune --task xnli` on XNLI test-en's training pairs, the checkpoint chosen on its selection pairs (the
  probe's split, whole premise groups apart: mlminilm.retention.probe), then `eval-xnli` on XNLI dev in every
  language; each dev row correct or not, premise groups the bootstrap's clusters (shared by the languages).
- mlqa: `finetune --task qa` on TyDiQA-GoldP's English training set less every 10th article, which chooses the
  checkpoint (MLQA is never seen in training or selection), then `eval-mlqa` on MLQA dev, context and question in
  the same language; each question's F1 (MLQA's official scorer), its article the bootstrap's cluster.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mlminilm.errors import DataError
from mlminilm.tasks.xnli import NLI_LABELS

TYDIQA_TRAIN = "tydiqa.goldp.en.train.json"
SELECTION_EVERY = 10  # every 10th article of the English QA training set chooses the checkpoint


@dataclass(frozen=True)
class Protocol:
    """`finetune` settings of a fine-tuned task (what the report names beside its training data)."""

    epochs: float
    lr: float = 1e-4
    batch_size: int = 32
    warmup: float = 0.1
    freeze_embeddings: bool = True
    max_seq_len: int | None = None  # None: the task's default
    doc_stride: int | None = None  # qa; None: finetune's (128)


def _write_nli(rows, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{p}\t{h}\t{NLI_LABELS[y]}\n" for p, h, y in rows), encoding="utf-8")


def xnli_files(data, work: Path) -> dict:
    """The English training and selection pairs as files under WORK/xnli-english/ (from the probe's split)."""
    files = {"train": work / "xnli-english" / "train-en.tsv", "selection": work / "xnli-english" / "selection-en.tsv"}
    _write_nli(data.train, files["train"])
    _write_nli(data.selection, files["selection"])
    return {**files, "train_pairs": len(data.train), "selection_pairs": len(data.selection)}


def _number(articles: list, tag: str) -> list:
    """The articles with every question given an id of its own (TyDiQA-GoldP's English train numbers its questions
    per article: a selection set must name each question once)."""
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


def qa_files(tydiqa: Path, work: Path) -> dict:
    """TyDiQA-GoldP's English train split into training articles and every SELECTION_EVERY-th article held out,
    written under WORK/qa-english/; their question counts."""
    doc = json.loads((tydiqa / TYDIQA_TRAIN).read_text(encoding="utf-8"))
    held = [a for i, a in enumerate(doc["data"]) if i % SELECTION_EVERY == SELECTION_EVERY - 1]
    kept = [a for i, a in enumerate(doc["data"]) if i % SELECTION_EVERY != SELECTION_EVERY - 1]
    if not held or not kept:
        raise DataError(f"{tydiqa / TYDIQA_TRAIN}: {len(doc['data'])} articles, too few to hold every 10th out")
    root = work / "qa-english"
    root.mkdir(parents=True, exist_ok=True)
    out = {"train": root / "train.json", "selection": root / "selection.json"}
    for name, articles in (("train", kept), ("selection", _number(held, "selection"))):
        out[name].write_text(json.dumps({**doc, "data": articles}, ensure_ascii=False), encoding="utf-8")
        out[f"{name}_questions"] = sum(len(p["qas"]) for a in articles for p in a["paragraphs"])
    return out


def _finetune(model: str, task: str, files: dict, protocol: Protocol, cfg, out: Path) -> dict:
    from mlminilm import finetune
    from mlminilm.config import FinetuneConfig
    from mlminilm.evaluation.common import position_limit
    from mlminilm.models.loading import load_config

    limit = position_limit(load_config(model))  # a model with fewer positions: its own limit
    if protocol.max_seq_len is not None and limit is not None and limit < protocol.max_seq_len:
        # a shorter window: the stride within what a 64-token question leaves of it
        stride = max(8, min(128, (limit - 64 - 4) // 2))
        protocol = Protocol(**{**asdict(protocol), "max_seq_len": limit, "doc_stride": stride})
    tuned = finetune.run(
        FinetuneConfig(
            model=model,
            task=task,
            train=str(files["train"]),
            dev=str(files["selection"]),
            out=out,
            epochs=protocol.epochs,
            batch_size=protocol.batch_size,
            lr=protocol.lr,
            warmup=protocol.warmup,
            max_seq_len=protocol.max_seq_len,
            **({"doc_stride": protocol.doc_stride} if protocol.doc_stride is not None else {}),
            freeze_embeddings=protocol.freeze_embeddings,
            group_by_length=True,
            overwrite=True,
            precision=cfg.precision,
            device=cfg.device,
            quiet=cfg.quiet,
        )
    ).to_dict()
    keys = ("steps", "train_examples", "selected_step", "selection_metric", "selected_score", "rule")
    return {**{k: tuned[k] for k in keys}, "protocol": asdict(protocol)}


def xnli(model: str, folder: Path, cfg, data, files: dict, protocol: Protocol, out: Path) -> dict:
    """Fine-tune on the English pairs, `eval-xnli` on dev; each dev row correct or not."""
    from mlminilm.config import EvalXnliConfig
    from mlminilm.evaluation import xnli as eval_xnli

    tuned = _finetune(model, "xnli", files, protocol, cfg, out / "model")
    report = out / "report"
    doc = eval_xnli.run(
        EvalXnliConfig(
            model=str(out / "model"),
            data=str(folder),
            split="dev",
            langs=tuple(data.dev),
            out=report,
            overwrite=True,
            precision=cfg.precision,
            device=cfg.device,
            quiet=cfg.quiet,
        )
    )
    languages = {}
    for lang, rows in data.dev.items():
        predicted = (report / "predictions" / f"dev-{lang}.tsv").read_text(encoding="utf-8").split()
        if len(predicted) != len(rows):
            raise DataError(f"eval-xnli predicted {len(predicted)} rows of dev-{lang}, the data has {len(rows)}")
        correct = [NLI_LABELS.index(label) == row[2] for label, row in zip(predicted, rows)]
        languages[lang] = {
            "score": doc["languages"][lang]["accuracy"],
            "items": "".join("1" if c else "0" for c in correct),
        }
    training = {
        "data": "XNLI test-en, training pairs",
        "pairs": files["train_pairs"],
        "selection": files["selection_pairs"],
    }
    return {
        "report": str(report),
        "summary": doc.get("summary", ""),
        "finetune": {**tuned, "training": training},
        "groups": data.dev_groups.tolist(),
        "languages": languages,
    }


def mlqa(model: str, folder: Path, cfg, files: dict, protocol: Protocol, out: Path) -> dict:
    """Fine-tune on English QA, `eval-mlqa` on MLQA dev (monolingual pairs); each question's F1 and article."""
    from mlminilm.config import EvalMlqaConfig
    from mlminilm.evaluation import mlqa as eval_mlqa

    tuned = _finetune(model, "qa", files, protocol, cfg, out / "model")
    report = out / "report"
    doc = eval_mlqa.run(
        EvalMlqaConfig(
            model=str(out / "model"),
            data=str(folder),
            langs=cfg.langs or monolingual_langs(folder),
            out=report,
            overwrite=True,
            precision=cfg.precision,
            device=cfg.device,
            quiet=cfg.quiet,
        )
    )
    languages = {}
    for key, scores in doc["languages"].items():
        name = f"dev-context-{key}-question-{key}.json"
        scored = question_scores(folder / name, report / "predictions" / name, key)
        f1, article = scored["f1"], scored["article"]
        if abs(100.0 * float(np.mean(f1)) - scores["f1"]) > 1e-6:
            raise DataError(f"eval-mlqa's predictions in {report} do not match its F1 for {key}")
        languages[key] = {"score": scores["f1"], "items": f1, "groups": article}
    training = {
        "data": f"TyDiQA-GoldP {TYDIQA_TRAIN} less every {SELECTION_EVERY}th article",
        "questions": files["train_questions"],
        "selection": files["selection_questions"],
    }
    return {
        "report": str(report),
        "summary": doc.get("summary", ""),
        "finetune": {**tuned, "training": training},
        "languages": languages,
    }


def monolingual_langs(folder: Path) -> tuple[str, ...]:
    """The languages of an MLQA folder's dev-context-X-question-X.json files."""
    found = (p.name[len("dev-context-") :].split("-question-") for p in folder.glob("dev-context-*-question-*.json"))
    return tuple(sorted(c for c, q in found if c == q.removesuffix(".json")))


def question_scores(data_file: Path, predictions: Path, lang: str) -> dict[str, list]:
    """Each question's EM (0/1) and F1 in [0, 1] (MLQA's official scorer, the context language's rules) and the
    index of its article, in the data file's order: {"em", "f1", "article"}."""
    from mlminilm.metrics.mlqa import score_prediction

    doc = json.loads(data_file.read_text(encoding="utf-8"))
    predicted = json.loads(predictions.read_text(encoding="utf-8"))
    out: dict[str, list] = {"em": [], "f1": [], "article": []}
    for index, entry in enumerate(doc["data"]):
        for paragraph in entry["paragraphs"]:
            for qa in paragraph["qas"]:
                em, f1 = score_prediction(predicted.get(qa["id"], ""), [a["text"] for a in qa["answers"]], lang)
                out["em"].append(em)
                out["f1"].append(float(f1))
                out["article"].append(index)
    return out
