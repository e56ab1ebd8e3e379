"""Measurements behind docs/RETENTION.md and docs/benchmarks/RETENTION_*.md (experiments/retention*.py).

The retention benchmark's measurements of one model: its XNLI data split, sentence vectors, speed, size, the
frozen-encoder XNLI probe, the XNLI fine-tuning, and Tatoeba reports (experiments/retention.py runs them as stages)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
XNLI_LANGS = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")
LABELS = ("entailment", "neutral", "contradiction")
SELECTION_ROWS = 510  # of XNLI test-en's 5,010 (whole premise groups); the other 4,500 train

# ----------------------------------------------------------------------------------------------- XNLI data


@dataclass
class XnliData:
    train: list[tuple[str, str, int]]
    selection: list[tuple[str, str, int]]
    dev: dict[str, list[tuple[str, str, int]]]  # per language, the kept dev rows
    dev_groups: np.ndarray  # premise group of each kept dev row (merged over languages: row-parallel files)
    dev_dir: Path  # the kept dev rows as XTREME files, for eval-xnli


def _rows(path: Path) -> list[tuple[str, str, int]]:
    out = []
    for line in path.read_text(encoding="utf-8").rstrip("\n").split("\n"):  # not splitlines(): U+001D in test-el
        premise, hypothesis, label = line.split("\t")
        out.append((premise, hypothesis, LABELS.index(label.replace("contradictory", "contradiction"))))
    return out


def xnli_data(work: Path, every: int, train_every: int = 1) -> XnliData:
    from mlminilm.tasks.xnli_split import merge_groups, premise_groups, split_by_groups, subsample_groups

    test_en = _rows(SHARED / "xnli" / "test-en.tsv")
    groups = premise_groups([r[0] for r in test_en])
    train_idx, sel_idx = split_by_groups(groups, SELECTION_ROWS, seed=0)
    train_idx = train_idx[subsample_groups(groups[train_idx], train_every)]
    sel_idx = sel_idx[subsample_groups(groups[sel_idx], train_every)]
    dev_all = {lang: _rows(SHARED / "xnli" / f"dev-{lang}.tsv") for lang in XNLI_LANGS}
    merged = merge_groups(*(premise_groups([r[0] for r in rows]) for rows in dev_all.values()))
    kept = subsample_groups(merged, every)
    dev = {lang: [rows[i] for i in kept] for lang, rows in dev_all.items()}
    dev_dir = work / "xnli-dev"
    dev_dir.mkdir(parents=True, exist_ok=True)
    for lang, rows in dev.items():
        (dev_dir / f"dev-{lang}.tsv").write_text(
            "".join(f"{p}\t{h}\t{LABELS[y]}\n" for p, h, y in rows), encoding="utf-8"
        )
    for name, idx in (("train", train_idx), ("selection", sel_idx)):
        (work / f"nli-{name}-en.tsv").write_text(
            "".join(f"{test_en[i][0]}\t{test_en[i][1]}\t{LABELS[test_en[i][2]]}\n" for i in idx), encoding="utf-8"
        )
    return XnliData([test_en[i] for i in train_idx], [test_en[i] for i in sel_idx], dev, merged[kept], dev_dir)


# ----------------------------------------------------------------------------------------------- embeddings


def Embedder(model_dir: str, precision: str):  # noqa: N802 - the class it was; now the retention command's
    """A model's sentence vectors as eval-tatoeba makes them, on the CPU in `precision`, batch 64
    (mlminilm.retention.probe.Embedder: the one the `retention` command's probe uses)."""
    from mlminilm.retention.probe import Embedder as Vectors

    return Vectors(model_dir, "cpu", precision, 64)


def speed(embedder: Embedder, sentences: list[str], repeats: int) -> dict:
    """Sentences per second of the embedding pass (tokenising included), median over `repeats` after a warm-up."""
    embedder(sentences[:64])
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        embedder(sentences)
        rates.append(len(sentences) / (time.perf_counter() - t0))
    return {"sentences_per_s": float(np.median(rates)), "repeats": rates, "sentences": len(sentences)}


def speed_sentences() -> list[str]:
    """1,008 Tatoeba sentences: the first 36 of each language side (14 languages and their English)."""
    out = []
    for path in sorted((SHARED / "tatoeba").glob("tatoeba.*")):
        out += path.read_text(encoding="utf-8").splitlines()[:36]
    return out


def size(model_dir: str) -> dict:
    from mlminilm.models.loading import load_encoder

    model = load_encoder(model_dir)
    total = sum(p.numel() for p in model.parameters())
    emb = model.get_input_embeddings().weight.numel()
    disk = sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors"))
    return {
        "parameters": total,
        "embedding": emb,
        "rest": total - emb,
        "disk_bytes": disk,
        "shape": f"{model.config.num_hidden_layers}x{model.config.hidden_size}",
        "vocab": model.config.vocab_size,
    }


def frozen_probe(model_dir: str, data: XnliData, precision: str) -> dict:
    """The frozen-encoder probe of the `retention` command (mlminilm.retention.probe.frozen_probe), its per-language
    items as the correct flags this benchmark's stages keep."""
    from mlminilm.retention.probe import frozen_probe as probe

    result = probe(Embedder(model_dir, precision), data)
    keep = ("l2", "selection_accuracy", "selection_by_l2")
    return {
        **{k: result[k] for k in keep},
        "correct": {lang: [c == "1" for c in v["items"]] for lang, v in result["languages"].items()},
    }


def tatoeba_report(work: Path, name: str, model_dir: str, precision: str, folder: Path, backend: str = "torch") -> dict:
    from mlminilm.config import EvalTatoebaConfig
    from mlminilm.evaluation import tatoeba

    slug = name.replace(" ", "-").replace("+", "plus")
    return tatoeba.run(
        EvalTatoebaConfig(
            model=model_dir,
            data=str(folder),
            batch_size=64,
            backend=backend,
            precision=precision if backend == "torch" else "auto",
            out=work / f"report-tatoeba-{slug}",
            overwrite=True,
        )
    )


def retrieval_report(
    work: Path,
    name: str,
    model_dir: str,
    precision: str,
    langs: tuple[str, ...] = (),
    monolingual: bool = True,
    backend: str = "torch",
) -> dict:
    """Question -> passage retrieval on MLQA dev (nDCG@10 the main score): each language's own questions over its
    own contexts (MTEB's MLQARetrieval setting, `eval-retrieval --monolingual`), or with `monolingual` False every
    context x question language pair (MLQA's G-XLT pairs)."""
    from mlminilm.config import EvalRetrievalConfig
    from mlminilm.evaluation import retrieval

    slug = name.replace(" ", "-").replace("+", "plus") + ("" if monolingual else "-all-pairs")
    return retrieval.run(
        EvalRetrievalConfig(
            model=model_dir,
            data=str(SHARED / "mlqa" / "dev"),
            monolingual=monolingual,
            langs=langs,
            backend=backend,
            precision=precision if backend == "torch" else "auto",
            out=work / f"report-retrieval-{slug}",
            overwrite=True,
        )
    )


# Tatoeba's test sets for 30 languages that are not XNLI languages: none is in the parallel text.
MORE = "tatoeba-more"


def tatoeba_folder(work: Path, pairs: int | None, name: str = "tatoeba") -> Path:
    if pairs is None:
        return SHARED / name
    out = work / f"{name}-sample"
    out.mkdir(parents=True, exist_ok=True)
    for path in (SHARED / name).glob("tatoeba.*"):
        (out / path.name).write_text(
            "\n".join(path.read_text(encoding="utf-8").splitlines()[:pairs]) + "\n", encoding="utf-8"
        )
    return out
