"""Plain documents as question-passage pairs for `distill --passages`: the rule that makes them.

Users have documents far more often than questions with their passages. A documents file, `<lang>.txt` (optionally
gzipped), holds one document per line, of any length. Each document becomes pairs in three stated steps:

1. Sentences: the document is split after sentence-final punctuation followed by whitespace (. ! ? and the
   ellipsis, Arabic ؟, Devanagari । ॥, Ethiopic ።, Myanmar ။), after the CJK full-width marks 。！？ (no space
   follows them), and at whitespace between two Thai letters (Thai writes no full stop; a space ends a sentence).
2. Passages: a document's consecutive sentences are packed greedily into passages, each taking sentences while their
   tokens (the teacher's tokenizer, each sentence counted alone) plus the passage prompt and the special tokens stay
   within --passage-max-length. A sentence longer than that alone is a passage of its own.
3. Questions, by the inverse cloze rule (Lee, Chang and Toutanova, 2019): from every passage of two or more
   sentences one sentence, drawn with the run's seed, is taken out; it is the question, and the passage without it
   is its passage. The teacher's embeddings of both, under their prompts, are then the targets as for any pair.
   A passage of one sentence gives no pair (counted and said once).

The pairs depend only on the text, the tokenizer, the length, the prompt and the seed: a resumed run makes the same
pairs, and run.json's digest of them tells when any of these changed.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from mlminilm.errors import DataError

# Split points between sentences (the module's step 1); zero-width after the CJK marks, which no space follows.
SENTENCE_END = re.compile(
    r"(?<=[.!?\u2026\u061f\u0964\u0965\u1362\u104b])\s+"
    r"|(?<=[\u3002\uff01\uff1f])\s*"
    r"|(?<=[\u0e00-\u0e7f])\s+(?=[\u0e00-\u0e7f])"
)
# The inverse cloze draw uses its own stream, apart from the pairs' draw (corpus.passages.STREAM 11).
STREAM = 13
TOKENIZE_CHUNK = 8192  # sentences tokenised per call: the counts of a large file never sit in one batch


def sentences_of(document: str) -> list[str]:
    """The sentences of `document` by the module's rule, each stripped, none empty."""
    return [s for s in (piece.strip() for piece in SENTENCE_END.split(document)) if s]


def pack(counts: list[int], budget: int) -> list[range]:
    """Consecutive runs of sentences (by index) whose token counts sum to at most `budget`, greedily from the
    first; a sentence over the budget alone is a run of its own."""
    runs: list[range] = []
    start, used = 0, 0
    for i, n in enumerate(counts):
        if i > start and used + n > budget:
            runs.append(range(start, i))
            start, used = i, 0
        used += n
    if counts:
        runs.append(range(start, len(counts)))
    return runs


@dataclass(frozen=True)
class DocumentRule:
    """What decides the pairs of a documents file besides its text: the teacher's tokenizer, the passages' token
    limit and prompt, and the seed of the question draw."""

    tokenizer: object
    max_length: int
    prompt: str = ""
    seed: int = 0

    def budget(self, option: str) -> int:
        """The tokens a passage's sentences may take: the limit less the special tokens and the prompt's."""
        tok = self.tokenizer
        taken = tok.num_special_tokens_to_add(pair=False)
        if self.prompt:
            taken += len(tok(self.prompt, add_special_tokens=False)["input_ids"])
        if self.max_length - taken < 1:
            raise DataError(
                f"{option}: --passage-max-length {self.max_length} leaves no token for a passage's text after the "
                f"{taken} of the special tokens and the prompt {self.prompt!r}; raise it"
            )
        return self.max_length - taken

    def counts(self, sentences: list[str]) -> list[int]:
        """Each sentence's tokens without special tokens, tokenised in chunks."""
        found: list[int] = []
        for start in range(0, len(sentences), TOKENIZE_CHUNK):
            chunk = sentences[start : start + TOKENIZE_CHUNK]
            # verbose=False: a sentence over the model's positions is counted, not warned about (packing cuts it)
            ids = self.tokenizer(chunk, add_special_tokens=False, verbose=False)["input_ids"]
            found.extend(len(x) for x in ids)
        return found


@dataclass
class DocumentPairs:
    """The pairs made from the documents of one language, with what the rule found."""

    questions: list[str] = field(default_factory=list)
    passages: list[str] = field(default_factory=list)
    documents: int = 0
    single: int = 0  # passages of one sentence: no pair


def pairs_from_documents(documents: Iterable[str], lang: str, rule: DocumentRule, option: str) -> DocumentPairs:
    """The question-passage pairs of `documents` (all of language `lang`) by the module's rule."""
    budget = rule.budget(option)
    split = [sentences_of(d) for d in documents]
    flat = [s for sentences in split for s in sentences]
    counts = rule.counts(flat)
    # One stream per language, drawn in document order: a file's pairs never depend on another file's.
    rng = np.random.default_rng([rule.seed, STREAM, zlib.crc32(lang.encode())])
    found = DocumentPairs(documents=sum(1 for s in split if s))
    at = 0
    for sentences in split:
        for run in pack(counts[at : at + len(sentences)], budget):
            if len(run) < 2:
                found.single += 1
                continue
            out = run.start + int(rng.integers(len(run)))
            found.questions.append(sentences[out])
            found.passages.append(" ".join(sentences[i] for i in run if i != out))
        at += len(sentences)
    return found
