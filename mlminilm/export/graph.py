"""The graph of `mlminilm export`: the model traced to ONNX, checked against PyTorch, optionally quantised to int8.

The exporter is torch.onnx.export with dynamo=True (torch.export, then onnxscript's translation): with the
transformers this project uses it traces the attention-mask code with symbolic batch and sequence sizes, so one
graph serves every shape. The TorchScript exporter (dynamo=False) still runs but bakes the example's shapes into
the mask computation: its graph answers wrongly at any other length (checked: differences of 1-3 on a tiny
BERT), so it is not offered. Every export is checked: the graph and the PyTorch model run on sentences of other
lengths than the example's, padded, and a float32 graph that differs by more than 1e-3 (relative to the largest
output) is an error and nothing is written.

int8 (`--quantize int8`): mlminilm.export.int8 (the methods, measured per language in docs/BENCHMARKS.md
section 13) and mlminilm.export.int8_step (calibration text, the per-language check).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm.errors import CheckpointError, ConfigError, MlminilmError

if TYPE_CHECKING:
    from mlminilm.export.plan import ExportPlan

log = mlog.get(__name__)

# Traced once at this shape; checked at another (three sentences of other lengths, padded).
EXAMPLE = ["query: The quick brown fox jumps over the lazy dog.", "passage: Hallo Welt!"]
CHECK = [
    "query: Der Hund läuft jeden Morgen durch den Park.",
    "passage: 猫在垫子上睡觉。",
    "query: Кошка спит на ковре, а мы идём в парк каждое утро, чтобы читать книги о старых кораблях.",
]
CHECK_PAIRS = ["Kein Hund ist im Park.", "猫在睡觉。", "Мы читаем."]  # second segments of a classifier's check
FLOAT32_TOLERANCE = 1e-3  # max |ONNX - PyTorch| / max(1, max |PyTorch|) a float32 graph may show


class Graph(nn.Module):
    """The model with tensors in and its one output tensor out, as the graph has them."""

    def __init__(self, model: nn.Module, output: str):
        super().__init__()
        self.model, self.output = model, output

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        given = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            given["token_type_ids"] = token_type_ids
        return getattr(self.model(**given), self.output)


def model_inputs(tokenizer, task: str, texts: list[str], pairs: list[str], names: list[str]) -> dict:
    """The model inputs of `texts` (with `pairs` as second segments for a classifier), padded, as int64 tensors;
    token_type_ids of zeros where the tokenizer gives none."""
    second = pairs[: len(texts)] if task == "sequence-classification" else None
    encoded = tokenizer(texts, second, padding=True, return_tensors="pt")
    return {n: encoded[n].long() if n in encoded else torch.zeros_like(encoded["input_ids"]) for n in names}


@contextlib.contextmanager
def quiet_exporter():
    """The exporter's progress lines go to stderr (stdout is for results), and its warnings about axis names and
    packages it does not need (torchvision) are not shown."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def trace(wrapper, example: dict, names: list[str], output: str, path: Path, opset: int, large: bool) -> None:
    """`wrapper` traced at `example` (inputs `names`, one `output`) into `path`, batch and sequence axes dynamic;
    `large`: the weights in an external data file beside it."""
    from torch.export import Dim

    batch, sequence = Dim("batch"), Dim("sequence")
    try:
        with quiet_exporter():
            program = torch.onnx.export(
                wrapper,
                tuple(example[n] for n in names),
                None,
                dynamo=True,
                verbose=False,
                opset_version=opset,
                input_names=names,
                output_names=[output],
                dynamic_shapes={n: {0: batch, 1: sequence} for n in names},
            )
            program.save(str(path), external_data=large)
    except Exception as exc:
        raise failure(f"torch.onnx.export could not export the model at opset {opset}", exc) from exc
    import onnx

    written = {
        o.version for o in onnx.load(str(path), load_external_data=False).opset_import if o.domain in ("", "ai.onnx")
    }
    if written != {opset}:  # the version converter gives up with a warning and leaves the graph as it was
        raise ConfigError(
            f"the exporter could not write the graph at opset {opset} (it has opset "
            f"{', '.join(map(str, sorted(written)))}); use the default --opset"
        )


