"""int8 exports (issue 29): calibration text and its refusals (OpenVINO's int8 reads it: tests/test_openvino.py),
the float32 roles `--int8-keep` leaves in the graph, and the per-language fidelity report (`--check`) recomputed
here from the graphs themselves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import sample_lines

from helpers import prepare_data, run_main, save_tiny_teacher

pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LANGS = ("de", "fr", "ru")
ISO = {"de": "deu", "fr": "fra", "ru": "rus"}


@pytest.fixture(scope="module")
def bert(tiny_wordpiece_dir, tmp_path_factory) -> Path:
    return save_tiny_teacher(
        tiny_wordpiece_dir, tmp_path_factory.mktemp("bert8"), layers=3, hidden=32, heads=4, intermediate=64
    )


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("calibration")
    for i, lang in enumerate(LANGS):
        (folder / f"{lang}.txt").write_text("\n".join(sample_lines(lang, 40, seed=i)) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def tatoeba(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tatoeba8")
    for i, lang in enumerate(LANGS):
        iso = ISO[lang]
        (folder / f"tatoeba.{iso}-eng.{iso}").write_text("\n".join(sample_lines(lang, 12, seed=10 + i)) + "\n")
        (folder / f"tatoeba.{iso}-eng.eng").write_text("\n".join(sample_lines("en", 12, seed=10 + i)) + "\n")
    return folder


@pytest.fixture(scope="module")
def fp32(bert, tmp_path_factory) -> Path:
    """The float32 export of `bert`, which the int8 graphs are compared with (the same trace as theirs)."""
    from mlminilm.config import ExportConfig
    from mlminilm.export import pipeline

    out = tmp_path_factory.mktemp("fp32") / "export"
    pipeline.run(ExportConfig(model=str(bert), out=out))
    return out


def export(monkeypatch, capsys, model: Path, out: Path, *args: str) -> dict:
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "export", "--model", str(model), "--out", str(out), "--json", *args
    )
    assert code == 0, stderr
    return json.loads(stdout)


def refused(result, out: Path | None, *needles: str) -> None:
    code, stdout, stderr = result
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert code != 0 and len(errors) == 1 and not stdout and "Traceback" not in stderr, (code, stdout, stderr)
    for needle in needles:
        assert needle in errors[0], errors[0]
    if out is not None:
        assert not out.exists() and not list(out.parent.glob(f".tmp-{out.name}-*"))


def run_graph(graph: Path, tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    encoded = tokenizer(texts, padding=True, truncation=True, max_length=64, return_tensors="np")
    feed = {n: (encoded[n] if n in encoded else np.zeros_like(encoded["input_ids"])).astype(np.int64) for n in names}
    (hidden,) = session.run(None, feed)
    return hidden, encoded["attention_mask"]


def mean_pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """A plain float64 loop: the mean of each sentence's real-token vectors."""
    out = np.zeros((hidden.shape[0], hidden.shape[2]))
    for i in range(hidden.shape[0]):
        count = 0
        for t in range(hidden.shape[1]):
            if mask[i, t]:
                out[i] += hidden[i, t].astype(np.float64)
                count += 1
        out[i] /= count
    return out


# ------------------------------------------------------------------------------------------ calibration


def test_calibration_from_text_files(bert, text_dir):
    from transformers import AutoTokenizer

    from mlminilm.export.calibration import read_calibration

    tokenizer = AutoTokenizer.from_pretrained(bert)
    text = read_calibration(text_dir, tokenizer, per_language=10)
    assert list(text.sentences) == sorted(LANGS) and text.kind == "text files"
    for i, lang in enumerate(LANGS):
        lines = set(sample_lines(lang, 40, seed=i))
        assert len(text.sentences[lang]) == 10 and set(text.sentences[lang]) <= lines
        assert len(set(text.sentences[lang])) == 10
    assert read_calibration(text_dir, tokenizer, per_language=10) == text  # seeded: the same draw twice
    assert read_calibration(text_dir, tokenizer, per_language=100).sentences["de"] == sample_lines("de", 40, seed=0)


def test_calibration_from_prepared_data(bert, text_dir, tmp_path):
    """The documents of a `prepare` output, read back from its token ids, are lines it was prepared from (those the
    packing cut at a sequence's end are left out)."""
    from transformers import AutoTokenizer

    from mlminilm.export.calibration import read_calibration

    data = prepare_data(bert, text_dir, tmp_path / "data", seq_len=64)
    tokenizer = AutoTokenizer.from_pretrained(bert)
    text = read_calibration(data, tokenizer, per_language=1000)
    assert text.kind == "prepared data" and list(text.sentences) == sorted(LANGS)
    for i, lang in enumerate(LANGS):
        expected = {
            tokenizer.decode(tokenizer(line, add_special_tokens=False)["input_ids"])
            for line in sample_lines(lang, 40, seed=i)
        }
        got = text.sentences[lang]
        assert len(got) >= 30 and set(got) <= expected and len(set(got)) == len(got), (lang, len(got))


