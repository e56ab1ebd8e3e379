"""`export --format openvino` (OpenVINO IR, float32 or NNCF int8) and `--backend openvino`: the IR against the
PyTorch model at shapes it was not traced at, the directory it writes, eval-tatoeba's parity with torch, and the
refusals as one line each.

Run in a pytest process of their own by tests/test_openvino.py: with OpenVINO's runtime (its TBB threads) loaded,
the suite's process crashes later in tests that fork (DataLoader workers, tokenizer pools) - a segmentation fault
seen with test_loader.py, this file and test_output_protocol.py in one process, never with any two of them. A user's
process loads OpenVINO only to export or evaluate, and forks nothing after it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ST_MODULES, sample_lines
from test_onnx_eval import evaluate, tatoeba_dir
from test_onnx_export import card_snippet, pooled_like_sentence_transformers, run_card_snippet

from helpers import refused, run_main, save_tiny_teacher

pytest.importorskip("openvino")  # a guard only: the test extra installs mlminilm[openvino]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def st_xlmr(tiny_sentencepiece_dir, tmp_path_factory) -> Path:
    """A 2-layer XLM-R with e5-like sentence-transformers files (mean pooling, a 'query: ' prompt)."""
    model = save_tiny_teacher(
        tiny_sentencepiece_dir,
        tmp_path_factory.mktemp("ovxlmr"),
        kind="xlmr",
        layers=2,
        hidden=32,
        heads=4,
        intermediate=64,
    )
    (model / "modules.json").write_text(json.dumps(ST_MODULES[:2]))
    (model / "1_Pooling").mkdir()
    (model / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, "pooling_mode": "mean"})
    )
    (model / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "query: "}}))
    return model


@pytest.fixture(scope="module")
def calibration(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ovcal")
    for i, lang in enumerate(("de", "ru", "zh")):
        (folder / f"{lang}.txt").write_text("\n".join(sample_lines(lang, 30, seed=20 + i)) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def ov_exports(st_xlmr, calibration, tmp_path_factory):
    from mlminilm.config import ExportConfig
    from mlminilm.export import pipeline

    root = tmp_path_factory.mktemp("ovexports")
    made = {}
    for name, quantize in (("fp32", "none"), ("int8", "int8")):
        out = root / name
        config = ExportConfig(
            model=str(st_xlmr),
            out=out,
            format="openvino",
            quantize=quantize,
            calibration=calibration if quantize == "int8" else None,
        )
        made[name] = (out, pipeline.run(config))
    return made


def pooled(hidden, mask) -> np.ndarray:
    """Mean over real tokens, a float64 loop."""
    hidden, mask = np.asarray(hidden, dtype=np.float64), np.asarray(mask)
    out = np.zeros((hidden.shape[0], hidden.shape[2]))
    for i in range(hidden.shape[0]):
        rows = [hidden[i, t] for t in range(hidden.shape[1]) if mask[i, t]]
        out[i] = sum(rows) / len(rows)
    return out


def batches(tokenizer):
    for texts in ([sample_lines("en", 1, seed=1)[0]], sample_lines("ru", 5, seed=2)):
        yield tokenizer(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")


def test_openvino_float32_equals_pytorch_and_int8_is_close(ov_exports, st_xlmr):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from mlminilm.runtimes.openvino_runtime import OpenVinoModel

    torch_model = AutoModel.from_pretrained(st_xlmr).eval()
    tokenizer = AutoTokenizer.from_pretrained(st_xlmr)
    fp32, int8 = (OpenVinoModel(ov_exports[k][0]) for k in ("fp32", "int8"))
    for batch in batches(tokenizer):
        feed = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        with torch.no_grad():
            expected = torch_model(**feed).last_hidden_state.numpy()
        mask = feed["attention_mask"].numpy()
        got = fp32(**feed).last_hidden_state.numpy()
        assert np.abs(got - expected)[mask.astype(bool)].max() <= 1e-3 * max(1.0, np.abs(expected).max())
        a, b = pooled(expected, mask), pooled(int8(**feed).last_hidden_state.numpy(), mask)
        cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        assert cosine.min() >= 0.99, cosine  # tolerance on this tiny random model


def test_openvino_directory_and_record(ov_exports, calibration):
    for name, (out, record) in ov_exports.items():
        files = sorted(p.name for p in (out / "openvino").iterdir())
        assert files == ["export.json", "openvino_model.bin", "openvino_model.xml"]
        assert not (out / "onnx").exists() and (out / "tokenizer.json").is_file() and (out / "modules.json").is_file()
        assert record["format"] == "openvino" and record["graph"] == "openvino/openvino_model.xml"
        assert record["versions"]["openvino"] and record["dtype"] == ("int8" if name == "int8" else "float32")
        assert json.loads((out / "openvino" / "export.json").read_text())["format"] == "openvino"
    quantization = ov_exports["int8"][1]["quantization"]
    assert quantization["method"] == "nncf" and quantization["calibration"]["source"] == str(calibration)
    assert quantization["calibration"]["languages"] == {"de": 30, "ru": 30, "zh": 30}
    assert ov_exports["int8"][1]["graph_bytes"] < ov_exports["fp32"][1]["graph_bytes"]
    assert "int8 (nncf" in (ov_exports["int8"][0] / "README.md").read_text()


def test_openvino_card_names_openvino_and_its_snippet_runs(ov_exports, st_xlmr, monkeypatch):
    """The card of an OpenVINO export (int8 too) is about OpenVINO IR, not ONNX, and points to the files it has; its
    snippet runs as printed with OpenVINO and gives the model's sentence-transformers embeddings."""
    for name, (out, _) in ov_exports.items():
        card = (out / "README.md").read_text(encoding="utf-8")
        assert "OpenVINO IR" in card and "openvino/openvino_model.xml" in card and "- openvino" in card, name
        assert "ONNX" not in card and "onnx/model.onnx" not in card and "library_name" not in card, name
        # sentence-transformers' backend="openvino" is named only to say what it needs (issue 55)
        assert 'backend="openvino")` would load this directory too, but it needs optimum-intel' in card, name
        assert json.loads((out / "mlminilm.json").read_text())["title"].endswith(
            ", OpenVINO IR (" + ("int8)" if name == "int8" else "float32)")
        )
    out = ov_exports["fp32"][0]
    assert '"query: The cat sleeps."' in card_snippet(out) and "ov.Core().compile_model" in card_snippet(out)
    found = run_card_snippet(out, monkeypatch)
    expected = pooled_like_sentence_transformers(st_xlmr, found["batch"], normalize=False)
    np.testing.assert_allclose(found["embeddings"], expected, atol=1e-4, rtol=0)


