"""eval-retrieval: the metrics against a float64 loop written from BEIR's definitions and a hand-worked example, the
ranking's tie rule, the SQuAD and BEIR readers and their errors, the CLI report on a tiny model, compare, and
(realdata) MLQA dev scored against an independent computation."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_error, assert_usage_error, run_main, tiny_encoder_fixture

pytestmark = pytest.mark.usefixtures("one_torch_thread")

encoder = tiny_encoder_fixture("tiny_wordpiece_dir", "enc", layers=2, hidden=16, heads=2, intermediate=32)

A = "the cat sat on the mat near the door"
B = "rain fell over the hills all night long"
A_DE = "die katze sass auf der matte"
B_DE = "regen fiel die ganze nacht"


def write_squad(path: Path, paragraphs: list[tuple[str, list[tuple[str, str]]]]) -> Path:
    """A SQuAD-format file of one article: (context, [(question id, question), ...]) per paragraph."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "version": "1.0",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {"context": c, "qas": [{"id": i, "question": q, "answers": []} for i, q in qas]}
                    for c, qas in paragraphs
                ],
            }
        ],
    }
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def write_mlqa(folder: Path) -> Path:
    """MLQA-named files in en and de with every pair. A question whose text is a passage's text embeds exactly as
    that passage (no prompts on a plain encoder), so its ranking is known: in `en`, q1, q2, q4 find their own
    context first; q3 (text B, asked of A) finds B first and A second. The third paragraph repeats A (merged)."""
    write_squad(
        folder / "dev-context-en-question-en.json", [(A, [("q1", A), ("q3", B)]), (B, [("q2", B)]), (A, [("q4", A)])]
    )
    write_squad(folder / "dev-context-de-question-de.json", [(A_DE, [("d1", A_DE)]), (B_DE, [("d2", B_DE)])])
    write_squad(folder / "dev-context-de-question-en.json", [(A_DE, [("x1", A_DE)]), (B_DE, [("x2", B)])])
    write_squad(folder / "dev-context-en-question-de.json", [(A, [("y1", A)]), (B, [("y2", B)])])
    return folder


