"""Sentence embeddings from an encoder as it is: which layer, which pooling, which prefix, and the batched pass.

A model directory with sentence-transformers files (`modules.json` with a Pooling module) is embedded the way
the model itself embeds: the last layer, its Pooling module's mode, and its "query" prompt as prefix when
`config_sentence_transformers.json` has one. Any other encoder follows XTREME's choice for base encoders: the
mean over real tokens of hidden-states index `layers // 2 + 1` (0 = the embedding output): layer 7 of 12, 13 of
24, 4 of 6. Options override each choice; `EmbeddingSpec.describe()` says which rule decided.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from mlminilm import logging as mlog
from mlminilm.errors import ConfigError
from mlminilm.evaluation.common import length_order, pad_batch, position_limit, to_device
from mlminilm.models.pooling import POOLING_MODES, pool
from mlminilm.models.sentence_encoder import SentenceTransformerSetup

log = mlog.get(__name__)

# A sentence is cut at max_length x this many characters before it is tokenised (`encode`): no token of real text
# spans that many on average, so its first max_length tokens are unchanged.
CHARS_PER_TOKEN = 100


def default_layer(num_layers: int) -> int:
    """XTREME's layer for base encoders as a hidden-states index: layers // 2 + 1 (7 of 12, 13 of 24, 4 of 6,
    1 of 1); never the embedding output, never past the last layer."""
    return min(num_layers, num_layers // 2 + 1)


@dataclass(frozen=True)
class EmbeddingSpec:
    """How every sentence becomes a vector; `rules` says which rule decided each choice (for the report)."""

    weights: str  # what load_encoder loads: the model, or its sentence-transformers encoder subfolder
    layer: int  # hidden-states index, 0 = the embedding output
    num_layers: int
    pooling: tuple[str, ...]
    prefix: str
    max_length: int
    skip_prompt_tokens: int = 0  # leading tokens left out of the pooling (sentence-transformers include_prompt)
    rules: dict = field(default_factory=dict)

    def describe(self) -> str:
        prefix = repr(self.prefix) if self.prefix else "none"
        return (
            f"layer {self.layer} of {self.num_layers} ({self.rules['layer']}), {'+'.join(self.pooling)} pooling "
            f"({self.rules['pooling']}), prefix {prefix} ({self.rules['prefix']}), max length {self.max_length}"
        )

    def record(self) -> dict:
        return {
            "layer": self.layer,
            "num_layers": self.num_layers,
            "layer_rule": self.rules["layer"],
            "pooling": list(self.pooling),
            "pooling_rule": self.rules["pooling"],
            "prefix": self.prefix,
            "prefix_rule": self.rules["prefix"],
            "max_length": self.max_length,
            "max_length_rule": self.rules["max_length"],
            "skip_prompt_tokens": self.skip_prompt_tokens,
            "sentence_transformers": self.rules.get("sentence_transformers"),
            "weights": self.weights,
            "weights_dtype": "float32",
        }


def resolve_spec(
    model: str,
    config,
    st: SentenceTransformerSetup | None,
    *,
    layer: int | None,
    pooling: str,
    prefix: str | None,
    max_length: int | None,
    default_max_length: int,
) -> EmbeddingSpec:
    """Each choice from the options, else the model's sentence-transformers setup, else XTREME's rule.
    ConfigErrors for a layer out of range, an unsupported pooling mode or a length past the positions."""
    n = int(config.num_hidden_layers)
    problems: list[str] = []
    rules: dict = {}
    index, rules["layer"] = _choose_layer(model, n, st, layer, problems)
    modes, rules["pooling"] = _choose_pooling(model, st, pooling, problems)
    text, rules["prefix"] = _choose_prefix(st, prefix)
    limit = position_limit(config)
    length, rules["max_length"] = _choose_max_length(model, limit, max_length, default_max_length, problems)
    if problems:
        raise ConfigError("; ".join(problems))
    weights = model
    if st is not None:
        rules["sentence_transformers"] = _sentence_transformers_record(model, st)
        if st.transformer_path and os.path.isdir(model):
            weights = str(Path(model) / st.transformer_path)
    return EmbeddingSpec(weights, index, n, tuple(modes), text, length, rules=rules)


def _choose_layer(
    model: str, n: int, st: SentenceTransformerSetup | None, layer: int | None, problems: list[str]
) -> tuple[int, str]:
    """(hidden-states index, rule): --layer (negative from the end), the last with a sentence-transformers setup,
    else XTREME's."""
    if layer is not None:
        index = layer + n + 1 if layer < 0 else layer
        if not 0 <= index <= n:
            problems.append(
                f"--layer {layer} is out of range for model {model} with {n} layers "
                f"(0 = the embedding output, 1..{n} = the output of that layer, -1 = the last)"
            )
        return index, "--layer"
    if st is not None:
        return n, "last layer: the model's sentence-transformers setup"
    index = default_layer(n)
    return index, f"XTREME's choice for base encoders: layers // 2 + 1 = {index} of {n}"


