"""The language registry: every TOML file is well formed and the benchmark sets match the published ones."""

from __future__ import annotations

import re
import sys
from importlib import resources

import pytest

from mlminilm import langs
from mlminilm.errors import DataError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# ISO 15924 names (the part before any parenthesis, as the first 21 files wrote them), and Hant's full name.
SCRIPTS = {
    "Latin",
    "Cyrillic",
    "Greek",
    "Arabic",
    "Devanagari",
    "Thai",
    "Han",
    "Bengali",
    "Hangul",
    "Telugu",
    "Armenian",
    "Ethiopic",
    "Georgian",
    "Gujarati",
    "Gurmukhi",
    "Hebrew",
    "Japanese",
    "Kannada",
    "Khmer",
    "Lao",
    "Malayalam",
    "Myanmar",
    "Oriya",
    "Sinhala",
    "Tamil",
    "Han (Traditional variant)",
}
TOP_LEVEL_KEYS = {"code": str, "name": str, "script": str, "benchmarks": list, "iso639_3": str, "spaces": bool}
OPTIONAL_KEYS = {"mlqa": dict, "variant_of": str}
# Tatoeba's ISO 639-3 file codes of the first 21 languages (LASER / XTREME spell Chinese "cmn" and Swahili "swh"):
# kept exactly.
ISO639_3 = {
    "ar": "ara",
    "bg": "bul",
    "bn": "ben",
    "de": "deu",
    "el": "ell",
    "en": "eng",
    "es": "spa",
    "fi": "fin",
    "fr": "fra",
    "hi": "hin",
    "id": "ind",
    "ko": "kor",
    "ro": "ron",
    "ru": "rus",
    "sw": "swh",
    "te": "tel",
    "th": "tha",
    "tr": "tur",
    "ur": "urd",
    "vi": "vie",
    "zh": "cmn",
}
MLQA_KEYS = {"article_pattern": str, "segmentation": str}

XNLI = "ar bg de el en es fr hi ru sw th tr ur vi zh".split()
MLQA = "ar de en es hi vi zh".split()
XQUAD = "ar de el en es hi ro ru th tr vi zh".split()
TYDIQA = "ar bn en fi id ko ru sw te".split()

# The official MLQA scorer's article patterns (mlqa_evaluation_v1.py), verbatim.
MLQA_ARTICLES = {
    "en": r"\b(a|an|the)\b",
    "es": r"\b(un|una|unos|unas|el|la|los|las)\b",
    "de": r"\b(ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b",
    "vi": r"\b(của|là|cái|chiếc|những)\b",
    "ar": r"\sال^|ال",
    "hi": None,
    "zh": None,
}


def _toml_files():
    return sorted(
        (entry for entry in resources.files("mlminilm.langs").iterdir() if entry.name.endswith(".toml")),
        key=lambda entry: entry.name,
    )


@pytest.mark.parametrize("entry", _toml_files(), ids=lambda entry: entry.name)
def test_toml_file_is_well_formed(entry):
    data = tomllib.loads(entry.read_text(encoding="utf-8"))
    assert set(TOP_LEVEL_KEYS) <= set(data) <= set(TOP_LEVEL_KEYS) | set(OPTIONAL_KEYS)
    if data["code"] in ISO639_3:
        assert data["iso639_3"] == ISO639_3[data["code"]]
    for key, kind in {**TOP_LEVEL_KEYS, **OPTIONAL_KEYS}.items():
        assert key not in data or isinstance(data[key], kind), key
    assert data["code"] == entry.name.removesuffix(".toml")
    assert data["script"] in SCRIPTS
    assert data["benchmarks"] and set(data["benchmarks"]) <= set(langs.BENCHMARKS)
    assert len(set(data["benchmarks"])) == len(data["benchmarks"])
    assert data["benchmarks"] == [b for b in langs.BENCHMARKS if b in data["benchmarks"]]  # one order everywhere

    if "mlqa" not in data:
        assert data["code"] not in ISO639_3  # the first 21 languages all keep their MLQA rules
        return
    mlqa = data["mlqa"]
    assert set(mlqa) <= set(MLQA_KEYS) and "segmentation" in mlqa
    for key, value in mlqa.items():
        assert isinstance(value, MLQA_KEYS[key]), key
    assert mlqa["segmentation"] in langs.SEGMENTATIONS
    if "article_pattern" in mlqa:
        re.compile(mlqa["article_pattern"])
        assert "mlqa" in data["benchmarks"]


def test_every_benchmark_language_is_registered():
    assert len(_toml_files()) == len(langs.all_languages())
    assert set(XNLI + MLQA + XQUAD + TYDIQA) <= set(langs.all_languages())


@pytest.mark.parametrize("benchmark, expected", [("xnli", XNLI), ("mlqa", MLQA), ("xquad", XQUAD), ("tydiqa", TYDIQA)])
def test_benchmark_languages(benchmark, expected):
    assert langs.benchmark_languages(benchmark) == sorted(expected)


def test_mlqa_normalisation_rules_are_the_official_ones():
    for code, pattern in MLQA_ARTICLES.items():
        language = langs.get_language(code)
        assert language.article_pattern == pattern, code
        assert language.segmentation == ("mixed" if code == "zh" else "whitespace"), code
    for code, language in langs.all_languages().items():
        if code in ISO639_3 and code not in MLQA_ARTICLES:  # XQuAD / TyDiQA extras: the scorer's default branch
            assert language.article_pattern is None and language.segmentation == "whitespace", code
        elif code not in ISO639_3:  # languages added later have no MLQA rules (the scorer refuses them)
            assert language.article_pattern is None and language.segmentation is None, code
            assert not language.has_mlqa_rules


def test_language_record():
    de = langs.get_language("de")
    assert de == langs.Language(
        code="de",
        name="German",
        script="Latin",
        benchmarks=("xnli", "mlqa", "xquad", "cc100", "xtreme", "tatoeba"),
        article_pattern=MLQA_ARTICLES["de"],
        segmentation="whitespace",
        iso639_3="deu",
        spaces=True,
        variant_of=None,
    )
    assert de.has_mlqa_rules
    assert re.sub(de.article_pattern, " ", "das Haus des Mannes").split() == ["Haus", "Mannes"]


def test_unknown_code_lists_the_known_ones():
    with pytest.raises(DataError, match=r"unknown language 'xx'; known: af, am, ang, ar, .*zh, zh-Hant$"):
        langs.get_language("xx")


def test_validate_codes_reports_every_unknown_code_at_once():
    langs.validate_codes(["de", "zh"])
    with pytest.raises(DataError) as info:
        langs.validate_codes(["de", "yy", "xx"])
    message = str(info.value)
    assert message.startswith("unknown languages 'xx', 'yy'; known: af, am")
    assert "\n" not in message


def test_unknown_benchmark():
    with pytest.raises(DataError, match="known: xnli, mlqa, xquad, tydiqa, cc100, xtreme, tatoeba"):
        langs.benchmark_languages("squad")
