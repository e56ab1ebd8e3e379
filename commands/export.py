"""`mlminilm export`: the CLI translates options into an ExportConfig and calls mlminilm.models.onnx_export.run."""

from __future__ import annotations

from mlminilm.commands._options import build
from mlminilm.config import ExportConfig

EXAMPLES = """\b
Examples:
  mlminilm export --model runs/l6h384/student --format onnx --out student-onnx/
  mlminilm export --model runs/l6h384/student --format onnx --quantize int8 --out student-int8/
  mlminilm export --model ft/xnli --format onnx --quantize int8 --out ft/xnli-int8/ --json
"""


def main(cfg: ExportConfig, json_out: bool) -> None:
    """Export a model for serving: an ONNX graph (optionally int8) with its tokenizer, for onnxruntime,
    sentence-transformers (backend="onnx") and `eval-tatoeba` / `eval-xnli --backend onnx`."""
    from mlminilm.models import onnx_export

    result = onnx_export.run(cfg)
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
    print(
        f"{result['out']}: {result['graph']} ({result['dtype']}, opset {result['opset']}, {result['task']}, "
        f"{result['graph_bytes'] / 1e6:,.1f} MB); max |ONNX - PyTorch| {check['max_abs_diff']:.3g}{agreement}; "
        f"{result['elapsed_s']:.1f} s"
    )


command = build(
    ExportConfig, main, json_help="Print the export record (onnx/export.json) as JSON on stdout, and nothing else."
)
