"""Writing systems of a vocabulary: which script each piece is written in, the scripts a language's counts use,
the single-character pieces of those scripts, and the pieces its counts did not show, ranked by likelihood.

Scripts are Unicode's (`\\p{Script=...}` of the `regex` package, which transformers installs). A piece's text is
the piece without its word-start marker (SentencePiece's `▁`, WordPiece's `##`); Common (digits, punctuation,
symbols, the marker itself) and Inherited (combining marks) characters belong to every script.

Ranking the pieces a language's counts did not show (`--script-fill`): the model's own Unigram score (the
log-probability of the piece in the model's pre-training text; 0 for a WordPiece vocabulary, which has none) plus
`LIKELIHOOD_WEIGHT` times the log-likelihood ratio of two character trigram models: one of the language's counted
pieces (each weighted by its count), one of every candidate piece of the same scripts (each once). The score says
how common the piece is in all the model's languages, the ratio how much more it looks like this language than
like the script's pieces in general (a German piece among the Latin pieces of a hundred languages).
"""

from __future__ import annotations

import functools
import math
from collections import Counter

import numpy as np

# Unicode scripts a piece's letters are classified into (ISO 15924 names as Unicode spells them); a letter of any
# other script counts as "Other", which no language selects.
SCRIPTS = (
    "Latin",
    "Cyrillic",
    "Greek",
    "Armenian",
    "Georgian",
    "Hebrew",
    "Arabic",
    "Syriac",
    "Thaana",
    "Nko",
    "Devanagari",
    "Bengali",
    "Gurmukhi",
    "Gujarati",
    "Oriya",
    "Tamil",
    "Telugu",
    "Kannada",
    "Malayalam",
    "Sinhala",
    "Thai",
    "Lao",
    "Tibetan",
    "Myanmar",
    "Khmer",
    "Mongolian",
    "Ethiopic",
    "Cherokee",
    "Canadian_Aboriginal",
    "Tifinagh",
    "Hangul",
    "Hiragana",
    "Katakana",
    "Bopomofo",
    "Han",
    "Yi",
    "Javanese",
    "Balinese",
    "Sundanese",
    "Ol_Chiki",
)
NEUTRAL = ("Common", "Inherited")  # written in every script
MIN_SCRIPT_SHARE = 0.10  # a language uses a script that writes at least this share of its counted letters
LIKELIHOOD_WEIGHT = 0.5  # of the log-likelihood ratio, beside the Unigram score (measured: BENCHMARKS.md section 9)
WORD_START = "\u2581"  # SentencePiece's word-start marker


@functools.cache
def _regex():
    import regex

    named = "|".join(f"(?P<{name}>\\p{{Script={name}}})" for name in SCRIPTS + NEUTRAL)
    return regex.compile(named)


@functools.cache
def char_script(ch: str) -> str:
    """The Unicode script of one character: a name of SCRIPTS, "Common", "Inherited", or "Other"."""
    match = _regex().match(ch)
    return match.lastgroup if match else "Other"


def piece_text(piece: str, kind: str) -> str:
    """The characters a piece writes: without the word-start marker (Unigram: a leading `▁`, unless the piece is
    only the marker; WordPiece: a leading `##`)."""
    if kind == "Unigram" and piece.startswith(WORD_START) and len(piece) > 1:
        return piece[1:]
    if kind == "WordPiece" and piece.startswith("##") and len(piece) > 2:
        return piece[2:]
    return piece


def piece_scripts(pieces: list[str], kind: str) -> list[frozenset[str]]:
    """For each piece, the scripts of its letters (Common and Inherited left out: empty for digits, punctuation
    and the marker)."""
    return [frozenset(s for s in map(char_script, piece_text(p, kind)) if s not in NEUTRAL) for p in pieces]


