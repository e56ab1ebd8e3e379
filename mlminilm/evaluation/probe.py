"""The in-training probe: Tatoeba xx->en of a student while it distils (`distill --probe-tatoeba DIR`).

It answers "is the student getting better before I fine-tune?" with learning curves in metrics.jsonl. The
student is embedded exactly as `eval-tatoeba` will embed the exported student: with the teacher's sentence-
transformers setup (last layer, its pooling, its "query" prompt) when the teacher has one (the export carries
those files), else XTREME's layer for the student's depth with mean pooling. The sentences are tokenised once;
each probe runs the student in eval mode without gradients and restores its mode. Nothing selects on it.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from mlminilm.config import TATOEBA_MAX_LENGTH
from mlminilm.evaluation.embeddings import embed, encode, prompt_length, resolve_spec
from mlminilm.evaluation.tatoeba import retrieval_scores
from mlminilm.langs import warn_unregistered
from mlminilm.models.sentence_encoder import read_sentence_transformers
from mlminilm.tasks.tatoeba import TatoebaSet, load_tatoeba

BATCH_SIZE = 128


class TatoebaProbe:
    """Tatoeba retrieval of a model in training, on sentences tokenised once at construction."""

    def __init__(
        self,
        data: str | Path,
        langs: tuple[str, ...],
        max_pairs: int | None,
        teacher_dir: str,
        student_config,
        tokenizer,
    ):
        sets, unregistered = load_tatoeba(data, list(langs) or None)
        warn_unregistered(unregistered, "probed and logged under the Tatoeba file code")
        if max_pairs is not None:
            sets = {lang: TatoebaSet(s.files, s.source[:max_pairs], s.english[:max_pairs]) for lang, s in sets.items()}
        st = read_sentence_transformers(teacher_dir)
        spec = resolve_spec(
            teacher_dir,
            student_config,
            st,
            layer=None,
            pooling="auto",
            prefix=None,
            max_length=None,
            default_max_length=TATOEBA_MAX_LENGTH,
        )
        self.spec = dataclasses.replace(spec, skip_prompt_tokens=prompt_length(tokenizer, spec, st))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.rows = {
            lang: tuple(
                encode(tokenizer, side, self.spec.prefix, self.spec.max_length)[0] for side in (s.source, s.english)
            )
            for lang, s in sets.items()
        }
        self.pairs = {lang: len(s) for lang, s in sets.items()}

    def describe(self) -> str:
        return f"Tatoeba probe: {', '.join(f'{k} ({v})' for k, v in self.pairs.items())} pairs; {self.spec.describe()}"

    def __call__(self, model, rt) -> dict:
        """{"probe_tatoeba_xx_to_en": average %, "probe_tatoeba_en_to_xx": ..., "probe_tatoeba": per language,
        "probe_s": seconds} for `model` (a bare encoder) as it is now."""
        t0 = time.perf_counter()
        was_training = model.training
        model.eval()
        try:
            per_lang = {}
            for lang, (source, english) in self.rows.items():
                vectors = [
                    embed(model, rows, self.spec, batch_size=BATCH_SIZE, rt=rt, pad_id=self.pad_id)
                    for rows in (source, english)
                ]
                scores, _ = retrieval_scores(*vectors)
                per_lang[lang] = {"xx_to_en": round(scores["xx_to_en"], 2), "en_to_xx": round(scores["en_to_xx"], 2)}
        finally:
            model.train(was_training)
        return {
            "probe_tatoeba_xx_to_en": float(np.mean([v["xx_to_en"] for v in per_lang.values()])),
            "probe_tatoeba_en_to_xx": float(np.mean([v["en_to_xx"] for v in per_lang.values()])),
            "probe_tatoeba": per_lang,
            "probe_s": round(time.perf_counter() - t0, 2),
        }