def write_beir(folder: Path, qrels: str = "query-id\tcorpus-id\tscore\nqa\td1\t1\nqb\td2\t2\nqb\td1\t1\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    docs = [{"_id": "d1", "title": "", "text": A}, {"_id": "d2", "title": "rain", "text": B[5:]}]
    docs.append({"_id": "d3", "title": "", "text": A})  # same text as d1: kept apart, as BEIR
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    queries = [{"_id": "qa", "text": A}, {"_id": "qb", "text": B}, {"_id": "qc", "text": "not judged"}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    return folder


# ------------------------------------------------------------------------------------------ the metrics


def naive_scores(ranked: list[int], relevant: dict[int, int]) -> dict[str, float]:
    """BEIR's metrics of one query in float64, from their definitions (trec_eval's ndcg_cut with linear gains,
    recall_k, BEIR's MRR@k), written apart from mlminilm.metrics.retrieval."""
    dcg = 0.0
    for position in range(1, 11):
        if position <= len(ranked):
            dcg += relevant.get(ranked[position - 1], 0) / math.log2(position + 1)
    gains = sorted(relevant.values(), reverse=True)
    idcg = 0.0
    for position in range(1, min(10, len(gains)) + 1):
        idcg += gains[position - 1] / math.log2(position + 1)
    rr = 0.0
    for position in range(1, min(10, len(ranked)) + 1):
        if relevant.get(ranked[position - 1], 0) > 0:
            rr = 1.0 / position
            break
    out = {"ndcg_at_10": dcg / idcg if idcg else 0.0, "mrr_at_10": rr}
    for k in (1, 10, 100):
        hits = len([d for d in ranked[:k] if relevant.get(d, 0) > 0])
        out[f"recall_at_{k}"] = hits / len([g for g in relevant.values() if g > 0]) if relevant else 0.0
    return out


def test_metrics_hand_worked():
    from mlminilm.metrics.retrieval import mean_scores, query_scores

    # The relevant document second: DCG = 1 / log2(3), IDCG = 1.
    s = query_scores([3, 1, 2], {1: 1})
    assert s["ndcg_at_10"] == pytest.approx(1 / math.log2(3)) == pytest.approx(0.630930)
    assert (s["mrr_at_10"], s["recall_at_1"], s["recall_at_10"]) == (0.5, 0.0, 1.0)
    # Graded: gains 2 (doc 5) and 1 (doc 7), ranked 7, x, 5: DCG = 1 + 2/2 = 2, IDCG = 2 + 1/log2(3).
    s = query_scores([7, 0, 5], {5: 2, 7: 1})
    assert s["ndcg_at_10"] == pytest.approx(2 / (2 + 1 / math.log2(3)))
    # Past the cut-offs: the relevant document 11th counts for recall@100 only.
    s = query_scores(list(range(20, 30)) + [1], {1: 1})
    assert (s["ndcg_at_10"], s["mrr_at_10"], s["recall_at_10"], s["recall_at_100"]) == (0.0, 0.0, 0.0, 1.0)
    # A judged query with nothing relevant scores 0; the mean is over queries, in %.
    assert mean_scores([[1, 2], [2, 1]], [{1: 1}, {}]) == pytest.approx(
        {"ndcg_at_10": 50.0, "mrr_at_10": 50.0, "recall_at_1": 50.0, "recall_at_10": 50.0, "recall_at_100": 50.0}
    )


def test_metrics_match_naive_float64_loop():
    from mlminilm.metrics.retrieval import mean_scores

    rng = random.Random(3)
    ranked, qrels = [], []
    for _ in range(200):
        corpus = rng.randint(1, 150)
        order = list(range(corpus))
        rng.shuffle(order)
        ranked.append(order[:100])
        relevant = {d: rng.choice((1, 1, 2, 3)) for d in rng.sample(range(corpus), rng.randint(1, min(5, corpus)))}
        qrels.append(relevant)
    got = mean_scores(ranked, qrels)
    for name in got:
        expected = 100 * sum(naive_scores(r, q)[name] for r, q in zip(ranked, qrels)) / len(qrels)
        assert got[name] == pytest.approx(expected, abs=1e-9), name


def test_rank_cosine_ties_to_the_lower_index():
    from mlminilm.evaluation.retrieval import rank

    docs = np.array([[0.0, 1.0], [2.0, 0.0], [1.0, 0.0], [1.0, 1.0], [3.0, 0.0]], dtype=np.float32)
    # Docs 1, 2 and 4 point the same way (cosine 1 with the query): the lower index first, then doc 3 (cos 0.707).
    assert rank(np.array([[5.0, 0.0]]), docs, depth=4).tolist() == [[1, 2, 4, 3]]
    assert rank(np.array([[0.0, 1.0]]), docs, depth=100).tolist() == [[0, 3, 1, 2, 4]]  # depth past the corpus
    rng = np.random.default_rng(0)
    q, d = rng.normal(size=(30, 8)), rng.normal(size=(57, 8))
    sims = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (d / np.linalg.norm(d, axis=1, keepdims=True)).T
    expected = [sorted(range(57), key=lambda j: (-sims[i, j], j))[:10] for i in range(30)]
    assert rank(q, d, depth=10).tolist() == expected


# ------------------------------------------------------------------------------------------ the readers


def test_squad_reader_distinct_contexts(tmp_path):
    from mlminilm.tasks.retrieval import from_squad
    from mlminilm.tasks.squad import qa_file_info

    folder = write_mlqa(tmp_path / "mlqa")
    rset = from_squad(qa_file_info(folder / "dev-context-en-question-en.json"))
    assert rset.corpus == [A, B] and rset.doc_ids == ["c0", "c1"] and rset.merged == 1
    assert rset.queries == [A, B, B, A] and rset.query_ids == ["q1", "q3", "q2", "q4"]
    assert rset.qrels == [{0: 1}, {0: 1}, {1: 1}, {0: 1}]  # q4's paragraph repeats A: the same document
    cross = from_squad(qa_file_info(folder / "dev-context-de-question-en.json"))
    assert (cross.key, cross.context_lang, cross.question_lang) == ("de-en", "de", "en")


def test_beir_reader(tmp_path):
    from mlminilm.errors import DataError
    from mlminilm.tasks.retrieval import read_beir

    folder = write_beir(tmp_path / "beir")
    rset = read_beir(folder, "test", "en", "en")
    assert rset.corpus == [A, B, A] and rset.doc_ids == ["d1", "d2", "d3"] and rset.duplicate_texts == 1
    assert rset.query_ids == ["qa", "qb"] and rset.unjudged == 1  # qc has no qrels row: not scored
    assert rset.qrels == [{0: 1}, {1: 2, 0: 1}]
    bad = {
        "query-id\tcorpus-id\tscore\nqa\tzz\t1\n": "document ids not in corpus.jsonl (zz)",
        "qa\td1\n": "line 1 has 2 tab-separated fields",
        "qa\td1\thigh\n": "score 'high' is not a number",
        "qx\td1\t1\n": "query ids not in queries.jsonl (qx)",
    }
    for qrels, message in bad.items():
        write_beir(folder, qrels)
        with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
            read_beir(folder, "test", "en", "en")
    with pytest.raises(DataError, match=r"no qrels/dev.tsv .*it has test.tsv"):
        read_beir(folder, "dev", "en", "en")
    # A raw U+2028 inside a JSON string is one line of JSON, not two (str.splitlines would break it).
    doc = {"_id": "d1", "text": "first\u2028second"}
    (folder / "corpus.jsonl").write_text(json.dumps(doc, ensure_ascii=False) + "\n", encoding="utf-8")
    write_qrels = "qa\td1\t1\n"
    (folder / "qrels" / "test.tsv").write_text(write_qrels, encoding="utf-8")
    assert read_beir(folder, "test", "en", "en").corpus == ["first\u2028second"]
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\nnot json\n', encoding="utf-8")
    with pytest.raises(DataError, match="corpus.jsonl: line 2 is not JSON"):
        read_beir(folder, "test", "en", "en")
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": 5}\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 1 has no string 'text'"):
        read_beir(folder, "test", "en", "en")


def test_lang_pairs():
    from mlminilm.config.retrieval import lang_pair

    assert lang_pair("de") == ("de", "de") and lang_pair("de-en") == ("de", "en")
    assert lang_pair("zh-Hant") == ("zh-Hant", "zh-Hant") and lang_pair("zh-Hant-en") == ("zh-Hant", "en")
    with pytest.raises(ValueError, match="not a language code"):
        lang_pair("german")


# ------------------------------------------------------------------------------------------------- CLI


def _run(monkeypatch, capsys, *args):
    return run_main(monkeypatch, capsys, "eval-retrieval", *args, "--precision", "fp32")


def test_cli_report_known_answer(encoder, tmp_path, monkeypatch, capsys):
    data = write_mlqa(tmp_path / "mlqa")
    out = tmp_path / "report"
    code, stdout, stderr = _run(monkeypatch, capsys, "--model", str(encoder), "--data", str(data), "--out", str(out))
    assert code == 0, stderr
    assert "MLQA question -> passage retrieval" in stdout and "nDCG@10: monolingual" in stdout
    doc = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert (
        doc["task"] == "retrieval"
        and doc["benchmark"] == "mlqa"
        and list(doc["languages"])
        == [
            "de",
            "en",
            "de-en",
            "en-de",
        ]
    )
    en = doc["languages"]["en"]
    second = 1 / math.log2(3)  # q3's own context is ranked second of two
    assert en["ndcg_at_10"] == pytest.approx(100 * (3 + second) / 4)
    assert (en["mrr_at_10"], en["recall_at_1"], en["recall_at_10"]) == (pytest.approx(87.5), 75.0, 100.0)
    assert (en["examples"], en["corpus"], en["merged_contexts"]) == (4, 2, 1)
    assert doc["languages"]["de"]["ndcg_at_10"] == pytest.approx(100.0)
    assert doc["averages"]["monolingual"]["pairs"] == 2 and doc["averages"]["crosslingual"]["pairs"] == 2
    assert doc["matrix"]["contexts"] == ["de", "en"] and doc["matrix"]["values"][1][1] == pytest.approx(
        en["ndcg_at_10"]
    )
    assert doc["average"]["ndcg_at_10"] == pytest.approx(np.mean([s["ndcg_at_10"] for s in doc["languages"].values()]))
    assert doc["embedding"]["query"]["prefix"] == "" and doc["embedding"]["passage"]["max_length"] == 160
    run = (out / "predictions" / "en.trec").read_text().splitlines()
    assert run[0].split()[:4] == ["q1", "Q0", "c0", "1"] and run[2].split()[:4] == ["q3", "Q0", "c1", "1"]
    assert len(run) == 8 and {p.name for p in (out / "predictions").iterdir()} == {
        "de.trec",
        "en.trec",
        "de-en.trec",
        "en-de.trec",
    }
    assert "| passage \\ question | de | en |" in (out / "metrics.md").read_text()
    # --monolingual, --langs, prompts and lengths of one's own.
    code, stdout, stderr = _run(
        monkeypatch,
        capsys,
        *("--model", str(encoder), "--data", str(data), "--monolingual", "--langs", "en", "--json"),
        *("--query-prompt", "query: ", "--passage-prompt", "passage: ", "--passage-max-length", "4"),
    )
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert list(doc["languages"]) == ["en"] and "matrix" not in doc
    assert doc["embedding"]["passage"]["prefix"] == "passage: " and doc["truncated"] == {"query": 0, "passage": 2}
    assert "--passage-prompt" in doc["summary"] and doc["settings"]["passage_max_length"] == 4


def test_cli_beir_and_the_model_prompts(encoder, tmp_path, monkeypatch, capsys):
    import shutil

    model = tmp_path / "st"
    shutil.copytree(encoder, model)
    (model / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    (model / "1_Pooling").mkdir()
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean"}))
    (model / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "passage": "passage: "}})
    )
    beir = write_beir(tmp_path / "beir" / "en")
    code, stdout, stderr = _run(
        monkeypatch, capsys, "--model", str(model), "--data", str(beir.parent), "--split", "test", "--json"
    )
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert doc["benchmark"] == "beir" and list(doc["languages"]) == ["en"]
    emb = doc["embedding"]
    assert (emb["query"]["prefix"], emb["passage"]["prefix"], emb["query"]["layer"]) == ("query: ", "passage: ", 2)
    assert doc["languages"]["en"]["examples"] == 2 and doc["languages"]["en"]["unjudged_queries"] == 1
    # One BEIR folder needs --lang; with it the folder is scored under that pair.
    assert_error(_run(monkeypatch, capsys, "--model", str(model), "--data", str(beir), "--split", "test"), "--lang")
    code, stdout, stderr = _run(
        monkeypatch, capsys, "--model", str(model), "--data", str(beir), "--split", "test", "--lang", "de-en", "--json"
    )
    assert code == 0 and list(json.loads(stdout)["languages"]) == ["de-en"], stderr
    # --update-card: the pair's nDCG@10, MRR@10 and recall@100 as Hub model-index entries of a Retrieval task.
    code, stdout, stderr = _run(
        monkeypatch, capsys, "--model", str(model), "--data", str(beir.parent), "--split", "test", "--update-card"
    )
    assert code == 0, stderr
    from huggingface_hub import ModelCard

    card = ModelCard.load(model / "README.md")
    results = {(r.task_type, r.dataset_name, r.dataset_config, r.metric_type) for r in card.data.eval_results}
    assert results == {("Retrieval", "beir (retrieval)", "en", m) for m in ("ndcg_at_10", "mrr_at_10", "recall_at_100")}
    assert "mlminilm:eval-retrieval:start" in (model / "README.md").read_text()


