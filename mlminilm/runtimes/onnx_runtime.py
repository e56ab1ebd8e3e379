"""An `mlminilm export` directory at run time: the optional packages it needs, its record (`onnx/export.json`),
and its graph in an onnxruntime session that the evaluations call as they call a PyTorch model.

`OnnxModel(directory)` takes the padded batches the evaluations build (input_ids, attention_mask and, where the
graph has them, token_type_ids; torch tensors) and answers with what `embed` and `predict` read from a
transformers model: `.hidden_states[n]` (the last layer only: the graph has no other) and `.last_hidden_state`
for an encoder, `.logits` for a classifier, as float32 torch tensors. Tokenisation, padding, batching, pooling
and the label mapping stay the evaluations' own, so the two backends differ only in the forward pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from mlminilm.config.export import EXPORT_FORMATS
from mlminilm.errors import ConfigError

ONNX_EXTRA = "pip install 'mlminilm[onnx]'"
GRAPH = "onnx/model.onnx"  # where sentence-transformers' backend="onnx" (and optimum) look by default
RECORD = "onnx/export.json"
OPENVINO_RECORD = "openvino/export.json"  # `export --format openvino`: the record beside the IR
RECORDS = (RECORD, OPENVINO_RECORD)
TASKS = {"feature-extraction": "last_hidden_state", "sequence-classification": "logits"}  # task -> graph output


def require_onnx(what: str, packages: tuple[str, ...] = ("onnx", "onnxruntime")) -> None:
    """ConfigError naming the extra to install when one of `packages` cannot be imported (`what` needs them)."""
    import importlib

    missing = []
    for name in packages:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ConfigError(
            f"{what} needs the optional package{'s' if len(missing) > 1 else ''} {', '.join(missing)}, "
            f"which {'are' if len(missing) > 1 else 'is'} not installed: {ONNX_EXTRA}"
        )


def versions() -> dict[str, str | None]:
    """The versions of what writes and runs the graphs (None for a package that is not installed)."""
    from importlib import metadata

    found = {}
    for name in ("torch", "transformers", "onnx", "onnxruntime", "onnxscript"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


@dataclass(frozen=True)
class ExportRecord:
    """What `onnx/export.json` says about the graph beside it."""

    directory: Path
    doc: dict

    @property
    def graph(self) -> Path:
        return self.directory / self.doc.get("graph", GRAPH)

    @property
    def task(self) -> str:
        return self.doc["task"]

    @property
    def dtype(self) -> str:
        return self.doc["dtype"]  # float32 or int8

    @property
    def inputs(self) -> list[str]:
        return [i["name"] for i in self.doc["inputs"]]

    @property
    def format(self) -> str:
        return self.doc.get("format", "onnx")  # onnx or openvino

    def describe(self) -> str:
        if self.format == "openvino":
            return f"OpenVINO, {self.dtype} model ({self.doc.get('graph')})"
        return f"onnxruntime, {self.dtype} graph ({self.doc.get('graph', GRAPH)}, opset {self.doc.get('opset')})"


def record_path(model: str | Path) -> Path | None:
    """The export record of the directory `model` (ONNX or OpenVINO), or None."""
    for name in RECORDS:
        if (Path(model) / name).is_file():
            return Path(model) / name
    return None


def is_export(model: str | Path) -> bool:
    return record_path(model) is not None


def read_export(model: str | Path, task: str | None = None) -> ExportRecord:
    """The record of the export directory `model`; ConfigError when `model` is not one (or not of `task`)."""
    directory = Path(model)
    path = record_path(directory)
    if path is None:
        raise ConfigError(
            f"--backend onnx / openvino needs a directory written by `mlminilm export`; {model} has no "
            f"{' or '.join(RECORDS)}: run `mlminilm export --model {model} --format onnx --out DIR` and evaluate DIR"
        )
    record = None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        missing = [key for key in ("task", "dtype", "inputs") if key not in doc]
        problems = [f"no {', '.join(missing)}"] if missing else []
        problems += _field_problems(doc)
        record = ExportRecord(directory, doc)
        if not missing and doc["task"] not in TASKS:
            problems.append(f"unknown task {doc['task']!r}")
        if not problems:
            problems += _graph_problems(directory, doc.get("graph", GRAPH))
    except (OSError, ValueError, TypeError, AttributeError) as exc:  # unreadable, not JSON, not an object
        problems = [f"not a readable export record ({type(exc).__name__}: {exc})"]
    if problems or record is None:
        raise ConfigError(f"{path}: {'; '.join(problems)}; export the model again with `mlminilm export`")
    if task is not None and record.task != task:
        raise ConfigError(
            f"{model} is an export of a {record.task} model (output {TASKS[record.task]}); this evaluation needs a "
            f"{task} export: export the right model with `mlminilm export`"
        )
    return record


def _field_problems(doc: dict) -> list[str]:
    """The fields the evaluations read, each of its type: a record edited by hand fails here in one line, not as a
    traceback in the middle of an evaluation."""
    problems = []
    for key, ok, what in (
        ("task", lambda v: isinstance(v, str), "a string"),
        ("dtype", lambda v: v in ("float32", "int8"), "float32 or int8"),
        (
            "inputs",
            lambda v: isinstance(v, list)
            and v
            and all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in v),
            "a list of named inputs",
        ),
        ("graph", lambda v: isinstance(v, str) and v, "a path inside the export directory"),
        # the evaluations' --backend takes its name: another would advise a --backend that does not exist
        ("format", lambda v: v in EXPORT_FORMATS, " or ".join(EXPORT_FORMATS)),
        ("num_layers", lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1024, "a layer count"),
        ("hidden_size", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0, "a positive integer"),
        ("opset", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0, "an opset number"),
    ):
        if key in doc and not ok(doc[key]):
            problems.append(f"{key} is {doc[key]!r}, not {what}")
    return problems


def _graph_problems(directory: Path, graph: str) -> list[str]:
    """The graph the record names must be a file inside the export directory (no absolute path, no `..`, no link
    leading out): an export directory never makes an evaluation load a graph from elsewhere."""
    root = directory.resolve()
    target = (directory / graph).resolve()
    if Path(graph).is_absolute() or ".." in Path(graph).parts or root not in target.parents:
        return [f"its graph {graph!r} lies outside the export directory {directory}, which mlminilm does not load"]
    if not target.is_file():
        return [f"its graph {directory / graph} is missing"]
    return []


def export_format(model: str | Path) -> str | None:
    """The format of an export directory, onnx or openvino (by where its record is); None for anything else."""
    path = record_path(model)
    if path is None:
        return None
    return "openvino" if path.parent.name == Path(OPENVINO_RECORD).parent.name else "onnx"


def refuse_torch_on_export(model: str | Path) -> None:
    """An export directory holds a graph, not PyTorch weights: say which --backend reads it (where it has none)."""
    directory = Path(model)
    fmt = export_format(directory)
    if fmt and not any(directory.glob("*.safetensors")) and not any(directory.glob("*.bin")):
        raise ConfigError(
            f"{model} is {'an OpenVINO' if fmt == 'openvino' else 'an ONNX'} export (`mlminilm export`) without "
            f"PyTorch weights: evaluate it with --backend {fmt}, or give the model it was exported from"
        )


class LastLayerOnly:
    """`hidden_states` of a graph that outputs only the last layer: index `num_layers` (or -1) and nothing else."""

    def __init__(self, last, num_layers: int):
        self.last, self.num_layers = last, num_layers

    def __len__(self) -> int:
        return self.num_layers + 1

    def __getitem__(self, index: int):
        if index in (self.num_layers, -1):
            return self.last
        raise ConfigError(
            f"the ONNX graph outputs only the last layer ({self.num_layers}), not hidden-states index "
            f"{index}: use --layer -1, or --backend torch"
        )


def session(graph: str | Path, threads: int | None = None):
    """An onnxruntime CPU session of `graph`, with `threads` intra-op threads (default: torch's thread count, so
    the two backends are timed on the same cores)."""
    import onnxruntime as ort

    if threads is None:
        import torch

        threads = torch.get_num_threads()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: its warnings are about optimisations, not results
    try:
        return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime's errors (InvalidProtobuf, Fail, ...) share no base class
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(
            f"{graph}: onnxruntime cannot load this graph, it is damaged ({first[:300]}); export the "
            "model again with `mlminilm export`"
        ) from None


class GraphModel:
    """An exported graph called like the transformers model it was exported from (see the module's docstring):
    inference only. Subclasses run the feed: onnxruntime (OnnxModel), OpenVINO (openvino_runtime.OpenVinoModel)."""

    training = False
    runtime = "graph"

    def __init__(self, record: ExportRecord, graph_inputs: list[set[str]]):
        """`graph_inputs`: the names of each input of the loaded graph (an OpenVINO port may have several). They
        must be those the record names, checked once here: a graph that lacks one (or wants another) fails in one
        line at load, not inside the runtime at the first batch."""
        self.record = record
        self.input_names = _matching_inputs(record, graph_inputs)
        self.output_name = TASKS[record.task]
        self.num_layers = int(record.doc.get("num_layers", 0))

    def run(self, feed: dict):
        """The graph's one output for `feed` (int64 numpy arrays by input name), as a numpy array."""
        raise NotImplementedError

    def eval(self):
        return self

    def train(self, mode: bool = True):
        if mode:
            raise ConfigError(f"an {self.runtime} graph cannot be trained; use the PyTorch model")
        return self

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, output_hidden_states: bool = False):
        import numpy as np
        import torch

        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        feed = {}
        for name in self.input_names:
            value = given.get(name)
            if value is None:
                if name != "token_type_ids":
                    raise ValueError(f"the graph needs {name}")
                value = torch.zeros_like(input_ids)  # one segment, as the PyTorch model assumes without them
            feed[name] = np.ascontiguousarray(value.detach().cpu().numpy(), dtype=np.int64)
        tensor = torch.from_numpy(np.asarray(self.run(feed), dtype=np.float32))
        if self.output_name == "logits":
            return SimpleNamespace(logits=tensor)
        return SimpleNamespace(last_hidden_state=tensor, hidden_states=LastLayerOnly(tensor, self.num_layers))


