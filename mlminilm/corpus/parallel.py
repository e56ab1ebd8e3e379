"""Parallel text for `distill --parallel`: sentence pairs (a sentence in the teacher's language, its translation)
and the stateless draw of each step's pairs.

Format (sentence-transformers' parallel-sentences files): UTF-8 text, one source sentence per line followed by
one or more translations, tab-separated; `.tsv`, `.txt` or gzip-compressed `.tsv.gz` / `.txt.gz`. `--parallel`
names one such file or a directory of them. A file named `<src>-<lang>.tsv` (`en-de.tsv`) or `<lang>.tsv`
gives its translations that language in the log and the run record; other names count as `?`.

Pairs are tokenised per batch (a few dozen sentences, a millisecond), so a corpus of millions of pairs costs
its text in memory and nothing at start-up.
"""

from __future__ import annotations

import gzip
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mlminilm.errors import DataError

SUFFIXES = (".tsv", ".txt", ".tsv.gz", ".txt.gz")
# Padded lengths are rounded up to this multiple: fewer distinct shapes for a compiled step, little padding.
PAD_MULTIPLE = 16
# The draw of parallel pairs uses its own stream, apart from the running-text batches' (seed, step).
STREAM = 7


@dataclass(frozen=True)
class ParallelPairs:
    sources: tuple[str, ...]
    targets: tuple[str, ...]
    langs: tuple[str, ...]  # the target's language per pair ("?" when the file name does not say)
    skipped: int  # lines without a source and a non-empty translation

    def __len__(self) -> int:
        return len(self.sources)

    def lang_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(self.langs).items()))


def _files(path: Path) -> list[Path]:
    if not path.exists():
        raise DataError(f"--parallel {path} does not exist")
    if path.is_file():
        return [path]
    found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
    if not found:
        raise DataError(f"--parallel {path} holds no parallel-text files ({', '.join('*' + s for s in SUFFIXES)})")
    return found


def file_lang(path: Path) -> str:
    """The translations' language a file name states (`en-de.tsv`, `de.tsv.gz` -> de), else "?"."""
    stem = path.name
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    match = re.fullmatch(r"(?:[a-z]{2,3}[-_])?([a-z]{2,3}(?:_[a-z]+|-Hant)?)", stem)
    return match.group(1) if match else "?"


def _lines(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            yield from handle
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise DataError(f"--parallel {path} cannot be read as UTF-8 text{' (gzip)' if path.suffix == '.gz' else ''}: "
                        f"{exc}") from None


def read_parallel(path: Path) -> ParallelPairs:
    """Every (source, translation) pair under `path`; DataError when there is none."""
    sources, targets, langs = [], [], []
    skipped = 0
    for file in _files(Path(path)):
        lang = file_lang(file)
        for line in _lines(file):
            fields = [f.strip() for f in line.rstrip("\r\n").split("\t")]
            if not line.strip():
                continue
            pairs = [t for t in fields[1:] if t] if fields[0] else []
            if not pairs:
                skipped += 1
            for target in pairs:
                sources.append(fields[0])
                targets.append(target)
                langs.append(lang)
    if not sources:
        raise DataError(f"--parallel {path} holds no sentence pairs (each line: a sentence, a tab, its translation"
                        f"{f'; {skipped} line(s) had no translation' if skipped else ''})")
    return ParallelPairs(tuple(sources), tuple(targets), tuple(langs), skipped)


def write_pair_files(sources: list[str], translations: dict[str, list[str]], out: Path,
                     source_lang: str = "en") -> dict[str, int]:
    """Write line-aligned texts as `--parallel` files: OUT/<source_lang>-<lang>.tsv, each distinct (sentence,
    translation) pair once, pairs with an empty side (or a tab inside) left out. Returns the pairs per language;
    ValueError when a translation does not have the source's number of lines."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for lang, lines in translations.items():
        if len(lines) != len(sources):
            raise ValueError(f"{lang} has {len(lines)} lines, {source_lang} {len(sources)}: they do not line up")
        pairs = dict.fromkeys(f"{a.strip()}\t{b.strip()}" for a, b in zip(sources, lines)
                              if a.strip() and b.strip() and "\t" not in a + b)
        (out / f"{source_lang}-{lang}.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
        counts[lang] = len(pairs)
    return counts


@dataclass
class ParallelBatch:
    """One micro-batch of pairs, tokenised: `source_*` the teacher-side sentences [B, S], `both_*` the sources
    then the translations [2B, T], what the student embeds."""

    source_ids: torch.Tensor
    source_mask: torch.Tensor
    both_ids: torch.Tensor
    both_mask: torch.Tensor
    langs: dict[str, int]

    def to(self, device, non_blocking: bool = False) -> ParallelBatch:
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return ParallelBatch(move(self.source_ids), move(self.source_mask), move(self.both_ids), move(self.both_mask),
                             self.langs)


class ParallelSampler:
    """Stateless like corpus.sampling.BatchSampler: the pairs of micro-batch (step, micro) on process `rank` are a
    function of (seed, step) alone, so a resumed run draws what the uninterrupted one drew, and N processes
    with batch B draw the global batch one process with batch N*B would."""

    def __init__(self, pairs: ParallelPairs, tokenizer, *, prefix: str, max_length: int, seed: int):
        self.pairs, self.tokenizer = pairs, tokenizer
        self.prefix, self.max_length, self.seed = prefix, max_length, seed

    def indices(self, step: int, micro: int, batch: int, accum: int, rank: int, world: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, STREAM, step])
        drawn = rng.integers(0, len(self.pairs), size=batch * accum * world)
        start = (micro * world + rank) * batch
        return drawn[start : start + batch]

    def _encode(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        multiple = PAD_MULTIPLE if self.max_length % PAD_MULTIPLE == 0 else None  # never past max_length
        enc = self.tokenizer([self.prefix + t for t in texts], padding=True, truncation=True,
                             max_length=self.max_length, pad_to_multiple_of=multiple, return_tensors="pt",
                             return_token_type_ids=False)
        return enc["input_ids"], enc["attention_mask"]

    def batch(self, step: int, micro: int, batch: int, accum: int, rank: int, world: int) -> ParallelBatch:
        picked = self.indices(step, micro, batch, accum, rank, world)
        sources = [self.pairs.sources[i] for i in picked]
        targets = [self.pairs.targets[i] for i in picked]
        source_ids, source_mask = self._encode(sources)
        both_ids, both_mask = self._encode(sources + targets)
        return ParallelBatch(source_ids, source_mask, both_ids, both_mask,
                             dict(Counter(self.pairs.langs[i] for i in picked)))