def test_openvino_export_names_what_its_check_ran(st_xlmr, tmp_path, monkeypatch, capsys):
    """The summary line and the log of an OpenVINO export call the checked graph OpenVINO, not ONNX (issue 40 item 6:
    the export called itself an ONNX export)."""
    out = tmp_path / "o"
    args = ("export", "--model", str(st_xlmr), "--out", str(out), "--format", "openvino")
    code, stdout, stderr = run_main(monkeypatch, capsys, *args)
    assert code == 0, stderr
    assert "openvino/openvino_model.xml" in stdout and "max |OpenVINO - PyTorch|" in stdout, stdout
    assert "ONNX" not in stdout and "check: max |OpenVINO - PyTorch|" in stderr, (stdout, stderr)


def test_eval_tatoeba_openvino_equals_torch(ov_exports, st_xlmr, tmp_path, monkeypatch, capsys):
    data = tatoeba_dir(tmp_path / "tatoeba")
    args = ("--batch-size", "4")
    torch_doc = evaluate(
        monkeypatch, capsys, "eval-tatoeba", st_xlmr, data, tmp_path / "t", *args, "--precision", "fp32"
    )
    ov_doc = evaluate(
        monkeypatch, capsys, "eval-tatoeba", ov_exports["fp32"][0], data, tmp_path / "o", *args, "--backend", "openvino"
    )
    for lang in ("de", "ru", "zh"):
        for metric in ("xx_to_en", "en_to_xx", "examples"):
            assert ov_doc["languages"][lang][metric] == torch_doc["languages"][lang][metric], (lang, metric)
    assert ov_doc["backend"]["name"] == "openvino" and ov_doc["backend"]["runtime"].startswith("OpenVINO")
    assert ov_doc["throughput"]["backend"] == "OpenVINO" and "backend: OpenVINO, float32" in ov_doc["summary"]