def test_cli_errors(encoder, tmp_path, monkeypatch, capsys):
    data = write_mlqa(tmp_path / "mlqa")
    model = ("--model", str(encoder))
    assert_error(_run(monkeypatch, capsys, *model, "--data", str(tmp_path / "nowhere")), "nowhere")
    assert_error(
        _run(monkeypatch, capsys, *model, "--data", str(data), "--langs", "en,es"), "dev-context-es-question-es"
    )
    assert_error(_run(monkeypatch, capsys, *model, "--data", str(data), "--lang", "de"), "--lang names the language")
    assert_error(_run(monkeypatch, capsys, *model, "--data", str(data), "--layer", "9"), "--layer 9 is out of range")
    assert_usage_error(
        _run(monkeypatch, capsys, *model, "--data", str(data), "--passage-max-length", "1"), "--passage-max-length"
    )
    assert_usage_error(_run(monkeypatch, capsys, *model, "--data", str(data), "--split", "train"), "--split")
    bad = write_squad(tmp_path / "bad" / "dev-context-en-question-en.json", [])
    assert_error(_run(monkeypatch, capsys, *model, "--data", str(bad)), "no questions")
    # The report never goes into an input, and a failed run leaves no report behind.
    assert_error(_run(monkeypatch, capsys, *model, "--data", str(data), "--out", str(data / "r")), "--out")
    assert not (data / "r").exists()
    out = tmp_path / "out"
    assert_error(_run(monkeypatch, capsys, *model, "--data", str(tmp_path / "nowhere"), "--out", str(out)), "nowhere")
    assert not out.exists() or not any(out.iterdir())


