"""trim's per-language rules (issue 17, part 2): each language's most frequent ids, the fill, single characters of
the languages' scripts, prompt pieces, the held-out check piece by piece and the per-language figures it reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import sample_lines

from helpers import TRIM_LANGS, covered_texts, prepare_data, trim

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- Per-language rules, single characters, the fill, the held-out check (issue 17, part 2) ------------------------


def _table():
    """A hand-made count table over ids 0-9 (0 is the special token): en is large, sw small."""
    en = [100, 50, 40, 30, 1, 0, 0, 0, 0, 0]
    sw = [10, 0, 0, 1, 0, 3, 2, 2, 0, 0]
    return {"en": en, "sw": sw}, [a + b for a, b in zip(en, sw)]


def test_per_lang_top_k_keeps_each_languages_most_frequent_ids():
    """Worked by hand. Pooled counts (id: count) 1: 50, 2: 40, 3: 31, 5: 3, 6: 2, 7: 2, 4: 1; 129 other tokens."""
    from mlminilm.vocab.counts import select_ids

    per_language, pooled = _table()
    top2 = dict(per_language=per_language, per_lang_top_k=2, coverage=None)
    # en: 1, 2 (id 0 is special: never one of the k); sw: 5, then 6 before 7 (a tie: lower id first).
    chosen = select_ids(pooled, {0}, **top2)
    assert chosen.old_ids.tolist() == [0, 1, 2, 5, 6]
    assert chosen.per_lang_top_k == {"en": 2, "sw": 2} and chosen.added["per_lang_top_k"] == 4
    # The pooled rule alone, with as much room, keeps only en's ids: sw loses every one of its own.
    assert select_ids(pooled, {0}, max_vocab=5).old_ids.tolist() == [0, 1, 2, 3, 5]
    assert select_ids(pooled, {0}, max_vocab=3).old_ids.tolist() == [0, 1, 2]
    # --min-count in each language's own counts: sw's 6 and 7 occur twice, under 3.
    assert select_ids(pooled, {0}, min_count=3, **top2).old_ids.tolist() == [0, 1, 2, 5]


def test_per_lang_top_k_combines_with_the_pooled_rules():
    """Worked by hand: the top-2 ids cover 50 + 40 + 3 + 2 = 95 of 129 tokens."""
    from mlminilm.errors import ConfigError
    from mlminilm.vocab.counts import select_ids

    per_language, pooled = _table()
    top2 = dict(per_language=per_language, per_lang_top_k=2)
    # --coverage 0.5 needs 65 tokens: already covered, the pooled rule adds nothing.
    assert select_ids(pooled, {0}, coverage=0.5, **top2).old_ids.tolist() == [0, 1, 2, 5, 6]
    # --coverage 0.9 needs ceil(116.1) = 117, 22 more: id 3 (31 tokens) is the pooled rule's first id.
    both = select_ids(pooled, {0}, coverage=0.9, **top2)
    assert both.old_ids.tolist() == [0, 1, 2, 3, 5, 6] and both.added["pooled"] == 1
    assert both.covered_tokens == 126 and both.corpus_tokens == 129
    # --max-vocab 7 leaves the pooled rule 2 of its ids (3, then 7 before 4: 2 > 1 occurrences).
    assert select_ids(pooled, {0}, coverage=1.0, max_vocab=7, **top2).old_ids.tolist() == [0, 1, 2, 3, 5, 6, 7]
    with pytest.raises(ConfigError, match="--max-vocab 4 leaves no room.*number 5"):
        select_ids(pooled, {0}, coverage=1.0, max_vocab=4, **top2)


def test_fill_takes_each_languages_next_ids_after_the_count_rules():
    """Each language's list is its counted ids by count, then its ranking of ids it never showed."""
    from mlminilm.vocab.counts import select_ids

    per_language, pooled = _table()
    rankings = {"en": [8, 9, 7], "sw": [9, 1, 8]}
    # Top 1 (en: 1; sw: 5), then 2 more each: en 2, 3; sw 6, 7.
    chosen = select_ids(
        pooled, {0}, per_language=per_language, per_lang_top_k=1, coverage=None, fill=2, fill_rankings=rankings
    )
    assert chosen.old_ids.tolist() == [0, 1, 2, 3, 5, 6, 7] and chosen.added["script_fill"] == 4
    # Every counted id kept (the default pooled rule): en's next are 8, 9; sw's 9 (kept by en), then 8.
    chosen = select_ids(pooled, {0}, per_language=per_language, fill=2, fill_rankings=rankings)
    assert chosen.old_ids.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] and chosen.added["script_fill"] == 2


