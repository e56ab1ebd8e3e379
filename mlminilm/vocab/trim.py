"""`trim`: a model directory -> the same model with only the vocabulary a corpus uses, written atomically.

Output directory (a plain Hugging Face model directory):
  config.json, model.safetensors   vocab_size and special-token ids renumbered, vocabulary rows subset
  tokenizer files                  the same pieces renumbered (mlminilm.vocab.tokenizer)
  sentence-transformers files      copied unchanged, when the model has them
  run.json, selection.json         copied unchanged from a `finetune` output (evaluation reads its settings)
  trim.json                        old id of each new id, the counts behind the choice, options, coverage, the
                                   ids each rule added, and per language: its scripts, the share of its counted
                                   tokens kept and of its held-out sentences (--check) tokenised as before
  README.md, mlminilm.json         the model card
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from mlminilm import logging as mlog
from mlminilm.config import TrimConfig
from mlminilm.errors import CheckpointError, ConfigError, Problems
from mlminilm.version import __version__
from mlminilm.vocab import counts as counting
from mlminilm.vocab import identity, scripts, unseen, weights
from mlminilm.vocab import tokenizer as tokens

log = mlog.get(__name__)

TRIM_JSON = "trim.json"
FORMAT_VERSION = 1
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
    """Count, choose the ids, and write the trimmed model to `config.out`; all cheap checks come first. The model
    is written beside `config.out` and swapped in when complete, under the output's lock (README "Reliability")."""
    from mlminilm.io.outputs import Claim

    start = time.perf_counter()
    out = Path(config.out)
    # The output protocol (mlminilm.io.outputs): lock first, then check and claim --out, build beside, swap in.
    with Claim(out, "trim", "a model mlminilm trimmed", legacy=None) as claim:
        validated = _validate(config, claim)
        return _trim(config, out, start, claim, *validated)


def _trim(
    config: TrimConfig, out: Path, start: float, claim, tokenizer, doc, model_config, model_dir, check_files
) -> TrimResult:
    if config.data is not None:
        found = counting.counts_from_data(config.data, tokenizer, config.model)
    else:
        found = counting.counts_from_corpus(config.corpus, config.langs, tokenizer, config.workers)
    unseen.need_per_language(config, found)
    forced = {
        i
        for i in tokens.required_ids(tokenizer, doc) | weights.config_token_ids(model_config)
        if 0 <= i < len(tokenizer)
    }
    new_text, fill_to, filled = unseen.plan(config, found, forced)  # what the counts say of text they do not hold
    always, language_scripts, rankings = _rule_ids(config, tokenizer, doc, found, forced, model_dir, filled)
    selection = counting.select_ids(
        found.counts,
        forced,
        config.min_count,
        config.pooled_coverage,
        config.max_vocab,
        found.per_language,
        config.per_lang_top_k,
        always,
        config.script_fill or 0,
        rankings,
        fill_to,
    )
    old_ids = selection.old_ids
    log.info(
        "keeping %s of %s ids (%s), covering %.4f%% of the %s tokens of the counting corpus",
        f"{len(old_ids):,}",
        f"{len(tokenizer):,}",
        ", ".join(f"{name.replace('_', ' ')} {n:,}" for name, n in selection.added.items() if n),
        100 * selection.coverage,
        f"{selection.corpus_tokens:,}",
    )
    trimmed_doc = tokens.trim_document(doc, old_ids)
    languages = _languages(found, selection, language_scripts, check_files, tokenizer, trimmed_doc)
    unseen.add_to_record(languages, new_text, fill_to)
    identity.log_report(languages)

    model, absent = weights.load_any_model(config.model)
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        raise ConfigError(
            f"the tokenizer of --model {config.model} has {len(tokenizer)} ids but the model only "
            f"{rows} embedding rows: tokenizer and model do not belong together"
        )
    before = weights.count_parameters(model, absent)
    trimmed = weights.trim_model(model, old_ids)
    log.info("subset %s", ", ".join(trimmed))

    record = _record(
        config,
        model_dir,
        found,
        selection,
        rows,
        len(tokenizer),
        before,
        weights.count_parameters(model, absent),
        trimmed,
    )
    record["prompt_pieces"] = tokenizer.convert_ids_to_tokens([int(i) for i in always["prompts"] if i not in forced])
    record["languages"] = languages
    from mlminilm.io.outputs import disk_errors

    with claim.staging() as tmp:
        with disk_errors(tmp):  # safetensors reports a full disk as its own error, not an OSError
            model.save_pretrained(tmp, safe_serialization=True, state_dict=weights.saved_state(model, absent))
        tokens.write_tokenizer(tokenizer, doc, old_ids, tmp, trimmed_doc)
        sentence_encoder = _copy_extras(model_dir, tmp)
        (tmp / TRIM_JSON).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        _write_card(config, tmp, record, sentence_encoder, model.config)
        _check_output(tmp, len(old_ids))
    return TrimResult(out, record, time.perf_counter() - start)