def _choose_pooling(
    model: str, st: SentenceTransformerSetup | None, pooling: str, problems: list[str]
) -> tuple[tuple[str, ...], str]:
    """(pooling modes, rule): --pooling, the model's Pooling module (modes this module implements), else mean."""
    if pooling != "auto":
        return (pooling,), "--pooling"
    if st is not None:
        bad = [m for m in st.pooling if m not in POOLING_MODES]
        if bad:
            problems.append(
                f"model {model} pools with {'+'.join(bad)}, which eval-tatoeba does not implement; "
                f"choose one with --pooling {'|'.join(('mean', 'cls', 'max'))}"
            )
        return st.pooling, "the model's sentence-transformers Pooling module"
    return ("mean",), "mean over real tokens (XTREME)"


def _choose_prefix(st: SentenceTransformerSetup | None, prefix: str | None) -> tuple[str, str]:
    """(prefix, rule): --prefix, the model's "query" prompt, else none."""
    if prefix is not None:
        return prefix, "--prefix"
    if st is not None and st.query_prompt:
        return st.query_prompt, "the model's 'query' prompt (config_sentence_transformers.json)"
    return "", "none"


def _choose_max_length(
    model: str, limit: int | None, max_length: int | None, default_max_length: int, problems: list[str]
) -> tuple[int, str]:
    """(max length, rule): --max-length (within the model's `limit` positions), else the default, or the limit
    when that is lower."""
    if max_length is not None:
        if limit is not None and max_length > limit:
            problems.append(
                f"--max-length {max_length} is longer than model {model} allows ({limit} positions); "
                f"use --max-length {limit} or less"
            )
        return max_length, "--max-length"
    if limit is not None and limit < default_max_length:
        return limit, f"the model's position limit (below the default {default_max_length})"
    return default_max_length, "default (XTREME)"


def _sentence_transformers_record(model: str, st: SentenceTransformerSetup) -> dict:
    """The model's sentence-transformers setup for the report; a warning for the modules after pooling that
    eval-tatoeba does not apply."""
    record = {
        "pooling": list(st.pooling),
        "normalize": st.normalize,
        "include_prompt": st.include_prompt,
        "query_prompt": st.query_prompt,
        "max_seq_length": st.max_seq_length,
        "not_applied": list(st.not_applied),
    }
    if st.not_applied:
        log.warning(
            "model %s has %s after pooling, which eval-tatoeba does not apply: its embeddings differ "
            "from the model's own encode()",
            model,
            ", ".join(st.not_applied),
        )
    return record


def prompt_length(tokenizer, spec: EmbeddingSpec, st: SentenceTransformerSetup | None) -> int:
    """Leading tokens to leave out of the pooling: sentence-transformers' rule for `include_prompt: false`
    (the tokenized prompt with its special tokens, less the closing one)."""
    if st is None or st.include_prompt or not spec.prefix:
        return 0
    return max(0, len(tokenizer(spec.prefix)["input_ids"]) - 1)


