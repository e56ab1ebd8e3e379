"""trim: which vocabulary pieces a trimmed model keeps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import problems_to_error, unknown_langs


@dataclass(frozen=True)
class TrimConfig:
    """`trim`: keep the part of a model's vocabulary that a corpus uses (mlminilm.vocab).

    Token counts come from `data` (a `prepare` output: token_counts.npy, made with the model's own tokenizer) or
    are counted in `corpus` (<lang>.txt files, only `langs` when given) with the model's tokenizer. Kept: every
    special and added token, and the most frequent other ids that occur at least `min_count` times, until they
    cover `coverage` of the corpus's other tokens, at most `max_vocab` ids in all (None: no limit)."""

    model: str = ""
    out: Path | None = None
    data: Path | None = None
    corpus: Path | None = None
    langs: tuple[str, ...] = ()
    min_count: int = 1
    coverage: float = 1.0
    max_vocab: int | None = None
    workers: int = 0  # tokenizer processes counting --corpus; 0 = all cores
    overwrite: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        p: list[str] = []
        if not self.model:
            p.append("--model is required (a model directory or hub id: a teacher, a student or a fine-tuned model)")
        if self.out is None:
            p.append("--out is required (the directory to write the trimmed model to)")
        if (self.data is None) == (self.corpus is None):
            p.append("give exactly one of --data (a `mlminilm prepare` output) and --corpus (a directory of "
                     "<lang>.txt files)")
        if self.langs and self.corpus is None:
            p.append("--langs chooses files of --corpus; the counts of a --data directory cover all its languages "
                     "(prepare it with --langs instead)")
        if self.min_count < 1:
            p.append(f"--min-count must be at least 1 (got {self.min_count})")
        if not 0.0 < self.coverage <= 1.0:  # also false for NaN
            p.append(f"--coverage must be in (0, 1], a fraction of the corpus tokens (got {self.coverage})")
        if self.max_vocab is not None and self.max_vocab < 1:
            p.append(f"--max-vocab must be at least 1 (got {self.max_vocab})")
        if self.workers < 0:
            p.append(f"--workers must be 0 (all cores) or more (got {self.workers})")
        unknown_langs(p, self.langs, "--langs")
        problems_to_error(p)
