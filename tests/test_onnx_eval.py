"""`--backend onnx` of eval-tatoeba, eval-xnli and eval-retrieval: the figures and predictions of the PyTorch model
from its export, compare across backends, the int8 graph's report, and every refusal (missing packages, a layer or
device the graph cannot give, a damaged or edited export) as one line that leaves nothing behind. The models and
exports: tests/conftest.py."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import sample_lines
from taskdata import write_xnli_dir

from helpers import refused, run_main

pytest.importorskip("onnxruntime")  # a guard only: the test extra installs mlminilm[onnx]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -------------------------------------------------------------------------------- evaluations, both ways


def write_pair(folder: Path, iso: str, source: list[str], english: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"tatoeba.{iso}-eng.{iso}").write_text("".join(s + "\n" for s in source), encoding="utf-8")
    (folder / f"tatoeba.{iso}-eng.eng").write_text("".join(s + "\n" for s in english), encoding="utf-8")
    return folder


def tatoeba_dir(folder: Path) -> Path:
    """Pairs that are not copies of each other (the English side drops a word), so retrieval is not trivial."""
    for iso, lang in (("deu", "de"), ("rus", "ru"), ("cmn", "zh")):
        source = list(dict.fromkeys(sample_lines(lang, 12, seed=5)))
        write_pair(folder, iso, source, [" ".join(s.split()[1:]) or s for s in source])
    return folder


def evaluate(monkeypatch, capsys, command: str, model: Path, data: Path, out: Path, *args: str) -> dict:
    code, stdout, stderr = run_main(
        monkeypatch, capsys, command, "--model", str(model), "--data", str(data), "--out", str(out), "--json", *args
    )
    assert code == 0, stderr
    return json.loads(stdout)


@pytest.mark.parametrize("name, source, layer", [("bert", "bert", ("--layer", "-1")), ("st", "st_xlmr", ())])
def test_eval_tatoeba_onnx_equals_torch(name, source, layer, exports, request, tmp_path, monkeypatch, capsys):
    data = tatoeba_dir(tmp_path / "tatoeba")
    model = request.getfixturevalue(source)
    out, _ = exports[name]
    torch_doc = evaluate(
        monkeypatch,
        capsys,
        "eval-tatoeba",
        model,
        data,
        tmp_path / "torch",
        *layer,
        "--precision",
        "fp32",
        "--batch-size",
        "4",
    )
    onnx_doc = evaluate(
        monkeypatch,
        capsys,
        "eval-tatoeba",
        out,
        data,
        tmp_path / "onnx",
        *layer,
        "--backend",
        "onnx",
        "--batch-size",
        "4",
    )
    for lang in ("de", "ru", "zh"):
        for metric in ("xx_to_en", "en_to_xx", "correct_xx_to_en", "correct_en_to_xx", "examples"):
            assert onnx_doc["languages"][lang][metric] == torch_doc["languages"][lang][metric], (lang, metric)
        for suffix in ("", ".en_to_xx"):
            predictions = f"predictions/test-{lang}{suffix}.tsv"
            assert (tmp_path / "onnx" / predictions).read_text() == (tmp_path / "torch" / predictions).read_text()
    assert 0 < torch_doc["average"]["xx_to_en"] < 100  # not a trivial retrieval
    assert onnx_doc["embedding"]["layer"] == torch_doc["embedding"]["layer"] == onnx_doc["embedding"]["num_layers"]
    assert onnx_doc["embedding"]["prefix"] == ("query: " if name == "st" else "")
    assert torch_doc["backend"] == {"name": "torch", "dtype": "float32"}
    assert onnx_doc["backend"]["name"] == "onnx" and onnx_doc["backend"]["dtype"] == "float32"
    assert (
        onnx_doc["throughput"]["backend"] == "onnxruntime"
        and "backend: onnxruntime, float32 graph" in onnx_doc["summary"]
    )

    # compare: one protocol whatever the backend; the rows are the reports' directories, the models their paths.
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "compare", str(tmp_path / "torch"), str(tmp_path / "onnx"), "--json"
    )
    assert code == 0, stderr
    comparison = json.loads(stdout)
    assert list(comparison["reports"]) == ["torch", "onnx"]
    assert comparison["reports"]["onnx"]["model"] == str(out) != comparison["reports"]["torch"]["model"]
    assert comparison["average"]["ratio"]["onnx"]["xx_to_en"] == pytest.approx(1.0)
    assert "float32 graph" in comparison["reports"]["onnx"]["summary"]


def test_eval_tatoeba_int8_reports_its_dtype(exports, tmp_path, monkeypatch, capsys):
    out, _ = exports["bert-int8"]
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-tatoeba",
        "--model",
        str(out),
        "--data",
        str(tatoeba_dir(tmp_path / "t")),
        "--out",
        str(tmp_path / "r"),
        "--json",
        "--layer",
        "-1",
        "--backend",
        "onnx",
    )
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert "on cpu (onnxruntime, int8 graph" in stderr  # the log says what runs the forward pass
    assert doc["backend"]["dtype"] == doc["throughput"]["precision"] == doc["embedding"]["weights_dtype"] == "int8"
    assert doc["backend"]["quantization"]["per_channel"] is True and "int8 graph" in doc["summary"]


def test_eval_xnli_onnx_equals_torch(exports, classifier, tmp_path, monkeypatch, capsys):
    data = write_xnli_dir(tmp_path / "xnli", ("en", "de", "zh"), count=9)
    out, _ = exports["classifier"]
    torch_doc = evaluate(
        monkeypatch,
        capsys,
        "eval-xnli",
        classifier,
        data,
        tmp_path / "torch",
        "--precision",
        "fp32",
        "--batch-size",
        "4",
    )
    onnx_doc = evaluate(
        monkeypatch, capsys, "eval-xnli", out, data, tmp_path / "onnx", "--backend", "onnx", "--batch-size", "4"
    )
    for lang in ("en", "de", "zh"):
        for key in ("accuracy", "confusion", "correct", "examples"):
            assert onnx_doc["languages"][lang][key] == torch_doc["languages"][lang][key], (lang, key)
        name = f"predictions/test-{lang}.tsv"
        assert (tmp_path / "onnx" / name).read_text() == (tmp_path / "torch" / name).read_text()
    assert onnx_doc["settings"] == torch_doc["settings"]  # the max length of the fine-tuning run, from its run.json
    assert onnx_doc["selection"] == torch_doc["selection"] and onnx_doc["backend"]["name"] == "onnx"
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "compare", str(tmp_path / "torch"), str(tmp_path / "onnx"), "--json"
    )
    assert code == 0, stderr
    scores = json.loads(stdout)["average"]["scores"]
    assert scores["onnx"] == scores["torch"]


def test_eval_retrieval_onnx_equals_torch(exports, st_xlmr, tmp_path, monkeypatch, capsys):
    """eval-retrieval on the exported graph ranks every passage as the PyTorch model does (its query and passage
    prompts, the last layer), so the two reports agree to the last figure and their rankings line by line."""
    from test_eval_retrieval import write_squad

    lines = list(dict.fromkeys(sample_lines("de", 30, seed=9)))
    contexts = [" ".join(lines[i : i + 3]) for i in range(0, 18, 3)]
    paragraphs = [(c, [(f"q{i}", " ".join(c.split()[1:6]))]) for i, c in enumerate(contexts)]
    data = write_squad(tmp_path / "qa" / "dev-context-de-question-de.json", paragraphs)
    out, _ = exports["st"]
    torch_doc = evaluate(
        monkeypatch, capsys, "eval-retrieval", st_xlmr, data, tmp_path / "torch", "--precision", "fp32"
    )
    onnx_doc = evaluate(monkeypatch, capsys, "eval-retrieval", out, data, tmp_path / "onnx", "--backend", "onnx")
    for metric in ("ndcg_at_10", "mrr_at_10", "recall_at_1", "examples", "corpus"):
        assert onnx_doc["languages"]["de"][metric] == pytest.approx(torch_doc["languages"]["de"][metric]), metric
    assert [line.split()[:4] for line in (tmp_path / "onnx" / "predictions" / "de.trec").read_text().splitlines()] == [
        line.split()[:4] for line in (tmp_path / "torch" / "predictions" / "de.trec").read_text().splitlines()
    ]
    assert onnx_doc["embedding"]["passage"]["prefix"] == torch_doc["embedding"]["passage"]["prefix"]
    assert onnx_doc["backend"]["name"] == "onnx" and torch_doc["benchmark"] == "mlqa"


# ------------------------------------------------------------------------------------------------ refusals


def test_missing_onnx_packages_are_one_line(bert, exports, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    out = tmp_path / "o"
    refused(
        run_main(monkeypatch, capsys, "export", "--model", str(bert), "--out", str(out)),
        out,
        "needs the optional package onnxruntime",
        "pip install 'mlminilm[onnx]'",
    )
    data = tatoeba_dir(tmp_path / "t")
    refused(
        run_main(
            monkeypatch,
            capsys,
            "eval-tatoeba",
            "--model",
            str(exports["bert"][0]),
            "--data",
            str(data),
            "--layer",
            "-1",
            "--backend",
            "onnx",
            "--out",
            str(out),
        ),
        out,
        "--backend onnx needs the optional package onnxruntime",
        "pip install 'mlminilm[onnx]'",
    )


def test_eval_backend_refusals(bert, exports, tmp_path, monkeypatch, capsys):
    data = tatoeba_dir(tmp_path / "t")
    out = tmp_path / "report"

    def tatoeba(model, *args):
        return run_main(
            monkeypatch, capsys, "eval-tatoeba", "--model", str(model), "--data", str(data), "--out", str(out), *args
        )

    refused(tatoeba(bert, "--backend", "onnx", "--layer", "-1"), out, "no onnx/export.json", "mlminilm export --model")
    bert_export = exports["bert"][0]
    refused(
        tatoeba(bert_export, "--backend", "onnx", "--layer", "2"),
        out,
        "only the last layer",
        "not layer 2 of 4 (--layer)",
        "add --layer -1",
        "--backend torch",
    )
    # Without --layer a plain encoder is read at XTREME's layer (3 of 4), which the graph does not have.
    refused(tatoeba(bert_export, "--backend", "onnx"), out, "not layer 3 of 4 (XTREME's choice", "--layer -1")
    refused(
        tatoeba(bert_export, "--backend", "onnx", "--layer", "-1", "--precision", "bf16"),
        out,
        "--precision bf16 needs --backend torch",
    )
    refused(
        tatoeba(bert_export, "--backend", "onnx", "--layer", "-1", "--device", "cuda"),
        out,
        "--device cuda needs --backend torch",
    )
    refused(tatoeba(bert_export, "--layer", "-1"), out, "is an ONNX export", "--backend onnx")
    refused(
        tatoeba(exports["classifier"][0], "--backend", "onnx", "--layer", "-1"),
        out,
        "export of a sequence-classification model",
        "needs a feature-extraction export",
    )
    xnli = write_xnli_dir(tmp_path / "xnli", ("en",), count=3)
    refused(
        run_main(
            monkeypatch,
            capsys,
            "eval-xnli",
            "--model",
            str(exports["classifier"][0]),
            "--data",
            str(xnli),
            "--out",
            str(out),
        ),
        out,
        "is an ONNX export",
        "--backend onnx",
    )
    # Issue 27: a damaged graph, a field of the wrong type, and a graph outside the export: one line each.

    def edited(name: str, **fields) -> Path:
        copy = tmp_path / name
        shutil.copytree(bert_export, copy)
        record = json.loads((copy / "onnx" / "export.json").read_text())
        (copy / "onnx" / "export.json").write_text(json.dumps({**record, **fields}))
        return copy

    damaged = edited("damaged")
    (damaged / "onnx" / "model.onnx").write_bytes((damaged / "onnx" / "model.onnx").read_bytes()[:2000])
    refused(
        tatoeba(damaged, "--backend", "onnx", "--layer", "-1"),
        out,
        "onnxruntime cannot load this graph",
        "export the model again",
    )
    refused(
        tatoeba(edited("words", num_layers="four"), "--backend", "onnx", "--layer", "-1"),
        out,
        "num_layers is 'four', not a layer count",
    )
    shutil.copyfile(bert_export / "onnx" / "model.onnx", tmp_path / "elsewhere.onnx")
    refused(
        tatoeba(edited("outside", graph="../../elsewhere.onnx"), "--backend", "onnx", "--layer", "-1"),
        out,
        "lies outside the export directory",
    )
    refused(
        tatoeba(edited("absolute", graph=str(tmp_path / "elsewhere.onnx")), "--backend", "onnx", "--layer", "-1"),
        out,
        "lies outside the export directory",
    )
