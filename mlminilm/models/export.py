"""Write a model as a plain Hugging Face directory (safetensors, config, tokenizer, model card, and the
sentence-transformers files of a sentence-encoder teacher), atomically."""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from mlminilm.models.loading import resolve_model


def model_card(info: dict, summary: str | None = None, data=None) -> str:
    """The README.md text of an export: `data` (a huggingface_hub ModelCardData; default: inferred from `info`
    by mlminilm.models.cards.infer_card_data) as front matter, then the title, `summary` and the `info` table."""
    from mlminilm.models import cards

    return str(cards.render_card(info, data if data is not None else cards.infer_card_data(info), summary))


def export_model(
    model: nn.Module,
    tokenizer,
    out: Path,
    card: dict,
    summary: str | None = None,
    sentence_teacher: str | None = None,
    card_fields: dict | None = None,
) -> Path:
    """Write `model` as a plain HF directory (safetensors, config, tokenizer, model card) atomically at `out`.

    With `sentence_teacher`, a teacher whose directory carries sentence-transformers files, the student gets
    them too (mlminilm.models.sentence_encoder), so it also loads as a SentenceTransformer.

    The model card (README.md, huggingface_hub's ModelCard) takes its front matter from `card`: `base_model` or
    `teacher` names the base model (whose licence is inherited), `languages` the languages, `task` the pipeline;
    `card_fields` (base_model, language, license, pipeline_tag, library_name, tags) override any of them."""
    from mlminilm.io.outputs import staged

    out = Path(out)
    with staged(out) as tmp:  # never a half-written export beside the output
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        sentence_encoder = False
        if sentence_teacher is not None:
            from mlminilm.models.sentence_encoder import copy_sentence_transformers_files

            sentence_encoder = copy_sentence_transformers_files(
                resolve_model(sentence_teacher), tmp, model.config.hidden_size
            )
        from mlminilm.models.cards import infer_card_data

        data = infer_card_data(
            card, sentence_encoder, getattr(model.config, "architectures", None), **(card_fields or {})
        )
        (tmp / "README.md").write_text(model_card(card, summary, data), encoding="utf-8")
        (tmp / "mlminilm.json").write_text(json.dumps(card, indent=2, default=str) + "\n", encoding="utf-8")
    return out
