"""`export`: an encoder directory as an ONNX graph for serving, optionally with int8 weights, written atomically.

Output directory (README "export"):
  onnx/model.onnx                    the graph (sentence-transformers' backend="onnx" and optimum look here): inputs
                                     input_ids, attention_mask (and token_type_ids where the model tells segments
                                     apart), int64 [batch, sequence], both axes dynamic; output last_hidden_state
                                     [batch, sequence, hidden] of an encoder, logits [batch, labels] of a classifier
  onnx/export.json                   what the graph is: float32 or int8, opset, inputs, outputs, task, the versions
                                     that wrote it and its check against the PyTorch model
  config.json, tokenizer files       the model's (config.json: the exported architecture)
  sentence-transformers files        copied unchanged when the model has them (modules.json, 1_Pooling/, ...)
  run.json, selection.json           copied unchanged from a `finetune` output (eval-xnli reads its settings)
  README.md, mlminilm.json           the model card, noting the export
No PyTorch weights: the directory is for onnxruntime (`eval-* --backend onnx`); export again from the model.

How the graph is traced, checked and quantised, and why: mlminilm.export.graph.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm.config import ExportConfig
from mlminilm.errors import CheckpointError, ConfigError, Problems
from mlminilm.export import graph as onnx_graph
from mlminilm.export.plan import ExportPlan
from mlminilm.runtimes.onnx_runtime import GRAPH, RECORD, TASKS, is_export, require_onnx, versions
from mlminilm.version import __version__

log = mlog.get(__name__)

FORMAT_VERSION = 1
_RUN_FILES = ("run.json", "selection.json")  # a finetune output's settings, read by eval-xnli
# Heads whose outputs the graph would drop without a word: refused (a plain encoder or an MLM teacher is exported
# as its encoder; a sequence classifier with its head).
_OTHER_HEADS = ("ForQuestionAnswering", "ForTokenClassification", "ForMultipleChoice")
LARGE_MODEL_BYTES = 1_800_000_000  # above this the weights go to an external data file (protobuf's 2 GB limit)


def run(config: ExportConfig) -> dict:
    """Export `config.model` to `config.out`; returns the export record (onnx/export.json) with `out` and
    `elapsed_s`. All cheap checks come first; the output is built beside `config.out` and swapped in when complete,
    under the output's lock (README "Reliability")."""
    from mlminilm.io.outputs import Claim

    start = time.perf_counter()
    out = Path(config.out)
    plan = ExportPlan.from_config(config)  # what --format and --quantize mean together, decided here once
    # The output protocol (mlminilm.io.outputs): lock first, then check and claim --out, build beside, swap in.
    with Claim(out, "export", "an export mlminilm wrote", legacy=None) as claim:
        source = _validate(config, plan, claim)
        record = _export(config, plan, out, source, claim)
    return {"out": str(out), **record, "elapsed_s": round(time.perf_counter() - start, 3)}


@dataclass(frozen=True)
class _Source:
    """What the checks found out about the model to export."""

    model_dir: str  # the model's directory (a packaged teacher's converted one), or a hub id
    weights: str  # where the encoder is: model_dir, or its sentence-transformers Transformer subfolder
    config: object  # its transformers config
    tokenizer: object
    task: str  # a key of onnx_runtime.TASKS
    sentence_files: bool  # copy the sentence-transformers files
    int8: object = None  # int8_step.Int8Inputs with --quantize int8

    @property
    def input_names(self) -> list[str]:
        """input_ids, attention_mask, and token_type_ids where the model tells segments apart and its tokenizer
        gives them (e5's XLM-R tokenizer gives none: its BERT-typed model always sees segment 0)."""
        names = ["input_ids", "attention_mask"]
        if (
            getattr(self.config, "type_vocab_size", 0) or 0
        ) > 1 and "token_type_ids" in self.tokenizer.model_input_names:
            names.append("token_type_ids")
        return names


