"""eval-retrieval --query-model (asymmetric search, issue 51 part 2): the questions embedded by one encoder, the
passages (the index) by another. The scores against an independent computation (transformers, float64, each side's
own layer, mean pooling and prompt, a metric loop written here), --query-model = --model as the symmetric run, the
refusal of vectors of different sizes, the report naming both models and backends, compare's label, the query
model's card, and a query model run by onnxruntime."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import sample_lines

from helpers import assert_error, run_main, save_tiny_teacher

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAIRS = (("en", "en"), ("de", "de"), ("de", "en"), ("en", "de"))  # (passages, questions)


def write_mlqa(folder: Path) -> Path:
    """MLQA-named files, every pair of en and de: 6 contexts per file, 2 questions each (lines of the tokenizers'
    own words, so that the tiny models rank them by something)."""
    folder.mkdir(parents=True, exist_ok=True)
    for context_lang, question_lang in PAIRS:
        contexts = sample_lines(context_lang, 6, seed=11)
        questions = sample_lines(question_lang, 12, seed=23 if context_lang == question_lang else 29)
        paragraphs = [
            {
                "context": c,
                "qas": [
                    {"id": f"{context_lang}{question_lang}{i}{j}", "question": questions[2 * i + j], "answers": []}
                    for j in range(2)
                ],
            }
            for i, c in enumerate(contexts)
        ]
        data = {"version": "1.0", "data": [{"title": "t", "paragraphs": paragraphs}]}
        name = f"dev-context-{context_lang}-question-{question_lang}.json"
        (folder / name).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def mlqa(tmp_path_factory) -> Path:
    return write_mlqa(tmp_path_factory.mktemp("mlqa"))


def _run(monkeypatch, capsys, *args):
    return run_main(monkeypatch, capsys, "eval-retrieval", *args, "--precision", "fp32")


def _ok(result) -> dict:
    code, stdout, stderr = result
    assert code == 0, stderr
    return json.loads(stdout)


# ---------------------------------------------------------------------- the independent computation


def vectors(model_dir: Path, texts: list[str], prompt: str, layer: int) -> np.ndarray:
    """Unit-length float64 vectors: `prompt + text` through the plain transformers model in float64, the mean over
    the real tokens of hidden-states index `layer`."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).double().eval()
    out = []
    with torch.no_grad():
        for text in texts:
            batch = tokenizer(prompt + text, return_tensors="pt")
            hidden = model(**batch, output_hidden_states=True).hidden_states[layer][0]
            v = hidden.mean(0).numpy()
            out.append(v / np.linalg.norm(v))
    return np.stack(out)


def expected_scores(folder: Path, query: tuple, index: tuple) -> dict[str, dict[str, float]]:
    """Per language pair, in %, read from the files here: the corpus = the file's distinct contexts, each question's
    own context its one relevant passage; ranked by float64 cosine; nDCG@10, MRR@10, recall@1/10/100 of one relevant
    document by its rank, in a loop. `query` / `index`: (model directory, prompt, hidden-states index)."""
    out = {}
    for context_lang, question_lang in PAIRS:
        raw = json.loads((folder / f"dev-context-{context_lang}-question-{question_lang}.json").read_text("utf-8"))
        contexts, questions, relevant = [], [], []
        for paragraph in raw["data"][0]["paragraphs"]:
            if paragraph["context"] not in contexts:
                contexts.append(paragraph["context"])
            for qa in paragraph["qas"]:
                questions.append(qa["question"])
                relevant.append(contexts.index(paragraph["context"]))
        (q_model, q_prompt, q_layer), (p_model, p_prompt, p_layer) = query, index
        sims = vectors(q_model, questions, q_prompt, q_layer) @ vectors(p_model, contexts, p_prompt, p_layer).T
        totals = dict.fromkeys(("ndcg_at_10", "mrr_at_10", "recall_at_1", "recall_at_10", "recall_at_100"), 0.0)
        for row, rel in zip(sims, relevant):
            rank = 1 + sum(1 for d, s in enumerate(row) if s > row[rel] or (s == row[rel] and d < rel))
            totals["ndcg_at_10"] += 1 / math.log2(rank + 1) if rank <= 10 else 0.0
            totals["mrr_at_10"] += 1 / rank if rank <= 10 else 0.0
            for k in (1, 10, 100):
                totals[f"recall_at_{k}"] += 1.0 if rank <= k else 0.0
        key = context_lang if context_lang == question_lang else f"{context_lang}-{question_lang}"
        out[key] = {name: 100 * value / len(questions) for name, value in totals.items()}
    return out


