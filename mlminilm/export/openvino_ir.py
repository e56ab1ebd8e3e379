"""OpenVINO for `export --format openvino`: the float32 ONNX graph the exporter traced, converted to OpenVINO's IR
(openvino/openvino_model.xml + .bin, where sentence-transformers' backend="openvino" looks), optionally quantised
to int8 by NNCF. Run at evaluation time by mlminilm.runtimes.openvino_runtime.

int8 here is NNCF's post-training quantisation with its transformer preset (`nncf.quantize(model_type=
TRANSFORMER)`): static int8 (activation scales fixed from calibration text, per-channel weights), SmoothQuant on the
MatMul inputs, the operations the preset leaves in float (LayerNorm, GELU, Softmax and the residual adds among them)
and a bias correction; the word embeddings in int8, the position and token-type tables in float (small_tables).
Measured per language against onnxruntime's int8 in docs/BENCHMARKS.md section 13.
"""

from __future__ import annotations

from pathlib import Path


def convert(onnx_graph: Path, target: Path, batches=None, subset: int = 0) -> None:
    """The ONNX graph as OpenVINO IR at `target` (float32 weights); with `batches` (calibration inputs, dicts of
    int64 arrays), quantised to int8 by NNCF's transformer preset on `subset` of them first."""
    import contextlib
    import sys

    import openvino as ov

    with contextlib.redirect_stdout(sys.stderr):  # NNCF's progress bars to stderr: stdout is for results
        model = ov.convert_model(str(onnx_graph))
        if batches is not None:
            import logging

            import nncf

            nncf.set_log_level(logging.ERROR)
            model = nncf.quantize(
                model,
                nncf.Dataset(list(batches)),
                model_type=nncf.ModelType.TRANSFORMER,
                subset_size=subset,
                ignored_scope=nncf.IgnoredScope(names=small_tables(onnx_graph), validate=False),
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        ov.save_model(model, str(target), compress_to_fp16=False)


def small_tables(onnx_graph: Path) -> list[str]:
    """The embedding lookups other than the word embeddings' (positions, token types), which NNCF leaves in float:
    quantised, an XLM-R graph (positions computed from input_ids) no longer compiles (OpenVINO 2026.4: "constant_fold
    failed"), and their tables are a few hundred rows, nothing of the file's size or the time."""
    import onnx

    graph = onnx.load(str(onnx_graph), load_external_data=False).graph
    tables = {i.name for i in graph.initializer}
    return [
        n.name
        for n in graph.node
        if n.op_type == "Gather" and n.input[0] in tables and "word_embeddings" not in n.input[0]
    ]