# Every kind of whitespace str.split() splits on (a TREC run line is split so), and an empty id.
BAD_IDS = ("q 1", "q\t1", "q1\nq9 Q0 c1 1 9.0 forged", "q\r1", "q\u00a01", "q\u20281", "q\x1c1", "q\u30001", "")


def test_ids_that_would_break_the_trec_run_file_are_refused(encoder, tmp_path, monkeypatch, capsys):
    """predictions/<key>.trec is read by splitting each line at whitespace: a question, query or document id that
    holds any (or is empty) is refused in one line naming it and its file, before any model runs or --out is
    written; a plain id next to it is fine (test_cli_report_known_answer)."""
    from mlminilm.evaluation import retrieval

    def no_model_work(*args, **kwargs):
        raise AssertionError("the model ran on data whose ids are refused")

    monkeypatch.setattr(retrieval, "_embed_all", no_model_work)
    model, out = ("--model", str(encoder)), tmp_path / "out"
    for n, bad in enumerate(BAD_IDS):
        qa = write_squad(tmp_path / f"squad{n}" / "dev-context-en-question-en.json", [(A, [("q0", A), (bad, B)])])
        line = assert_error(_run(monkeypatch, capsys, *model, "--data", str(qa), "--out", str(out)), str(qa))
        assert f"question id {bad!r} {'is empty' if not bad else 'holds whitespace'} in {qa}" in line
        assert "predictions/en.trec" in line and not out.exists()
    # BEIR: a judged query's id and a document's id (JSON escapes a line break), each named with its own file.
    beir = write_beir(tmp_path / "beir" / "en")
    queries = (beir / "queries.jsonl").read_text(encoding="utf-8").replace('"qa"', '"q a"')
    (beir / "queries.jsonl").write_text(queries, encoding="utf-8")
    corpus = (beir / "corpus.jsonl").read_text(encoding="utf-8")
    (beir / "corpus.jsonl").write_text(corpus.replace('"d3"', '"d\\n3"').replace('"d2"', '"d 2 "'), encoding="utf-8")
    (beir / "qrels" / "test.tsv").write_text("q a\td1\t1\nqb\td1\t1\n", encoding="utf-8")
    beir_args = ("--data", str(beir.parent), "--split", "test", "--out", str(out))
    line = assert_error(_run(monkeypatch, capsys, *model, *beir_args))
    assert f"query id 'q a' holds whitespace in {beir / 'queries.jsonl'}" in line
    assert f"document id 'd 2 ' holds whitespace (and 1 more) in {beir / 'corpus.jsonl'}" in line
    assert not out.exists()
    # An unjudged query is not in the run file: its id is not refused.
    (beir / "corpus.jsonl").write_text(corpus, encoding="utf-8")
    (beir / "qrels" / "test.tsv").write_text("qb\td1\t1\n", encoding="utf-8")
    monkeypatch.undo()
    code, _, stderr = _run(monkeypatch, capsys, *model, *beir_args)
    assert code == 0, stderr
    assert [line.split()[0] for line in (out / "predictions" / "en.trec").read_text().splitlines()] == ["qb"] * 3


