"""int8 for `export --quantize int8`: onnxruntime's dynamic quantisation for `--format onnx`, NNCF's static one for
`--format openvino` (mlminilm.runtimes.openvino_runtime), and what each leaves in float.

- onnx: quantize_dynamic, QInt8 weights with one scale per output channel (every weight MatMul and the embedding
  Gathers), each activation scaled at run time from its own range (uint8, one scale per tensor per call). No
  calibration. `--int8-keep ROLE,...` leaves MatMuls of those roles in float32 (`last_ffn`: the last layer's two
  FFN MatMuls; `embeddings`: the word-embedding Gather).
- openvino: nncf.quantize with the transformer preset on calibration text of every language (`Batches`).

Roles of the weight MatMuls (`matmul_roles`, read from the graph's structure, not from node names, which the
exporter numbers): `qkv` (input: a LayerNorm output, square weight), `attn_out` (input: the attention context),
`ffn_in` (weight wider than tall), `ffn_out` (weight taller than wide).

Measured and not kept (docs/BENCHMARKS.md section 13, the recipe student, 2 cores with VNNI): onnxruntime's static
QDQ int8 (MinMax calibration on the same text, per-channel weights) loses far more than dynamic (cosine to float32
0.966 mean against 0.996) and runs slower (0.89x dynamic's sentences/s); SmoothQuant (alpha 0.5) before dynamic
quantisation loses more than dynamic alone (0.992); 8-bit MatMulNBits (blockwise, int8 compute) keeps almost
everything (0.9999) but runs no faster than float32. The largest single cause of dynamic's loss is the first
layer's feed-forward output (about a tenth of it); the rest is spread over every layer, so no short list of float32
MatMuls closes the gap. Per-tensor scales instead of per-channel lose more at the same speed (min cosine on e5
0.978 vs 0.991); quantising the embeddings costs nothing measurable and makes the file 4x smaller.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CALIBRATION_BATCH = 32  # sentences per calibration batch, sorted by length (little padding)


@dataclass(frozen=True)
class Int8Plan:
    """What an int8 export does: the method (dynamic for onnx, nncf for openvino) and the roles kept in float32."""

    method: str = "dynamic"
    keep: tuple[str, ...] = ()

    def record(self) -> dict:
        if self.method == "nncf":
            return {
                "method": "nncf",
                "how": "nncf.quantize, transformer preset (OpenVINO): static int8 from calibration text, SmoothQuant, "
                "LayerNorm / GELU / Softmax / residual adds kept in float, bias correction",
                "weights": "int8 per channel (word embeddings too; position and token-type tables in float)",
                "activations": "int8, scales fixed from calibration",
            }
        return {
            "method": "dynamic",
            "how": "onnxruntime.quantization.quantize_dynamic: activations scaled at run time",
            "weight_type": "QInt8",
            "per_channel": True,
            "activation_type": "QUInt8",
            "float32_kept": list(self.keep),
        }


def weight_matmuls(model) -> list:
    """The MatMul nodes whose second input is an initializer (a Linear layer's weight), in graph order."""
    initializers = {i.name for i in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in initializers]


def matmul_roles(model) -> dict[str, tuple[str, int]]:
    """Each weight MatMul's (role, layer), by structure: see the module's docstring."""
    shapes = {i.name: list(i.dims) for i in model.graph.initializer}
    producer = {out: node for node in model.graph.node for out in node.output}
    roles: dict[str, tuple[str, int]] = {}
    layer = 0
    for node in weight_matmuls(model):
        rows, cols = shapes[node.input[1]][:2]
        source = producer.get(node.input[0])
        if cols > rows:
            role = "ffn_in"
        elif rows > cols:
            role = "ffn_out"
        elif source is not None and source.op_type == "LayerNormalization":
            role = "qkv"
        else:
            role = "attn_out"
        roles[node.name] = (role, layer)
        if role == "ffn_out":
            layer += 1
    return roles


def kept_nodes(model, keep: tuple[str, ...]) -> list[str]:
    """The node names `keep` leaves in float32."""
    roles = matmul_roles(model)
    last = max((layer for _, layer in roles.values()), default=0)
    names = [
        name
        for name, (role, layer) in roles.items()
        if role in keep or ("last_ffn" in keep and layer == last and role in ("ffn_in", "ffn_out"))
    ]
    if "embeddings" in keep:
        names += [
            n.name for n in model.graph.node if n.op_type == "Gather" and n.input[0].endswith("embeddings.weight")
        ]
    return names


class Batches:
    """Calibration inputs (onnxruntime's CalibrationDataReader protocol): `sentences` tokenised, in batches of
    similar length, as int64 arrays named as the graph's inputs."""

    def __init__(self, tokenizer, sentences: list[str], names: list[str], max_length: int):
        self.tokenizer, self.names, self.max_length = tokenizer, names, max_length
        self.order = sorted(sentences, key=len)
        self.rewind()

    def rewind(self) -> None:
        self._next = 0

    def get_next(self):
        if self._next >= len(self.order):
            return None
        texts = self.order[self._next : self._next + CALIBRATION_BATCH]
        self._next += CALIBRATION_BATCH
        encoded = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="np")
        ids = encoded["input_ids"]
        return {n: (encoded[n] if n in encoded else np.zeros_like(ids)).astype(np.int64) for n in self.names}

    def __iter__(self):
        self.rewind()
        while (batch := self.get_next()) is not None:
            yield batch


def quantize_dynamic(source: Path, target: Path, keep: tuple[str, ...], large: bool) -> None:
    """`source` (float32 graph) into `target`: onnxruntime's dynamic int8, the `keep` roles left in float32."""
    import onnx
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize_dynamic as ort_quantize_dynamic

    exclude = kept_nodes(onnx.load(str(source), load_external_data=False), keep)
    with _quiet():
        ort_quantize_dynamic(
            str(source),
            str(target),
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=False,
            nodes_to_exclude=exclude,
            use_external_data_format=large,
        )


class _quiet:
    """onnxruntime's quantiser warns through the root logger ("consider pre-processing": its symbolic shape
    inference fails on these graphs and is not needed): silenced while it runs."""

    def __enter__(self):
        self.root = logging.getLogger()
        self.level, self.handler = self.root.level, logging.NullHandler()
        self.root.addHandler(self.handler)  # a root with a handler is not given a stderr handler by logging.warning
        self.root.setLevel(logging.ERROR)

    def __exit__(self, *exc):
        self.root.setLevel(self.level)
        self.root.removeHandler(self.handler)