def _validate(config: ExportConfig, plan: ExportPlan, claim) -> _Source:
    """The checks that need no weights, all reported at once."""
    from mlminilm.io.outputs import refuse_overlap
    from mlminilm.models.loading import (
        check_encoder_config,
        check_vocabulary,
        load_config,
        load_tokenizer,
        resolve_model,
    )
    from mlminilm.models.sentence_encoder import check_sentence_transformers_files, read_sentence_transformers

    problems = Problems()
    attempt = problems.attempt
    attempt(lambda: require_onnx("mlminilm export", ("onnx", "onnxruntime", "onnxscript")))
    model_dir = attempt(lambda: resolve_model(config.model))
    out = claim.given
    # Nor inside (or around) the text it reads: --overwrite must never reach a user's calibration or check files.
    inputs = {"--model": model_dir, "--calibration": config.calibration, "--check": config.check}
    attempt(lambda: refuse_overlap(claim.out, inputs))
    if claim.out.is_dir() and any(claim.out.iterdir()) and config.overwrite and not is_export(claim.out):
        # An export holds its onnx/export.json: without one the directory is not ours to replace.
        problems.add(
            CheckpointError(
                f"--out {out} holds files but no {RECORD}, so it is not an export mlminilm wrote; --overwrite "
                "replaces only that: move its files away or choose another --out"
            )
        )
    else:  # --overwrite replaces only the files the export's record of its own files names
        attempt(
            lambda: claim.check(
                config.overwrite, f"--out {out} is not empty; pass --overwrite to replace it, or choose another"
            )
        )
    if model_dir is not None and is_export(model_dir):
        problems.add(
            ConfigError(
                f"--model {config.model} is itself an export (it has {RECORD}); export the model it was made from"
            )
        )
        problems.raise_any()
    st = attempt(lambda: read_sentence_transformers(model_dir)) if model_dir is not None else None
    weights = model_dir
    sentence_files = st is not None
    if st is not None and st.transformer_path and model_dir is not None and os.path.isdir(model_dir):
        weights = str(Path(model_dir) / st.transformer_path)
        sentence_files = False
        log.warning(
            "--model %s keeps its encoder in the subfolder %s: the export is that encoder alone, without "
            "the sentence-transformers files",
            config.model,
            st.transformer_path,
        )
    if sentence_files:
        attempt(lambda: check_sentence_transformers_files(model_dir))
    model_config = attempt(lambda: load_config(weights)) if weights is not None else None
    task = None
    if model_config is not None:
        attempt(lambda: check_encoder_config(model_config, config.model))
        task = attempt(lambda: _task(model_config, config.model))
    tokenizer = attempt(lambda: load_tokenizer(weights)) if weights is not None else None
    if tokenizer is not None and model_config is not None:
        attempt(lambda: check_vocabulary(model_config, len(tokenizer), config.model))
    problems.raise_any()
    if plan.openvino:
        from mlminilm.runtimes.openvino_runtime import require_openvino

        require_openvino("mlminilm export --format openvino", quantize=plan.int8)
    int8 = None
    if plan.int8:  # calibration text and --check sentences read now: their errors before the trace
        from mlminilm.export.int8_step import read_inputs

        int8 = read_inputs(config, plan, model_dir, weights, model_config, tokenizer, task)
    return _Source(model_dir, weights, model_config, tokenizer, task, sentence_files, int8)


def _task(model_config, name: str) -> str:
    archs = [str(a) for a in (model_config.architectures or [])]
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return "sequence-classification"
    other = [a for a in archs if a.endswith(_OTHER_HEADS)]
    if other:
        raise ConfigError(
            f"--model {name} has a {other[0]} head, which export does not write (its graph would drop "
            "the head); export takes encoders and sequence-classification models"
        )
    return "feature-extraction"


# ------------------------------------------------------------------------------------------------ the export


def _export(config: ExportConfig, plan: ExportPlan, out: Path, source: _Source, claim) -> dict:
    model = _load(source)
    names = source.input_names
    output = TASKS[source.task]
    wrapper = onnx_graph.Graph(model, output).eval()
    large = sum(p.numel() * p.element_size() for p in model.parameters()) > LARGE_MODEL_BYTES
    with claim.staging() as tmp:  # never a half-written export beside the output
        onnx_file = tmp / GRAPH
        onnx_file.parent.mkdir(parents=True)
        t0 = time.perf_counter()
        # The float32 ONNX graph comes first whatever is written: int8 and OpenVINO are made from it.
        float_graph = onnx_file if plan.keeps_traced_graph else onnx_file.with_name("model-float32.onnx")
        example = onnx_graph.model_inputs(
            source.tokenizer, source.task, onnx_graph.EXAMPLE, onnx_graph.EXAMPLE[::-1], names
        )
        onnx_graph.trace(wrapper, example, names, output, float_graph, config.opset, large)
        log.info("traced %s (%s) in %.1f s", config.model, source.task, time.perf_counter() - t0)
        io = _io(float_graph)
        graph = tmp / plan.graph
        fidelity = None
        if plan.derives_graph:
            from mlminilm.export import int8_step

            int8_step.make_graph(source.int8, plan, float_graph, graph, source.tokenizer, names, large)
            if source.int8 is not None and source.int8.check is not None:
                partial = {"task": source.task, "num_layers": int(source.config.num_hidden_layers), "inputs": io[0]}
                fidelity = int8_step.fidelity(
                    source.int8, plan, tmp, float_graph, graph, partial, source.tokenizer, config
                )
            shutil.rmtree(float_graph.parent) if plan.openvino else _remove(float_graph)
        with torch.inference_mode():
            check = onnx_graph.check(wrapper, graph, source.tokenizer, source.task, names, output, plan)
        record = _record(config, plan, source, graph, check, fidelity, io)
        _write_directory(config, plan, source, model, tmp, record)
    log.info("export written to %s (%s %s, %.1f MB)", out, plan.dtype, plan.format, record["graph_bytes"] / 1e6)
    return record


