"""OpenVINO at run time for `--backend openvino` (and the export's own checks): the IR of an `export --format
openvino` directory (openvino/openvino_model.xml + .bin, where sentence-transformers' backend="openvino" looks),
compiled for the CPU and called as the evaluations call a PyTorch model. How the IR is made (converted from the
float32 ONNX graph, optionally quantised to int8 by NNCF): mlminilm.export.openvino_ir.
"""

from __future__ import annotations

from pathlib import Path

from mlminilm.errors import ConfigError
from mlminilm.runtimes.onnx_runtime import GraphModel

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
    from (as mlminilm.runtimes.onnx_runtime.OnnxModel): inference only."""

    runtime = "OpenVINO"

    def __init__(self, directory: str | Path, threads: int | None = None, record=None):
        from mlminilm.runtimes.onnx_runtime import read_export

        record = record or read_export(directory)
        model = compiled(record.graph, threads)
        super().__init__(record, [set(port.get_names()) for port in model.inputs])
        self.request = model.create_infer_request()

    def run(self, feed: dict):
        # A copy: the request reuses its output buffer on the next call.
        return next(iter(self.request.infer(feed).values())).copy()