def encode(tokenizer, sentences: Sequence[str], prefix: str, max_length: int) -> tuple[dict[str, list], int]:
    """Unpadded model inputs of `prefix + sentence` and how many were cut at `max_length`. A sentence longer than
    `max_length * CHARS_PER_TOKEN` characters is cut to that many before it is tokenised (and counted as cut): the
    tokenizer never holds a text of hundreds of megabytes whole (a 30 MB passage took 5.9 GB), and the first
    `max_length` tokens of real text lie well inside that many characters."""
    bound = max_length * CHARS_PER_TOKEN
    long = {i for i, s in enumerate(sentences) if len(s) > bound}
    texts = [prefix + (s[:bound] if i in long else s) for i, s in enumerate(sentences)]
    rows = dict(tokenizer(texts, truncation=False))
    over = [i for i, ids in enumerate(rows["input_ids"]) if len(ids) > max_length or i in long]
    if over:
        cut = tokenizer([texts[i] for i in over], truncation=True, max_length=max_length)
        for key in rows:
            for j, i in enumerate(over):
                rows[key][i] = cut[key][j]
    keys = ("input_ids", "attention_mask", "token_type_ids")
    return {k: list(v) for k, v in rows.items() if k in keys}, len(over)


def check_graph_layer(export, spec: EmbeddingSpec, backend: str, flag: str = "--backend") -> None:
    """An exported graph (`export`, None for PyTorch) outputs only the last layer's hidden states: a ConfigError
    when `spec` pools another. `flag`: the option that chose `backend`."""
    if export is not None and spec.layer != spec.num_layers:
        raise ConfigError(
            f"{flag} {backend}: the graph outputs only the last layer's hidden states, not layer {spec.layer} of "
            f"{spec.num_layers} ({spec.rules['layer']}): add --layer -1, or use {flag} torch"
        )


def load_embedder(spec: EmbeddingSpec, export, rt):
    """(model, tokenizer) for `spec`: the exported graph (`export`, an ExportRecord), called as the PyTorch model is
    (its last layer only), or the encoder in float32 cut above the spec's layer."""
    import torch

    from mlminilm.evaluation import backends
    from mlminilm.models.loading import load_encoder, load_tokenizer

    tokenizer = load_tokenizer(spec.weights)
    if export is not None:
        return backends.onnx_model(export), tokenizer
    # float32 weights whatever the checkpoint stores; --precision only sets the autocast of the forward pass.
    return truncate_at(load_encoder(spec.weights, dtype=torch.float32), spec.layer).to(rt.device).eval(), tokenizer


def skipping_prompt(spec: EmbeddingSpec, tokenizer, st: SentenceTransformerSetup | None) -> EmbeddingSpec:
    """`spec` with the count of its prompt's tokens that the pooling leaves out (`prompt_length`)."""
    from dataclasses import replace

    return replace(spec, skip_prompt_tokens=prompt_length(tokenizer, spec, st))


def truncate_at(model, layer: int):
    """The model without the layers above hidden-states index `layer` (at least one layer is kept, so that the
    embedding output stays index 0 of `hidden_states`): they cannot change that layer's output."""
    from torch import nn

    from mlminilm.models.layers import encoder_layers

    layers = encoder_layers(model)
    keep = max(1, layer)
    if keep < len(layers):
        model.base_model.encoder.layer = nn.ModuleList(list(layers)[:keep])
    return model


def embed(
    model,
    rows: dict[str, list],
    spec: EmbeddingSpec,
    *,
    batch_size: int,
    rt,
    pad_id: int,
    on_batch: Callable[[int], None] | None = None,
) -> np.ndarray:
    """One float32 vector per encoded sentence, in input order; batches sorted by length."""
    import torch

    order = length_order([len(ids) for ids in rows["input_ids"]])
    vectors: np.ndarray | None = None
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            batch = to_device(pad_batch(rows, index, pad_id), rt.device)
            with rt.autocast():
                hidden = model(**batch, output_hidden_states=True).hidden_states[spec.layer]
            pooled = pool(hidden, batch["attention_mask"], spec.pooling, spec.skip_prompt_tokens).cpu().numpy()
            if vectors is None:
                vectors = np.empty((len(order), pooled.shape[1]), dtype=np.float32)
            vectors[index] = pooled
            if on_batch is not None:
                on_batch(len(index))
    assert vectors is not None, "no sentences to embed"
    return vectors