def language_scripts(
    counts: np.ndarray, pieces: list[str], kind: str, min_share: float = MIN_SCRIPT_SHARE
) -> tuple[str, ...]:
    """The scripts that write at least `min_share` of the letters in a language's counts (each counted piece's
    letters times its count): zh -> Han; ja -> Han, Hiragana, Katakana. "Other" is never one."""
    letters: Counter = Counter()
    for i in np.flatnonzero(counts):
        if i >= len(pieces):
            continue
        for ch in piece_text(pieces[i], kind):
            script = char_script(ch)
            if script not in NEUTRAL:
                letters[script] += int(counts[i])
    total = sum(letters.values())
    return tuple(sorted(s for s, n in letters.items() if total and n >= min_share * total and s != "Other"))


def written_in(scripts: list[frozenset[str]], allowed) -> np.ndarray:
    """bool [pieces]: the pieces whose letters are all of the `allowed` scripts (pieces with no letter too)."""
    allowed = frozenset(allowed)
    return np.fromiter((s <= allowed for s in scripts), bool, count=len(scripts))


def single_characters(pieces: list[str], kind: str, scripts: list[frozenset[str]], allowed) -> np.ndarray:
    """bool [pieces]: pieces that write one character of the `allowed` scripts or a Common / Inherited one, with
    or without the word-start marker (so no character of those scripts is ever unknown)."""
    lone = np.fromiter((len(piece_text(p, kind)) == 1 for p in pieces), bool, count=len(pieces))
    return lone & written_in(scripts, allowed)


class CharModel:
    """A character trigram model of piece strings (word-start markers included), linearly interpolated with the
    bigram and an add-half unigram model; strings are weighted (a piece's count)."""

    ORDER = 3
    KEEP = 0.6  # weight of the longer context in each interpolation step
    ALPHABET = 5000  # assumed alphabet size for the unigram's smoothing

    def __init__(self):
        self.pairs: Counter = Counter()  # (context, char) -> weight
        self.contexts: Counter = Counter()  # context -> weight

    def add(self, text: str, weight: float = 1.0) -> None:
        for i, ch in enumerate(text):
            for k in range(min(i, self.ORDER - 1) + 1):
                context = text[i - k : i]
                self.pairs[context, ch] += weight
                self.contexts[context] += weight

    def log_prob(self, text: str) -> float:
        total, unigrams = 0.0, self.contexts[""]
        for i, ch in enumerate(text):
            p = (self.pairs["", ch] + 0.5) / (unigrams + 0.5 * self.ALPHABET)
            for k in range(1, min(i, self.ORDER - 1) + 1):
                context = text[i - k : i]
                seen = self.contexts.get(context)
                if seen:
                    p = self.KEEP * self.pairs[context, ch] / seen + (1 - self.KEEP) * p
            total += math.log(p)
        return total


def script_log_probs(pieces: list[str], candidates: np.ndarray) -> np.ndarray:
    """The log-probability of each candidate under a character model of all the candidates (each once): the
    background that `fill_ranking` compares a language with."""
    model = CharModel()
    for i in candidates:
        model.add(pieces[i])
    return np.array([model.log_prob(pieces[i]) for i in candidates], dtype=np.float64)


def fill_ranking(
    counts: np.ndarray, pieces: list[str], scores: np.ndarray, candidates: np.ndarray, background: np.ndarray
) -> np.ndarray:
    """The `candidates` (ids, ascending) that the language's `counts` do not show, likeliest first (the module's
    docstring); ties by id. `background`: `script_log_probs(pieces, candidates)`."""
    counted = CharModel()
    for i in np.flatnonzero(counts):
        if i < len(pieces):
            counted.add(pieces[i], float(counts[i]))
    unseen = counts[candidates] == 0
    ids = candidates[unseen]
    key = np.array(
        [scores[i] + LIKELIHOOD_WEIGHT * (counted.log_prob(pieces[i]) - b) for i, b in zip(ids, background[unseen])],
        dtype=np.float64,
    )
    return ids[np.lexsort((ids, -key))]