def test_compare_two_retrieval_reports(encoder, tmp_path, monkeypatch, capsys):
    data = write_mlqa(tmp_path / "mlqa")
    for name, prompt in (("plain", ""), ("prompted", "query: ")):
        code, _, stderr = _run(
            monkeypatch,
            capsys,
            *("--model", str(encoder), "--data", str(data), "--out", str(tmp_path / name)),
            *("--query-prompt", prompt),
        )
        assert code == 0, stderr
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "compare", str(tmp_path / "plain"), str(tmp_path / "prompted"), "--json"
    )
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert doc["metric"] == "ndcg_at_10" and list(doc["languages"]) == ["de", "en", "de-en", "en-de"]
    plain = json.loads((tmp_path / "plain" / "metrics.json").read_text())
    assert doc["languages"]["en"]["scores"]["plain"]["ndcg_at_10"] == pytest.approx(
        plain["languages"]["en"]["ndcg_at_10"]
    )


# ---------------------------------------------------------------------------------------------- real data


# MLQA dev as MTEB's MLQARetrieval describes it (its published descriptive statistics, validation split): distinct
# contexts (documents) and questions of each monolingual file.
MTEB_MLQA_DEV = {
    "ar": (439, 517),
    "de": (456, 512),
    "en": (978, 1148),
    "es": (454, 500),
    "hi": (425, 507),
    "vi": (451, 511),
}


