"""The MLQA scorer: exact match and F1 with the official `mlqa_evaluation_v1.py` normalisation, offline.

Normalisation is `white_space_fix(remove_articles(remove_punc(lower(s)), lang), lang)`:

- `remove_punc` deletes every character whose Unicode category starts with "P" and every character of
  `string.punctuation` (so ASCII `$+<=>^`|~` go too, while non-ASCII symbols such as "€" or "°" stay);
- `remove_articles` replaces each match of the language's article regex with a space. The regexes live in the
  language registry (`langs/*.toml`), copied verbatim from the official script, quirks included: the Arabic
  pattern `\\sال^|ال` removes every "ال", even inside a word ("قال" -> "ق");
- `white_space_fix` splits on whitespace, or for "mixed" segmentation (zh) makes every character in
  U+4E00-U+9FA5 (and every punctuation character) a token of its own.

Which language to pass: the official usage is `mlqa_evaluation_v1.py dataset_file prediction_file
answer_language`, and the answer language is the CONTEXT language (answers are spans of the context). For
`dev-context-zh-question-en.json` score with "zh", whatever the question language.

Languages the official script does not know (XQuAD / TyDiQA extras such as ru or fi, where it raises) are scored
with the rules of their registry file's [mlqa] table (for those extras: no article pattern, whitespace tokens). A
language without such a table, or a code the registry does not know, is refused before any scoring
(`require_rules`): normalisation depends on the language, and guessing would make scores that are not comparable.

The scorer is plain functions, not an `evaluate` module: `evaluate.load` fetches its metric scripts from the Hub,
which an offline run cannot reach.
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections.abc import Iterable, Mapping

from mlminilm.errors import DataError
from mlminilm.langs import MLQA_NEEDS, all_languages, get_language, validate_codes
from mlminilm.metrics.qa_aggregate import aggregate, dataset_questions, token_f1

__all__ = [
    "require_rules",
    "normalize_answer",
    "exact_match",
    "f1",
    "score_prediction",
    "evaluate_dataset",
    "evaluate_questions",
]

_ASCII_PUNCTUATION = frozenset(string.punctuation)
# The official mixed segmentation tests `re.search(r'[\u4e00-\u9fa5]', char)`: the CJK Unified Ideographs block
# as of 2019, so later additions (U+9FA6-U+9FFF) and Extension A (U+3400...) are NOT split apart.
_CJK_FIRST, _CJK_LAST = "\u4e00", "\u9fa5"


def _is_punctuation(char: str) -> bool:
    # Equivalent to the official precomputed PUNCT set (categories P* over range(sys.maxunicode), plus
    # string.punctuation): the only code point that range leaves out, U+10FFFF, is unassigned (Cn) anyway.
    return char in _ASCII_PUNCTUATION or unicodedata.category(char).startswith("P")


def _remove_punctuation(text: str) -> str:
    return "".join(char for char in text if not _is_punctuation(char))


def require_rules(langs: Iterable[str]) -> None:
    """One DataError naming every language the scorer cannot normalise: codes the registry does not know, and
    registered languages whose file has no [mlqa] table."""
    langs = sorted(set(langs))
    validate_codes(langs, MLQA_NEEDS)
    without = [lang for lang in langs if not get_language(lang).has_mlqa_rules]
    if without:
        having = ", ".join(code for code, language in all_languages().items() if language.has_mlqa_rules)
        files = ", ".join(f"langs/{lang}.toml" for lang in without)
        raise DataError(
            f"{files} {'has' if len(without) == 1 else 'have'} no [mlqa] table: "
            "MLQA normalisation needs the language's rules (article_pattern, segmentation); "
            f"languages with rules: {having}"
        )


@functools.cache
def _article_regex(lang: str) -> re.Pattern[str] | None:
    require_rules([lang])
    pattern = get_language(lang).article_pattern
    # Compiled with no flags, as `re.sub(pattern, ' ', text)` in the official script.
    return re.compile(pattern) if pattern else None


def _mixed_segmentation(text: str) -> list[str]:
    """The official algorithm: walk the characters, flushing the pending run (whitespace-split) before every
    CJK or punctuation character, which becomes a token of its own."""
    tokens: list[str] = []
    pending = ""
    for char in text:
        if _CJK_FIRST <= char <= _CJK_LAST or _is_punctuation(char):
            tokens.extend(pending.split())
            pending = ""
            tokens.append(char)
        else:
            pending += char
    tokens.extend(pending.split())
    return tokens


def normalize_answer(text: str, lang: str) -> str:
    """Lower-case, delete punctuation, replace articles by spaces, re-tokenise, join with single spaces."""
    text = _remove_punctuation(text.lower())
    articles = _article_regex(lang)
    if articles is not None:
        text = articles.sub(" ", text)
    if get_language(lang).segmentation == "mixed":
        tokens = _mixed_segmentation(text)
    else:
        tokens = text.split()
    return " ".join(token for token in tokens if token.strip())


def exact_match(prediction: str, gold: str, lang: str) -> float:
    """1.0 when the normalised strings are equal (so "" against "" is a match), else 0.0."""
    return float(normalize_answer(prediction, lang) == normalize_answer(gold, lang))


def f1(prediction: str, gold: str, lang: str) -> float:
    """Bag-of-tokens F1 of the normalised token lists; 0.0 when they share no token (two empty lists included)."""
    predicted = normalize_answer(prediction, lang).split()
    expected = normalize_answer(gold, lang).split()
    return token_f1(predicted, expected)


def score_prediction(prediction: str, golds: Iterable[str], lang: str) -> tuple[float, float]:
    """(exact match, F1) of one prediction: the maximum of each over the gold answers."""
    golds = list(golds)
    if not golds:
        raise DataError("a question has no gold answer; the MLQA scorer needs at least one per question")
    return (
        max(exact_match(prediction, gold, lang) for gold in golds),
        max(f1(prediction, gold, lang) for gold in golds),
    )


def evaluate_questions(
    questions: Iterable[tuple[str, list[str]]], predictions: Mapping[str, str], lang: str
) -> dict[str, float | int]:
    """Score `(question id, gold answer texts)` pairs against `predictions` (id -> answer text).

    Returns exact_match and f1 in percent over all questions, `examples` (questions scored) and `missing`
    (questions without a prediction: they score 0, as in the official script)."""
    return aggregate(questions, predictions, lambda prediction, golds: score_prediction(prediction, golds, lang))


def evaluate_dataset(dataset: Mapping | list, predictions: Mapping[str, str], lang: str) -> dict[str, float | int]:
    """Score a SQuAD-format dataset (the parsed JSON, or its `data` list) as `mlqa_evaluation_v1.py` does.

    `lang` is the answer language, i.e. the CONTEXT language of the file (see the module docstring).
    Returns {"exact_match": %, "f1": %, "examples": n, "missing": n}."""
    require_rules([lang])  # an unknown code, or a language without rules, fails before any scoring
    return evaluate_questions(dataset_questions(dataset), predictions, lang)
