"""What int8 costs each language (`export --quantize int8 --check DIR`): the float32 and the int8 graph embed the
same sample per language, compared vector by vector and as retrieval.

Per language:
- `cosine_mean`, `cosine_min`: cosine between the float32 and the int8 sentence vector of each sentence (the model's
  pooling over the last layer, its query prefix before each), over every sentence of the sample;
- `top1_agreement` (%): share of the sample's queries whose nearest neighbour (cosine) is the same under both
  graphs. With a Tatoeba-style folder a query is a sentence of one side and its neighbours the other side's, in
  both directions; with plain text, a sentence and the other sentences of its language;
- with a Tatoeba-style folder also the retrieval accuracy (%) of each graph, xx->en and en->xx, on the sample, and
  `drop`: the float32 accuracy less the int8 one, in points, the larger of the two directions;
- without pairs, `drop` is 100 - top1_agreement (points of queries that retrieve something else).
A language whose drop exceeds `max_drop` is listed in `over_max_drop`: a warning at export, a refusal with
--strict. Everything is computed in float64 from the graphs' float32 outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlminilm.config.export import CHECK_SENTENCES
from mlminilm.errors import DataError


@dataclass(frozen=True)
class CheckSet:
    """Per language either `pairs` (xx sentences, en sentences, line i translating line i) or plain `sentences`."""

    source: str
    kind: str  # "tatoeba" or "text"
    pairs: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    sentences: dict[str, list[str]] = field(default_factory=dict)

    @property
    def languages(self) -> list[str]:
        return sorted(self.pairs or self.sentences)


def read_check(path: str | Path, tokenizer, per_language: int = CHECK_SENTENCES) -> CheckSet:
    """A Tatoeba-style folder (tatoeba.xxx-eng.xxx / .eng pairs: the first `per_language` lines of each) or a
    calibration-style folder (calibration.read_calibration's rules)."""
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"--check {path} is not a folder (a Tatoeba-style folder, or <lang>.txt files)")
    if any(root.glob("tatoeba.*-eng.eng")):
        from mlminilm.corpus.parallel_files import MAX_SENTENCE_CHARS
        from mlminilm.langs import warn_unregistered
        from mlminilm.tasks.tatoeba import load_tatoeba

        # Lines cut as they are read, as --parallel's: a line of megabytes is never held whole nor tokenised.
        sets, unregistered = load_tatoeba(root, max_chars=MAX_SENTENCE_CHARS)
        warn_unregistered(unregistered, "checked and recorded under the Tatoeba file code")
        pairs = {lang: (s.source[:per_language], s.english[:per_language]) for lang, s in sets.items()}
        return CheckSet(str(root), "tatoeba", pairs=dict(sorted(pairs.items())))
    from mlminilm.export.calibration import read_calibration

    text = read_calibration(root, tokenizer, per_language, flag="--check")
    return CheckSet(str(root), "text", sentences=text.sentences)


def _unit(vectors: np.ndarray) -> np.ndarray:
    v = vectors.astype(np.float64)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def _nearest(queries: np.ndarray, keys: np.ndarray, exclude_self: bool = False) -> np.ndarray:
    scores = queries @ keys.T
    if exclude_self:
        np.fill_diagonal(scores, -np.inf)
    return scores.argmax(1)  # ties to the lowest index, as eval-tatoeba


def language_fidelity(float_vectors: list[np.ndarray], int8_vectors: list[np.ndarray]) -> dict:
    """One language: `float_vectors` / `int8_vectors` are [xx, en] (a Tatoeba pair) or [sentences] (plain text),
    each an array of sentence vectors in the same order under both graphs."""
    f = [_unit(v) for v in float_vectors]
    q = [_unit(v) for v in int8_vectors]
    cosine = np.concatenate([(a * b).sum(1) for a, b in zip(f, q)])
    result = {"sentences": int(sum(len(v) for v in f)), "cosine_mean": float(cosine.mean())}
    result["cosine_min"] = float(cosine.min())
    if len(f) == 2:
        same, accuracy = [], {}
        for name, (i, j) in (("xx_to_en", (0, 1)), ("en_to_xx", (1, 0))):
            nf, nq = _nearest(f[i], f[j]), _nearest(q[i], q[j])
            same.append(nf == nq)
            truth = np.arange(len(f[i]))
            accuracy[name] = {
                "float32": 100.0 * float((nf == truth).mean()),
                "int8": 100.0 * float((nq == truth).mean()),
            }
        result["top1_agreement"] = 100.0 * float(np.concatenate(same).mean())
        result["accuracy"] = accuracy
        # Rounded: 72.4 - 71.4 is 1.0000000000000142 in floating point, which --max-drop 1 must not count as over.
        result["drop"] = round(max(a["float32"] - a["int8"] for a in accuracy.values()), 9)
    else:
        nf, nq = _nearest(f[0], f[0], exclude_self=True), _nearest(q[0], q[0], exclude_self=True)
        result["top1_agreement"] = 100.0 * float((nf == nq).mean())
        result["drop"] = round(100.0 - result["top1_agreement"], 9)
    return result


def fidelity_report(languages: dict[str, dict], check: CheckSet, max_drop: float) -> dict:
    """The record of every language's figures (language_fidelity), the worst and the languages over `max_drop`."""
    over = sorted(lang for lang, r in languages.items() if r["drop"] > max_drop)
    worst = max(languages, key=lambda lang: languages[lang]["drop"])
    return {
        "check": check.source,
        "kind": check.kind,
        "drop_means": "retrieval accuracy, float32 less int8, points, the worse direction"
        if check.kind == "tatoeba"
        else "100 - top-1 agreement (% of sentences whose nearest neighbour changes)",
        "max_drop": max_drop,
        "languages": languages,
        "worst": {"language": worst, "drop": languages[worst]["drop"]},
        "cosine_min": min(r["cosine_min"] for r in languages.values()),
        "over_max_drop": over,
    }