@pytest.mark.parametrize("direction", ["st-queries", "bert-queries"])
def test_scores_equal_an_independent_computation(direction, bert, st_xlmr, mlqa, monkeypatch, capsys):
    """Each side its own model's embedding: the e5-like XLM-R with its 'query: ' / 'passage: ' prompt and its last
    layer (2 of 2), the plain BERT with no prompt and XTREME's layer (3 of 4); different tokenizers."""
    st_side = (st_xlmr, "query: " if direction == "st-queries" else "passage: ", 2)
    bert_side = (bert, "", 3)
    query, index = (st_side, bert_side) if direction == "st-queries" else (bert_side, st_side)
    code, stdout, stderr = _run(
        monkeypatch, capsys, "--model", str(index[0]), "--query-model", str(query[0]), "--data", str(mlqa), "--json"
    )
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert set(doc["languages"]) == {"en", "de", "de-en", "en-de"}
    # the plain BERT asks without the prompt the e5-like index gives its own questions: said, not changed
    assert ("has no 'query' prompt, but the index model" in stderr) == (direction == "bert-queries")
    assert "no matter for asymmetric search" in stderr  # layers and vocabularies differ
    expected = expected_scores(mlqa, query, index)
    for key, scores in expected.items():
        got = doc["languages"][key]
        assert got["examples"] == 12 and got["corpus"] == 6
        for name, value in scores.items():
            assert got[name] == pytest.approx(value, abs=1e-6), (key, name)
    emb = doc["embedding"]
    assert (emb["query"]["prefix"], emb["query"]["layer"]) == (query[1], query[2])
    assert (emb["passage"]["prefix"], emb["passage"]["layer"]) == (index[1], index[2])
    # not the same numbers as either model's symmetric search (else the test could not tell the sides apart)
    symmetric = _ok(_run(monkeypatch, capsys, "--model", str(index[0]), "--data", str(mlqa), "--json"))
    assert symmetric["average"]["ndcg_at_10"] != pytest.approx(doc["average"]["ndcg_at_10"], abs=1e-6)


def test_query_model_equal_to_model_is_the_symmetric_run(bert, mlqa, tmp_path, monkeypatch, capsys):
    sym, same = tmp_path / "sym", tmp_path / "same"
    assert _run(monkeypatch, capsys, "--model", str(bert), "--data", str(mlqa), "--out", str(sym))[0] == 0
    code, _, stderr = _run(
        monkeypatch, capsys, "--model", str(bert), "--query-model", f"{bert}/", "--data", str(mlqa), "--out", str(same)
    )
    assert code == 0, stderr
    a, b = (json.loads((d / "metrics.json").read_text(encoding="utf-8")) for d in (sym, same))
    assert a["languages"] == b["languages"] and a["average"] == b["average"] and a["summary"] == b["summary"]
    for name in ("en", "de", "de-en", "en-de"):
        assert (sym / "predictions" / f"{name}.trec").read_text() == (same / "predictions" / f"{name}.trec").read_text()
    # the default report has no trace of the option; the same model given as --query-model is recorded as such
    assert "query_model" not in a and "search" not in a and "query_backend" not in a
    assert (b["query_model"], b["search"], b["model"]) == (f"{bert}/", "symmetric", str(bert))
    assert "asymmetric" not in b["protocol"]


