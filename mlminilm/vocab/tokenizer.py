"""A tokenizer with part of its vocabulary removed, mapping text to the same pieces as before, renumbered.

The tokenizer is rewritten at the level of its `tokenizer.json` (the `tokenizers` library's own format, which
transformers loads for every fast tokenizer):

- SentencePiece Unigram (XLM-R, e5): the kept pieces stay in the vocabulary list with their scores, `unk_id`
  follows its piece. Segmentation is the best-scoring split over the vocabulary, so text whose best split used
  only kept pieces splits exactly as before; other text falls back to the best split over the kept pieces.
- WordPiece (BERT) and WordLevel: the kept tokens keep their strings with new ids (and `vocab.txt` is rewritten).
  WordPiece matches the longest known prefix first, so a word whose pieces were all kept splits as before.
- BPE is refused: its merges pass through intermediate tokens, so removing one changes what others produce.

Added tokens and the post-processor's special ids (`<s> $A </s>`, `[CLS] $A [SEP]`) are renumbered too.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from mlminilm.errors import ConfigError

TRIMMABLE = ("Unigram", "WordPiece", "WordLevel")
# Files of the slow (Python) tokenizers that would still hold the full vocabulary: dropped from the output.
STALE_FILES = ("sentencepiece.bpe.model", "spiece.model", "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt")


def tokenizer_document(tokenizer, model: str) -> dict:
    """The tokenizer.json of a loaded tokenizer, checked to be of a kind that can be trimmed."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ConfigError(
            f"the tokenizer of --model {model} is not a fast tokenizer (no tokenizer.json); "
            "trim rewrites tokenizer.json: save the model with a fast tokenizer first"
        )
    doc = json.loads(backend.to_str())
    kind = (doc.get("model") or {}).get("type")
    if kind not in TRIMMABLE:
        raise ConfigError(
            f"the tokenizer of --model {model} is a {kind} tokenizer; trim rebuilds SentencePiece "
            f"Unigram (XLM-R, e5) and WordPiece (BERT) tokenizers only (removing {kind} tokens would "
            "change how the others are built)"
        )
    return doc


def _processor_ids(processor: dict | None) -> list[int]:
    if not processor:
        return []
    kind = processor.get("type")
    if kind == "TemplateProcessing":
        return [i for spec in (processor.get("special_tokens") or {}).values() for i in spec.get("ids", [])]
    if kind in ("BertProcessing", "RobertaProcessing"):
        return [processor[key][1] for key in ("sep", "cls") if key in processor]
    if kind == "Sequence":
        return [i for inner in processor.get("processors", []) for i in _processor_ids(inner)]
    return []


def required_ids(tokenizer, doc: dict) -> set[int]:
    """Ids that are kept whatever their count: special tokens, added tokens, the unknown token and the ids the
    post-processor inserts."""
    ids = {int(i) for i in tokenizer.all_special_ids}
    ids |= {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {})}
    ids |= {int(t["id"]) for t in doc.get("added_tokens") or []}
    ids |= {int(i) for i in _processor_ids(doc.get("post_processor"))}
    model = doc["model"]
    if model["type"] == "Unigram" and model.get("unk_id") is not None:
        ids.add(int(model["unk_id"]))
    elif model.get("unk_token") in (model.get("vocab") or {}):
        ids.add(int(model["vocab"][model["unk_token"]]))
    return ids


def _remap_processor(processor: dict | None, new: dict[int, int]) -> None:
    if not processor:
        return
    kind = processor.get("type")
    if kind == "TemplateProcessing":
        for spec in (processor.get("special_tokens") or {}).values():
            spec["ids"] = [new[i] for i in spec.get("ids", [])]
    elif kind in ("BertProcessing", "RobertaProcessing"):
        for key in ("sep", "cls"):
            if key in processor:
                processor[key] = [processor[key][0], new[processor[key][1]]]
    elif kind == "Sequence":
        for inner in processor.get("processors", []):
            _remap_processor(inner, new)


def trim_document(doc: dict, old_ids) -> dict:
    """A copy of tokenizer.json `doc` that keeps only `old_ids` (ascending), renumbered 0, 1, ..."""
    new = {int(old): i for i, old in enumerate(old_ids)}
    doc = copy.deepcopy(doc)
    model = doc["model"]
    if model["type"] == "Unigram":
        vocab = model["vocab"]
        model["vocab"] = [vocab[old] for old in new if old < len(vocab)]
        if model.get("unk_id") is not None:
            model["unk_id"] = new[model["unk_id"]]
    else:
        model["vocab"] = {token: new[i] for token, i in model["vocab"].items() if i in new}
    doc["added_tokens"] = [dict(t, id=new[t["id"]]) for t in doc.get("added_tokens") or [] if t["id"] in new]
    _remap_processor(doc.get("post_processor"), new)
    padding = doc.get("padding")
    if padding and padding.get("pad_id") in new:
        padding["pad_id"] = new[padding["pad_id"]]
    return doc


def write_tokenizer(tokenizer, doc: dict, old_ids, out: Path, trimmed: dict | None = None) -> None:
    """Save `tokenizer` into `out` with its vocabulary trimmed to `old_ids` (`trimmed`: `trim_document(doc,
    old_ids)` when already made)."""
    tokenizer.save_pretrained(out)
    trimmed = trim_document(doc, old_ids) if trimmed is None else trimmed
    for name in STALE_FILES:
        (out / name).unlink(missing_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(trimmed, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    if trimmed["model"]["type"] == "WordPiece":  # BERT's plain vocabulary file, one token per line in id order
        tokens = sorted(trimmed["model"]["vocab"].items(), key=lambda item: item[1])
        (out / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in tokens), encoding="utf-8")
    config_path = out / "tokenizer_config.json"
    if config_path.is_file():  # transformers 4 writes the added tokens keyed by id
        config = json.loads(config_path.read_text(encoding="utf-8"))
        decoder = config.get("added_tokens_decoder")
        if isinstance(decoder, dict):
            new = {int(old): i for i, old in enumerate(old_ids)}
            config["added_tokens_decoder"] = {str(new[int(k)]): v for k, v in decoder.items() if int(k) in new}
            config_path.write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
