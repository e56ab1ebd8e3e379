"""The model card of an `mlminilm export` directory: what the graph is (ONNX or OpenVINO IR, float32 or int8), how
it was checked, and a snippet that loads and runs it.

The snippet uses onnxruntime or OpenVINO directly, with transformers' tokenizer: sentence-transformers'
`backend="onnx"` needs optimum, which does not install beside the transformers mlminilm pins, and its
`backend="openvino"` (optimum-intel) downgrades transformers and pulls a CUDA torch; the card says so (OPTIMUM). The
snippet runs as printed in the export directory (tests/test_onnx.py and tests/openvino_cases.py execute it and
compare with PyTorch), and pools as the model's sentence-transformers files say, so its vectors are those
`SentenceTransformer(source)` gives.

The front matter names no `library_name`: the directory holds no PyTorch weights, so neither transformers'
`AutoModel` nor `SentenceTransformer(dir)` loads it as it is (sentence-transformers only with a backend and
optimum), and ONNX and OpenVINO IR are file formats, which the Hub lists as tags (`onnx`, `openvino`), not libraries.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlminilm.export.plan import ExportPlan

# Why the card's snippet is not sentence-transformers' backend= (measured: pip's resolver ran 20 minutes, issue 55)
OPTIMUM = (
    'sentence-transformers\' `SentenceTransformer(dir, backend="{backend}")` would load this directory too, but it '
    "needs {package}, which does not install beside the transformers version mlminilm pins (pip's resolver finds no "
    "set of versions); the code below needs only {runtime} and transformers' tokenizer."
)

# numpy for each sentence-transformers pooling mode over `hidden` [batch, seq, dim] and `mask` [batch, seq, 1]
_POOLING = {
    "mean": "(hidden * mask).sum(1) / mask.sum(1)",
    "cls": "hidden[:, 0]",
    "max": "np.where(mask > 0, hidden, -np.inf).max(1)",
    "mean_sqrt_len_tokens": "(hidden * mask).sum(1) / np.sqrt(mask.sum(1))",
}


def write_card(config, plan: ExportPlan, source, model, tmp: Path, record: dict, sentence_encoder: bool) -> None:
    """README.md (the card) and mlminilm.json of the export being built in `tmp`."""
    from mlminilm.models.cards import infer_card_data, languages_of, render_card, source_card_data

    name = Path(str(config.model).rstrip("/")).name or config.model
    openvino, kind, int8 = plan.openvino, plan.kind, plan.int8
    check = record["check"]
    info = {
        "title": f"{name}, {kind} ({plan.dtype})",
        "base_model": config.model,
        "graph": plan.graph
        + (" + openvino/openvino_model.bin" if openvino else f" (opset {record['opset']})")
        + (f" + {', '.join(record['external_data'])}" if record["external_data"] and not openvino else ""),
        "weights": int8_line(record["quantization"]) if int8 else "float32",
        "inputs": ", ".join(f"{i['name']} {i['shape']}" for i in record["inputs"]),
        "output": f"{record['outputs'][0]['name']} {record['outputs'][0]['shape']} ({record['task']})",
        "check": f"max abs difference to the PyTorch model {check['max_abs_diff']:.3g} on {check['inputs']}",
        "exporter": "torch.onnx.export (dynamo)"
        + (" then openvino.convert_model" if openvino else "")
        + " "
        + ", ".join(
            f"{k} {v}"
            for k, v in record["versions"].items()
            if k in ("torch", "onnx", "onnxruntime", "openvino", "nncf") and v
        ),
    }
    source_info = _read_json(Path(source.model_dir) / "mlminilm.json") if source.model_dir else None
    languages = languages_of(source_card_data(config.model).get("language"))
    tags = [
        plan.format,
        *(["int8", "quantized"] if int8 else []),
        *(["multilingual"] if len(languages) > 1 else []),
    ]
    data = infer_card_data(info, sentence_encoder, getattr(model.config, "architectures", None), tags=tags)
    data.library_name = None  # no library loads it as it is: the module's docstring
    where = f"`{plan.record_file}`"
    summary = (
        f"An {kind} export of `{config.model}` (mlminilm export)"
        + (", weights quantised to int8" if int8 else "")
        + f": the {'model' if openvino else 'graph'}, the tokenizer and the config, no PyTorch weights. {where} "
        "records what it is and how it compares with the PyTorch model."
    )
    st = _setup(source, sentence_encoder)
    load = (
        f"Run it with {plan.runtime} and transformers' tokenizer, in this directory"
        + (f"{_prompts_line(st)}" if record["task"] != "sequence-classification" else "")
        + f":\n\n```python\n{snippet(plan, record['task'], st)}```\n\n"
        + (_optimum_line(plan) + "\n\n" if sentence_encoder else "")
        + f"`mlminilm eval-tatoeba` / `eval-xnli --backend {plan.format}` evaluate it."
    )
    if record.get("fidelity"):
        load += "\n\n" + fidelity_table(record["fidelity"])
    card = render_card(info, data, summary, load_line=load)
    (tmp / "README.md").write_text(str(card), encoding="utf-8")
    doc = {**info, **({"source": source_info} if source_info else {})}
    (tmp / "mlminilm.json").write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")


def _prompts_line(st) -> str:
    """What the snippet's prompt is: the model's query prompt, and the others it has."""
    prompts = dict(st.prompts) if st is not None else {}
    if not prompts:
        return ""
    said = ", ".join(f"`{text}` ({name})" for name, text in prompts.items())
    return (
        f" (every text starts with one of the model's prompts, {said}: the snippet embeds queries"
        + (f"; put `{st.passage_prompt}` before the documents a query retrieves" if st.passage_prompt else "")
        + ")"
    )


def _optimum_line(plan: ExportPlan) -> str:
    if plan.openvino:
        return OPTIMUM.format(backend="openvino", package="optimum-intel", runtime="OpenVINO")
    return OPTIMUM.format(backend="onnx", package="optimum", runtime="onnxruntime")


def _setup(source, sentence_encoder: bool):
    """The sentence-transformers setup the copied files describe, or None (a plain encoder: mean pooling)."""
    if not sentence_encoder:
        return None
    from mlminilm.models.sentence_encoder import read_sentence_transformers

    return read_sentence_transformers(str(source.model_dir))


def snippet(plan: ExportPlan, task: str, st=None) -> str:
    """Python that loads the export of `plan` (in the current directory) and runs it on two sentences: `embeddings`
    (pooled as `st`, the sentence-transformers setup, says; mean without one) or, for a classifier (`task`),
    `labels`."""
    openvino = plan.openvino
    classifier = task == "sequence-classification"
    prompt = (st.query_prompt or "") if st is not None else ""
    lines = ["import numpy as np"]
    lines += ["import openvino as ov"] if openvino else ["import onnxruntime"]
    lines += [f"from transformers import {'AutoConfig, ' if classifier else ''}AutoTokenizer"]
    lines += ["", 'tokenizer = AutoTokenizer.from_pretrained(".")']
    if openvino:
        lines += [
            f'model = ov.Core().compile_model("{plan.graph}", "CPU")',
            "names = [i.any_name for i in model.inputs]",
        ]
    else:
        lines += [
            f'session = onnxruntime.InferenceSession("{plan.graph}")',
            "names = [i.name for i in session.get_inputs()]",
        ]
    if classifier:
        lines += ['batch = tokenizer(["A man is eating."], ["Someone eats."], padding=True, return_tensors="np")']
    else:
        texts = ", ".join(json.dumps(prompt + t, ensure_ascii=False) for t in ("The cat sleeps.", "Die Katze schläft."))
        lines += [f'batch = tokenizer([{texts}], padding=True, return_tensors="np")']
    lines += ["feed = {name: batch[name].astype(np.int64) for name in names}"]
    run = "model(feed)[0]" if openvino else "session.run(None, feed)[0]"
    if classifier:
        lines += [
            f"logits = {run}",
            'labels = [AutoConfig.from_pretrained(".").id2label[int(i)] for i in logits.argmax(-1)]',
        ]
        return "\n".join(lines) + "\n"
    modes = st.pooling if st is not None else ("mean",)
    pooled = [_POOLING[m] for m in modes]
    said = "as 1_Pooling/config.json says" if st is not None else "no sentence-transformers files: mean over tokens"
    lines += [f"hidden = {run}", 'mask = batch["attention_mask"][..., None].astype(hidden.dtype)']
    lines += [
        f"embeddings = {pooled[0] if len(pooled) == 1 else 'np.concatenate([' + ', '.join(pooled) + '], axis=1)'}"
        f"  # {'+'.join(modes)} pooling, {said}"
    ]
    if st is not None and not st.include_prompt:
        lines += ["# (this model's pooling leaves the prompt's tokens out: set their mask to 0 to match it exactly)"]
    if st is not None and st.normalize:
        lines += ["embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)  # the Normalize module"]
    return "\n".join(lines) + "\n"


def int8_line(quantization: dict) -> str:
    kept = quantization.get("float32_kept") or []
    calibration = quantization.get("calibration")
    return (
        f"int8 ({quantization['method']}: {quantization['how']}; QInt8 weights per channel"
        + (f"; float32 kept: {', '.join(kept)}" if kept else "")
        + (
            f"; calibrated on {sum(calibration['languages'].values())} sentences in "
            f"{len(calibration['languages'])} languages ({calibration['kind']})"
            if calibration
            else ""
        )
        + ")"
    )


def fidelity_table(report: dict) -> str:
    """The card's per-language table of what int8 costs (onnx/export.json's `fidelity`)."""
    pairs = report["kind"] == "tatoeba"
    lines = [
        f"int8 against float32, per language (`--check {report['check']}`; drop: {report['drop_means']}):",
        "",
        "| language | sentences | cosine mean | cosine min | top-1 agreement (%) | "
        + ("accuracy xx->en float32 / int8 | accuracy en->xx float32 / int8 | " if pairs else "")
        + "drop |",
        "|---|---:|---:|---:|---:|" + ("---:|---:|" if pairs else "") + "---:|",
    ]
    for lang, r in report["languages"].items():
        accuracy = (
            "".join(
                f" {r['accuracy'][d]['float32']:.1f} / {r['accuracy'][d]['int8']:.1f} |"
                for d in ("xx_to_en", "en_to_xx")
            )
            if pairs
            else ""
        )
        flag = " (over --max-drop)" if lang in report["over_max_drop"] else ""
        lines.append(
            f"| {lang} | {r['sentences']} | {r['cosine_mean']:.4f} | {r['cosine_min']:.4f} | "
            f"{r['top1_agreement']:.1f} |{accuracy} {r['drop']:.1f}{flag} |"
        )
    return "\n".join(lines)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None