def test_calibration_refusals(bert, text_dir, tmp_path):
    from transformers import AutoTokenizer

    from mlminilm.errors import DataError
    from mlminilm.export.calibration import read_calibration

    tokenizer = AutoTokenizer.from_pretrained(bert)
    with pytest.raises(DataError, match="absent does not exist; give a `prepare` output"):
        read_calibration(tmp_path / "absent", tokenizer)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.md").write_text("not a language file")
    with pytest.raises(DataError, match="holds no language"):
        read_calibration(empty, tokenizer)
    gap = tmp_path / "gap"
    gap.mkdir()
    (gap / "de.txt").write_text("Ein Satz.\n")
    (gap / "fr.txt").write_text("\n  \n")
    with pytest.raises(DataError, match="no sentences for fr"):
        read_calibration(gap, tokenizer)


def test_calibration_refuses_data_of_another_vocabulary(bert, tiny_sentencepiece_dir, text_dir, tmp_path):
    from transformers import AutoTokenizer

    from mlminilm.errors import DataError
    from mlminilm.export.calibration import read_calibration

    other = save_tiny_teacher(tiny_sentencepiece_dir, tmp_path / "xlmr", kind="xlmr", layers=1, hidden=16, heads=2)
    data = prepare_data(other, text_dir, tmp_path / "data", seq_len=32)
    with pytest.raises(DataError, match="another vocabulary"):
        read_calibration(data, AutoTokenizer.from_pretrained(bert))


# ------------------------------------------------------------------------------------------ the methods


def test_kept_roles_reach_the_graph(bert, tmp_path, monkeypatch, capsys):
    """`--int8-keep ffn_out,embeddings`: the feed-forward output MatMuls (weights [intermediate, hidden], read
    from the config here) keep float32 weights, every other weight MatMul reads int8, the word embeddings stay."""
    import onnx
    from onnx import numpy_helper

    out = tmp_path / "kept"
    record = export(monkeypatch, capsys, bert, out, "--quantize", "int8", "--int8-keep", "ffn_out,embeddings")
    assert record["quantization"]["float32_kept"] == ["ffn_out", "embeddings"]
    model = onnx.load(str(out / "onnx" / "model.onnx"))
    config = json.loads((bert / "config.json").read_text())
    floats = {
        i.name: numpy_helper.to_array(i) for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT
    }
    float_matmuls = [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in floats]
    shapes = sorted(floats[n.input[1]].shape for n in float_matmuls)
    assert shapes == [(config["intermediate_size"], config["hidden_size"])] * config["num_hidden_layers"]
    integer = [n for n in model.graph.node if n.op_type == "MatMulInteger"]
    assert len(integer) == 5 * config["num_hidden_layers"]  # Q, K, V, attention output, FFN input
    word = [
        n
        for n in model.graph.node
        if n.op_type == "Gather" and n.input[0] in floats and floats[n.input[0]].shape[0] == config["vocab_size"]
    ]
    assert len(word) == 1


# ---------------------------------------------------------------------------------------- fidelity report


def test_fidelity_numbers_by_hand():
    from mlminilm.export.fidelity import language_fidelity

    rng = np.random.default_rng(0)
    xx, en = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    en[:3] = xx[:3] + 0.01  # three true translations that float32 finds
    xx8, en8 = xx.copy(), en.copy()
    xx8[0] = -xx8[0]  # int8 flips one sentence: it is lost
    got = language_fidelity([xx, en], [xx8, en8])
    cos = []
    for a, b in ((xx, xx8), (en, en8)):
        for i in range(6):
            cos.append(float(a[i] @ b[i] / (np.linalg.norm(a[i]) * np.linalg.norm(b[i]))))
    assert got["cosine_min"] == pytest.approx(min(cos)) and got["cosine_mean"] == pytest.approx(sum(cos) / 12)

    def nearest(q, k, i):
        scores = [q[i] @ k[j] / (np.linalg.norm(q[i]) * np.linalg.norm(k[j])) for j in range(len(k))]
        return int(np.argmax(scores))

    acc, same = {}, 0
    for name, (q, k, q8, k8) in {"xx_to_en": (xx, en, xx8, en8), "en_to_xx": (en, xx, en8, xx8)}.items():
        f = [nearest(q, k, i) for i in range(6)]
        g = [nearest(q8, k8, i) for i in range(6)]
        acc[name] = (100 * sum(f[i] == i for i in range(6)) / 6, 100 * sum(g[i] == i for i in range(6)) / 6)
        same += sum(a == b for a, b in zip(f, g))
    for name, (f, g) in acc.items():
        assert got["accuracy"][name] == {"float32": pytest.approx(f), "int8": pytest.approx(g)}
    assert got["drop"] == pytest.approx(max(f - g for f, g in acc.values())) and got["drop"] > 0
    assert got["top1_agreement"] == pytest.approx(100 * same / 12)