def test_openvino_refusals(st_xlmr, ov_exports, calibration, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"

    def export(*args):
        return run_main(monkeypatch, capsys, "export", "--model", str(st_xlmr), "--out", str(out), *args)

    code, _, stderr = export("--format", "openvino", "--quantize", "int8", "--int8-keep", "ffn_out")
    assert code == 2 and "NNCF" in stderr and not out.exists()  # a usage error: --int8-keep is --format onnx's
    refused(export("--format", "openvino", "--quantize", "int8"), out, "needs calibration text")
    data = tatoeba_dir(tmp_path / "t")

    def evaluate_with(model, backend):
        return run_main(
            monkeypatch,
            capsys,
            "eval-tatoeba",
            "--model",
            str(model),
            "--data",
            str(data),
            "--backend",
            backend,
            "--out",
            str(out),
        )

    refused(evaluate_with(ov_exports["fp32"][0], "onnx"), out, "--format openvino", "--backend openvino")
    refused(evaluate_with(st_xlmr, "openvino"), out, "needs a directory written by `mlminilm export`")
    monkeypatch.setitem(sys.modules, "nncf", None)
    refused(
        export("--format", "openvino", "--quantize", "int8", "--calibration", str(calibration)),
        out,
        "needs the optional package nncf",
        "pip install 'mlminilm[openvino]'",
    )
    monkeypatch.setitem(sys.modules, "openvino", None)
    refused(evaluate_with(ov_exports["fp32"][0], "openvino"), out, "--backend openvino needs the optional package")


def test_openvino_refusals_before_any_work(st_xlmr, tmp_path, monkeypatch, capsys):
    """--format openvino --quantize int8 with a --calibration folder that is not there: one line, nothing written."""
    out = tmp_path / "o"
    args = ("export", "--model", str(st_xlmr), "--out", str(out), "--format", "openvino", "--quantize", "int8")
    absent = tmp_path / "absent"
    refused(run_main(monkeypatch, capsys, *args, "--calibration", str(absent)), out, f"{absent} does not exist; give")


def test_a_recipe_student_is_calibrated_on_its_parallel_pairs(st_xlmr, tmp_path, monkeypatch, capsys):
    """Issue 55 item 2: a student whose mlminilm.json names the --parallel pairs it was distilled on (and no
    prepared data) exports to OpenVINO int8 without --calibration, calibrated on those pairs (one log line says
    so); once the pairs are gone, one Error line names them and shows --calibration, and nothing is written."""
    import shutil

    student = shutil.copytree(st_xlmr, tmp_path / "student")
    pairs = tmp_path / "pairs" / "en-de.tsv"
    pairs.parent.mkdir()
    lines = zip(sample_lines("en", 20, seed=1), sample_lines("de", 20, seed=1))
    pairs.write_text("".join(f"{a}\t{b}\n" for a, b in lines), encoding="utf-8")
    record = {"title": "s", "data": "none (only the parallel / passage terms, no running text)", "parallel": str(pairs)}
    (student / "mlminilm.json").write_text(json.dumps(record), encoding="utf-8")

    def export(out: Path, *extra: str):
        args = ("export", "--model", str(student), "--out", str(out), "--format", "openvino", "--quantize", "int8")
        return run_main(monkeypatch, capsys, *args, *extra)

    code, stdout, stderr = export(tmp_path / "ov8", "--calibration-sentences", "8", "--json")
    assert code == 0, stderr
    calibration = json.loads(stdout)["quantization"]["calibration"]
    assert calibration["source"] == f"--parallel {pairs}" and calibration["kind"] == "parallel pairs"
    assert calibration["languages"] == {"de": 8, "en": 8}
    said = [line for line in stderr.splitlines() if "calibration text:" in line]
    assert len(said) == 1 and str(pairs) in said[0] and "was distilled on" in said[0], stderr
    shutil.rmtree(pairs.parent)
    error = refused(export(tmp_path / "gone"), tmp_path / "gone", f"--parallel {pairs}", "no longer there")
    assert "--calibration PATH" in error and "tab-separated pairs" in error
    refused(export(tmp_path / "given", "--calibration", str(pairs)), tmp_path / "given", f"{pairs} does not exist")


def test_ir_without_a_recorded_input_is_one_line(ov_exports, tmp_path, monkeypatch, capsys):
    """An IR that loads but whose input_ids port is named otherwise, while export.json names input_ids: one line at
    load (OpenVINO's own error came at the first batch: "Port for tensor name input_ids was not found")."""
    import shutil

    copy = shutil.copytree(ov_exports["fp32"][0], tmp_path / "renamed")
    xml = copy / "openvino" / "openvino_model.xml"
    text = xml.read_text(encoding="utf-8")
    assert 'names="input_ids"' in text
    xml.write_text(text.replace('names="input_ids"', 'names="ids"'), encoding="utf-8")
    data, out = tatoeba_dir(tmp_path / "t"), tmp_path / "report"
    args = ("--model", str(copy), "--data", str(data), "--out", str(out), "--backend", "openvino")
    refused(run_main(monkeypatch, capsys, "eval-tatoeba", *args), out, "the graph lacks input_ids", "export the model")


def test_calibration_names_and_lines(st_xlmr, calibration, tmp_path, monkeypatch, capsys):
    """--calibration: a file name that cannot be a language code is one line before any work; a line of 3 MB is
    cut as it is read (one warning) and the int8 IR is written."""
    import shutil

    out = tmp_path / "o"
    args = ("export", "--model", str(st_xlmr), "--out", str(out), "--format", "openvino", "--quantize", "int8")
    bad = shutil.copytree(calibration, tmp_path / "bad")
    (bad / "xx.txt").write_text("Une phrase.\n", encoding="utf-8")
    refused(run_main(monkeypatch, capsys, *args, "--calibration", str(bad)), out, "'xx'", "file names are language")
    huge = shutil.copytree(calibration, tmp_path / "huge")
    with (huge / "de.txt").open("a", encoding="utf-8") as handle:
        handle.write("Der Hund läuft durch den Park. " * 100_000 + "\n")
    code, _, stderr = run_main(monkeypatch, capsys, *args, "--calibration", str(huge), "--json")
    assert code == 0, stderr
    cut = [line for line in stderr.splitlines() if "cut to that length" in line]
    assert len(cut) == 1 and "1 line(s) longer than 10000 characters" in cut[0], cut
    assert (out / "openvino" / "openvino_model.xml").is_file()