def _matching_inputs(record: ExportRecord, graph_inputs: list[set[str]]) -> list[str]:
    """The record's input names, in its order, when the graph's inputs are exactly those; else ConfigError."""
    named = record.inputs
    missing = [name for name in named if not any(name in names for names in graph_inputs)]
    extra = [sorted(names)[0] if names else "(unnamed)" for names in graph_inputs if not names & set(named)]
    if missing or extra:
        what = "; ".join(
            part
            for part in (
                f"lacks {', '.join(missing)}" if missing else "",
                f"has inputs the record does not name ({', '.join(extra)})" if extra else "",
            )
            if part
        )
        raise ConfigError(
            f"{record.graph}: the graph {what}, while its export record names the inputs {', '.join(named)}: the "
            "graph and the record do not belong together; export the model again with `mlminilm export`"
        )
    return list(named)


class OnnxModel(GraphModel):
    """The graph of an ONNX export directory in an onnxruntime session."""

    runtime = "ONNX"

    def __init__(self, directory: str | Path, threads: int | None = None, record: ExportRecord | None = None):
        record = record or read_export(directory)
        self.session = session(record.graph, threads)
        super().__init__(record, [{i.name} for i in self.session.get_inputs()])

    def run(self, feed: dict):
        (output,) = self.session.run([self.output_name], feed)
        return output