def test_fill_ranks_pieces_that_look_like_the_language_first():
    from mlminilm.vocab import scripts

    pieces = ["▁schön", "▁qxzv", "▁sch", "ön", "▁schon"]
    counts = np.array([0, 0, 40, 40, 10])
    candidates = np.array([0, 1])
    scores = np.zeros(5)  # the same model score: only the likeness decides
    order = scripts.fill_ranking(counts, pieces, scores, candidates, scripts.script_log_probs(pieces, candidates))
    assert order.tolist() == [0, 1]
    scores[1] = 30.0  # a far more common piece wins anyway
    order = scripts.fill_ranking(counts, pieces, scores, candidates, scripts.script_log_probs(pieces, candidates))
    assert order.tolist() == [1, 0]


def _hand_unigram(path: Path):
    """The hand-built Unigram vocabulary of test_dropped_pieces_fall_back_to_the_best_split_over_kept_pieces."""
    from transformers import AutoTokenizer, XLMRobertaTokenizer

    scores = {"▁abc": -1.0, "▁ab": -2.0, "c": -2.0, "▁a": -3.0, "bc": -0.5, "▁": -3.0, "a": -6.0, "b": -6.0}
    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *scores.items(), ("<mask>", 0.0)]
    XLMRobertaTokenizer(vocab=pieces).save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def test_held_out_sentences_compared_piece_by_piece(tmp_path):
    """Checked by hand with the scores above, '▁abc' dropped: 'abc' was ['▁abc'] and becomes ['▁a', 'bc']; 'ab c'
    stays ['▁ab', '▁', 'c'] and 'a bc' stays ['▁a', '▁', 'bc'] (all their pieces are kept)."""
    from mlminilm.vocab import identity
    from mlminilm.vocab.tokenizer import tokenizer_document, trim_document

    full = _hand_unigram(tmp_path / "full")
    assert full.tokenize("ab c") == ["▁ab", "▁", "c"] and full.tokenize("a bc") == ["▁a", "▁", "bc"]
    doc = tokenizer_document(full, "full")
    dropped = full.convert_tokens_to_ids("▁abc")
    old_ids = [i for i in range(len(full)) if i != dropped]
    trimmed = trim_document(doc, old_ids)
    check = tmp_path / "check"
    check.mkdir()
    (check / "en.txt").write_text("abc\nab c\n\na bc\nb\n", encoding="utf-8")  # the empty line is skipped
    (check / "notes.md").write_text("not a language file")
    files = identity.check_files(check)
    assert list(files) == ["en"]
    result = identity.held_out(files, full, trimmed, old_ids, counted=("en",))["en"]
    assert (result["sentences"], result["equal"], result["tokens"]) == (4, 3, 9)  # 'b' is ['▁', 'b'] both times
    assert result["equal_share"] == pytest.approx(3 / 4) and result["counted"]
    assert result["example"] == {"text": "abc", "original": ["▁abc"], "trimmed": ["▁a", "bc"]}
    # '▁ab', 'a' and 'b' dropped too: only 'a bc' is unchanged. 'b' becomes ['▁', <unk>], which the tokenizer
    # reports with the text 'b': compared by id, it differs.
    old_ids = [i for i in old_ids if full.convert_ids_to_tokens(i) not in ("▁ab", "a", "b")]
    from tokenizers import Tokenizer

    fewer = trim_document(doc, old_ids)
    assert Tokenizer.from_str(json.dumps(fewer)).encode("b", add_special_tokens=False).tokens == ["▁", "b"]
    result = identity.held_out(files, full, fewer, old_ids)["en"]
    assert result["equal"] == 1 and not result["counted"]


def test_corpus_shares_count_kept_tokens_per_language():
    """Worked by hand: en's other tokens are 50 + 40 + 30 + 1 = 121, of which ids 1 and 3 hold 80; sw's 1 + 3 + 2
    + 2 = 8, of which ids 3 and 5 hold 4."""
    from mlminilm.vocab.identity import corpus_shares

    per_language, _ = _table()
    shares = corpus_shares({k: np.array(v) for k, v in per_language.items()}, np.array([0, 1, 3, 5]), np.array([0]))
    assert shares["en"] == {"tokens": 121, "kept_tokens": 80, "kept_share": 80 / 121}
    assert shares["sw"] == {"tokens": 8, "kept_tokens": 4, "kept_share": 0.5}


def _script(ch: str) -> str:
    """The script of a character by its Unicode name (independent of the code under test)."""
    import unicodedata

    if unicodedata.category(ch)[0] not in "LM":  # letters and marks belong to a script
        return "Common"
    name = unicodedata.name(ch, "")
    return "Han" if name.startswith("CJK") else name.split(" ")[0].capitalize()


