"""export: a model as a serving graph (ONNX, optionally int8)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import check_choice, problems_to_error
from mlminilm.config.limits import int_problems

EXPORT_FORMATS = ("onnx",)
QUANTIZATIONS = ("none", "int8")  # int8: onnxruntime's dynamic quantisation (int8 weights, activations at run time)
ONNX_OPSET = 18  # the opset torch's dynamo exporter writes natively (others go through onnx's version converter)


@dataclass(frozen=True)
class ExportConfig:
    """`export`: an encoder directory (a student, a teacher, a sentence-transformers model or a fine-tuned
    sequence classifier) written as `out/onnx/model.onnx` beside its config, tokenizer and sentence-transformers
    files (mlminilm.models.onnx_export). `quantize` int8: the graph's weights in int8 (onnxruntime's
    quantize_dynamic); `opset`: the ONNX opset of the graph."""

    model: str = ""
    out: Path | None = None
    format: str = "onnx"
    quantize: str = "none"
    opset: int = ONNX_OPSET
    overwrite: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        p: list[str] = []
        if not self.model:
            p.append("--model is required (an encoder or sequence-classification model directory, or hub id)")
        if self.out is None:
            p.append("--out is required (the directory to write the export to)")
        check_choice(p, self.format, EXPORT_FORMATS, "--format")
        check_choice(p, self.quantize, QUANTIZATIONS, "--quantize")
        p += int_problems(self)  # --opset within ONNX_OPSET_MIN..ONNX_OPSET_MAX
        problems_to_error(p)