def _io(graph: Path) -> tuple[list, list]:
    """The graph's inputs and outputs as the record lists them (names, dtypes, dynamic axes)."""
    from mlminilm.runtimes.onnx_runtime import session

    graph_session = session(graph, 1)
    return onnx_graph.io_record(graph_session.get_inputs()), onnx_graph.io_record(graph_session.get_outputs())


def _remove(float_graph: Path) -> None:
    for path in float_graph.parent.glob(float_graph.name + "*"):  # the float32 graph and its data file
        path.unlink()


def _load(source: _Source) -> nn.Module:
    from transformers import AutoModelForSequenceClassification

    from mlminilm.models.loading import load_encoder, load_model

    if source.task == "sequence-classification":
        # Strict, as eval-xnli loads it: every tensor from the files, the pooler a BERT classifier reads included.
        model, _ = load_model(
            AutoModelForSequenceClassification,
            source.weights,
            pooler_optional=False,
            dtype=torch.float32,
            attn_implementation="sdpa",
        )
    else:
        model = load_encoder(source.weights, dtype=torch.float32)
    return model.eval()


def _record(
    config: ExportConfig, plan: ExportPlan, source: _Source, graph: Path, check: dict, fidelity: dict | None, io: tuple
) -> dict:
    stem = graph.name.split(".")[0]  # model (model.onnx + its data file) or openvino_model (.xml + .bin)
    files = [p for p in graph.parent.iterdir() if p.name.startswith(stem + ".")]
    return {
        "format_version": FORMAT_VERSION,
        "format": plan.format,
        "graph": plan.graph,
        "external_data": sorted(p.name for p in files if p != graph),
        "graph_bytes": sum(p.stat().st_size for p in files),
        "dtype": plan.dtype,
        "quantization": _quantization(source) if plan.int8 else None,
        "opset": config.opset,
        "task": source.task,
        "inputs": io[0],
        "outputs": io[1],
        "num_layers": int(source.config.num_hidden_layers),
        "hidden_size": int(source.config.hidden_size),
        "model_type": source.config.model_type,
        "exporter": "torch.onnx.export(dynamo=True): torch.export, translated by onnxscript, dynamic batch and "
        "sequence axes" + ("; then openvino.convert_model" if plan.openvino else ""),
        "source": {"model": config.model, "model_dir": str(source.model_dir)},
        "check": check,
        "fidelity": fidelity,
        "versions": {**versions(), **(_openvino_versions() if plan.openvino else {}), "mlminilm": __version__},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _openvino_versions() -> dict:
    from mlminilm.runtimes.openvino_runtime import versions as openvino_versions

    return openvino_versions()


def _quantization(source: _Source) -> dict:
    record = source.int8.plan.record()
    if source.int8.calibration is not None:
        record["calibration"] = {**source.int8.calibration.record(), "prefix": source.int8.prefix}
    return record


def _write_directory(config: ExportConfig, plan: ExportPlan, source: _Source, model, tmp: Path, record: dict) -> None:
    from mlminilm.models.sentence_encoder import copy_sentence_transformers_tree

    model.config.architectures = [type(model).__name__]  # the exported architecture, not (say) an MLM teacher's
    model.config.save_pretrained(tmp)
    source.tokenizer.save_pretrained(tmp)
    sentence_encoder = copy_sentence_transformers_tree(source.model_dir, tmp) if source.sentence_files else False
    for name in _RUN_FILES:
        if (Path(source.model_dir) / name).is_file():
            shutil.copyfile(Path(source.model_dir) / name, tmp / name)
    (tmp / plan.record_file).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    from mlminilm.export.card import write_card

    write_card(config, plan, source, model, tmp, record, sentence_encoder)
