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

How the graph is traced, checked and quantised, and why: mlminilm.models.onnx_graph.
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
from mlminilm.models import onnx_graph
from mlminilm.models.onnx_runtime import GRAPH, RECORD, TASKS, is_export, require_onnx, versions
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
    # The output protocol (mlminilm.io.outputs): lock first, then check and claim --out, build beside, swap in.
    with Claim(out, "export", "an export mlminilm wrote", legacy=None) as claim:
        source = _validate(config, claim)
        record = _export(config, out, source, claim)
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


def _validate(config: ExportConfig, claim) -> _Source:
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
    attempt(lambda: refuse_overlap(claim.out, {"--model": model_dir}))
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
    return _Source(model_dir, weights, model_config, tokenizer, task, sentence_files)


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


def _export(config: ExportConfig, out: Path, source: _Source, claim) -> dict:
    model = _load(source)
    names = source.input_names
    output = TASKS[source.task]
    wrapper = onnx_graph.Graph(model, output).eval()
    large = sum(p.numel() * p.element_size() for p in model.parameters()) > LARGE_MODEL_BYTES
    with claim.staging() as tmp:  # never a half-written export beside the output
        graph = tmp / GRAPH
        graph.parent.mkdir(parents=True)
        t0 = time.perf_counter()
        float_graph = graph if config.quantize == "none" else graph.with_name("model-float32.onnx")
        example = onnx_graph.model_inputs(
            source.tokenizer, source.task, onnx_graph.EXAMPLE, onnx_graph.EXAMPLE[::-1], names
        )
        onnx_graph.trace(wrapper, example, names, output, float_graph, config.opset, large)
        log.info("traced %s (%s) in %.1f s", config.model, source.task, time.perf_counter() - t0)
        if config.quantize == "int8":
            t0 = time.perf_counter()
            onnx_graph.quantize_int8(float_graph, graph, large)
            for path in float_graph.parent.glob(float_graph.name + "*"):  # the float32 graph and its data file
                path.unlink()
            log.info("quantised to int8 in %.1f s", time.perf_counter() - t0)
        with torch.inference_mode():
            check = onnx_graph.check(wrapper, graph, source.tokenizer, source.task, names, output, config.quantize)
        record = _record(config, source, graph, check)
        _write_directory(config, source, model, tmp, record)
    log.info("export written to %s (%s graph, %.1f MB)", out, record["dtype"], record["graph_bytes"] / 1e6)
    return record


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


def _record(config: ExportConfig, source: _Source, graph: Path, check: dict) -> dict:
    from mlminilm.models.onnx_runtime import session

    graph_session = session(graph, 1)
    data_files = sorted(p.name for p in graph.parent.iterdir() if p.name.startswith("model.onnx") and p != graph)
    return {
        "format_version": FORMAT_VERSION,
        "format": "onnx",
        "graph": GRAPH,
        "external_data": data_files,
        "graph_bytes": sum(p.stat().st_size for p in graph.parent.iterdir() if p.name.startswith("model.onnx")),
        "dtype": "int8" if config.quantize == "int8" else "float32",
        "quantization": dict(onnx_graph.INT8) if config.quantize == "int8" else None,
        "opset": config.opset,
        "task": source.task,
        "inputs": onnx_graph.io_record(graph_session.get_inputs()),
        "outputs": onnx_graph.io_record(graph_session.get_outputs()),
        "num_layers": int(source.config.num_hidden_layers),
        "hidden_size": int(source.config.hidden_size),
        "model_type": source.config.model_type,
        "exporter": "torch.onnx.export(dynamo=True): torch.export, translated by onnxscript, dynamic batch and "
        "sequence axes",
        "source": {"model": config.model, "model_dir": str(source.model_dir)},
        "check": check,
        "versions": {**versions(), "mlminilm": __version__},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _write_directory(config: ExportConfig, source: _Source, model, tmp: Path, record: dict) -> None:
    from mlminilm.models.sentence_encoder import copy_sentence_transformers_tree

    model.config.architectures = [type(model).__name__]  # the exported architecture, not (say) an MLM teacher's
    model.config.save_pretrained(tmp)
    source.tokenizer.save_pretrained(tmp)
    sentence_encoder = copy_sentence_transformers_tree(source.model_dir, tmp) if source.sentence_files else False
    for name in _RUN_FILES:
        if (Path(source.model_dir) / name).is_file():
            shutil.copyfile(Path(source.model_dir) / name, tmp / name)
    (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    _write_card(config, source, model, tmp, record, sentence_encoder)


def _write_card(config: ExportConfig, source: _Source, model, tmp: Path, record: dict, sentence_encoder: bool) -> None:
    from mlminilm.models.cards import infer_card_data, languages_of, render_card, source_card_data

    name = Path(str(config.model).rstrip("/")).name or config.model
    int8 = record["dtype"] == "int8"
    check = record["check"]
    info = {
        "title": f"{name}, ONNX ({record['dtype']})",
        "base_model": config.model,
        "graph": f"{GRAPH} (opset {record['opset']})"
        + (f" + {', '.join(record['external_data'])}" if record["external_data"] else ""),
        "weights": (
            "int8: onnxruntime dynamic quantisation (QInt8 weights per channel, MatMul and embeddings; "
            "activations quantised at run time)"
        )
        if int8
        else "float32",
        "inputs": ", ".join(f"{i['name']} {i['shape']}" for i in record["inputs"]),
        "output": f"{record['outputs'][0]['name']} {record['outputs'][0]['shape']} ({record['task']})",
        "check": f"max abs difference to the PyTorch model {check['max_abs_diff']:.3g} on {check['inputs']}",
        "exporter": "torch.onnx.export (dynamo) "
        + ", ".join(f"{k} {v}" for k, v in record["versions"].items() if k in ("torch", "onnx", "onnxruntime") and v),
    }
    source_info = _read_json(Path(source.model_dir) / "mlminilm.json") if source.model_dir else None
    languages = languages_of(source_card_data(config.model).get("language"))
    tags = ["onnx", *(["int8", "quantized"] if int8 else []), *(["multilingual"] if len(languages) > 1 else [])]
    data = infer_card_data(info, sentence_encoder, getattr(model.config, "architectures", None), tags=tags)
    summary = (
        f"An ONNX export of `{config.model}` (mlminilm export)"
        + (", weights quantised to int8" if int8 else "")
        + ": the graph, the tokenizer and the config, "
        "no PyTorch weights. `onnx/export.json` records what the graph is and how it compares with the "
        "PyTorch model."
    )
    load = (
        'Load it with `SentenceTransformer(dir, backend="onnx")` (sentence-transformers with optimum), or '
        '`onnxruntime.InferenceSession("onnx/model.onnx")` beside `AutoTokenizer.from_pretrained(dir)`; '
        "`mlminilm eval-tatoeba` / `eval-xnli --backend onnx` evaluate it."
    )
    card = render_card(info, data, summary, load_line=load)
    (tmp / "README.md").write_text(str(card), encoding="utf-8")
    doc = {**info, **({"source": source_info} if source_info else {})}
    (tmp / "mlminilm.json").write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None
