"""`distill --passages` on plain documents (issue 51 part 1): the sentence rule per script, the greedy packing by
tokens against a hand-worked example and against the teacher's tokenizer run on each whole passage, the inverse
cloze pairs (the question is one of its passage's sentences, taken out, drawn by the seed), the reader's files side
by side with pairs files and its refusals, and a tiny run that records what it made."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import sample_lines

from helpers import TINY_STUDENT, assert_error, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize(
    "document, sentences",
    [
        ("One here. Two there? Three! Four… five", ["One here.", "Two there?", "Three!", "Four…", "five"]),
        ("No end", ["No end"]),
        ("3.14 is pi. e.g.it stays", ["3.14 is pi.", "e.g.it stays"]),  # a full stop without a space splits nothing
        ("我很好。你呢？好的！", ["我很好。", "你呢？", "好的！"]),
        ("สวัสดีครับ วันนี้อากาศดี", ["สวัสดีครับ", "วันนี้อากาศดี"]),
        ("ไทย hello world", ["ไทย hello world"]),  # a space between Thai and Latin letters is no sentence end
        ("यह एक है। यह दो है॥ तीन", ["यह एक है।", "यह दो है॥", "तीन"]),
        ("هل هذا؟ نعم.", ["هل هذا؟", "نعم."]),
        ("  ", []),
    ],
)
def test_sentences_by_the_stated_rule(document, sentences):
    from mlminilm.corpus.documents import sentences_of

    assert sentences_of(document) == sentences


def test_packing_by_hand():
    from mlminilm.corpus.documents import pack

    # budget 6: [3, 3] fills it; 3 then 10 would not fit, 10 alone is over and stands alone; 1 + 1 fit.
    assert pack([3, 3, 3, 10, 1, 1], 6) == [range(0, 2), range(2, 3), range(3, 4), range(4, 6)]
    assert pack([], 6) == []
    assert pack([7], 6) == [range(0, 1)]


def _rule(tokenizer_dir, max_length=24, prompt="passage: ", seed=0):
    from transformers import AutoTokenizer

    from mlminilm.corpus.documents import DocumentRule

    return DocumentRule(AutoTokenizer.from_pretrained(tokenizer_dir), max_length, prompt, seed)


def _documents(n=12, lang="de", per=6, seed=0) -> list[str]:
    lines = sample_lines(lang, n * per, seed=seed)
    return [" ".join(line.rstrip(".!?") + "." for line in lines[i * per : (i + 1) * per]) for i in range(n)]


def test_pairs_are_cloze_pairs_of_greedy_passages_within_the_limit(tiny_wordpiece_dir):
    from mlminilm.corpus.documents import pairs_from_documents, sentences_of

    rule = _rule(tiny_wordpiece_dir, max_length=40)
    documents = _documents()
    made = pairs_from_documents(documents, "de", rule, "--passages x")

    def fits(sentences):  # the teacher's tokens of a whole passage under its prompt, special tokens included
        return len(rule.tokenizer(rule.prompt + " ".join(sentences))["input_ids"]) <= rule.max_length

    # The passages by the rule, computed independently: grow each while the whole passage still fits.
    runs = []
    for doc in documents:
        sentences, start = sentences_of(doc), 0
        while start < len(sentences):
            stop = start + 1
            while stop < len(sentences) and fits(sentences[start : stop + 1]):
                stop += 1
            runs.append(sentences[start:stop])
            start = stop
    runs = [run for run in runs if len(run) >= 2]
    assert len(runs) == len(made.questions) >= 12 and made.documents == len(documents)
    for run, question, passage in zip(runs, made.questions, made.passages):
        assert fits(run)
        assert question in run  # one of its sentences, taken out
        assert passage == " ".join(s for s in run if s != question)


def test_the_draw_follows_the_seed_and_nothing_else(tiny_wordpiece_dir):
    from mlminilm.corpus.documents import pairs_from_documents

    documents = _documents()
    one = pairs_from_documents(documents, "de", _rule(tiny_wordpiece_dir, seed=1), "x")
    again = pairs_from_documents(documents, "de", _rule(tiny_wordpiece_dir, seed=1), "x")
    other = pairs_from_documents(documents, "de", _rule(tiny_wordpiece_dir, seed=2), "x")
    assert (one.questions, one.passages) == (again.questions, again.passages)
    assert one.questions != other.questions


def test_one_sentence_passages_give_no_pair_and_are_counted(tiny_wordpiece_dir):
    from mlminilm.corpus.documents import pairs_from_documents

    made = pairs_from_documents(["Just one sentence here", "A. B."], "en", _rule(tiny_wordpiece_dir), "x")
    assert made.single == 1 and made.questions in (["A."], ["B."]) and made.documents == 2


def test_a_prompt_that_leaves_no_room_is_refused(tiny_wordpiece_dir):
    from mlminilm.corpus.documents import pairs_from_documents
    from mlminilm.errors import DataError

    with pytest.raises(DataError, match="--passage-max-length 4 leaves no token"):
        pairs_from_documents(["A. B."], "en", _rule(tiny_wordpiece_dir, max_length=4), "--passages x")


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "de.txt").write_text("\n".join(_documents()) + "\n", encoding="utf-8")
    with gzip.open(folder / "fr.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(_documents(6, "fr")) + "\n")
    q, p = sample_lines("en", 1)[0], sample_lines("en", 1, seed=3)[0]
    (folder / "en.tsv").write_text(f"{q}?\t{p}\n", encoding="utf-8")
    return folder


def test_documents_and_pairs_files_side_by_side(tiny_wordpiece_dir, tmp_path):
    from mlminilm.corpus.passages import passages_record, read_passages

    folder = _folder(tmp_path)
    pairs = read_passages(folder, _rule(tiny_wordpiece_dir))
    counts = pairs.lang_counts()
    assert counts["en"] == 1 and counts["de"] >= 12 and counts["fr"] >= 6
    assert pairs.documents == 18
    record = passages_record(pairs)
    assert record["documents"] == 18 and record["pairs"] == len(pairs)
    # the digest changes with the rule's length: a resumed run with another --passage-max-length is told
    longer = passages_record(read_passages(folder, _rule(tiny_wordpiece_dir, max_length=60)))
    assert longer["digest"] != record["digest"]


def test_a_documents_line_with_a_tab_is_refused_naming_the_line(tiny_wordpiece_dir, tmp_path):
    from mlminilm.corpus.passages import read_passages
    from mlminilm.errors import DataError

    (tmp_path / "ar.txt").write_text("One. Two.\nA question?\tits passage\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"ar.txt, line 2: holds a tab.*pairs go in ar.tsv"):
        read_passages(tmp_path / "ar.txt", _rule(tiny_wordpiece_dir))


def test_documents_of_single_sentences_only_are_refused(tiny_wordpiece_dir, tmp_path):
    from mlminilm.corpus.passages import read_passages
    from mlminilm.errors import DataError

    (tmp_path / "ar.txt").write_text("no full stop at all\nnor here\n", encoding="utf-8")
    with pytest.raises(DataError, match="2 passage.s. of documents held one sentence"):
        read_passages(tmp_path / "ar.txt", _rule(tiny_wordpiece_dir))


def test_a_run_on_documents_records_what_it_made(monkeypatch, capsys, st_teacher, tmp_path):
    folder = _folder(tmp_path)
    args = [
        "distill", "--teacher", str(st_teacher), "--out", str(tmp_path / "run"), *TINY_STUDENT, "--batch-size", "4",
        "--relation-loss-weight", "0", "--hidden-loss-weight", "0", "--embedding-loss-weight", "0",
        "--device", "cpu", "--passages", str(folder),
    ]  # fmt: skip
    code, _, err = run_main(monkeypatch, capsys, *args, "--passage-max-length", "48", "--max-steps", "2")
    assert code == 0, err
    record = json.loads((tmp_path / "run" / "run.json").read_text())["passage_pairs"]
    assert record["documents"] == 18 and set(record["languages"]) == {"de", "en", "fr"}
    assert "18 documents cut into passages of at most 48 tokens" in err
    # another --passage-max-length makes other passages: --resume refuses it
    again = run_main(monkeypatch, capsys, *args, "--passage-max-length", "40", "--max-steps", "2", "--resume")
    assert_error(again, "passage_max_length: 48 -> 40")


# ------------------------------------------------------------------------------------------ SQuAD-format files


def _squad(path: Path, rows: list[tuple[str, str]]) -> Path:
    qa = [[{"id": f"q{i}", "question": q, "answers": []}] for i, (q, _) in enumerate(rows)]
    articles = [{"paragraphs": [{"context": c, "qas": qas}]} for (_, c), qas in zip(rows, qa)]
    path.write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")
    return path


def test_squad_files_give_each_question_with_its_context(tmp_path):
    from mlminilm.corpus.passages import read_passages

    _squad(tmp_path / "tydiqa.goldp.ar.dev.json", [("Q1?", "C one."), ("Q2?", "C two.")])
    _squad(tmp_path / "de.json", [("Wer?", "Er.")])
    (tmp_path / "fr.tsv").write_text("Qui ?\tLui.\n", encoding="utf-8")
    pairs = read_passages(tmp_path)
    assert list(zip(pairs.questions, pairs.passages, pairs.langs)) == [
        ("Wer?", "Er.", "de"), ("Qui ?", "Lui.", "fr"), ("Q1?", "C one.", "ar"), ("Q2?", "C two.", "ar"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "name, needle",
    [
        ("dev-context-de-question-en.json", "questions in en and passages in de"),
        ("squad.json", "named by its language code .* not 'squad.json'"),
    ],
)
def test_squad_files_whose_language_is_not_one_are_refused(tmp_path, name, needle):
    from mlminilm.corpus.passages import read_passages
    from mlminilm.errors import DataError

    _squad(tmp_path / name, [("Q?", "C.")])
    with pytest.raises(DataError, match=needle) as caught:
        read_passages(tmp_path / name)
    assert str(caught.value).startswith("--passages ")


def test_a_squad_file_that_is_not_squad_is_one_error(tmp_path):
    from mlminilm.corpus.passages import read_passages
    from mlminilm.errors import DataError

    (tmp_path / "de.json").write_text('{"data": [{"title": "no paragraphs"}]}', encoding="utf-8")
    with pytest.raises(DataError, match=r"^--passages .*de.json.*paragraphs"):
        read_passages(tmp_path)


@pytest.mark.realdata
def test_real_tydiqa_files_give_every_question(shared_data, tiny_wordpiece_dir):
    from mlminilm.corpus.passages import read_passages

    folder = shared_data / "tydiqa"
    pairs = read_passages(folder, _rule(tiny_wordpiece_dir))
    want = {}
    for path in folder.glob("tydiqa.goldp.*.json"):
        lang = path.name.split(".")[2]
        doc = json.loads(path.read_text(encoding="utf-8"))
        want[lang] = want.get(lang, 0) + sum(len(p["qas"]) for a in doc["data"] for p in a["paragraphs"])
    assert pairs.lang_counts() == dict(sorted(want.items()))
    assert pairs.documents == 0
