"""The encoders of an `eval-retrieval` run: `--model` embeds the passages (the index) and, unless `--query-model`
names another encoder (asymmetric search), the questions too.

In asymmetric search each side is its model's own: its directory or hub id, its backend (`--backend` for the index,
`--query-backend` for the questions: by default what the query model's directory is), its layer, pooling, prompt,
tokenizer and maximum length. Only the two vectors meet, in the cosine similarity, so they must have one size; that
the two models tokenise or pool differently does not matter (a student on the query path of its teacher's index
often does both). A `--query-model` that is `--model` on the same backend is symmetric search, run as such.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mlminilm import logging as mlog
from mlminilm.errors import ConfigError, MlminilmError

log = mlog.get(__name__)

SIDES = ("query", "passage")


@dataclass
class Encoder:
    """One model of the run, checked before any work: as given, the option that gave it, where it is, its config,
    its sentence-transformers setup, its backend (the option that chose it) and, for onnx / openvino, its export."""

    name: str
    flag: str  # --model or --query-model
    directory: str
    config: object
    st: object  # SentenceTransformerSetup | None
    backend: str = "torch"
    backend_flag: str = "--backend"
    export: object = None  # ExportRecord | None

    def dimension(self, spec) -> int:
        """The size of its sentence vectors: the hidden size times the pooling modes (concatenated)."""
        return int(self.config.hidden_size) * len(spec.pooling)


def open_encoders(cfg) -> dict[str, Encoder]:
    """{"query": ..., "passage": ...}: one Encoder for both sides (symmetric search), or the query model's and the
    index model's; every problem of both models in one ConfigError."""
    problems: list[str] = []
    index = _open(cfg.model, "--model", problems)
    query = _open(cfg.query_model, "--query-model", problems) if cfg.query_model is not None else None
    if problems:
        raise ConfigError("; ".join(problems))
    index.backend = cfg.backend
    if query is None:
        return {"query": index, "passage": index}
    same = _same_directory(query.directory, index.directory)
    if cfg.query_backend != "auto":
        query.backend, query.backend_flag = cfg.query_backend, "--query-backend"
    else:
        from mlminilm.runtimes.onnx_runtime import export_format

        query.backend = cfg.backend if same else (export_format(query.directory) or "torch")
        query.backend_flag = "--query-backend"
    if same and query.backend == index.backend:
        log.info("--query-model is --model on the same backend (%s): symmetric search", index.backend)
        return {"query": index, "passage": index}
    return {"query": query, "passage": index}


def _open(name: str, flag: str, problems: list[str]) -> Encoder | None:
    from mlminilm.models.loading import check_encoder_config, load_config, resolve_model
    from mlminilm.models.sentence_encoder import read_sentence_transformers

    try:
        config = load_config(name)
        check_encoder_config(config, name)
        directory = resolve_model(name)
        return Encoder(name, flag, directory, config, read_sentence_transformers(directory))
    except MlminilmError as exc:
        problems.append(str(exc))
        return None


def _same_directory(a: str, b: str) -> bool:
    if os.path.isdir(a) and os.path.isdir(b):
        return os.path.samefile(a, b)
    return a == b


def asymmetric(encoders: dict[str, Encoder]) -> bool:
    return encoders["query"] is not encoders["passage"]


def check_exports(encoders: dict[str, Encoder], specs: dict) -> None:
    """Each model's backend: its export record (onnx / openvino) read, or PyTorch weights there; an exported graph
    only pools its last layer. ConfigErrors name the option that chose the backend."""
    from mlminilm.evaluation import backends
    from mlminilm.evaluation.embeddings import check_graph_layer

    for side in SIDES:
        enc = encoders[side]
        if enc.export is None:
            enc.export = backends.check(enc.backend, enc.directory, "feature-extraction", flag=enc.backend_flag)
        check_graph_layer(enc.export, specs[side], enc.backend, enc.backend_flag)


