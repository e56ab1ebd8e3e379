"""OpenVINO for `export --format openvino` and `--backend openvino`: the float32 ONNX graph the exporter traced,
converted to OpenVINO's IR (openvino/openvino_model.xml + .bin, where sentence-transformers' backend="openvino"
looks), optionally quantised to int8 by NNCF, and run on the CPU as the evaluations call a PyTorch model.

int8 here is NNCF's post-training quantisation with its transformer preset (`nncf.quantize(model_type=
TRANSFORMER)`): static int8 (activation scales fixed from calibration text, per-channel weights), SmoothQuant on the
MatMul inputs, the operations the preset leaves in float (LayerNorm, GELU, Softmax and the residual adds among them)
and a bias correction; the word embeddings in int8, the position and token-type tables in float (small_tables).
Measured per language against onnxruntime's int8 in docs/BENCHMARKS.md section 13.
"""

from __future__ import annotations

from pathlib import Path

from mlminilm.errors import ConfigError
from mlminilm.models.onnx_runtime import GraphModel

OPENVINO_EXTRA = "pip install 'mlminilm[openvino]'"
IR = "openvino/openvino_model.xml"  # sentence-transformers' backend="openvino" (and optimum-intel) read this name


def require_openvino(what: str, quantize: bool = False) -> None:
    """ConfigError naming the extra when openvino (and, to quantise, nncf) cannot be imported."""
    import importlib

    missing = []
    for name in ("openvino", *(("nncf",) if quantize else ())):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ConfigError(
            f"{what} needs the optional package{'s' if len(missing) > 1 else ''} {', '.join(missing)}, "
            f"which {'are' if len(missing) > 1 else 'is'} not installed: {OPENVINO_EXTRA}"
        )


def versions() -> dict[str, str | None]:
    from importlib import metadata

    found = {}
    for name in ("openvino", "nncf"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def convert(onnx_graph: Path, target: Path, batches=None, subset: int = 0) -> None:
    """The ONNX graph as OpenVINO IR at `target` (float32 weights); with `batches` (calibration inputs, dicts of
    int64 arrays), quantised to int8 by NNCF's transformer preset on `subset` of them first."""
    import contextlib
    import sys

    import openvino as ov

    with contextlib.redirect_stdout(sys.stderr):  # NNCF's progress bars to stderr: stdout is for results
        model = ov.convert_model(str(onnx_graph))
        if batches is not None:
            import logging

            import nncf

            nncf.set_log_level(logging.ERROR)
            model = nncf.quantize(
                model,
                nncf.Dataset(list(batches)),
                model_type=nncf.ModelType.TRANSFORMER,
                subset_size=subset,
                ignored_scope=nncf.IgnoredScope(names=small_tables(onnx_graph), validate=False),
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        ov.save_model(model, str(target), compress_to_fp16=False)


def small_tables(onnx_graph: Path) -> list[str]:
    """The embedding lookups other than the word embeddings' (positions, token types), which NNCF leaves in float:
    quantised, an XLM-R graph (positions computed from input_ids) no longer compiles (OpenVINO 2026.4: "constant_fold
    failed"), and their tables are a few hundred rows, nothing of the file's size or the time."""
    import onnx

    graph = onnx.load(str(onnx_graph), load_external_data=False).graph
    tables = {i.name for i in graph.initializer}
    return [
        n.name
        for n in graph.node
        if n.op_type == "Gather" and n.input[0] in tables and "word_embeddings" not in n.input[0]
    ]


def compiled(graph: Path, threads: int | None = None):
    """The IR compiled for the CPU on `threads` threads (default: torch's count), float32 inference precision (a
    CPU with bf16 would otherwise run float32 layers in bf16), one stream."""
    import openvino as ov

    if threads is None:
        import torch

        threads = torch.get_num_threads()
    config = {
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32",
    }
    try:
        return ov.Core().compile_model(str(graph), "CPU", config)
    except Exception as exc:  # noqa: BLE001 - OpenVINO raises RuntimeError with its own text for any damage
        # OpenVINO's first line names only its source file: the reason is the last non-empty line.
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
        first = lines[-1]
        raise ConfigError(
            f"{graph}: OpenVINO cannot load this model ({first[:300]}); export it again with `mlminilm export`"
        ) from None


class OpenVinoModel(GraphModel):
    """The IR of an `export --format openvino` directory, called like the transformers model it was exported
    from (as mlminilm.models.onnx_runtime.OnnxModel): inference only."""

    runtime = "OpenVINO"

    def __init__(self, directory: str | Path, threads: int | None = None, record=None):
        from mlminilm.models.onnx_runtime import read_export

        record = record or read_export(directory)
        model = compiled(record.graph, threads)
        super().__init__(record, [set(port.get_names()) for port in model.inputs])
        self.request = model.create_infer_request()

    def run(self, feed: dict):
        # A copy: the request reuses its output buffer on the next call.
        return next(iter(self.request.infer(feed).values())).copy()