def failure(what: str, exc: Exception) -> MlminilmError:
    """A failure of the exporter, quantiser or runtime as one line (the traceback with MLMINILM_DEBUG=1)."""
    if os.environ.get("MLMINILM_DEBUG") == "1":
        raise exc
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return CheckpointError(f"{what}: {first[:300]}; nothing was written (MLMINILM_DEBUG=1 shows the traceback)")


def check(wrapper, graph: Path, tokenizer, task: str, names: list[str], output: str, plan: ExportPlan) -> dict:
    """The graph against the PyTorch model on CHECK (another batch size and length than the trace's, padded): the
    largest difference over real tokens (last_hidden_state) or over the logits. A float32 graph beyond
    FLOAT32_TOLERANCE is an error; an int8 graph's figures are recorded."""
    import numpy as np

    from mlminilm.runtimes.onnx_runtime import session

    batch = model_inputs(tokenizer, task, CHECK, CHECK_PAIRS, names)
    expected = wrapper(*[batch[n] for n in names]).float().numpy()
    feed = {n: batch[n].numpy() for n in names}
    try:
        if plan.openvino:  # OpenVINO's IR
            from mlminilm.runtimes.openvino_runtime import compiled

            got = np.array(next(iter(compiled(graph).create_infer_request().infer(feed).values())), dtype=np.float32)
        else:
            (got,) = session(graph).run([output], feed)
    except Exception as exc:
        raise failure(f"{plan.runtime} could not run the exported graph", exc) from exc
    mask = batch["attention_mask"].numpy().astype(bool)
    if output == "last_hidden_state":
        diff = float(np.abs(got - expected)[mask].max())
        weights = mask[..., None].astype(np.float32)
        mean = lambda h: (h * weights).sum(1) / weights.sum(1)  # noqa: E731
        a, b = mean(got), mean(expected)
        cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        agreement = {"mean_pooled_cosine_min": float(cosine.min())}
    else:
        diff = float(np.abs(got - expected).max())
        agreement = {"same_argmax": bool((got.argmax(-1) == expected.argmax(-1)).all())}
    largest = float(np.abs(expected).max())
    scale = max(1.0, largest)
    result = {
        "inputs": f"{len(CHECK)} sentences{' (pairs)' if output == 'logits' else ''}, padded to "
        f"{batch['input_ids'].shape[1]} tokens (traced at {len(EXAMPLE)} sentences of another length)",
        "max_abs_diff": diff,
        "max_abs_output": largest,
        **agreement,
    }
    if not plan.int8:
        result["tolerance"] = f"{FLOAT32_TOLERANCE:g} x max(1, max |output|)"
        if diff > FLOAT32_TOLERANCE * scale:
            raise CheckpointError(
                f"the exported graph does not reproduce the model: max {plan.difference} = {diff:.3g} on the check "
                f"sentences (allowed {FLOAT32_TOLERANCE * scale:.3g}); nothing was written. Try another --opset"
            )
    log.info(
        "check: max %s = %.3g over %s%s",
        plan.difference,
        diff,
        "real tokens" if output != "logits" else "logits",
        "".join(f", {k} {v}" for k, v in agreement.items()),
    )
    return result


def io_record(values) -> list[dict]:
    """Graph inputs or outputs (onnxruntime's NodeArgs) as names, dtypes and shapes (axis names for dynamic axes)."""

    def dims(shape):
        return [d if isinstance(d, (int, str)) else None for d in shape]

    def dtype(kind: str) -> str:  # onnxruntime's "tensor(float)" -> float32
        name = kind.replace("tensor(", "").rstrip(")")
        return {"float": "float32", "double": "float64"}.get(name, name)

    return [{"name": v.name, "dtype": dtype(v.type), "shape": dims(v.shape)} for v in values]