def check_pair(encoders: dict[str, Encoder], specs: dict) -> None:
    """Asymmetric search compares a question's vector with a passage's: a ConfigError when their sizes differ. The
    ways the two models tokenise and pool may differ (said once in the log, as what asymmetric search is)."""
    if not asymmetric(encoders):
        return
    query, index = encoders["query"], encoders["passage"]
    q_spec, p_spec = specs["query"], specs["passage"]
    dq, dp = query.dimension(q_spec), index.dimension(p_spec)
    if dq != dp:
        raise ConfigError(
            f"--query-model {query.name} embeds questions in {dq} dimensions (hidden size "
            f"{query.config.hidden_size}, {'+'.join(q_spec.pooling)} pooling) and --model {index.name} embeds "
            f"passages in {dp} (hidden size {index.config.hidden_size}, {'+'.join(p_spec.pooling)} pooling): "
            "cosine similarity compares vectors of one size; pair the index with a query model of its embedding "
            "size (e.g. a student distilled from it at its hidden size)"
        )
    own = index.st.query_prompt if index.st is not None else None
    if own and q_spec.rules.get("prefix") == "none":
        log.warning(
            "--query-model %s has no 'query' prompt, but the index model %s puts %r before its own questions: the "
            "questions get none; add --query-prompt %r if the query model learned with it",
            query.name,
            index.name,
            own,
            own,
        )
    differ = [
        what
        for what, a, b in (
            ("vocabulary", query.config.vocab_size, index.config.vocab_size),
            ("pooling", q_spec.pooling, p_spec.pooling),
            ("layer", (q_spec.layer, q_spec.num_layers), (p_spec.layer, p_spec.num_layers)),
        )
        if a != b
    ]
    if differ:
        log.info(
            "the query model and the index model differ in %s: no matter for asymmetric search, where only the "
            "two %d-dimensional vectors meet",
            ", ".join(differ),
            dq,
        )


def load(encoders: dict[str, Encoder], specs: dict, cfg) -> tuple[dict, dict]:
    """({side: (model, tokenizer)}, {side: runtime}): each model loaded once, in its own backend's runtime."""
    from mlminilm.evaluation import backends
    from mlminilm.evaluation.embeddings import load_embedder

    loaded, rts = {}, {}
    for side in SIDES:
        enc = encoders[side]
        rts[side] = backends.runtime(cfg, enc.backend)
        if side == "passage" and not asymmetric(encoders):
            loaded[side] = loaded["query"]  # one encoder for both sides
        else:
            loaded[side] = load_embedder(specs[side], enc.export, rts[side])
    return loaded, rts


# ------------------------------------------------------------------------------------------ the report


def backend_text(enc: Encoder) -> str:
    """The backend that runs `enc`, for the summary: torch, or the export's runtime and graph."""
    return enc.export.describe() if enc.export is not None else "torch"


def stamp(doc: dict, encoders: dict[str, Encoder], specs: dict, rts: dict, sides: dict) -> dict:
    """An asymmetric report's backends, sizes and per-side throughput: `backend` and `size` stay the index model's
    (`model`), `query_backend` and `query_size` are the query model's; each side's vectors' weights dtype; the
    questions' and the passages' own rates (`throughput.sides`: text counts, seconds, texts per second)."""
    from mlminilm.evaluation import backends
    from mlminilm.models.size import model_size

    query, index = encoders["query"], encoders["passage"]
    doc["backend"] = backends.record(index.export, rts["passage"])
    doc["query_backend"] = backends.record(query.export, rts["query"])
    for side in SIDES:
        enc = encoders[side]
        if enc.export is not None:
            doc["embedding"][side]["weights_dtype"] = enc.export.dtype
    tp = doc["throughput"]
    if index.export is not None:
        tp["precision"] = index.export.dtype
        tp["backend"] = "OpenVINO" if index.export.format == "openvino" else "onnxruntime"
    tp["sides"] = {
        side: {
            "model": encoders[side].name,
            "backend": backend_text(encoders[side]),
            "device": str(rts[side].device),
            "texts": count,
            "elapsed_s": elapsed,
            "texts_per_s": count / max(elapsed, 1e-9),
        }
        for side, (count, elapsed) in sides.items()
    }
    for key, side in (("size", "passage"), ("query_size", "query")):
        enc = encoders[side]
        doc[key] = model_size(str(enc.export.directory) if enc.export is not None else specs[side].weights)
    return doc
