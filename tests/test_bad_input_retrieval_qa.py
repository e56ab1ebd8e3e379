"""Bad input to what the retrieval and fine-tuning issues added (issue 37's hostile pass over `eval-retrieval`,
`eval-mlqa` and `finetune --task qa`): BEIR folders and SQuAD-format QA files that are broken, ambiguous or huge end
in one `Error:` line (exit 1) naming what to fix, or in a warning that says what the scores mean, and nothing is
written. The first tests hold cases the pass found clean already; the others failed before their fixes."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from test_eval_retrieval import A, B, write_beir, write_squad

from helpers import assert_error, run_main, tiny_encoder_fixture

pytestmark = pytest.mark.usefixtures("one_torch_thread")

encoder = tiny_encoder_fixture("tiny_wordpiece_dir", "enc", layers=2, hidden=16, heads=2, intermediate=32)
MLQA_NAME = "dev-context-en-question-en.json"
QA_LENGTHS = ("--max-seq-len", "128", "--doc-stride", "32")  # the tiny QA model has 160 positions


@pytest.fixture(scope="module")
def qa_model(tiny_wordpiece_dir, tmp_path_factory):
    from taskdata import save_head_model

    return save_head_model(tiny_wordpiece_dir, tmp_path_factory.mktemp("qa-model"), "qa", max_positions=160)


def retrieval(monkeypatch, capsys, model: Path, *args: str):
    return run_main(monkeypatch, capsys, "eval-retrieval", "--model", str(model), "--precision", "fp32", *args)


def qa_commands(encoder: Path, qa_model: Path, data: Path) -> list[tuple[str, ...]]:
    """The three readers of a QA file, each given `data` (finetune as its --train)."""
    model = ("--model", str(qa_model))
    return [
        ("eval-retrieval", "--model", str(encoder), "--data", str(data)),
        ("eval-mlqa", *model, "--data", str(data), *QA_LENGTHS),
        ("finetune", "--task", "qa", *model, "--train", str(data), *QA_LENGTHS),
    ]


def beir_args(folder: Path, *extra: str) -> list[str]:
    return ["--data", str(folder), "--lang", "en", "--split", "test", *extra]


def answered(path: Path, paragraphs) -> Path:
    """A SQuAD-format file whose every question is answered by its context's second word."""
    write_squad(path, paragraphs)
    doc = json.loads(path.read_text(encoding="utf-8"))
    for paragraph in doc["data"][0]["paragraphs"]:
        word = paragraph["context"].split()[1]
        for qa in paragraph["qas"]:
            qa["answers"] = [{"text": word, "answer_start": paragraph["context"].index(word)}]
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def damaged_gzip(path: Path, text: str) -> Path:
    """A .gz whose deflate stream is damaged in the middle (zlib.error or a CRC error when read)."""
    data = bytearray(gzip.compress("".join(f"{i} {text}\n" for i in range(3000)).encode()))
    for i in range(len(data) // 2, len(data) // 2 + 40):
        data[i] ^= 0x55
    path.write_bytes(bytes(data))
    return path


# ------------------------------------------------------------------------------------ clean already (held here)


def test_beir_files_that_do_not_read_are_one_line(tmp_path):
    """Malformed JSON lines, unknown or duplicate ids, empty files, damaged .gz, non-UTF-8 bytes, a missing qrels
    folder: each a DataError naming the file (the CLI prints it as its one Error: line)."""
    from mlminilm.errors import DataError
    from mlminilm.tasks.retrieval import read_beir

    docs = "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in ((1, A), (2, B)))
    cases = {
        "corpus.jsonl": [
            ('{"_id": "d1", "text"\n', "line 1 is not JSON"),
            ("[1]\n", "line 1 is not a JSON object"),
            ("", "no entries"),
            (b'{"_id": "d1", "text": "caf\xe9"}\n', "not UTF-8"),
            (docs + json.dumps({"_id": "d1", "text": B}) + "\n", "document id"),
        ],
        "queries.jsonl": [("\n\n", "no entries"), ('{"_id": "qa", "text": null}\n', "no string 'text'")],
        "qrels/test.tsv": [
            ("qa\tzz\t1\n", "document ids not in corpus.jsonl (zz)"),
            ("qx\td1\t1\n", "query ids not in queries.jsonl (qx)"),
            ("query-id\tcorpus-id\tscore\n", "no relevance judgements"),
            (b"qa\td\xff1\t1\n", "not UTF-8"),
        ],
    }
    for name, bad in cases.items():
        for content, needle in bad:
            folder = write_beir(tmp_path / f"b{len(list(tmp_path.iterdir()))}")
            target = folder / name
            target.write_bytes(content if isinstance(content, bytes) else content.encode())
            with pytest.raises(DataError, match=needle.replace("(", r"\(").replace(")", r"\)")) as info:
                read_beir(folder, "test", "en", "en")
            assert str(target) in str(info.value), (name, str(info.value))
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        folder = write_beir(tmp_path / f"gz-{name.replace('/', '-')}")
        damaged_gzip(folder / f"{name}.gz", (folder / name).read_text())
        (folder / name).unlink()
        with pytest.raises(DataError, match="not a whole gzip file"):
            read_beir(folder, "test", "en", "en")
    folder = write_beir(tmp_path / "no-qrels")
    for path in (folder / "qrels").iterdir():
        path.unlink()
    (folder / "qrels").rmdir()
    with pytest.raises(DataError, match=r"no qrels/test.tsv \(BEIR layout\)$"):
        read_beir(folder, "test", "en", "en")


def test_qa_files_that_do_not_read_are_one_line(encoder, qa_model, tmp_path, monkeypatch, capsys):
    """A truncated, non-UTF-8, damaged .gz or empty QA file, and a BEIR folder where a QA file is expected: one
    line from every command that reads QA files, nothing written."""
    good = answered(tmp_path / "good.json", [(A, [("q1", A)]), (B, [("q2", B)])])
    text = good.read_text(encoding="utf-8")
    bad = {
        "truncated": (text[:-20].encode(), "not JSON"),
        "latin1": (text.replace("cat", "c\xe9t").encode("latin-1"), "not UTF-8 text"),
        "empty": (b"", "not JSON"),
    }
    out = tmp_path / "out"
    for name, (content, needle) in bad.items():
        path = tmp_path / name / MLQA_NAME
        path.parent.mkdir()
        path.write_bytes(content)
        for command in qa_commands(encoder, qa_model, path):
            assert_error(run_main(monkeypatch, capsys, *command, "--out", str(out)), str(path), needle)
    (tmp_path / "gz").mkdir()
    gz = damaged_gzip(tmp_path / "gz" / f"{MLQA_NAME}.gz", text)
    assert_error(retrieval(monkeypatch, capsys, encoder, "--data", str(gz.parent)), str(gz), "not a whole gzip")
    finetune = ("finetune", "--task", "qa", "--model", str(qa_model), "--train", str(good), *QA_LENGTHS)
    assert_error(run_main(monkeypatch, capsys, *finetune, "--dev", str(gz), "--out", str(out)), "not a whole gzip")
    beir = write_beir(tmp_path / "beir")
    assert_error(run_main(monkeypatch, capsys, "eval-mlqa", "--model", str(qa_model), "--data", str(beir)), "no QA")
    assert not out.exists()


# ------------------------------------------------------------------------------------------ fixed (issue 37)


def test_beir_query_ids_given_twice_are_refused(encoder, tmp_path, monkeypatch, capsys):
    """Two queries with one id: the first text was dropped without a word and the second scored twice."""
    queries = [{"_id": "qa", "text": A}, {"_id": "qa", "text": B}, {"_id": "qb", "text": B}]
    folder = write_beir(tmp_path / "beir")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    out = tmp_path / "out"
    assert_error(
        retrieval(monkeypatch, capsys, encoder, *beir_args(folder, "--out", str(out))),
        str(folder / "queries.jsonl"),
        "1 query id(s) appear more than once (qa)",
    )
    assert not out.exists()


def test_a_broken_beir_folder_says_what_is_wrong(encoder, tmp_path, monkeypatch, capsys):
    """A BEIR file that is a directory was reported as --lang misused or as a qrels file that was there; a broken or
    missing language folder under a parent was left out of the report without a word."""
    folder = write_beir(tmp_path / "one")
    (folder / "corpus.jsonl").unlink()
    (folder / "corpus.jsonl").mkdir()
    assert_error(
        retrieval(monkeypatch, capsys, encoder, *beir_args(folder)),
        f"--data {folder} is not a whole BEIR folder: corpus.jsonl is a directory, not a file",
    )
    folder = write_beir(tmp_path / "two")
    (folder / "qrels" / "test.tsv").unlink()
    (folder / "qrels" / "test.tsv").mkdir()
    line = assert_error(
        retrieval(monkeypatch, capsys, encoder, *beir_args(folder)), "qrels/test.tsv is a directory, not a file"
    )
    assert "it has" not in line
    parent = tmp_path / "parent"
    write_beir(parent / "en")
    (write_beir(parent / "de") / "queries.jsonl").unlink()
    split = ("--split", "test")
    assert_error(
        retrieval(monkeypatch, capsys, encoder, "--data", str(parent), *split),
        f"{parent / 'de'} is not a whole BEIR folder: no queries.jsonl",
    )
    code, _, stderr = retrieval(monkeypatch, capsys, encoder, "--data", str(parent), *split, "--langs", "en")
    assert code == 0, stderr  # a folder not asked for is not read
    shutil.rmtree(parent / "de")
    assert_error(
        retrieval(monkeypatch, capsys, encoder, "--data", str(parent), *split, "--langs", "de,en"),
        "no BEIR folder",
        "for de (--langs)",
    )


def test_a_qa_file_that_is_a_directory_is_named_so(encoder, qa_model, tmp_path, monkeypatch, capsys):
    """It was "no such file", though the path was there."""
    mlqa = tmp_path / "mlqa"
    (mlqa / MLQA_NAME).mkdir(parents=True)
    xquad = tmp_path / "xquad"
    (xquad / "xquad.en.json").mkdir(parents=True)
    for data, named in ((mlqa, mlqa / MLQA_NAME), (xquad, xquad / "xquad.en.json")):
        assert_error(retrieval(monkeypatch, capsys, encoder, "--data", str(data)), f"{named} is a directory")
    for data in (mlqa, xquad):
        mlqa_eval = qa_commands(encoder, qa_model, data)[1]
        assert_error(run_main(monkeypatch, capsys, *mlqa_eval, "--langs", "en"), "en.json is a directory")
    out = tmp_path / "ft"
    finetune = qa_commands(encoder, qa_model, mlqa / MLQA_NAME)[2]
    assert_error(run_main(monkeypatch, capsys, *finetune, "--out", str(out)), f"--train {mlqa / MLQA_NAME} is a dir")
    assert not out.exists()


def test_judged_questions_without_a_relevant_passage(encoder, tmp_path, monkeypatch, capsys):
    """Some: one warning (they score 0, as in BEIR). All: nothing to score, refused; both scored 0 without a word."""
    folder = write_beir(tmp_path / "some", "qa\td1\t0\nqb\td2\t1\n")
    code, _, stderr = retrieval(monkeypatch, capsys, encoder, *beir_args(folder, "--json"))
    assert code == 0, stderr
    warned = [line for line in stderr.splitlines() if "no relevant passage" in line]
    assert len(warned) == 1 and "1 of 2 judged questions" in warned[0], stderr
    folder = write_beir(tmp_path / "none", "qa\td1\t0\nqb\td2\t0\n")
    assert_error(retrieval(monkeypatch, capsys, encoder, *beir_args(folder)), "no judgement marks a document relevant")


def test_question_ids_repeated_in_a_qa_file_are_warned_about(encoder, tmp_path, monkeypatch, capsys):
    """eval-retrieval scores every question (ids may repeat, as in TyDiQA-GoldP's English train), but its TREC run
    then lists an id twice: one warning says so."""
    path = write_squad(tmp_path / MLQA_NAME, [(A, [("q1", A), ("q1", B)]), (B, [("q2", B)])])
    code, stdout, stderr = retrieval(monkeypatch, capsys, encoder, "--data", str(path), "--json")
    assert code == 0 and json.loads(stdout)["languages"]["en"]["examples"] == 3, stderr
    warned = [line for line in stderr.splitlines() if "reuse an earlier question's id" in line]
    assert len(warned) == 1 and "predictions/en.trec" in warned[0], stderr


def test_a_huge_passage_is_cut_before_it_is_tokenised(encoder):
    """A 30 MB passage took 5.9 GB and a minute to tokenise whole (a 200 MB one cannot be): `encode` cuts every text
    at max_length x CHARS_PER_TOKEN characters first, and the tokens kept are those the whole text gives."""
    from transformers import AutoTokenizer

    from mlminilm.evaluation.embeddings import CHARS_PER_TOKEN, encode

    tokenizer = AutoTokenizer.from_pretrained(encoder)
    seen = []

    def spy(texts, **kwargs):
        seen.extend(len(t) for t in texts)
        return tokenizer(texts, **kwargs)

    spy.pad_token_id = tokenizer.pad_token_id
    huge = "the cat sat on the mat " * 100_000  # 2.3 million characters
    rows, cut = encode(spy, [A, huge], "query: ", 32)
    assert max(seen) <= len("query: ") + 32 * CHARS_PER_TOKEN and cut == 1
    whole = tokenizer(["query: " + huge], truncation=True, max_length=32)["input_ids"][0]
    assert rows["input_ids"][1] == whole and rows["input_ids"][0] == tokenizer(["query: " + A])["input_ids"][0]


def test_a_huge_qa_context_or_question_is_refused_when_read(encoder, qa_model, tmp_path, monkeypatch, capsys):
    """A context cannot be cut (its answers are offsets into it): one past MAX_CONTEXT_CHARS (lowered here) is one
    line from every reader; a 5 MB one took 1.3 GB to featurise, hundreds of megabytes could not be."""
    from mlminilm.tasks import squad

    monkeypatch.setattr(squad, "MAX_CONTEXT_CHARS", 2_000)
    monkeypatch.setattr(squad, "MAX_QUESTION_CHARS", 500)
    long_context = answered(tmp_path / "c" / MLQA_NAME, [(A, [("q1", A)]), (A + " x" * 1_500, [("q2", B)])])
    long_question = answered(tmp_path / "q" / MLQA_NAME, [(A, [("q1", "why " * 200)])])
    out = tmp_path / "out"
    for path, needle in (
        (long_context, "data[0].paragraphs[1].context is 3,036 characters long, over the 2,000 allowed"),
        (long_question, "data[0].paragraphs[0].qas[0].question is 800 characters long, over the 500 allowed"),
    ):
        for command in qa_commands(encoder, qa_model, path):
            assert_error(run_main(monkeypatch, capsys, *command, "--out", str(out)), str(path), needle)
    assert not out.exists()


def test_a_huge_id_is_cut_in_the_error_line(encoder, tmp_path, monkeypatch, capsys):
    """A qrels line of 5 MB naming an unknown query put all of it into the Error: line."""
    folder = write_beir(tmp_path / "beir", "qa\td1\t1\n" + "x" * 5_000_000 + "\td1\t1\n")
    line = assert_error(retrieval(monkeypatch, capsys, encoder, *beir_args(folder)), "x" * 40 + "...")
    assert len(line) < 300, len(line)


def test_qa_training_data_without_any_answer_is_refused(qa_model, tmp_path, monkeypatch, capsys):
    """Every target would be "no answer" (the CLS token): finetune trained a model to find nothing, without a word
    (--dev and eval-mlqa already refused unlabelled files)."""
    path = write_squad(tmp_path / "train.json", [(A, [("q1", A)]), (B, [("q2", B)])])  # answers: []
    out = tmp_path / "ft"
    finetune = ("finetune", "--task", "qa", "--model", str(qa_model), "--train", str(path), *QA_LENGTHS)
    assert_error(run_main(monkeypatch, capsys, *finetune, "--out", str(out)), "no training question has an answer")
    assert not out.exists()


# ------------------------------------------------------------------------------------------ fixed (issue 53)


def test_beir_files_python_cannot_parse_are_one_line(encoder, tmp_path, monkeypatch, capsys):
    """JSON nested 100,000 deep was a RecursionError traceback, an id of 5,000 digits a ValueError one, a qrels
    score of inf or of 400 digits an OverflowError one; `_id: 1e400` became the id "inf" and `nan` a score."""
    many = "1" * 400
    cases = [
        ("corpus.jsonl", '{"_id": "d1", "text": "a", "x": ' + "[" * 100_000 + "\n", "nested more than 100 levels"),
        ("queries.jsonl", '{"_id": ' + "1" * 5000 + ', "text": "a"}\n', "an integer of 5,000 digits"),
        ("corpus.jsonl", '{"_id": 1e400, "text": "a"}\n', "the number 1e400 is too large for a float"),
        ("queries.jsonl", '{"_id": "qa", "text": NaN}\n', "NaN is not a number JSON allows"),
        ("qrels/test.tsv", "qa\td1\tinf\n", "line 1: score 'inf' is not a finite number"),
        ("qrels/test.tsv", "qa\td1\t1\nqb\td2\t-nan\n", "line 2: score '-nan' is not a finite number"),
        ("qrels/test.tsv", f"qa\td1\t{many}\n", f"score {many[:20]!r}... (400 characters) is not a finite number"),
        (
            "qrels/test.tsv",
            "qa\td1\t3e9\n",
            "score '3e9' is not a finite number between -2,147,483,647 and 2,147,483,647;",
        ),
    ]
    out = tmp_path / "out"
    for n, (name, content, needle) in enumerate(cases):
        folder = write_beir(tmp_path / f"b{n}")
        (folder / name).write_text(content, encoding="utf-8")
        where = f"{folder / name}: line 1 is not JSON (" if name.endswith(".jsonl") else f"{folder / name}: line "
        line = assert_error(retrieval(monkeypatch, capsys, encoder, *beir_args(folder, "--out", str(out))), needle)
        assert line.startswith(f"Error: {where}") and len(line) < 300, line
    assert not out.exists()
    folder = write_beir(tmp_path / "graded", "qa\td1\t1.0\nqb\td2\t2\nqb\td1\t0\n")  # "1.0" is 1, as BEIR reads it
    code, stdout, stderr = retrieval(monkeypatch, capsys, encoder, *beir_args(folder, "--json"))
    assert code == 0 and json.loads(stdout)["languages"]["en"]["examples"] == 2, stderr


def squad_variants(good: Path) -> dict[str, tuple[str, str]]:
    """Text of `good` (a SQuAD file written by `answered`) spoiled each way a QA reader met with a traceback or a
    wrong value, and the words of its error."""
    text = good.read_text(encoding="utf-8")
    start = '"answer_start": 4'
    assert start in text
    return {
        "deep": (text.replace('"title": "t"', '"title": ' + "[" * 100_000), "not JSON (nested more than 100 levels"),
        "digits": (text.replace(start, '"answer_start": ' + "4" * 5000), "not JSON (an integer of 5,000 digits"),
        "infinity": (text.replace(start, '"answer_start": Infinity'), "not JSON (Infinity is not a number JSON"),
        "surrogate": (text.replace('"q1"', '"\\ud800"'), "not JSON (a \\u escape of a lone UTF-16 surrogate"),
        "bool": (text.replace(start, '"answer_start": true'), "answer_start should be an integer, found a boolean"),
    }


def test_qa_files_python_cannot_parse_are_one_line_from_every_reader(encoder, qa_model, tmp_path, monkeypatch, capsys):
    """eval-retrieval, eval-mlqa and finetune --task qa (--train and --dev) on a SQuAD file nested 100,000 deep
    (RecursionError), with a 5,000-digit answer_start (ValueError): tracebacks. `answer_start: true` was read as 1
    (and matched the answer at offset 1); Infinity and a lone surrogate got past the reader."""
    good = answered(tmp_path / "good.json", [(A, [("q1", A)]), (B, [("q2", B)])])
    variants = squad_variants(good)
    # "xcat sat ...": true read as 1 pointed right at the answer "cat", and the file was taken as it stood.
    bool_one = good.read_text(encoding="utf-8").replace('"the cat', '"xcat')
    variants["bool at 1"] = (bool_one.replace('"answer_start": 4', '"answer_start": true'), "found a boolean")
    out = tmp_path / "out"
    for name, (content, needle) in variants.items():
        path = tmp_path / name / MLQA_NAME
        path.parent.mkdir()
        path.write_text(content, encoding="utf-8")
        for command in qa_commands(encoder, qa_model, path):
            assert_error(run_main(monkeypatch, capsys, *command, "--out", str(out)), f"{path}: ", needle)
        finetune = ("finetune", "--task", "qa", "--model", str(qa_model), "--train", str(good), *QA_LENGTHS)
        assert_error(run_main(monkeypatch, capsys, *finetune, "--dev", str(path), "--out", str(out)), needle)
    assert not out.exists()


def test_prediction_files_python_cannot_parse_are_one_line(tmp_path, monkeypatch, capsys):
    """eval-mlqa --predictions: a file nested 100,000 deep or with a 5,000-digit number was a traceback."""
    data = answered(tmp_path / "data" / MLQA_NAME, [(A, [("q1", A)]), (B, [("q2", B)])])
    out = tmp_path / "out"
    for name, text, needle in (
        ("deep", '{"q1": ' + "[" * 100_000, "not JSON (nested more than 100 levels deep)"),
        ("digits", '{"q1": "cat", "q2": ' + "1" * 5000 + "}", "not JSON (an integer of 5,000 digits"),
        ("bytes", None, "not JSON (not UTF-8 text: invalid start byte at byte 8)"),
    ):
        predictions = tmp_path / name
        predictions.mkdir()
        if text is None:
            (predictions / MLQA_NAME).write_bytes(b'{"q1": "\xff"}')
        else:
            (predictions / MLQA_NAME).write_text(text, encoding="utf-8")
        command = ("eval-mlqa", "--data", str(data), "--predictions", str(predictions), "--out", str(out))
        assert_error(run_main(monkeypatch, capsys, *command), f"{predictions / MLQA_NAME}: {needle}")
    assert not out.exists()


def test_gxlt_on_one_mlqa_file_reports_its_one_pair(qa_model, tmp_path, monkeypatch, capsys):
    """--gxlt with --data one MLQA file ended in KeyError: 'en-en' after the whole evaluation: the file was keyed
    "en" and the matrix read "en-en". Now it is the matrix of its one pair; a file that is no MLQA file (no pair of
    languages in its name) is refused before any model work, as a directory of them is."""
    data = answered(tmp_path / "data" / MLQA_NAME, [(A, [("q1", A)]), (B, [("q2", B)])])
    predictions = tmp_path / "predictions"
    predictions.mkdir()
    # q1 right ("cat", the second word of A); q2 wrong ("over" for "fell"): EM and F1 are 50.
    (predictions / MLQA_NAME).write_text(json.dumps({"q1": "cat", "q2": "over"}), encoding="utf-8")
    out = tmp_path / "scored"
    command = ("eval-mlqa", "--data", str(data), "--gxlt", "--out", str(out))
    code, _, stderr = run_main(monkeypatch, capsys, *command, "--predictions", str(predictions))
    assert code == 0, stderr
    doc = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert list(doc["languages"]) == ["en-en"]
    assert doc["gxlt"] == {"contexts": ["en"], "questions": ["en"], "exact_match": [[50.0]], "f1": [[50.0]]}
    assert doc["average"]["exact_match"] == 50.0 and "G-XLT" in (out / "metrics.md").read_text(encoding="utf-8")
    # With a model, and a file of two languages: the same shape.
    cross = shutil.copy(data, tmp_path / "data" / "dev-context-de-question-en.json")
    out = tmp_path / "run"
    code, _, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-mlqa",
        "--model",
        str(qa_model),
        "--data",
        str(cross),
        "--gxlt",
        "--out",
        str(out),
        *QA_LENGTHS,
    )
    assert code == 0, stderr
    doc = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert list(doc["languages"]) == ["de-en"] and doc["gxlt"]["contexts"] == ["de"]
    assert doc["gxlt"]["f1"] == [[doc["languages"]["de-en"]["f1"]]]
    # Not an MLQA file: one line, before the model is loaded, nothing written.
    xquad = shutil.copy(data, tmp_path / "data" / "xquad.en.json")
    out = tmp_path / "refused"
    for extra in (("--model", str(tmp_path / "no-model")), ("--predictions", str(predictions))):
        assert_error(
            run_main(monkeypatch, capsys, "eval-mlqa", "--data", str(xquad), "--gxlt", "--out", str(out), *extra),
            f"--gxlt needs MLQA files (named like dev-context-de-question-en.json); not {xquad}",
        )
    assert not out.exists()
