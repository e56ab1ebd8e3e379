"""The frozen-encoder XNLI probe of a row: multinomial logistic regression on [u, v, |u-v|, u*v] of the sentence
vectors (mlminilm.evaluation.nli_probe), trained on English pairs of XNLI test-en, its L2 chosen on English
selection pairs (whole premise groups apart from the training ones), zero-shot on XNLI dev in every language. The
sentence vectors are eval-tatoeba's (the model's own sentence-transformers layer, pooling and query prompt)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlminilm.errors import DataError

# 510 of XNLI test-en's 5,010 rows (whole premise groups) choose the L2 penalty; the others train (smaller files:
# the same share)
SELECTION_SHARE = 510 / 5010
L2_GRID = (1e-3, 1e-2, 1e-1, 1.0)
PROBE_METHOD = (
    "multinomial logistic regression on [u, v, |u-v|, u*v] of the sentence vectors, L2 chosen on English "
    "selection pairs; trained on XNLI test-en split by premise groups, zero-shot on XNLI dev"
)

Pair = tuple[str, str, int]  # premise, hypothesis, label


@dataclass
class XnliData:
    train: list[Pair]
    selection: list[Pair]
    dev: dict[str, list[Pair]]  # per language
    dev_groups: np.ndarray  # premise group of each dev row, merged over the languages (row-parallel files)


def _pairs(examples) -> list[Pair]:
    return [(e.premise, e.hypothesis, int(e.label)) for e in examples]


def xnli_data(folder: Path, langs: tuple[str, ...] = ()) -> XnliData:
    """test-en split by premise groups into training and selection pairs (seed 0), and the dev files of `langs`
    (default: every language there), which must be row-parallel (the same items in every language)."""
    from mlminilm.tasks.xnli import load_xnli_split
    from mlminilm.tasks.xnli_split import merge_groups, premise_groups, split_by_groups

    test_en = _pairs(load_xnli_split(folder, "test", ["en"])["en"])
    groups = premise_groups([p for p, _, _ in test_en])
    train_idx, sel_idx = split_by_groups(groups, max(1, round(len(test_en) * SELECTION_SHARE)), seed=0)
    dev = {lang: _pairs(rows) for lang, rows in load_xnli_split(folder, "dev", list(langs) or None).items()}
    sizes = {len(rows) for rows in dev.values()}
    if len(sizes) != 1:
        raise DataError(
            f"the XNLI dev files in {folder} differ in length ({', '.join(f'{k} {len(v)}' for k, v in dev.items())})"
            ": the probe's intervals need row-parallel files (the same items in every language)"
        )
    merged = merge_groups(*(premise_groups([p for p, _, _ in rows]) for rows in dev.values()))
    return XnliData([test_en[i] for i in train_idx], [test_en[i] for i in sel_idx], dev, merged)


class Embedder:
    """A model's sentence vectors as eval-tatoeba makes them (its sentence-transformers setup: layer, pooling,
    prompt), on `device` in `precision`."""

    def __init__(self, model: str, device: str, precision: str, batch_size: int):
        from mlminilm import training
        from mlminilm.config import TATOEBA_MAX_LENGTH
        from mlminilm.evaluation.embeddings import load_embedder, resolve_spec, skipping_prompt
        from mlminilm.models.loading import load_config, resolve_model
        from mlminilm.models.sentence_encoder import read_sentence_transformers

        model_dir = resolve_model(model)
        st = read_sentence_transformers(model_dir)
        spec = resolve_spec(
            model_dir,
            load_config(model_dir),
            st,
            layer=None,
            pooling="auto",
            prefix=None,
            max_length=None,
            default_max_length=TATOEBA_MAX_LENGTH,
        )
        self.rt = training.setup_runtime(device, precision)
        self.model, self.tokenizer = load_embedder(spec, None, self.rt)
        self.spec = skipping_prompt(spec, self.tokenizer, st)
        self.batch_size = batch_size

    def __call__(self, sentences: list[str]) -> np.ndarray:
        from mlminilm.evaluation.embeddings import embed, encode

        rows, _ = encode(self.tokenizer, sentences, self.spec.prefix, self.spec.max_length)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return embed(self.model, rows, self.spec, batch_size=self.batch_size, rt=self.rt, pad_id=pad)


def pair_vectors(embedder: Embedder, rows: list[Pair]) -> tuple[np.ndarray, np.ndarray]:
    """Premise and hypothesis vectors of each row (each distinct sentence embedded once)."""
    distinct = sorted({s for r in rows for s in r[:2]})
    index = {s: i for i, s in enumerate(distinct)}
    vectors = embedder(distinct)
    return vectors[[index[r[0]] for r in rows]], vectors[[index[r[1]] for r in rows]]


def frozen_probe(embedder: Embedder, data: XnliData) -> dict:
    """The probe's result: per language its accuracy (%) and each dev row correct or not, the L2 chosen."""
    from mlminilm.evaluation.nli_probe import pair_features, select_l2

    feats = {}
    for name, rows in (("train", data.train), ("selection", data.selection)):
        feats[name] = (pair_features(*pair_vectors(embedder, rows)), np.array([r[2] for r in rows]))
    chosen = select_l2(*feats["train"], *feats["selection"], grid=L2_GRID)
    languages = {}
    for lang, rows in data.dev.items():
        correct = chosen.probe.correct(pair_features(*pair_vectors(embedder, rows)), np.array([r[2] for r in rows]))
        languages[lang] = {
            "score": 100.0 * float(np.mean(correct)),
            "items": "".join("1" if c else "0" for c in correct),
        }
    return {
        "l2": chosen.l2,
        "selection_accuracy": 100 * chosen.accuracy,
        "selection_by_l2": {str(k): 100 * v for k, v in chosen.accuracies.items()},
        "train_pairs": len(data.train),
        "selection_pairs": len(data.selection),
        "groups": data.dev_groups.tolist(),
        "languages": languages,
    }


def probe(model: str, folder: Path, cfg, data: XnliData) -> dict:
    """One row's probe (`cfg`: the RetentionConfig: device, precision, batch size)."""
    embedder = Embedder(model, cfg.device, cfg.precision, cfg.batch_size or 128)
    result = frozen_probe(embedder, data)
    result["summary"] = f"embedding: {embedder.spec.describe()}; {PROBE_METHOD}"
    result["report"] = None
    return result
