"""`mlminilm export`: a model as a serving graph (ONNX or OpenVINO IR, optionally int8), on its own floor above
models/ and evaluation/ (README "Development"): nothing below imports it. One concept per module:

- `plan`: ExportPlan, what --format and --quantize mean together (graph, record, runtime, int8 method), decided
  once from the config; the modules below read it;
- `pipeline`: `run(config)`, the checks, the trace, the directory it writes;
- `graph`: the model traced to ONNX and checked against PyTorch;
- `int8`: onnxruntime's dynamic int8 and what it leaves in float; `openvino_ir`: the IR, NNCF's static int8;
- `int8_step`: what int8 reads before the trace (calibration text, check sentences) and its fidelity check;
- `calibration`, `fidelity`: the calibration text; the per-language report of int8 against float32;
- `card`: the export's model card.

The export directory at run time (its record, onnxruntime and OpenVINO sessions) is mlminilm.runtimes, on the
models' floor, so that the evaluations' `--backend onnx|openvino` reads it without importing the exporter.
"""

from mlminilm.config import ExportConfig
from mlminilm.export.pipeline import run

__all__ = ["run"]

# `from mlminilm import export` may give this package: calling it runs the command (mlminilm.api).
from mlminilm.api import command_module  # noqa: E402

command_module(__name__, ExportConfig)