def test_export_check_recomputed_from_the_graphs(bert, fp32, tatoeba, tmp_path, monkeypatch, capsys):
    """`--check DIR`: every language's figures in export.json equal those recomputed here from the float32 graph
    (an export of its own: the same trace) and the int8 graph, with a pooling loop of this test's."""
    from transformers import AutoTokenizer

    int8 = tmp_path / "int8"
    record = export(
        monkeypatch,
        capsys,
        bert,
        int8,
        "--quantize",
        "int8",
        "--check",
        str(tatoeba),
        "--check-sentences",
        "10",
    )
    report = record["fidelity"]
    assert report["kind"] == "tatoeba" and sorted(report["languages"]) == sorted(LANGS)
    assert json.loads((int8 / "onnx" / "export.json").read_text())["fidelity"] == report
    tokenizer = AutoTokenizer.from_pretrained(bert)
    for lang in LANGS:
        iso = ISO[lang]
        sides = [(tatoeba / f"tatoeba.{iso}-eng.{s}").read_text().splitlines()[:10] for s in (iso, "eng")]
        vec = {}
        for name, folder in (("f", fp32), ("q", int8)):
            vec[name] = [mean_pooled(*run_graph(folder / "onnx" / "model.onnx", tokenizer, side)) for side in sides]
        unit = {k: [v / np.linalg.norm(v, axis=1, keepdims=True) for v in vs] for k, vs in vec.items()}
        cosine = np.concatenate([(a * b).sum(1) for a, b in zip(unit["f"], unit["q"])])
        got = report["languages"][lang]
        assert got["sentences"] == 20
        assert got["cosine_mean"] == pytest.approx(cosine.mean(), abs=1e-5)
        assert got["cosine_min"] == pytest.approx(cosine.min(), abs=1e-5)
        f_acc = 100 * np.mean((unit["f"][0] @ unit["f"][1].T).argmax(1) == np.arange(10))
        q_acc = 100 * np.mean((unit["q"][0] @ unit["q"][1].T).argmax(1) == np.arange(10))
        assert got["accuracy"]["xx_to_en"] == {"float32": pytest.approx(f_acc), "int8": pytest.approx(q_acc)}
    card = (int8 / "README.md").read_text()
    assert "per language" in card and all(f"| {lang} |" in card for lang in LANGS)


def test_strict_refuses_a_language_over_max_drop(bert, tatoeba, tmp_path, monkeypatch, capsys):
    from mlminilm.export import fidelity

    real = fidelity.language_fidelity

    def costly(f, q):  # int8 made to cost every language 5 points: the refusal path, not the numbers
        return {**real(f, q), "drop": 5.0}

    monkeypatch.setattr(fidelity, "language_fidelity", costly)
    monkeypatch.setattr("mlminilm.export.int8_step.language_fidelity", costly)
    out = tmp_path / "strict"
    base = (
        "export",
        "--model",
        str(bert),
        "--out",
        str(out),
        "--quantize",
        "int8",
        "--check",
        str(tatoeba),
        "--check-sentences",
        "6",
    )
    refused(run_main(monkeypatch, capsys, *base, "--strict"), out, "--strict", "de, fr, ru", "--max-drop 1")
    code, _, stderr = run_main(monkeypatch, capsys, *base)  # without --strict: written, one warning per language
    assert code == 0 and sum("int8 costs" in line for line in stderr.splitlines()) == 3


def test_int8_option_refusals(bert, text_dir, tatoeba, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"

    def run(*args):
        return run_main(monkeypatch, capsys, "export", "--model", str(bert), "--out", str(out), *args)

    refused(run("--calibration", str(text_dir)), out, "--calibration", "only applies with --quantize int8")
    refused(run("--check", str(tatoeba)), out, "--check", "only applies with --quantize int8")
    refused(run("--quantize", "int8", "--calibration", str(text_dir)), out, "--format openvino", "needs none")
    refused(run("--quantize", "int8", "--strict"), out, "--strict needs --check")
    refused(run("--quantize", "int8", "--check", str(tmp_path / "absent")), out, "--check", "is not a folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(run("--quantize", "int8", "--check", str(empty)), out, f"--check {empty} holds no language")
    refused(run("--quantize", "int8", "--int8-keep", "ffn"), out, "--int8-keep must be one of", "'ffn'")