def _validate(config: TrimConfig, claim):
    """The checks that need no counting, all reported at once."""
    from mlminilm.io.outputs import refuse_overlap
    from mlminilm.models.loading import load_config, load_tokenizer, resolve_model

    problems = Problems()
    attempt = problems.attempt

    model_dir = attempt(lambda: resolve_model(config.model))
    inputs = {"--model": model_dir, "--data": config.data, "--corpus": config.corpus, "--check": config.check}
    out = claim.given
    attempt(lambda: refuse_overlap(claim.out, inputs))
    if claim.out.is_dir() and any(claim.out.iterdir()) and config.overwrite and not (claim.out / TRIM_JSON).is_file():
        # A trimmed model holds its trim.json: without one the directory is not ours to replace.
        problems.add(
            CheckpointError(
                f"--out {out} holds files but no {TRIM_JSON}, so it is not a model mlminilm trimmed; --overwrite "
                "replaces only that: move its files away or choose another --out"
            )
        )
    else:  # --overwrite replaces only the files the trimmed model's record of its own files names
        attempt(
            lambda: claim.check(
                config.overwrite, f"--out {out} is not empty; pass --overwrite to replace it, or choose another"
            )
        )
    for flag, path in (("--data", config.data), ("--corpus", config.corpus)):
        if path is not None and not Path(path).exists():
            problems.add(ConfigError(f"{flag} {path} does not exist"))
    check_files = attempt(lambda: identity.check_files(config.check)) if config.check is not None else None
    # A --model that does not resolve (an unreachable Hub's id costs a probe) is said once: nothing more to load.
    model_config = attempt(lambda: load_config(config.model)) if model_dir is not None else None
    tokenizer = attempt(lambda: load_tokenizer(config.model)) if model_dir is not None else None
    doc = attempt(lambda: tokens.tokenizer_document(tokenizer, config.model)) if tokenizer is not None else None
    problems.raise_any()
    return tokenizer, doc, model_config, model_dir, check_files


def _rule_ids(
    config: TrimConfig,
    tokenizer,
    doc: dict,
    found: counting.TokenCounts,
    forced: set[int],
    model_dir: str,
    filled: set[str],
) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, ...]], dict[str, np.ndarray]]:
    """The ids kept by rule beside the counts (prompt pieces, script characters), the scripts of each language
    (empty when neither script option is on), and for each language --script-fill fills (`filled`) its ranking
    of the pieces of its scripts that its counts do not show."""
    size = len(tokenizer)
    always = {"prompts": _prompt_ids(tokenizer, model_dir)}
    rankings: dict[str, np.ndarray] = {}
    if not (config.script_chars or filled):
        return always, {}, rankings
    kind = doc["model"]["type"]
    pieces = tokenizer.convert_ids_to_tokens(list(range(size)))
    written = scripts.piece_scripts(pieces, kind)
    per_language = found.per_language if found.per_language is not None else {"(all)": found.counts}
    forced_mask = np.zeros(size, bool)
    forced_mask[sorted(forced)] = True
    by_lang = {
        lang: scripts.language_scripts(np.where(forced_mask, 0, counts), pieces, kind)
        for lang, counts in per_language.items()
    }
    for lang, used in by_lang.items():
        log.info("%s: written in %s", lang, ", ".join(used) or "no script with letters")
    if config.script_chars:
        allowed = set().union(*by_lang.values()) | set(scripts.NEUTRAL)
        singles = scripts.single_characters(pieces, kind, written, allowed)
        always["script_chars"] = np.flatnonzero(singles & ~forced_mask)
    if filled:
        vocab = doc["model"].get("vocab")
        scores = np.zeros(size)
        if kind == "Unigram":
            scores[: min(size, len(vocab))] = [float(score) for _, score in vocab[:size]]
        background: dict[frozenset, tuple[np.ndarray, np.ndarray]] = {}
        for lang, counts in sorted((lang, c) for lang, c in per_language.items() if lang in filled):
            allowed = frozenset(by_lang[lang]) | frozenset(scripts.NEUTRAL)
            if allowed not in background:
                candidates = np.flatnonzero(scripts.written_in(written, allowed) & ~forced_mask)
                background[allowed] = candidates, scripts.script_log_probs(pieces, candidates)
            candidates, log_probs = background[allowed]
            rankings[lang] = scripts.fill_ranking(counts, pieces, scores, candidates, log_probs)
    return always, by_lang, rankings


def _prompt_ids(tokenizer, model_dir: str) -> np.ndarray:
    """The ids of the model's sentence-transformers prompts ("query: ", "passage: "), as the model splits them: a
    model that puts a prompt before every text must keep its pieces, or every text would tokenise differently."""
    path = Path(model_dir) / "config_sentence_transformers.json" if model_dir else None
    prompts = {}
    if path is not None and path.is_file():
        try:
            prompts = json.loads(path.read_text(encoding="utf-8")).get("prompts") or {}
        except (OSError, ValueError, AttributeError):
            prompts = {}
    texts = [text for text in (prompts.values() if isinstance(prompts, dict) else ()) if isinstance(text, str) and text]
    ids = {int(i) for text in texts for i in tokenizer(text, add_special_tokens=False)["input_ids"]}
    return np.asarray(sorted(ids), dtype=np.int64)


