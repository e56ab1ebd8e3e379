"""`trim`: a model directory -> the same model with only the vocabulary a corpus uses, written atomically.

Output directory (a plain Hugging Face model directory):
  config.json, model.safetensors   vocab_size and special-token ids renumbered, vocabulary rows subset
  tokenizer files                  the same pieces renumbered (mlminilm.vocab.tokenizer)
  sentence-transformers files      copied unchanged, when the model has them
  run.json, selection.json         copied unchanged from a `finetune` output (evaluation reads its settings)
  trim.json                        old id of each new id, the counts behind the choice, options, coverage
  README.md, mlminilm.json         the model card
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from mlminilm import __version__
from mlminilm import logging as mlog
from mlminilm.config import TrimConfig
from mlminilm.errors import ConfigError, Problems
from mlminilm.vocab import counts as counting
from mlminilm.vocab import tokenizer as tokens
from mlminilm.vocab import weights

log = mlog.get(__name__)

TRIM_JSON = "trim.json"
FORMAT_VERSION = 1
_SENTENCE_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
_RUN_FILES = ("run.json", "selection.json")  # a finetune output's settings, read by the evaluations


@dataclass
class TrimResult:
    """What `run` did; `to_dict` is the CLI's --json document (trim.json without the id lists)."""

    out: Path
    record: dict
    elapsed_s: float

    @property
    def vocab_before(self) -> int:
        return self.record["vocab_size"]["before"]

    @property
    def vocab_after(self) -> int:
        return self.record["vocab_size"]["after"]

    @property
    def parameters_before(self) -> int:
        return self.record["parameters"]["before"]

    @property
    def parameters_after(self) -> int:
        return self.record["parameters"]["after"]

    @property
    def coverage(self) -> float:
        return self.record["coverage"]

    def to_dict(self) -> dict:
        doc = {k: v for k, v in self.record.items() if k not in ("old_ids", "kept_counts")}
        return {"out": str(self.out), **doc, "elapsed_s": round(self.elapsed_s, 3)}


def run(config: TrimConfig) -> TrimResult:
    """Count, choose the ids, and write the trimmed model to `config.out`; all cheap checks come first."""
    start = time.perf_counter()
    out = Path(config.out)
    tokenizer, doc, model_config, model_dir = _validate(config, out)
    if config.data is not None:
        found = counting.counts_from_data(config.data, tokenizer, config.model)
    else:
        found = counting.counts_from_corpus(config.corpus, config.langs, tokenizer, config.workers)
    forced = {i for i in tokens.required_ids(tokenizer, doc) | weights.config_token_ids(model_config)
              if 0 <= i < len(tokenizer)}
    selection = counting.select_ids(found.counts, forced, config.min_count, config.coverage, config.max_vocab)
    old_ids = selection.old_ids
    log.info("keeping %s of %s ids (%s special), covering %.4f%% of %s corpus tokens",
             f"{len(old_ids):,}", f"{len(tokenizer):,}", len(selection.forced), 100 * selection.coverage,
             f"{selection.corpus_tokens:,}")

    model, absent = weights.load_any_model(config.model)
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        raise ConfigError(f"the tokenizer of --model {config.model} has {len(tokenizer)} ids but the model only "
                          f"{rows} embedding rows: tokenizer and model do not belong together")
    before = weights.count_parameters(model, absent)
    trimmed = weights.trim_model(model, old_ids)
    log.info("subset %s", ", ".join(trimmed))

    record = _record(config, model_dir, found, selection, rows, len(tokenizer), before,
                     weights.count_parameters(model, absent), trimmed)
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True, state_dict=weights.saved_state(model, absent))
        tokens.write_tokenizer(tokenizer, doc, old_ids, tmp)
        sentence_encoder = _copy_extras(model_dir, tmp)
        (tmp / TRIM_JSON).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        _write_card(config, tmp, record, sentence_encoder, model.config)
        _check_output(tmp, len(old_ids))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return TrimResult(out, record, time.perf_counter() - start)


def _validate(config: TrimConfig, out: Path):
    """The checks that need no counting, all reported at once."""
    from mlminilm.models.loading import load_config, load_tokenizer, resolve_model

    problems = Problems()
    attempt = problems.attempt

    model_dir = attempt(lambda: resolve_model(config.model))
    if out.exists() and not out.is_dir():
        problems.add(ConfigError(f"--out {out} is a file; name a directory"))
    elif out.is_dir() and any(out.iterdir()) and not config.overwrite:
        problems.add(ConfigError(f"--out {out} is not empty; pass --overwrite to replace it, or choose another"))
    if model_dir and Path(model_dir).is_dir() and out.exists() and out.resolve() == Path(model_dir).resolve():
        problems.add(ConfigError(f"--out {out} is the model directory itself; write the trimmed model elsewhere"))
    for flag, path in (("--data", config.data), ("--corpus", config.corpus)):
        if path is not None and not Path(path).exists():
            problems.add(ConfigError(f"{flag} {path} does not exist"))
    model_config = attempt(lambda: load_config(config.model))
    tokenizer = attempt(lambda: load_tokenizer(config.model))
    doc = attempt(lambda: tokens.tokenizer_document(tokenizer, config.model)) if tokenizer is not None else None
    problems.raise_any()
    return tokenizer, doc, model_config, model_dir


