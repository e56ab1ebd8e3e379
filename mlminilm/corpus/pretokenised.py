"""Does a language's text look pre-tokenised (word-split fragments) rather than running text?

Token-classification corpora such as wikiann and UD are stored one token per space: Chinese and Thai with a space
between every character or word ("北 京 大 学"), every other language with a space around every punctuation mark
("Osjorsk ( Kaliningrad )"). A student distilled on that learns a text shape it never meets at evaluation, so
`prepare` warns. `TextShape` looks at a capped sample of a language's first documents and measures two shares:

- spaced: of the CJK / kana / Thai characters followed by another such character or a space, the share followed by a
  space and then another such character. Running Chinese, Japanese and Thai put no spaces between words, so ~0.
  Hangul is left out: Korean is spaced between words.
- isolated: of the punctuation marks at a word's edge, the share with whitespace (or the line's edge) on both sides.
  Running text attaches most marks to a word; French spaces ; : ! ? « », XNLI's Arabic often " ، ", a minority.

Measured on ../shared/data, first 2,000 lines (at most 200k characters) per language:

    spaced     zh: wikiann 0.86, ud 0.52 | xnli, mlqa, tatoeba 0.00
               th: wikiann 0.95, ud 0.22 | xnli 0.02, tatoeba 0.01;  tydiqa ko (hanja) 0.04
    isolated   wikiann 0.87-0.97 (ur 0.46: it keeps "،" on its word), ud 0.93-1.00 in every language |
               xnli 0.01-0.07 (ar 0.28), tatoeba 0.00-0.03 (fr 0.23), mlqa 0.01-0.03, tydiqa 0.01-0.09

hence SPACED_ABOVE = 0.1 and ISOLATED_ABOVE = 0.4. A third signal, the share of bare "▁" pieces among the teacher's
tokens, was measured and dropped: it separates only CJK/Thai (0.19-0.42 against 0.00-0.07), which `spaced` already
does without a tokenizer.
"""

from __future__ import annotations

import re
import unicodedata

# Scripts written without spaces between words: CJK ideographs (extension A, unified, compatibility), Hiragana and
# Katakana, Thai.
_UNSPACED = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\u0e00-\u0e7f"
_UNSPACED_NEXT = re.compile(f"[{_UNSPACED}](?=[{_UNSPACED} ])")  # a character and what follows it
_UNSPACED_SPACED = re.compile(f"[{_UNSPACED}](?= [{_UNSPACED}])")

# A run of punctuation (Unicode P*) counts as one mark ("...", "),"). The ASCII apostrophe is left out: it is an
# apostrophe, a quote and wiki markup ('' bold '') by turns.
_PUNCTUATION = "".join(c for c in map(chr, range(0x10000)) if unicodedata.category(c)[0] == "P" and c != "'")
_MARKS = re.compile(f"[{re.escape(_PUNCTUATION)}]+")

SPACED_ABOVE = 0.1
ISOLATED_ABOVE = 0.4
MIN_EVIDENCE = 100  # pairs / marks: fewer than this says nothing (an English text quoting one Chinese name)
MAX_LINES = 2_000
MAX_CHARS = 200_000


class TextShape:
    """Feed it a language's lines with `add` (it stops counting once its sample is full), then ask `verdict`."""

    def __init__(self, max_lines: int = MAX_LINES, max_chars: int = MAX_CHARS):
        self.max_lines, self.max_chars = max_lines, max_chars
        self.lines = self.chars = 0
        self.unspaced_pairs = self.spaced_pairs = 0
        self.marks = self.isolated_marks = 0

    @property
    def full(self) -> bool:
        return self.lines >= self.max_lines or self.chars >= self.max_chars

    def add(self, line: str) -> None:
        if self.full:
            return
        line = line[: self.max_chars - self.chars]
        self.lines += 1
        self.chars += len(line)
        self.unspaced_pairs += len(_UNSPACED_NEXT.findall(line))
        self.spaced_pairs += len(_UNSPACED_SPACED.findall(line))
        for run in _MARKS.finditer(line):
            before = run.start() == 0 or line[run.start() - 1].isspace()
            after = run.end() == len(line) or line[run.end()].isspace()
            # Marks inside a word (l'homme, e-mail, 3.5, U.S.) say nothing either way: count marks at a word's edge.
            if before or after:
                self.marks += 1
                self.isolated_marks += before and after

    @property
    def spaced(self) -> float | None:
        return self.spaced_pairs / self.unspaced_pairs if self.unspaced_pairs >= MIN_EVIDENCE else None

    @property
    def isolated(self) -> float | None:
        return self.isolated_marks / self.marks if self.marks >= MIN_EVIDENCE else None

    def verdict(self) -> str | None:
        """Why the sample looks pre-tokenised, as one clause, or None when it looks like running text."""
        if (spaced := self.spaced) is not None and spaced > SPACED_ABOVE:
            return f"{spaced:.0%} of CJK/Thai characters are separated by spaces"
        if (isolated := self.isolated) is not None and isolated > ISOLATED_ABOVE:
            return f"{isolated:.0%} of punctuation marks have spaces on both sides"
        return None