def _languages(
    found: counting.TokenCounts,
    selection: counting.Selection,
    language_scripts: dict,
    check_files: dict | None,
    tokenizer,
    trimmed_doc: dict,
) -> dict[str, dict]:
    """Per language: its scripts, its ids in --per-lang-top-k, its counted tokens kept, its held-out sentences."""
    languages: dict[str, dict] = {lang: {} for lang in found.languages}
    for lang, used in language_scripts.items():
        languages.setdefault(lang, {})["scripts"] = list(used)
    for lang, n in selection.per_lang_top_k.items():
        languages.setdefault(lang, {})["per_lang_top_k"] = n
    if found.per_language is not None:
        for lang, shares in identity.corpus_shares(found.per_language, selection.old_ids, selection.forced).items():
            languages.setdefault(lang, {})["corpus"] = shares
    if check_files:
        missing = sorted(set(found.languages) - set(check_files))
        if missing:
            log.warning(
                "--check: no held-out file for %s (expected <lang>%s)", ", ".join(missing), identity.CHECK_SUFFIX
            )
        for lang, result in identity.held_out(
            check_files, tokenizer, trimmed_doc, selection.old_ids, found.languages
        ).items():
            languages.setdefault(lang, {})["held_out"] = result
    return dict(sorted(languages.items()))


def _record(
    config: TrimConfig,
    model_dir: str,
    found: counting.TokenCounts,
    selection: counting.Selection,
    rows: int,
    tokenizer_size: int,
    before: int,
    after: int,
    trimmed: list[str],
) -> dict:
    old_ids = selection.old_ids
    return {
        "format_version": FORMAT_VERSION,
        "mlminilm_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": config.model,
        "model_dir": str(model_dir),
        "options": {
            "data": _str(config.data),
            "corpus": _str(config.corpus),
            "langs": list(config.langs),
            "min_count": config.min_count,
            "coverage": config.pooled_coverage,
            "max_vocab": config.max_vocab,
            "per_lang_top_k": config.per_lang_top_k,
            "script_chars": config.script_chars,
            "script_fill": "auto" if config.script_fill is None else config.script_fill,
            "check": _str(config.check),
        },
        "counts": {
            "source": found.source,
            "path": found.path,
            "languages": found.languages,
            "corpus_tokens": selection.corpus_tokens,
            "distinct_ids_seen": selection.seen,
            "rule": "occurrences of every id but the special and added tokens; coverage is the share of "
            "them whose id is kept: coverage of the counting corpus, not of the languages (`languages`: `unseen`)",
        },
        "vocab_size": {"before": rows, "after": len(old_ids)},
        "tokenizer_size": {"before": tokenizer_size, "after": len(old_ids)},
        "special_ids": [int(i) for i in selection.forced],
        "rules": {
            "added": selection.added,
            "order": "ids each rule adds beyond the rules before it: special and added tokens, each language's "
            "top k (--per-lang-top-k), the pooled counts (--coverage, --min-count, --max-vocab), the "
            "pieces of the model's prompts, single characters (--script-chars), --script-fill",
        },
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
    from mlminilm.models.sentence_encoder import copy_sentence_transformers_tree

    source = Path(model_dir)
    if not source.is_dir():
        return False
    for name in _RUN_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)
    return copy_sentence_transformers_tree(source, out)


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
        "coverage": f"{100 * record['coverage']:.4f}% of the {record['counts']['corpus_tokens']:,} tokens of the "
        "counting corpus",
        "min_count": config.min_count,
        "max_vocab": config.max_vocab,
        "per_lang_top_k": config.per_lang_top_k,
        "script_chars": config.script_chars,
        "script_fill": record["options"]["script_fill"],
        "small_counting_corpus": ", ".join(
            lang for lang, info in record["languages"].items() if info.get("unseen", {}).get("small_corpus")
        )
        or "none",
    }
    source = source_card_data(config.model)
    data = infer_card_data(
        info,
        sentence_encoder,
        getattr(model_config, "architectures", None),
        pipeline_tag=source.get("pipeline_tag"),
        tags=["vocabulary-trimming", *(["multilingual"] if len(languages) > 1 else [])],
    )
    summary = (
        "The model with only the vocabulary its languages use (mlminilm trim): text that used only kept "
        "pieces tokenizes to the same pieces as before, renumbered; `trim.json` maps each new id to its old "
        "id."
    )
    (out / "README.md").write_text(model_card(info, summary, data), encoding="utf-8")
    (out / "mlminilm.json").write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")


def _check_output(out: Path, size: int) -> None:
    """The written directory loads with AutoConfig / AutoTokenizer and has the trimmed size."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    if config.vocab_size != size or len(tokenizer) != size:
        raise ConfigError(
            f"the trimmed model came out with vocab_size {config.vocab_size} and {len(tokenizer)} "
            f"tokenizer ids instead of {size}; report this as a bug"
        )