@pytest.mark.realdata
def test_real_mlqa_dev_sizes_as_mteb(shared_data):
    from mlminilm.evaluation.retrieval_files import find_retrieval_sets

    benchmark, sets, _ = find_retrieval_sets(shared_data / "mlqa", "dev", None, None, monolingual=True)
    assert benchmark == "mlqa" and sorted(sets) == ["ar", "de", "en", "es", "hi", "vi", "zh"]
    assert {k: (len(s.corpus), len(s.queries)) for k, s in sets.items() if k in MTEB_MLQA_DEV} == MTEB_MLQA_DEV
    benchmark, sets, _ = find_retrieval_sets(shared_data / "mlqa" / "dev", "dev", ["de", "en"], None, False)
    assert sorted(sets) == ["de", "de-en", "en", "en-de"] and len(sets["en-de"].corpus) == 447  # MTEB: eng-deu


@pytest.mark.realdata
def test_real_mlqa_dev_against_an_independent_computation(shared_data, tiny_sentencepiece_dir, tmp_path):
    """MLQA dev de: the corpus (distinct contexts) and questions read apart from the project's readers, embedded by
    the plain transformers model (mean over real tokens of the last layer, float64), ranked and scored in a float64
    loop; the report agrees within one question's rank flip on a near tie."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from helpers import save_tiny_teacher
    from mlminilm.config import EvalRetrievalConfig
    from mlminilm.evaluation import retrieval

    model_dir = save_tiny_teacher(
        tiny_sentencepiece_dir, tmp_path / "m", kind="xlmr", layers=1, hidden=16, heads=2, intermediate=32
    )
    path = shared_data / "mlqa" / "dev" / "dev-context-de-question-de.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    contexts, questions, relevant = [], [], []
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            if paragraph["context"] not in contexts:
                contexts.append(paragraph["context"])
            for qa in paragraph["qas"]:
                questions.append(qa["question"])
                relevant.append(contexts.index(paragraph["context"]))
    assert len(questions) == 512
    doc = retrieval.run(
        EvalRetrievalConfig(
            model=str(model_dir),
            data=str(shared_data / "mlqa"),
            langs=("de",),
            monolingual=True,
            layer=-1,
            passage_max_length=128,
            query_max_length=128,
            precision="fp32",
            batch_size=64,
        )
    )
    got = doc["languages"]["de"]
    assert (got["examples"], got["corpus"]) == (512, len(contexts))
    tokenizer, model = AutoTokenizer.from_pretrained(model_dir), AutoModel.from_pretrained(model_dir).double().eval()

    def vectors(texts):
        out = []
        with torch.no_grad():
            for text in texts:
                batch = tokenizer(text, truncation=True, max_length=128, return_tensors="pt")
                hidden = model(**batch).last_hidden_state[0]
                v = hidden.mean(0).numpy()
                out.append(v / np.linalg.norm(v))
        return np.stack(out)

    sims = vectors(questions) @ vectors(contexts).T
    per_query = [naive_scores(list(np.argsort(-row, kind="stable")), {rel: 1}) for row, rel in zip(sims, relevant)]
    for name in ("ndcg_at_10", "mrr_at_10", "recall_at_1", "recall_at_10", "recall_at_100"):
        expected = 100 * sum(s[name] for s in per_query) / len(per_query)
        assert got[name] == pytest.approx(expected, abs=100 / 512 + 1e-9), name
