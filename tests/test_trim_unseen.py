"""A counting corpus that is small for a language (issue 55, item 3): the Good-Turing share of new text's tokens
that its counts never show, one warning per small language saying what --script-fill keeps (or would), the summary
calling its coverage that of the counting corpus, and the default --script-fill (auto) that fills a small
language's list to AUTO_FILL_IDS ids and leaves a language with enough text alone."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import sample_lines

from helpers import run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _table():
    """Hand-made counts over ids 0-9 (0 is the special token)."""
    en = [100, 50, 40, 30, 1, 0, 0, 0, 0, 0]
    sw = [10, 0, 0, 1, 0, 3, 2, 2, 0, 0]
    return {"en": en, "sw": sw}, [a + b for a, b in zip(en, sw)]


def test_the_default_fill_keeps_the_first_ids_of_each_small_languages_list():
    """Worked by hand. sw's list: its counted ids by count (5, 6, 7, 3), then its ranking (9, 1, 8); en's: 1, 2, 3,
    4, then 8, 9, 7. Every counted id is kept already (the pooled rule at coverage 1)."""
    from mlminilm.vocab.counts import select_ids

    per_language, pooled = _table()
    rankings = {"en": [8, 9, 7], "sw": [9, 1, 8]}
    # sw's first 6: 5, 6, 7, 3, 9, 1: only 9 is new; en is not filled (not named).
    chosen = select_ids(pooled, {0}, per_language=per_language, fill_rankings=rankings, fill_to={"sw": 6})
    assert chosen.old_ids.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 9] and chosen.added["script_fill"] == 1
    # en's first 5 add 8; sw's first 8 (its whole list of 7) add 9 and 8 again: two ids in all.
    chosen = select_ids(pooled, {0}, per_language=per_language, fill_rankings=rankings, fill_to={"sw": 8, "en": 5})
    assert chosen.old_ids.tolist() == list(range(10)) and chosen.added["script_fill"] == 2
    # Not filled at all: the counted ids.
    assert select_ids(pooled, {0}, per_language=per_language).old_ids.tolist() == [0, 1, 2, 3, 4, 5, 6, 7]


def test_unseen_share_is_the_ids_seen_once_over_the_tokens_counted():
    from mlminilm.vocab import unseen

    per_language, pooled = _table()
    found = SimpleNamespace(per_language={k: np.array(v) for k, v in per_language.items()}, counts=np.array(pooled))
    got = unseen.unseen(found, {0})
    # en: ids 1-4 hold 121 tokens, id 4 once; sw: ids 3, 5, 6, 7 hold 8 tokens, id 3 once.
    assert got["en"] == unseen.Unseen(tokens=121, distinct=4, once=1) and got["en"].share == pytest.approx(1 / 121)
    assert got["sw"] == unseen.Unseen(tokens=8, distinct=4, once=1) and got["sw"].small
    many = SimpleNamespace(per_language={"de": np.array([0, 5000, 3000, 2, 0])}, counts=None)
    assert unseen.unseen(many, {0})["de"].share == 0 and not unseen.unseen(many, {0})["de"].small
    pooled_only = SimpleNamespace(per_language=None, counts=np.array(pooled))
    assert list(unseen.unseen(pooled_only, {0})) == [unseen.POOLED]
    # The default fill: on unless the size was chosen another way or --script-fill given.
    config = SimpleNamespace(script_fill=None, coverage=None, max_vocab=None, per_lang_top_k=None)
    assert unseen.fill_to(config, got, True) == {"en": unseen.AUTO_FILL_IDS, "sw": unseen.AUTO_FILL_IDS}
    assert unseen.fill_to(config, got, False) is None
    for chosen in ({"script_fill": 0}, {"script_fill": 5}, {"max_vocab": 9}, {"coverage": 0.9}, {"per_lang_top_k": 2}):
        assert unseen.fill_to(SimpleNamespace(**{**vars(config), **chosen}), got, True) is None, chosen


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """de: six lines (small: most ids seen once); en: forty lines written thirty times (no id seen once)."""
    root = tmp_path_factory.mktemp("unseen")
    small = root / "small"
    small.mkdir()
    (small / "de.txt").write_text("\n".join(sample_lines("de", 6, seed=3)) + "\n", encoding="utf-8")
    (small / "en.txt").write_text("\n".join(sample_lines("en", 40) * 30) + "\n", encoding="utf-8")
    check = root / "check"
    check.mkdir()
    # German the six counted lines do not hold (their words, in other sentences, and words of their own)
    held_out = sample_lines("de", 30, seed=9) + [
        "Die Katzen schliefen gestern lange auf den alten Teppichen.",
        "Morgens gehen wir selten in die Parks der Stadt.",
        "Sie las Bücher über Schiffe, Häfen und Meere.",
    ]
    (check / "de.txt").write_text("\n".join(held_out) + "\n", encoding="utf-8")
    return small, check


def _trim(monkeypatch, capsys, model, corpus, check, out, *extra):
    args = ("trim", "--model", str(model), "--corpus", str(corpus), "--workers", "1", "--check", str(check))
    code, stdout, stderr = run_main(monkeypatch, capsys, *args, "--out", str(out), *extra)
    assert code == 0, stderr
    warnings = [line for line in stderr.splitlines() if "the counting corpus is small" in line]
    return stdout, warnings, json.loads((out / "trim.json").read_text())


def test_a_small_language_is_warned_about_and_filled_by_default(trim_teachers, corpora, tmp_path, monkeypatch, capsys):
    small, check = corpora
    model = trim_teachers["unigram"]
    stdout, warnings, record = _trim(monkeypatch, capsys, model, small, check, tmp_path / "auto")
    assert len(warnings) == 1 and "de: the counting corpus is small for it" in warnings[0], warnings
    assert "--script-fill (default: auto) keeps up to" in warnings[0] and "--script-fill 0 does not" in warnings[0]
    de, en = record["languages"]["de"], record["languages"]["en"]
    assert de["unseen"]["small_corpus"] and de["unseen"]["script_fill_to"] == 50_000
    assert de["unseen"]["ids_seen_once"] > 0 and de["unseen"]["unseen_share"] > 0.001
    assert en["unseen"] == {**en["unseen"], "ids_seen_once": 0, "small_corpus": False, "script_fill_to": None}
    assert record["options"]["script_fill"] == "auto" and record["rules"]["added"]["script_fill"] > 0
    assert "coverage of the counting corpus 100.0000% of its" in stdout
    assert "the counting corpus is small for de (" in stdout and "--script-fill kept" in stdout

    # --script-fill 0: the same warning, saying what the default would keep; no fill, fewer ids, and held-out
    # German text that the default tokenises exactly as before no longer does.
    stdout, warnings, off = _trim(monkeypatch, capsys, model, small, check, tmp_path / "off", "--script-fill", "0")
    assert len(warnings) == 1 and "no fill (--script-fill 0): the default, auto, would keep up to" in warnings[0]
    assert off["options"]["script_fill"] == 0 and "script_fill" not in off["rules"]["added"]
    assert off["vocab_size"]["after"] + record["rules"]["added"]["script_fill"] == record["vocab_size"]["after"]
    assert "no --script-fill" in stdout
    assert de["held_out"]["equal_share"] == 1.0 > off["languages"]["de"]["held_out"]["equal_share"]

    # Another rule chose the size: no default fill, and the warning says what --script-fill N would keep.
    _, warnings, top = _trim(monkeypatch, capsys, model, small, check, tmp_path / "top", "--per-lang-top-k", "50")
    assert "script_fill" not in top["rules"]["added"] and "chose the size): --script-fill " in warnings[0]


def test_a_language_with_enough_text_is_neither_warned_about_nor_filled(
    trim_teachers, corpora, tmp_path, monkeypatch, capsys
):
    small, check = corpora
    enough = tmp_path / "enough"
    enough.mkdir()
    (enough / "en.txt").write_bytes((small / "en.txt").read_bytes())
    stdout, warnings, record = _trim(monkeypatch, capsys, trim_teachers["unigram"], enough, check, tmp_path / "o")
    assert warnings == [] and "small" not in stdout and "coverage of the counting corpus" in stdout
    assert not record["languages"]["en"]["unseen"]["small_corpus"] and "script_fill" not in record["rules"]["added"]