def test_vectors_of_different_sizes_are_refused(bert, tiny_wordpiece_dir, mlqa, tmp_path, monkeypatch, capsys):
    from mlminilm.evaluation import retrieval

    def no_model_work(*args, **kwargs):
        raise AssertionError("the models ran on a pair that is refused")

    small = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "h16", layers=2, hidden=16, heads=2, intermediate=32)
    monkeypatch.setattr(retrieval, "_embed_all", no_model_work)
    out = tmp_path / "out"
    args = ("--model", str(bert), "--query-model", str(small), "--data", str(mlqa), "--out", str(out))
    line = assert_error(_run(monkeypatch, capsys, *args))
    assert f"--query-model {small} embeds questions in 16 dimensions" in line
    assert f"--model {bert} embeds passages in 32" in line and not out.exists()
    # a backend the query model's directory cannot run, named by its own option
    line = assert_error(_run(monkeypatch, capsys, *args[:4], "--query-backend", "onnx", "--data", str(mlqa)))
    assert "--query-backend onnx" in line and "mlminilm export" in line
    missing = tmp_path / "nowhere"
    line = assert_error(
        _run(monkeypatch, capsys, "--model", str(bert), "--query-model", str(missing), "--data", str(mlqa))
    )
    assert str(missing) in line
    # --query-backend without --query-model, an empty --query-model
    assert_error(
        _run(monkeypatch, capsys, "--model", str(bert), "--query-backend", "torch", "--data", str(mlqa)),
        "--query-backend torch needs --query-model",
    )
    assert_error(
        _run(monkeypatch, capsys, "--model", str(bert), "--query-model", "", "--data", str(mlqa)),
        "--query-model is empty",
    )


