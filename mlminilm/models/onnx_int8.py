"""int8 graphs for `export --quantize int8`: which weights become int8, how activations are scaled, what stays float.

Methods (`--int8`), all onnxruntime's quantiser on the float32 graph the exporter wrote:
- `dynamic`: quantize_dynamic, QInt8 weights with one scale per output channel (MatMul and the embedding Gathers),
  each activation scaled at run time from its own range (uint8, one scale per tensor per call). No calibration.
- `static`: quantize_static in QDQ format: the same weights, activation scales fixed from the ranges seen on
  calibration text (onnxruntime's MinMax calibrator), uint8 activations.
- `smooth`: the activation outliers of each weight MatMul's input moved into its weights first (SmoothQuant, Xiao
  et al. 2023: input channel j divided by s_j = max|X_j|^a / max|W_j|^(1-a), weight row j multiplied by it, which
  is exact in float), the per-channel maxima max|X_j| measured on calibration text; then `dynamic`. The division is
  one Mul node before each smoothed MatMul group (Q, K and V share one): the MatMuls' inputs here also feed the
  residual connections, so it cannot be folded into the LayerNorm before them.

Roles of the weight MatMuls (`matmul_roles`, read from the graph's structure, not from node names, which the
exporter numbers): `qkv` (input: a LayerNorm output, square weight), `attn_out` (input: the attention context),
`ffn_in` (weight wider than tall), `ffn_out` (input: the GELU's output, weight taller than wide). `--int8-keep
ROLE,...` leaves those MatMuls in float32 (`last_ffn`: the last layer's two FFN MatMuls); `embeddings` keeps the
Gathers float32. Why each choice is the default: docs/BENCHMARKS.md section 13 (measured, per language).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlminilm.config.export import DEFAULT_INT8

SMOOTH_ALPHA = 0.5  # SmoothQuant's migration strength: the paper's default for encoders, and the best measured here
CALIBRATION_BATCH = 32  # sentences per calibration batch, sorted by length (little padding)


@dataclass(frozen=True)
class Int8Plan:
    """What an int8 export does: the method, the roles kept in float32, the smoothing strength."""

    method: str = DEFAULT_INT8
    keep: tuple[str, ...] = ()
    alpha: float = SMOOTH_ALPHA

    @property
    def calibrated(self) -> bool:
        return self.method in ("static", "smooth", "nncf")

    def record(self) -> dict:
        detail = {
            "dynamic": "onnxruntime.quantization.quantize_dynamic: activations scaled at run time",
            "static": "onnxruntime.quantization.quantize_static, QDQ, MinMax calibration: activation scales fixed",
            "smooth": f"SmoothQuant (alpha {self.alpha}) from calibration maxima, then quantize_dynamic",
            "nncf": "nncf.quantize, transformer preset (OpenVINO): static int8 from calibration, SmoothQuant, "
            "LayerNorm / GELU / Softmax / residual adds kept in float, bias correction",
        }[self.method]
        return {
            "method": self.method,
            "how": detail,
            "weight_type": "QInt8",
            "per_channel": True,
            "activation_type": "per tensor, static" if self.method == "nncf" else "QUInt8",
            "float32_kept": list(self.keep),
            **({"alpha": self.alpha} if self.method == "smooth" else {}),
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


def quantize(source: Path, target: Path, plan: Int8Plan, batches: Batches | None, large: bool) -> None:
    """`source` (float32 graph) quantised by `plan` into `target`; `batches` feed the calibration."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType

    model = onnx.load(str(source), load_external_data=False)
    exclude = kept_nodes(model, plan.keep)
    if plan.method == "static":
        from onnxruntime.quantization import quantize_static

        reader = type("Reader", (CalibrationDataReader,), {"get_next": lambda self: batches.get_next()})()
        batches.rewind()
        with _quiet():
            quantize_static(
                str(source),
                str(target),
                reader,
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=["MatMul", "Gather"],
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=exclude,
                use_external_data_format=large,
                extra_options={"MatMulConstBOnly": True},
            )
        return
    if plan.method == "smooth":
        smoothed = target.with_name(target.stem + "-smoothed.onnx")
        smooth(source, smoothed, batches, plan.alpha, skip=set(exclude), large=large)
        source = smoothed
    from onnxruntime.quantization import quantize_dynamic

    with _quiet():
        quantize_dynamic(
            str(source),
            str(target),
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=False,
            nodes_to_exclude=exclude,
            use_external_data_format=large,
        )
    if plan.method == "smooth":
        for path in source.parent.glob(source.name + "*"):
            path.unlink()


def smooth(source: Path, target: Path, batches: Batches, alpha: float, skip: set[str], large: bool) -> dict:
    """SmoothQuant on every weight MatMul group not in `skip`: returns each group's input -> scales."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    initializers = {i.name: i for i in model.graph.initializer}
    groups: dict[str, list] = {}
    for node in weight_matmuls(model):
        if node.name not in skip:
            groups.setdefault(node.input[0], []).append(node)
    maxima = activation_maxima(source, list(groups), batches)
    inserted, scales = [], {}
    for tensor, nodes in groups.items():
        weights = [numpy_helper.to_array(initializers[n.input[1]]) for n in nodes]
        weight_max = np.max(np.stack([np.abs(w).max(1) for w in weights]), 0)
        s = smoothing_scales(maxima[tensor], weight_max, alpha)
        scales[tensor] = s
        inverse = numpy_helper.from_array((1.0 / s).astype(np.float32), name=f"{tensor}.smooth_inverse")
        model.graph.initializer.append(inverse)
        smoothed = f"{tensor}.smoothed"
        inserted.append(
            (nodes[0], helper.make_node("Mul", [tensor, inverse.name], [smoothed], name=f"{tensor}.smooth"))
        )
        for node, w in zip(nodes, weights):
            node.input[0] = smoothed
            initializers[node.input[1]].CopyFrom(
                numpy_helper.from_array((w * s[:, None]).astype(np.float32), node.input[1])
            )
    nodes = list(model.graph.node)
    for first, mul in inserted:  # each Mul right before its group's first MatMul: the order stays topological
        nodes.insert(nodes.index(first), mul)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(target), save_as_external_data=large)
    return scales


def smoothing_scales(activation_max: np.ndarray, weight_max: np.ndarray, alpha: float) -> np.ndarray:
    """s_j = max|X_j|^alpha / max|W_j|^(1 - alpha), both floored at 1e-5 (a channel never active, a zero row)."""
    a = np.maximum(activation_max.astype(np.float64), 1e-5)
    w = np.maximum(weight_max.astype(np.float64), 1e-5)
    return np.clip(a**alpha / w ** (1.0 - alpha), 1e-5, None).astype(np.float32)


def activation_maxima(graph: Path, tensors: list[str], batches: Batches) -> dict[str, np.ndarray]:
    """max |value| per channel (last axis) of each of `tensors` over the real tokens of every calibration batch."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    model = onnx.load(str(graph))
    present = {o.name for o in model.graph.output}
    for name in tensors:
        if name not in present:
            model.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    maxima: dict[str, np.ndarray] = {}
    for batch in batches:
        real = batch["attention_mask"].astype(bool)
        for name, value in zip(tensors, session.run(tensors, batch)):
            peak = np.abs(value[real]).max(0)
            maxima[name] = peak if name not in maxima else np.maximum(maxima[name], peak)
    return maxima


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
