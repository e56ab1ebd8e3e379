"""The pre-tokenised text detector, and `prepare`'s one warning per word-split language."""

from __future__ import annotations

import json
import logging
from itertools import islice
from pathlib import Path

import pytest

from mlminilm.config import PrepareConfig
from mlminilm.corpus import prepare
from mlminilm.corpus.pretokenised import TextShape

RUNNING = {
    "zh": ["北京大学是中国的一所综合性大学，位于北京市海淀区。", "我们每天早上去公园散步，她在读一本关于旧船的书。"],
    "th": ["ฉันชอบกินข้าวผัดมาก วันนี้อากาศดีมาก", "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย"],
    "en": ["The city (population 5,000) lies on the river, near Rome.", 'She said: "I\'m home." Then she left!'],
    # French spaces ; : ! ? and the inside of « »; commas and full stops stay attached, and they are the majority.
    "fr": [
        "Il a dit : « Je viens demain » ; elle a répondu, sans hésiter, qu'elle partirait à midi, après le repas.",
        "Le chat dort sur le tapis, près de la fenêtre, et le chien, lui, court dans le jardin du voisin.",
        "Pourquoi pas ? Nous irons à la plage, puis au marché, et nous rentrerons vers six heures.",
    ],
}


def _shape(lines: list[str], repeat: int = 30) -> TextShape:
    shape = TextShape()
    for line in lines * repeat:
        shape.add(line)
    return shape


def _spaced(line: str) -> str:
    return " ".join(line.replace(" ", ""))


@pytest.mark.parametrize("lang", sorted(RUNNING))
def test_running_text_is_not_flagged(lang):
    assert _shape(RUNNING[lang]).verdict() is None


@pytest.mark.parametrize("lang", ["zh", "th"])
def test_characters_split_by_spaces_are_flagged(lang):
    reason = _shape([_spaced(line) for line in RUNNING[lang]]).verdict()
    assert reason is not None and "CJK/Thai characters are separated by spaces" in reason


def test_punctuation_split_off_every_word_is_flagged():
    lines = [
        "The city ( population 5,000 ) lies on the river , near Rome .",
        'She said : " I \'m home . " Then she left !',
    ]
    reason = _shape(lines).verdict()
    assert reason is not None and "punctuation marks have spaces on both sides" in reason


def test_too_little_evidence_says_nothing():
    # One spaced Chinese name in English text is no reason to warn.
    assert _shape(["He met 王 小 明 in Paris , she said ."], repeat=3).verdict() is None


def test_the_sample_is_capped():
    shape = TextShape(max_lines=5, max_chars=1_000)
    for _ in range(10):
        shape.add("北 京 大 学")
    assert (shape.lines, shape.full) == (5, True)
    shape = TextShape(max_lines=100, max_chars=12)
    shape.add("x" * 10)
    shape.add("y" * 10)
    assert shape.chars == 12 and shape.full


# --- prepare: one warning per word-split language, recorded in the manifest -----------------------------------


def test_prepare_warns_once_for_a_word_split_language(tiny_wordpiece_dir, make_lines, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    # More lines than the detector's sample, in many batches: it judges zh early and must still warn only once.
    (corpus / "zh.txt").write_text("\n".join(make_lines("zh", 2_500)) + "\n", encoding="utf-8")  # word-split
    (corpus / "en.txt").write_text("\n".join(make_lines("en", 300)) + "\n", encoding="utf-8")  # running
    monkeypatch.setattr(prepare, "BATCH_DOCUMENTS", 300)
    out = tmp_path / "out"
    # A handler of our own on the package logger: caplog's handling depends on propagation, which `mlog.setup`
    # changes, and on the pytest version (some attach to the named logger too, so a record would count twice).
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    package = logging.getLogger("mlminilm")
    package.addHandler(handler)
    try:
        config = PrepareConfig(teacher=str(tiny_wordpiece_dir), inputs=(str(corpus),), out=out, seq_len=32, workers=1)
        prepare.run(config)
    finally:
        package.removeHandler(handler)
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("zh: the text looks pre-tokenised (") and "wikiann" in warnings[0]
    languages = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["languages"]
    assert "CJK/Thai characters are separated by spaces" in languages["zh"]["pretokenised"]
    assert languages["en"]["pretokenised"] is None


# --- real data ---------------------------------------------------------------------------------------------


XNLI_LANGS = "ar bg de el en es fr hi ru sw th tr ur vi zh".split()


def _verdict(lines) -> str | None:
    shape = TextShape()
    for line in islice((line for line in lines if line.strip()), shape.max_lines):
        shape.add(line.rstrip("\r\n"))
    return shape.verdict()


def _file_lines(path: Path):
    with open(path, encoding="utf-8") as f:
        yield from f


@pytest.mark.realdata
def test_real_word_split_corpora_warn_and_xnli_premises_do_not(shared_data):
    for lang in ("zh", "th"):
        reason = _verdict(_file_lines(shared_data / "corpus" / "wikiann" / f"{lang}.txt"))
        assert reason and "CJK/Thai" in reason, lang
    # Every UD language, and every wikiann one but Urdu (whose wikiann keeps "،" on its word), also split punctuation.
    for source, exempt in (("ud", ()), ("wikiann", ("ur",))):
        for path in sorted((shared_data / "corpus" / source).glob("*.txt")):
            if path.stem not in exempt:
                assert _verdict(_file_lines(path)), f"{source} {path.stem}"
    for lang in XNLI_LANGS:
        premises = (line.split("\t")[0] for line in _file_lines(shared_data / "xnli" / f"dev-{lang}.tsv"))
        assert _verdict(premises) is None, f"xnli {lang}"
