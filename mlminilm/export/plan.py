"""The export plan: what `--format` and `--quantize` mean together, decided once from the config (as DistillPlan
is for distill), so that the pipeline, the int8 step, the check, the record and the card read one answer.

Four exports, all made from the float32 ONNX graph the exporter traces first:

| --format | --quantize | graph                            | runtime     | int8 method                       |
|---|---|---|---|---|
| onnx     | none       | onnx/model.onnx (the traced one) | onnxruntime | -                                 |
| onnx     | int8       | onnx/model.onnx                  | onnxruntime | dynamic (no calibration)          |
| openvino | none       | openvino/openvino_model.xml      | OpenVINO    | -                                 |
| openvino | int8       | openvino/openvino_model.xml      | OpenVINO    | nncf (static, calibration text)   |
"""

from __future__ import annotations

from dataclasses import dataclass

from mlminilm.runtimes.onnx_runtime import GRAPH, OPENVINO_RECORD, RECORD
from mlminilm.runtimes.openvino_runtime import IR


@dataclass(frozen=True)
class ExportPlan:
    """One export's format and quantisation, resolved: every question the export asks of the pair, answered."""

    format: str  # onnx or openvino (--format): the record's `format`, the evaluations' --backend
    quantize: str  # none or int8 (--quantize)
    int8: bool  # int8 weights
    dtype: str  # float32 or int8: the record's `dtype`
    openvino: bool  # the graph is OpenVINO's IR, converted from the ONNX one
    graph: str  # the graph's path in the export directory (onnx/model.onnx, openvino/openvino_model.xml)
    record_file: str  # the export record's path (onnx/export.json, openvino/export.json)
    keeps_traced_graph: bool  # the traced float32 ONNX graph is the export itself (no later step)
    int8_method: str | None  # dynamic (onnxruntime) or nncf (OpenVINO), None without int8
    calibrated: bool  # the int8 method reads calibration text (nncf)
    runtime: str  # what runs the graph: onnxruntime or OpenVINO
    kind: str  # the card's word for the graph: ONNX or OpenVINO IR

    @classmethod
    def of(cls, format: str, quantize: str) -> ExportPlan:
        openvino, int8 = format == "openvino", quantize == "int8"
        method = ("nncf" if openvino else "dynamic") if int8 else None
        return cls(
            format=format,
            quantize=quantize,
            int8=int8,
            dtype="int8" if int8 else "float32",
            openvino=openvino,
            graph=IR if openvino else GRAPH,
            record_file=OPENVINO_RECORD if openvino else RECORD,
            keeps_traced_graph=not openvino and not int8,
            int8_method=method,
            calibrated=method == "nncf",
            runtime="OpenVINO" if openvino else "onnxruntime",
            kind="OpenVINO IR" if openvino else "ONNX",
        )

    @property
    def difference(self) -> str:
        """How the check's figure is named: max |ONNX - PyTorch|, or |OpenVINO - PyTorch| for the IR it ran."""
        return f"|{'OpenVINO' if self.openvino else 'ONNX'} - PyTorch|"

    @classmethod
    def from_config(cls, config) -> ExportPlan:
        """The plan of an ExportConfig (its `format` and `quantize`)."""
        return cls.of(config.format, config.quantize)

    @property
    def derives_graph(self) -> bool:
        """A step after the trace makes the exported graph from the float32 one (int8, or the OpenVINO IR)."""
        return not self.keeps_traced_graph