def _record(config: TrimConfig, model_dir: str, found: counting.TokenCounts, selection: counting.Selection,
            rows: int, tokenizer_size: int, before: int, after: int, trimmed: list[str]) -> dict:
    old_ids = selection.old_ids
    return {
        "format_version": FORMAT_VERSION,
        "mlminilm_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": config.model,
        "model_dir": str(model_dir),
        "options": {"data": _str(config.data), "corpus": _str(config.corpus), "langs": list(config.langs),
                    "min_count": config.min_count, "coverage": config.coverage, "max_vocab": config.max_vocab},
        "counts": {"source": found.source, "path": found.path, "languages": found.languages,
                   "corpus_tokens": selection.corpus_tokens, "distinct_ids_seen": selection.seen,
                   "rule": "occurrences of every id but the special and added tokens; coverage is the share of "
                           "them whose id is kept"},
        "vocab_size": {"before": rows, "after": len(old_ids)},
        "tokenizer_size": {"before": tokenizer_size, "after": len(old_ids)},
        "special_ids": [int(i) for i in selection.forced],
        "coverage": selection.coverage,
        "covered_tokens": selection.covered_tokens,
        "parameters": {"before": before, "after": after},
        "trimmed_tensors": trimmed,
        "old_ids": [int(i) for i in old_ids],  # new id i is old id old_ids[i]
        "kept_counts": [int(c) for c in np.asarray(found.counts)[old_ids]],
    }


def _str(path) -> str | None:
    return None if path is None else str(path)


def _copy_extras(model_dir: str, out: Path) -> bool:
    """Copy the sentence-transformers files and a finetune run's settings unchanged; True for a sentence encoder."""
    from mlminilm.models.sentence_encoder import sentence_transformers_modules

    source = Path(model_dir)
    if not source.is_dir():
        return False
    for name in _RUN_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)
    modules = sentence_transformers_modules(source)
    if not modules:
        return False
    for name in _SENTENCE_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)
    for module in modules:
        folder = str(module.get("path", ""))
        if folder and (source / folder).is_dir():
            shutil.copytree(source / folder, out / folder, dirs_exist_ok=True)
    return True


def _write_card(config: TrimConfig, out: Path, record: dict, sentence_encoder: bool, model_config) -> None:
    from mlminilm.models.cards import infer_card_data, source_card_data
    from mlminilm.models.export import model_card

    languages = list(record["counts"]["languages"])
    before, after = record["vocab_size"]["before"], record["vocab_size"]["after"]
    info = {
        "title": f"{Path(config.model).name or config.model}, vocabulary trimmed to {after:,} ids",
        "base_model": config.model,
        "languages": ", ".join(languages),
        "vocabulary": f"{before:,} -> {after:,} ids",
        "parameters": f"{record['parameters']['before']:,} -> {record['parameters']['after']:,}",
        "counts": f"{record['counts']['source']} {record['counts']['path']}",
        "coverage": f"{100 * record['coverage']:.4f}% of {record['counts']['corpus_tokens']:,} corpus tokens",
        "min_count": config.min_count,
        "max_vocab": config.max_vocab,
    }
    source = source_card_data(config.model)
    data = infer_card_data(
        info, sentence_encoder, getattr(model_config, "architectures", None),
        pipeline_tag=source.get("pipeline_tag"), tags=["vocabulary-trimming", *(["multilingual"] if len(languages) > 1 else [])],
    )
    summary = ("The model with only the vocabulary its languages use (mlminilm trim): text that used only kept "
               "pieces tokenizes to the same pieces as before, renumbered; `trim.json` maps each new id to its old "
               "id.")
    (out / "README.md").write_text(model_card(info, summary, data), encoding="utf-8")
    (out / "mlminilm.json").write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")


def _check_output(out: Path, size: int) -> None:
    """The written directory loads with AutoConfig / AutoTokenizer and has the trimmed size."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    if config.vocab_size != size or len(tokenizer) != size:
        raise ConfigError(f"the trimmed model came out with vocab_size {config.vocab_size} and {len(tokenizer)} "
                          f"tokenizer ids instead of {size}; report this as a bug")
