"""What a counting corpus does not show (issue 55): per language, the share of new text's tokens whose piece its
counts never show, the rule that calls the counting corpus small for a language, its warning, and the default
`--script-fill` that follows from it.

`coverage` (trim.json, the summary) is coverage of the counting corpus: at 100 % every counted token keeps its
piece, which says nothing of text the corpus does not hold. What new text of the language would miss is estimated
from the counts alone, by Good and Turing's rule (Good 1953): the probability that the next token's id is one the
counts never show is about the number of ids seen exactly once over the tokens counted (`Unseen.share`).

Small: a language whose counts leave more than SMALL_UNSEEN_SHARE (0.1 %) of new text's tokens unseen. At 0.1 %, a
sentence of 30 tokens keeps all its pieces 97 % of the time ((1 - 0.001)^30). Measured with multilingual-e5-small's
vocabulary, counting Universal Dependencies and WikiANN lines and holding out the language's 1,000 Tatoeba sentences
(docs/guides/ship.md "A small counting corpus"): German at 2.29 % unseen (231 K tokens) tokenised 61.7 % of them as
before, at 0.31 % (1.76 M tokens) 92.6 %; French at 1.04 % (599 K) 89.5 %. Every corpus under a few million tokens
per language is small, and a trim of it alone changes the tokenisation of much of the language's other text.

The default `--script-fill` (None, "auto"): each small language keeps the first AUTO_FILL_IDS (50,000) ids of its
list (its counted ids by falling count, then the pieces of its scripts its counts never show, the likeliest first:
mlminilm.vocab.scripts), an id another language keeps serving both; a language with enough text gets nothing more.
Measured on the same text, 1,000 lines to all of them: the held-out sentences tokenised as before rise to 90-99.7 %
for German, French and Turkish (6-96 % without) and to 99.8 % for Russian, whose script has fewer pieces than that;
German and French counted on 3,000 lines each keep Tatoeba within 0.3 points of the original (78.9 and 63.5 xx->en
without, against 98.0 and 92.2). It costs at most 50,000 ids per small language (19.2 M parameters at hidden size
384; 45.5 M parameters instead of 28.5 M for that German and French model), nothing for a language with enough text.
It is off when the user chose the size another way (--coverage, --max-vocab, --per-lang-top-k), and with
`--script-fill 0`.

The estimate is of text like the counting corpus, not of every text of the language: a corpus of another kind
(Chinese with spaces between words) passes the rule and still misses ordinary text; `--check` tells.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlminilm import logging as mlog
from mlminilm.corpus.manifest import TOKEN_COUNTS
from mlminilm.errors import DataError

log = mlog.get(__name__)

SMALL_UNSEEN_SHARE = 0.001  # the rule: more than this share of new text's tokens unseen (the docstring says why)
AUTO_FILL_IDS = 50_000  # the default fill keeps this many ids of each small language's list
POOLED = "(all languages)"  # the name of the pooled counts when no per-language counts are known


@dataclass(frozen=True)
class Unseen:
    """One language's counts as Good-Turing reads them (special and added tokens left out)."""

    tokens: int  # tokens counted
    distinct: int  # ids seen
    once: int  # ids seen exactly once

    @property
    def share(self) -> float:
        """The estimated share of new text's tokens whose id the counts never show."""
        return self.once / self.tokens if self.tokens else 1.0

    @property
    def small(self) -> bool:
        return self.share > SMALL_UNSEEN_SHARE

    def record(self) -> dict:
        return {"distinct_ids": self.distinct, "ids_seen_once": self.once, "unseen_share": self.share}


def unseen(found, forced) -> dict[str, Unseen]:
    """language -> its Unseen (the pooled counts under POOLED when no per-language counts are known)."""
    counts = found.per_language if found.per_language is not None else {POOLED: found.counts}
    other = None
    result = {}
    for lang, c in sorted(counts.items()):
        if other is None:
            other = np.ones(len(c), bool)
            ids = np.asarray(sorted(forced), dtype=np.int64)
            other[ids[(ids >= 0) & (ids < len(c))]] = False
        mine = np.asarray(c)[other]
        result[lang] = Unseen(int(mine.sum()), int(np.count_nonzero(mine)), int(np.count_nonzero(mine == 1)))
    return result