def test_report_compare_and_card_name_both_models(bert, st_xlmr, mlqa, tmp_path, monkeypatch, capsys):
    import shutil

    from huggingface_hub import ModelCard

    query, index = tmp_path / "student", tmp_path / "teacher"
    shutil.copytree(st_xlmr, query)
    shutil.copytree(bert, index)
    sym, asym = tmp_path / "sym", tmp_path / "asym"
    code, stdout, stderr = _run(monkeypatch, capsys, "--model", str(index), "--data", str(mlqa), "--out", str(sym))
    assert code == 0, stderr
    code, stdout, stderr = _run(
        monkeypatch,
        capsys,
        *("--model", str(index), "--query-model", str(query), "--data", str(mlqa), "--out", str(asym)),
        "--update-card",
    )
    assert code == 0, stderr
    assert "questions by" in stdout and "passages (the index) by" in " ".join(stdout.split())  # the summary line
    doc = json.loads((asym / "metrics.json").read_text(encoding="utf-8"))
    assert f"questions by {query} (torch): layer 2 of 2" in doc["summary"]
    assert f"passages (the index) by {index} (torch): layer 3 of 4" in doc["summary"]
    assert (doc["model"], doc["query_model"], doc["search"]) == (str(index), str(query), "asymmetric")
    assert doc["backend"]["name"] == doc["query_backend"]["name"] == "torch"
    assert (
        f"asymmetric search with questions embedded by {query} and passages (the index) by {index}" in doc["protocol"]
    )
    assert doc["query_size"]["parameters"] != doc["size"]["parameters"]
    assert [doc["throughput"]["sides"][s]["texts"] for s in ("query", "passage")] == [48, 12]
    markdown = (asym / "metrics.md").read_text(encoding="utf-8")
    assert f"questions by {query}" in markdown and f"- model: `{index}`" in markdown

    # compare: a symmetric and an asymmetric report of one index are compared, labelled, never silently
    code, stdout, stderr = run_main(monkeypatch, capsys, "compare", str(sym), str(asym), "--json")
    assert code == 0, stderr
    assert "WARNING" in stderr and "symmetric and asymmetric search side by side" in stderr
    cmp = json.loads(stdout)
    assert cmp["search"] == {
        "sym": f"symmetric, questions and passages by {index}",
        "asym": f"asymmetric, questions by {query}, passages (the index) by {index}",
    }
    assert cmp["reports"]["asym"]["model"] == f"{query} (questions) on the index of {index}"
    assert cmp["languages"]["en"]["scores"]["asym"]["ndcg_at_10"] == pytest.approx(doc["languages"]["en"]["ndcg_at_10"])
    assert any("asymmetric" in line for line in cmp["warnings"])
    # --baseline names the asymmetric report by its query model (both reports' index is the same model)
    code, stdout, stderr = run_main(monkeypatch, capsys, "compare", str(sym), str(asym), "--baseline", "student")
    assert code == 0 and "against asym" in stdout, stderr
    # symmetric reports only (one of them given --query-model = --model): as before, no label
    same = tmp_path / "same"
    args = ("--model", str(index), "--query-model", str(index), "--data", str(mlqa), "--out", str(same))
    assert _run(monkeypatch, capsys, *args)[0] == 0
    code, stdout, stderr = run_main(monkeypatch, capsys, "compare", str(sym), str(same), "--json")
    assert code == 0 and "search" not in json.loads(stdout) and "asymmetric" not in stderr, stderr

    # the card: the query model's, not the index's, under names that say whose index it searched
    assert not (index / "README.md").exists()
    card = ModelCard.load(query / "README.md")
    names = {(r.dataset_name, r.dataset_config) for r in card.data.eval_results}
    assert names == {
        (f"MLQA (question -> passage retrieval; passages embedded by {index})", f"{pair} (index: {index})")
        for pair in ("en", "de", "de-en", "en-de")
    }
    # the query model's own symmetric results join them; a re-run of the asymmetric one replaces only its own
    for args in (("--model", str(query)), ("--model", str(index), "--query-model", str(query), "--langs", "en")):
        code, _, stderr = _run(monkeypatch, capsys, *args, "--data", str(mlqa), "--update-card")
        assert code == 0, stderr
    results = ModelCard.load(query / "README.md").data.eval_results
    assert len(results) == 2 * 4 * 3  # (symmetric + asymmetric) x 4 pairs x 3 metrics
    assert {r.dataset_name for r in results} == {
        "MLQA (question -> passage retrieval)",
        f"MLQA (question -> passage retrieval; passages embedded by {index})",
    }
    assert not (index / "README.md").exists()


def test_query_model_as_an_onnx_export(bert, st_xlmr, mlqa, tmp_path, monkeypatch, capsys):
    """The index in PyTorch, the query model an `mlminilm export` directory: --query-backend auto runs it in
    onnxruntime (its export record says so) and scores as its PyTorch weights do; torch on it is refused by name."""
    from mlminilm.config import ExportConfig
    from mlminilm.export import pipeline

    export = tmp_path / "student-onnx"
    pipeline.run(ExportConfig(model=str(st_xlmr), out=export, quantize="none"))
    base = ("--model", str(bert), "--data", str(mlqa), "--json")
    graph = _ok(_run(monkeypatch, capsys, *base, "--query-model", str(export)))
    torch_run = _ok(_run(monkeypatch, capsys, *base, "--query-model", str(st_xlmr)))
    assert (graph["query_backend"]["name"], graph["query_backend"]["dtype"], graph["backend"]["name"]) == (
        "onnx",
        "float32",
        "torch",
    )
    assert "onnxruntime" in graph["throughput"]["sides"]["query"]["backend"]
    assert f"questions by {export} (onnxruntime, float32 graph" in graph["summary"]
    for key, scores in torch_run["languages"].items():
        for name in ("ndcg_at_10", "mrr_at_10", "recall_at_1", "recall_at_10"):
            assert graph["languages"][key][name] == pytest.approx(scores[name], abs=1e-4), (key, name)
    line = assert_error(_run(monkeypatch, capsys, *base, "--query-model", str(export), "--query-backend", "torch"))
    assert "evaluate it with --query-backend onnx" in line
