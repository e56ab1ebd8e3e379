"""The export plan (mlminilm.export.plan): what `--format` and `--quantize` mean together, decided once."""

from __future__ import annotations

import pytest

from mlminilm.config import ExportConfig
from mlminilm.export.plan import ExportPlan


@pytest.mark.parametrize(
    "fmt, quantize, graph, record_file, dtype, method, traced, runtime",
    [
        ("onnx", "none", "onnx/model.onnx", "onnx/export.json", "float32", None, True, "onnxruntime"),
        ("onnx", "int8", "onnx/model.onnx", "onnx/export.json", "int8", "dynamic", False, "onnxruntime"),
        ("openvino", "none", "openvino/openvino_model.xml", "openvino/export.json", "float32", None, False, "OpenVINO"),
        ("openvino", "int8", "openvino/openvino_model.xml", "openvino/export.json", "int8", "nncf", False, "OpenVINO"),
    ],
)
def test_each_format_and_quantisation_is_resolved_once(
    fmt, quantize, graph, record_file, dtype, method, traced, runtime, tmp_path
):
    plan = ExportPlan.from_config(ExportConfig(model="m", out=tmp_path, format=fmt, quantize=quantize))
    assert (plan.format, plan.quantize, plan.graph, plan.record_file, plan.dtype) == (
        fmt,
        quantize,
        graph,
        record_file,
        dtype,
    )
    assert plan.int8_method == method and plan.calibrated == (method == "nncf") and plan.int8 == (quantize == "int8")
    assert plan.keeps_traced_graph == traced and plan.derives_graph == (not traced)
    assert plan.runtime == runtime and plan.openvino == (fmt == "openvino")
    assert plan.kind == ("OpenVINO IR" if fmt == "openvino" else "ONNX")
    # the check's figure names the graph it ran (the summary line and the log: openvino_cases.py)
    assert plan.difference == ("|OpenVINO - PyTorch|" if fmt == "openvino" else "|ONNX - PyTorch|")
    with pytest.raises(AttributeError):
        plan.format = "onnx"  # frozen: decided once
