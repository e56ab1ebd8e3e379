"""The int8 step of `mlminilm export`: what it reads before the trace (calibration text, the check sentences), the
quantisation itself, and the per-language fidelity report (float32 against int8 graph) that goes into
onnx/export.json and the card. The methods: mlminilm.export.int8; the report: mlminilm.export.fidelity.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.config import ExportConfig
from mlminilm.config.export import CALIBRATION_MAX_LENGTH
from mlminilm.errors import CheckpointError, ConfigError
from mlminilm.export.calibration import CalibrationText, calibration_text
from mlminilm.export.fidelity import CheckSet, fidelity_report, language_fidelity, read_check
from mlminilm.export.int8 import Batches, Int8Plan, quantize_dynamic
from mlminilm.export.plan import ExportPlan

log = mlog.get(__name__)


@dataclass(frozen=True)
class Int8Inputs:
    """What the int8 step needs, read (and checked) before anything is traced."""

    plan: Int8Plan
    prefix: str  # the model's query prefix, before every calibration and check sentence
    calibration: CalibrationText | None
    check: CheckSet | None
    spec: object  # the EmbeddingSpec of the fidelity check (pooling, prefix, max length), when --check


def read_inputs(
    config: ExportConfig, plan: ExportPlan, model_dir: str, weights: str, model_config, tokenizer, task: str
) -> Int8Inputs:
    """The int8 method's plan, the calibration text and the check set; ConfigError / DataError before any work."""
    from mlminilm.config import TATOEBA_MAX_LENGTH
    from mlminilm.evaluation.embeddings import resolve_spec
    from mlminilm.models.sentence_encoder import read_sentence_transformers

    int8 = Int8Plan(method=plan.int8_method, keep=tuple(config.int8_keep))
    st = read_sentence_transformers(model_dir) if task == "feature-extraction" else None
    prefix = st.query_prompt if st is not None and st.query_prompt else ""
    calibration = None
    if plan.calibrated:  # --calibration, else the text the model was distilled on
        calibration = calibration_text(
            config.calibration, model_dir, config.model, tokenizer, config.calibration_sentences
        )
    check, spec = None, None
    if config.check is not None:
        if task != "feature-extraction":
            raise ConfigError("--check compares sentence embeddings: it applies to encoders, not to a classifier")
        check = read_check(config.check, tokenizer, config.check_sentences)
        spec = resolve_spec(
            weights,
            model_config,
            st,
            layer=-1,  # the graph outputs the last layer only
            pooling="auto",
            prefix=None,
            max_length=None,
            default_max_length=TATOEBA_MAX_LENGTH,
        )
    return Int8Inputs(int8, prefix, calibration, check, spec)


def make_graph(
    inputs: Int8Inputs | None,
    plan: ExportPlan,
    float_graph: Path,
    graph: Path,
    tokenizer,
    names: list[str],
    large: bool,
) -> None:
    """From the float32 ONNX graph, `graph`: an int8 ONNX graph (onnxruntime, by the plan), or OpenVINO's IR
    (float32, or int8 by NNCF with `inputs`), calibrated on the calibration text where the method needs it."""
    from mlminilm.export.graph import failure

    batches = None
    if inputs is not None and inputs.calibration is not None:
        sentences = [inputs.prefix + s for lines in inputs.calibration.sentences.values() for s in lines]
        batches = Batches(tokenizer, sentences, names, CALIBRATION_MAX_LENGTH)
    t0 = time.perf_counter()
    if plan.openvino:
        from mlminilm.export.openvino_ir import convert

        try:
            convert(float_graph, graph, list(batches) if batches is not None else None, len(list(batches or ())))
        except Exception as exc:  # noqa: BLE001 - OpenVINO and NNCF raise whatever their steps raise
            raise failure(
                "OpenVINO could not convert" + (" and quantise" if batches else "") + " the graph", exc
            ) from exc
        log.info("converted to OpenVINO%s in %.1f s", " int8 (NNCF)" if batches else "", time.perf_counter() - t0)
        return
    try:
        quantize_dynamic(float_graph, graph, inputs.plan.keep, large)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's quantiser raises whatever its steps raise
        raise failure("onnxruntime could not quantise the graph to int8", exc) from exc
    log.info("quantised to int8 (dynamic) in %.1f s", time.perf_counter() - t0)


def fidelity(
    inputs: Int8Inputs, plan: ExportPlan, staging: Path, float_graph: Path, graph: Path, record: dict, tokenizer, cfg
) -> dict:
    """The per-language report of the int8 graph against the float32 one (both in `staging`)."""
    from mlminilm.evaluation.embeddings import embed, encode
    from mlminilm.runtimes.onnx_runtime import ExportRecord, OnnxModel
    from mlminilm.training import setup_runtime

    check, spec = inputs.check, inputs.spec
    rt = setup_runtime("cpu", "fp32")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def runner(path: Path, openvino: bool):
        doc = {**record, "graph": str(path.relative_to(staging))}
        if openvino:
            from mlminilm.runtimes.openvino_runtime import OpenVinoModel

            return OpenVinoModel(staging, record=ExportRecord(staging, doc))
        return OnnxModel(staging, record=ExportRecord(staging, doc))

    models = {"float32": runner(float_graph, False), "int8": runner(graph, plan.openvino)}  # float32: the traced graph
    t0 = time.perf_counter()
    languages = {}
    for lang in check.languages:
        sides = list(check.pairs[lang]) if check.kind == "tatoeba" else [check.sentences[lang]]
        vectors = {}
        for dtype, model in models.items():
            vectors[dtype] = []
            for side in sides:
                rows, _ = encode(tokenizer, side, spec.prefix, spec.max_length)
                vectors[dtype].append(embed(model, rows, spec, batch_size=32, rt=rt, pad_id=pad))
        languages[lang] = language_fidelity(vectors["float32"], vectors["int8"])
    report = fidelity_report(languages, check, cfg.max_drop)
    report["embedding"] = spec.describe()
    report["seconds"] = round(time.perf_counter() - t0, 1)
    for lang in report["over_max_drop"]:
        log.warning(
            "int8 costs %s %.1f points (%s; --max-drop %g)",
            lang,
            languages[lang]["drop"],
            report["drop_means"],
            cfg.max_drop,
        )
    if report["over_max_drop"] and cfg.strict:
        raise CheckpointError(
            f"--strict: int8 costs {', '.join(report['over_max_drop'])} more than --max-drop {cfg.max_drop:g} "
            f"points (worst {report['worst']['language']} {report['worst']['drop']:.1f}); nothing was written. "
            "Try --int8 with another method, --int8-keep, or export float32"
        )
    log.info(
        "check: %d languages, worst drop %s %.2f points, min cosine %.4f (%.0f s)",
        len(languages),
        report["worst"]["language"],
        report["worst"]["drop"],
        report["cosine_min"],
        report["seconds"],
    )
    return report