def auto_fill(config) -> bool:
    """The default --script-fill is on: not given, and no other rule chose the size."""
    return (
        config.script_fill is None
        and config.coverage is None
        and config.max_vocab is None
        and (config.per_lang_top_k is None)
    )


def fill_to(config, languages: dict[str, Unseen], per_language: bool) -> dict[str, int] | None:
    """The default --script-fill: each small language -> AUTO_FILL_IDS; None when it is off (or no per-language
    counts are known)."""
    if not auto_fill(config) or not per_language:
        return None
    return {lang: AUTO_FILL_IDS for lang, info in languages.items() if info.small}


def plan(config, found, forced) -> tuple[dict[str, Unseen], dict[str, int] | None, set[str]]:
    """What the counts leave unseen per language (each small one warned about), the default fill (`fill_to`) and
    the languages whose ranking --script-fill reads."""
    languages = unseen(found, forced)
    warn_small(config, languages)
    to = fill_to(config, languages, found.per_language is not None)
    filled = set(to) if to is not None else set(found.per_language or ()) if config.script_fill else set()
    return languages, to, filled


def add_to_record(record: dict[str, dict], languages: dict[str, Unseen], to: dict[str, int] | None) -> None:
    """trim.json's `languages`: each language's `unseen` figures, whether its corpus is small, its default fill."""
    for lang, info in languages.items():
        small = {"small_corpus": info.small, "script_fill_to": (to or {}).get(lang)}
        record.setdefault(lang, {})["unseen"] = {**info.record(), **small}


def warn_small(config, languages: dict[str, Unseen]) -> None:
    """One warning per language whose counting corpus is small, saying what --script-fill keeps (or would)."""
    for lang, info in languages.items():
        if not info.small:
            continue
        more = max(0, AUTO_FILL_IDS - info.distinct)
        if lang == POOLED:
            fill = "--script-fill needs per-language counts: prepare the data again, or count it with --corpus"
        elif auto_fill(config):
            fill = f"--script-fill (default: auto) keeps up to {more:,} more ids for it; --script-fill 0 does not"
        elif config.script_fill:
            fill = f"--script-fill {config.script_fill} keeps {config.script_fill:,} more ids for it"
        elif config.script_fill == 0:
            fill = (
                f"no fill (--script-fill 0): the default, auto, would keep up to {more:,} more ids for it (its "
                f"scripts' likeliest pieces its counts never show, {AUTO_FILL_IDS:,} ids for it in all)"
            )
        else:
            fill = (
                f"no fill (--coverage, --max-vocab or --per-lang-top-k chose the size): --script-fill {more} would "
                "keep that many more ids for it, its scripts' likeliest pieces its counts never show"
            )
        log.warning(
            "%s: the counting corpus is small for it: about %.2f%% of new text's tokens would need a piece its "
            "counts never show (%s of its %s ids seen once in %s tokens; small: over %.1f%%), so text it does not "
            "hold tokenises differently after the trim, whatever the coverage; %s",
            lang,
            100 * info.share,
            f"{info.once:,}",
            f"{info.distinct:,}",
            f"{info.tokens:,}",
            100 * SMALL_UNSEEN_SHARE,
            fill,
        )


def need_per_language(config, found) -> None:
    """--per-lang-top-k and --script-fill need per-language counts: an error when only pooled counts exist (the
    default fill is then off, and a warning says the figures are pooled)."""
    flags = [
        flag
        for flag, on in (
            ("--per-lang-top-k", config.per_lang_top_k is not None),
            ("--script-fill", bool(config.script_fill)),
        )
        if on
    ]
    if found.per_language is not None:
        return
    if flags:
        raise DataError(
            f"{' and '.join(flags)} need{'s' if len(flags) == 1 else ''} per-language counts, but --data "
            f"{found.path} holds only pooled counts ({TOKEN_COUNTS}: {found.pooled_only}); run "
            "`mlminilm prepare` again to get its shards, or count a corpus with --corpus"
        )
    log.warning(
        "--data %s: %s, so only its pooled counts are known: no per-language figures, no default --script-fill, "
        "and the scripts of --script-chars are those of all languages together",
        found.path,
        found.pooled_only,
    )