def test_script_chars_keep_every_single_character_of_the_languages_scripts(trim_teachers, tiny_corpus_dir, tmp_path):
    """The tiny corpus is en, de, ar, zh: Latin, Arabic and Han single characters stay, Cyrillic, Greek and
    Devanagari ones (ru, el, hi: never counted) go, unless counted."""
    from transformers import AutoTokenizer

    teacher = trim_teachers["unigram"]
    before = AutoTokenizer.from_pretrained(teacher)
    with_chars = trim(teacher, tmp_path / "chars", corpus=tiny_corpus_dir).record
    without = trim(teacher, tmp_path / "plain", corpus=tiny_corpus_dir, script_chars=False).record
    singles = {
        i: p.removeprefix("▁")
        for i, p in enumerate(before.convert_ids_to_tokens(range(len(before))))
        if len(p.removeprefix("▁")) == 1 and i not in with_chars["special_ids"]
    }
    wanted = {i for i, ch in singles.items() if _script(ch) in ("Latin", "Arabic", "Han", "Common")}
    other = {i for i, ch in singles.items() if _script(ch) in ("Cyrillic", "Greek", "Devanagari")}
    assert wanted and other
    kept = set(with_chars["old_ids"])
    assert wanted <= kept, {singles[i] for i in wanted - kept}
    assert not (other & kept), {singles[i] for i in other & kept}
    assert not wanted <= set(without["old_ids"])  # some were never counted: the option is what keeps them
    assert with_chars["rules"]["added"]["script_chars"] == len(wanted - set(without["old_ids"]))
    assert {with_chars["languages"][lang]["scripts"][0] for lang in TRIM_LANGS} == {"Latin", "Arabic", "Han"}
    # A word of those characters the corpus never had: no <unk> with the option, some without it.
    word = "".join(singles[i] for i in sorted(wanted - set(without["old_ids"]))[:6] if singles[i].isalpha())
    assert word
    assert "<unk>" not in AutoTokenizer.from_pretrained(tmp_path / "chars").tokenize(word)


def test_prompt_pieces_are_kept(trim_teachers, tiny_corpus_dir, tmp_path):
    """A sentence-transformers prompt the corpus never shows (Russian, with an en/de corpus) keeps its pieces."""
    import shutil

    from transformers import AutoTokenizer

    model = tmp_path / "st"
    shutil.copytree(trim_teachers["unigram"], model)
    prompt = "Кошка спит "
    (model / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": prompt}}))
    result = trim(model, tmp_path / "trimmed", corpus=tiny_corpus_dir, langs=("en", "de"), script_chars=False)
    before, after = AutoTokenizer.from_pretrained(model), AutoTokenizer.from_pretrained(result.out)
    pieces = before.tokenize(prompt)
    never_counted = set(pieces) - set(before.tokenize(" ".join(covered_texts())))
    assert before.unk_token not in pieces and never_counted
    assert result.record["prompt_pieces"] == sorted(set(pieces), key=before.convert_tokens_to_ids)
    assert after.tokenize(prompt + "The cat") == before.tokenize(prompt + "The cat")
    assert result.record["rules"]["added"]["prompts"] >= len(never_counted)


def test_trim_reports_per_language_figures(trim_teachers, tiny_corpus_dir, tmp_path):
    """--per-lang-top-k and --check through `run`, counts from a prepare output (its shards) as from the corpus."""
    teacher = trim_teachers["unigram"]
    check = tmp_path / "check"
    check.mkdir()
    counted = [line for line in covered_texts() if line]  # words the corpus has: every piece counted
    (check / "en.txt").write_text("\n".join(counted[:15]) + "\n", encoding="utf-8")
    (check / "ru.txt").write_text("\n".join(sample_lines("ru", 5)) + "\n", encoding="utf-8")
    data = prepare_data(teacher, tiny_corpus_dir, tmp_path / "data")
    options = dict(per_lang_top_k=5, script_chars=False, check=check)
    from_data = trim(teacher, tmp_path / "a", data=data, **options).record
    from_corpus = trim(teacher, tmp_path / "b", corpus=tiny_corpus_dir, **options).record
    assert from_data["old_ids"] == from_corpus["old_ids"]
    languages = from_corpus["languages"]
    assert set(languages) == {*TRIM_LANGS, "ru"}
    assert {lang: languages[lang]["per_lang_top_k"] for lang in TRIM_LANGS} == dict.fromkeys(TRIM_LANGS, 5)
    for lang in TRIM_LANGS:  # the top 5 cover part of each language's tokens
        assert 0 < languages[lang]["corpus"]["kept_share"] < 1
        assert languages[lang]["corpus"] == from_data["languages"][lang]["corpus"]
    assert languages["en"]["held_out"]["counted"] and not languages["ru"]["held_out"]["counted"]
    assert languages["ru"]["held_out"]["equal"] == 0  # no Cyrillic piece is kept
    full = trim(teacher, tmp_path / "c", corpus=tiny_corpus_dir, check=check).record["languages"]
    assert full["en"]["held_out"]["equal"] == full["en"]["held_out"]["sentences"] == 15
    assert full["en"]["corpus"]["kept_share"] == 1.0
