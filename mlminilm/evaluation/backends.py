"""Which forward pass an evaluation runs (`--backend`): the PyTorch model, or the graph of an `mlminilm export`
directory in onnxruntime (mlminilm.runtimes.onnx_runtime.OnnxModel, called as the PyTorch model is called).

Only the forward pass differs: tokenisation, padding, batching by length, pooling, label mapping and the report
are the evaluations' own code either way. The report records the backend (`backend` in metrics.json, the graph's
dtype as the throughput's precision, a line under the table), so that two reports of one model, run by PyTorch and
by onnxruntime, can be told apart and still be compared (`mlminilm compare`: the backend is no part of the
protocol).
"""

from __future__ import annotations

from mlminilm.errors import ConfigError
from mlminilm.runtimes.onnx_runtime import ExportRecord, OnnxModel, read_export, refuse_torch_on_export, require_onnx


def check(backend: str, model: str, task: str, flag: str = "--backend") -> ExportRecord | None:
    """Before any work: with onnx, the optional packages and `model`'s export record (of `task`); with torch, a
    model directory that is an export without PyTorch weights is refused with the flag that reads it. `flag`: the
    option that chose `backend` (eval-retrieval's --query-backend), as the refusals name it."""
    if flag != "--backend":
        try:
            return check(backend, model, task)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("--backend ", f"{flag} ")) from None
    if backend in ("onnx", "openvino"):
        if backend == "onnx":
            require_onnx("--backend onnx")
        else:
            from mlminilm.runtimes.openvino_runtime import require_openvino

            require_openvino("--backend openvino")
        record = read_export(model, task)
        if record.format != backend:
            raise ConfigError(
                f"{model} is an export of --format {record.format}: evaluate it with --backend {record.format}"
            )
        return record
    refuse_torch_on_export(model)
    return None


def runtime(cfg, backend: str | None = None):
    """The runtime of the run: --device and --precision for torch; the CPU in float32 for onnx (the graph computes
    in its own dtype; the runtime only says where batches are built). `backend`: another than `cfg.backend` (the
    query model's in eval-retrieval), under the same --device and --precision."""
    from mlminilm import training

    if (backend or cfg.backend) in ("onnx", "openvino"):
        return training.setup_runtime("cpu", "fp32")
    return training.setup_runtime(cfg.device, cfg.precision)


def onnx_model(record: ExportRecord):
    """The export's graph in an onnxruntime session (OpenVINO for an OpenVINO export) with as many threads as
    torch uses here."""
    if record.format == "openvino":
        from mlminilm.runtimes.openvino_runtime import OpenVinoModel

        return OpenVinoModel(record.directory, record=record)
    return OnnxModel(record.directory, record=record)


def where(export: ExportRecord | None, rt) -> str:
    """Where the forward pass runs, for the log: the device, and the graph when onnxruntime runs it."""
    return str(rt.device) if export is None else f"{rt.device} ({export.describe()})"


def record(export: ExportRecord | None, rt) -> dict:
    """The report's `backend`: what ran the forward pass, in which dtype."""
    if export is None:
        return {"name": "torch", "dtype": str(rt.dtype).replace("torch.", "")}
    import torch

    from mlminilm.runtimes.onnx_runtime import versions

    if export.format == "openvino":
        from mlminilm.runtimes.openvino_runtime import versions as openvino_versions

        engine = f"OpenVINO {openvino_versions().get('openvino')} (CPU, {torch.get_num_threads()} threads)"
    else:
        engine = (
            f"onnxruntime {versions().get('onnxruntime')} (CPUExecutionProvider, {torch.get_num_threads()} threads)"
        )
    return {
        "name": export.format,
        "dtype": export.dtype,
        "graph": export.doc.get("graph"),
        "opset": export.doc.get("opset"),
        "runtime": engine,
        "exported_from": (export.doc.get("source") or {}).get("model"),
        "quantization": export.doc.get("quantization"),
    }


def stamp(doc: dict, export: ExportRecord | None, rt) -> dict:
    """Record the backend in a metrics document: `backend`, and for onnx the graph's dtype as the throughput's
    precision and a line in the summary."""
    doc["backend"] = record(export, rt)
    if export is not None:
        if isinstance(doc.get("throughput"), dict):
            doc["throughput"]["precision"] = export.dtype
            doc["throughput"]["backend"] = "OpenVINO" if export.format == "openvino" else "onnxruntime"
        line = f"backend: {export.describe()}"
        doc["summary"] = f"{doc['summary']}; {line}" if doc.get("summary") else line
        if isinstance(doc.get("embedding"), dict):
            doc["embedding"]["weights_dtype"] = export.dtype
    return doc
