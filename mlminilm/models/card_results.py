"""Evaluation results in a model card (`eval-* --update-card`): a report's per-language results written into the
evaluated model's README.md as Hugging Face Hub `model-index` metadata (huggingface_hub's ModelCard, ModelCardData
and EvalResult) and a short Markdown table, everything else in the card kept.

- One EvalResult per language and metric, valued as the report (in %), its `source` naming mlminilm, the command and
  the protocol or scorer the report used, with a link to that protocol.
- Merging: entries of other tasks, datasets, splits and languages stay; the report's (task, dataset, config, split)
  entries replace those the card held, in place, so a re-run never duplicates. Asymmetric search (`eval-retrieval
  --query-model`, written into the query model's card) names the index model in its dataset's name and config
  (the Hub tells results apart by type, config and split): those results stand beside the model's symmetric ones.
- Only the `model-index` block of the front matter is rewritten, so every other field stays byte for byte (checked by
  parsing the result; where the YAML's layout defeats that, the front matter is dumped again with the same values).
  In the body only mlminilm's own section changes, one per evaluation family, between
  `<!-- mlminilm:eval-xnli:start -->` and `<!-- mlminilm:eval-xnli:end -->` (eval-mlqa, eval-tatoeba alike).
"""

from __future__ import annotations

import codecs
import os
import re
from dataclasses import dataclass
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.errors import CheckpointError, ConfigError, DataError
from mlminilm.version import __version__

log = mlog.get(__name__)

XTREME_URL = "https://arxiv.org/abs/2003.11080"
_QA_METRICS = (("exact_match", "exact_match", None, "Exact match (%)"), ("f1", "f1", None, "F1 (%)"))
# report task -> (command, task type, task name, metrics: (report key, metric type, metric config, metric name))
FAMILIES = {
    "xnli": (
        "eval-xnli",
        "text-classification",
        "Natural Language Inference",
        (("accuracy", "accuracy", None, "Accuracy (%)"),),
    ),
    **{
        task: ("eval-mlqa", "question-answering", "Question Answering", _QA_METRICS)
        for task in ("mlqa", "xquad", "tydiqa", "squad-format")
    },
    "tatoeba": (
        "eval-tatoeba",
        "sentence-similarity",
        "Bitext Mining",
        (
            ("xx_to_en", "accuracy", "xx_to_en", "Accuracy xx->en (%)"),
            ("en_to_xx", "accuracy", "en_to_xx", "Accuracy en->xx (%)"),
        ),
    ),
    "retrieval": (
        "eval-retrieval",
        "Retrieval",
        "Question -> passage retrieval",
        (
            ("ndcg_at_10", "ndcg_at_10", None, "nDCG@10 (%)"),
            ("mrr_at_10", "mrr_at_10", None, "MRR@10 (%)"),
            ("recall_at_100", "recall_at_100", None, "Recall@100 (%)"),
        ),
    ),
}
# report task -> (dataset type: the Hub dataset, dataset name)
DATASETS = {
    "xnli": ("facebook/xnli", "XNLI"),
    "mlqa": ("facebook/mlqa", "MLQA"),
    "xquad": ("google/xquad", "XQuAD"),
    "tydiqa": ("google-research-datasets/tydiqa", "TyDiQA-GoldP"),
    "tatoeba": ("mteb/tatoeba-bitext-mining", "Tatoeba"),
}
SCORER_URLS = {
    "mlqa": "https://github.com/facebookresearch/MLQA",
    "squad": "https://rajpurkar.github.io/SQuAD-explorer/",
}
BEIR_URL = "https://github.com/beir-cellar/beir"
TATOEBA_URL = "https://github.com/facebookresearch/LASER/tree/main/data/tatoeba/v1"
SPLITS = {"dev": "validation"}  # the Hub's split names
_COMMANDS = sorted({family[0] for family in FAMILIES.values()})
# How long an update waits for another process's update of the same card (a read, a merge and a write) to finish.
CARD_LOCK_WAIT = 60.0
_TOP_LEVEL = re.compile(r"[^\s#-]|-[^\s-]")  # a line that starts a top-level key (not an item, comment or blank)


def markers(command: str) -> tuple[str, str]:
    return f"<!-- mlminilm:{command}:start -->", f"<!-- mlminilm:{command}:end -->"


# --------------------------------------------------------------------------------------------- results


def eval_results(doc: dict) -> list:
    """The report `doc`'s EvalResults: one per language and metric."""
    from huggingface_hub import EvalResult

    task = doc["task"]
    command, task_type, task_name, metrics = FAMILIES[task]
    dataset_type, dataset_name = _dataset(doc)
    split = SPLITS.get(doc.get("split", "test"), doc.get("split", "test"))
    source, url = _source(doc, command)
    return [
        EvalResult(
            task_type=task_type,
            task_name=task_name,
            dataset_type=dataset_type,
            dataset_name=dataset_name,
            dataset_config=_config(task, key, scores) + _index_note(doc),
            dataset_split=split,
            metric_type=metric_type,
            metric_value=float(scores[report_key]),
            metric_config=metric_config,
            metric_name=metric_name,
            source_name=source,
            source_url=url,
        )
        for key, scores in doc["languages"].items()
        for report_key, metric_type, metric_config, metric_name in metrics
    ]


def _dataset(doc: dict) -> tuple[str, str]:
    dataset_type, name = _plain_dataset(doc)
    if doc.get("search") == "asymmetric":  # eval-retrieval --query-model: this model's questions, another's index
        name = f"{name[:-1]}; passages embedded by {doc['model']})"
    return dataset_type, name


def _plain_dataset(doc: dict) -> tuple[str, str]:
    if doc["task"] == "retrieval" and doc.get("benchmark") in DATASETS:  # the QA set, read for retrieval
        dataset_type, name = DATASETS[doc["benchmark"]]
        return dataset_type, f"{name} (question -> passage retrieval)"
    if doc["task"] == "retrieval":  # a BEIR folder or one SQuAD-format file: named by itself
        stem = re.sub(r"\.json(\.gz)?$", "", Path(str(doc["data"]["source"]).rstrip("/")).name)
        return stem, f"{stem} (retrieval)"
    if doc["task"] in DATASETS:
        return DATASETS[doc["task"]]
    name = Path(str(doc["data"]["source"])).name  # one SQuAD-format file: named by itself
    stem = re.sub(r"\.json(\.gz)?$", "", name)
    return stem, f"{stem} (SQuAD format)"


def _index_note(doc: dict) -> str:
    """After the language of an asymmetric search's results (eval-retrieval --query-model): the index model."""
    return f" (index: {doc['model']})" if doc.get("search") == "asymmetric" else ""


def _config(task: str, key: str, scores: dict) -> str:
    """The language (or pair) of one report row: Tatoeba's file pair (deu-eng); an MLQA G-XLT pair as
    context-question (de-en), a monolingual one as its language."""
    if task == "tatoeba":
        return f"{scores['iso639_3']}-eng"
    context, question = scores.get("context_lang"), scores.get("question_lang")
    if context and question:
        return context if context == question else f"{context}-{question}"
    return key


def _source(doc: dict, command: str) -> tuple[str, str]:
    """(source name, url): mlminilm, the command and version, the protocol (first clause) or scorer used."""
    head = str(doc.get("protocol", "")).split(":")[0]
    if doc.get("scorer"):
        scorer = doc["scorer"]
        return (
            f"mlminilm {command} {__version__}: {head}; {scorer['title']} scorer, chosen by {scorer['chosen']}",
            SCORER_URLS.get(scorer["name"], XTREME_URL),
        )
    if doc["task"] == "tatoeba":
        e = doc.get("embedding", {})
        pooling, prefix = "+".join(e.get("pooling", ())), repr(e["prefix"]) if e.get("prefix") else "none"
        pairs = (doc.get("average") or {}).get("examples")  # eval-tatoeba refuses --update-card on a subset
        return (
            f"mlminilm {command} {__version__}: {head}; layer {e.get('layer')} of {e.get('num_layers')}, "
            f"{pooling} pooling, prefix {prefix}, max length {e.get('max_length')}"
            + (f"; the full test files, {pairs:,} pairs" if pairs else ""),
            TATOEBA_URL,
        )
    if doc["task"] == "retrieval":
        return f"mlminilm {command} {__version__}: {head}; {doc.get('summary', '')}", BEIR_URL
    return f"mlminilm {command} {__version__}: {head}", XTREME_URL


def _key(result) -> tuple:
    return result.task_type, result.dataset_type, result.dataset_config, result.dataset_split


def merge(existing: list, new: list) -> list:
    """`existing` with the entries `new` replaces (same task, dataset, config, split) swapped for `new`, which
    takes the place of the first one it replaces (or goes last)."""
    replaced = {_key(r) for r in new}
    merged, placed = [], False
    for result in existing:
        if _key(result) in replaced:
            if not placed:
                merged += new
                placed = True
        else:
            merged.append(result)
    return merged if placed else merged + new


# ------------------------------------------------------------------------------------------------ card


@dataclass
class CardFile:
    """A README.md split as huggingface_hub splits it: `lead` ("---" line), `yaml`, `close` ("---" line), `body`."""

    path: Path
    exists: bool = False
    bom: bool = False
    lead: str = ""
    yaml: str | None = None  # None: no front matter
    close: str = ""
    body: str = ""
    line_break: str = "\n"
    data: object = None  # the ModelCardData
    fields: dict | None = None


def target(model: str, flag: str = "--model") -> Path:
    """The README.md `--update-card` writes for `model` (given as `flag`: eval-retrieval's --query-model), checked
    before any evaluation: a local directory one can write in, whose card (if any) parses."""
    folder = Path(model)
    if not folder.is_dir():
        raise ConfigError(
            f"--update-card writes the README.md of a local model directory; {flag} {model} is not one (a hub id?): "
            f"download it first (e.g. `hf download {model} --local-dir DIR`) and evaluate {flag} DIR"
        )
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"--update-card: cannot write in the model directory {folder} (permission denied)")
    card = folder / "README.md"
    read_card(card)
    return card


def read_card(path: Path) -> CardFile:
    """The card at `path` (an empty one when there is no file); a DataError naming the file when it cannot be
    read or its front matter does not parse."""
    import yaml
    from huggingface_hub import ModelCardData
    from huggingface_hub.repocard import REGEX_YAML_BLOCK

    card = CardFile(path)
    if not path.exists():
        return card
    try:
        raw = path.read_bytes()
        card.bom = raw.startswith(codecs.BOM_UTF8)
        text = raw[len(codecs.BOM_UTF8) :].decode("utf-8") if card.bom else raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"--update-card: cannot read the model card {path}: {_one_line(exc)}") from None
    card.exists = True
    card.line_break = "\r\n" if "\r\n" in text else "\n"
    match = REGEX_YAML_BLOCK.search(text)
    for command in _COMMANDS:
        start, end = markers(command)
        i, j = text.find(start), text.find(end)
        if (i < 0) != (j < 0) or j < i:
            raise DataError(
                f"--update-card: the model card {path} has an unmatched {start if i >= 0 else end} "
                "marker; restore or remove the pair and run again"
            )
    if match is None:
        if text.lstrip().split("\n", 1)[0].strip() == "---":
            raise DataError(
                f"--update-card: the model card {path} opens a front matter ('---') that does not close "
                "with a '---' line; fix it and run again"
            )
        card.body = text
        return card
    card.lead, card.yaml, card.close, card.body = match.group(1), match.group(2), match.group(3), text[match.end() :]
    try:
        fields = yaml.safe_load(card.yaml)
        fields = {} if fields is None else fields
        if not isinstance(fields, dict):
            raise ValueError(f"the front matter is a {type(fields).__name__}, not a mapping of fields")
        # Only what is read here (model-index, parsed into eval_results, and the model name): huggingface_hub
        # dedups `tags` and other lists in quadratic time, > 400 s for a card of 300,000 tags.
        card.data = ModelCardData(**{k: v for k, v in fields.items() if k in ("model-index", "model_name")})
    except (yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DataError(
            f"--update-card: the front matter of the model card {path} is malformed: {_one_line(exc)}; "
            "fix it and run again"
        ) from None
    card.fields = fields
    return card


def _one_line(exc: Exception) -> str:
    text = " ".join(str(getattr(exc, "strerror", None) or exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def update_card(path: Path, doc: dict) -> Path:
    """Write the report `doc`'s results into the card at `path` (re-read now: it may have changed while the
    evaluation ran), atomically. Returns `path`.

    Read, merge and write happen under a lock on the card (`.README.md.lock` beside it, mlminilm.io.output_lock,
    removed when released), so two evaluations that finish at once take turns and neither loses the other's
    results. The lock is held for well under a second; one held longer than CARD_LOCK_WAIT stops the waiter with
    one line."""
    from mlminilm.io.atomic import write_text_atomic
    from mlminilm.io.output_lock import LockTimeout, OutputLock

    new, command = eval_results(doc), FAMILIES[doc["task"]][0]

    def waiting(holder: str) -> None:
        log.info("model card %s is being updated by another mlminilm process%s: waiting for it", path, holder)

    try:
        with OutputLock(path, flag="--update-card", wait=waiting, timeout=CARD_LOCK_WAIT):
            write_text_atomic(path, _updated_text(path, doc, new))
    except LockTimeout as exc:
        raise CheckpointError(f"{exc}; the results of this evaluation are not in the card") from None
    log.info("model card %s updated with %d %s results (model-index and table)", path, len(doc["languages"]), command)
    return path


def _updated_text(path: Path, doc: dict, new: list) -> str:
    """The card at `path`, read now, with the results `new` of the report `doc` merged in."""
    from huggingface_hub import ModelCardData

    card = read_card(path)
    lb = card.line_break
    data = card.data
    name = (data.model_name if data is not None else None) or path.resolve().parent.name
    results = merge((data.eval_results or []) if data is not None else [], new)
    index = ModelCardData(model_name=name, eval_results=results)
    head = f"---{lb}{index.to_yaml(line_break=lb)}{lb}---{lb}"
    if card.yaml is not None:
        head = card.lead + _front_matter(card, index, lb) + card.close
    command = FAMILIES[doc["task"]][0]
    body = card.body if card.exists else f"{lb}# {name}{lb}"
    body = _with_section(body, _section(command, results, lb), command, lb)
    return ("\ufeff" if card.bom else "") + head + body


def _front_matter(card: CardFile, index, lb: str) -> str:
    """The front matter with its model-index block replaced (or added last), every other line as it was; dumped
    again from the parsed fields only where the result would not read back as intended."""
    import yaml

    block = index.to_yaml(line_break=lb)
    lines = card.yaml.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(r"""["']?model-index["']?\s*:""", line)), None)
    if start is None:
        new = card.yaml + (lb if card.yaml and not card.yaml.endswith(("\n", "\r")) else "") + block
    else:
        end = start + 1
        while end < len(lines) and not _TOP_LEVEL.match(lines[end]):
            end += 1
        while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
            end -= 1  # blank and comment lines before the next key belong to it
        tail = lb if lines[end - 1].endswith(("\n", "\r")) else ""
        new = "".join(lines[:start]) + block + tail + "".join(lines[end:])
    expected = {**{k: v for k, v in card.fields.items() if k != "model-index"}, **index.to_dict()}
    try:
        if yaml.safe_load(new) == expected:
            return new
    except yaml.YAMLError:
        pass
    from huggingface_hub import ModelCardData

    data = ModelCardData(**card.fields)  # every field, to dump them again (rare: a front matter yaml reads back oddly)
    data.model_name, data.eval_results = index.model_name, index.eval_results
    return data.to_yaml(line_break=lb, original_order=list(card.fields))


# ----------------------------------------------------------------------------------------------- table


def _section(command: str, results: list, lb: str) -> str:
    """The Markdown section of `command`'s family: every mlminilm result of that family in the card, a row per
    dataset, split and language, an average row per dataset and split, and the sources."""
    metrics = next(family[3] for family in FAMILIES.values() if family[0] == command)
    ours = [r for r in results if (r.source_name or "").startswith(f"mlminilm {command} ")]
    rows: dict[tuple, dict] = {}
    for r in ours:
        row = rows.setdefault((r.dataset_name, r.dataset_split, r.dataset_config), {})
        row[(r.metric_type, r.metric_config)] = r.metric_value
    columns = [(m[1], m[2]) for m in metrics]
    names = [m[3] for m in metrics]
    start, end = markers(command)
    lines = [
        start,
        f"## Evaluation results ({command})",
        "",
        f"Written by `mlminilm {command} --update-card`; the same figures are in this card's `model-index`.",
        "",
        "| dataset | split | language | " + " | ".join(names) + " |",
        "|---|---|---|" + "---:|" * len(names),
    ]

    def cells(values: list) -> str:
        return " | ".join("" if v is None else f"{float(v):.2f}" for v in values)

    groups: dict[tuple, list] = {}
    for (dataset, split, config), values in rows.items():
        row = [values.get(c) for c in columns]
        groups.setdefault((dataset, split), []).append(row)
        lines.append(f"| {dataset} | {split} | {config} | {cells(row)} |")
    for (dataset, split), group in groups.items():
        if len(group) > 1:
            mean = [
                None if any(r[i] is None for r in group) else sum(r[i] for r in group) / len(group)
                for i in range(len(columns))
            ]
            lines.append(f"| {dataset} | {split} | average of {len(group)} | {cells(mean)} |")
    lines.append("")
    for source, url in dict.fromkeys((r.source_name, r.source_url) for r in ours):
        lines.append(f"- source: {source} ({url})")
    lines.append(end)
    return lb.join(lines)


def _with_section(body: str, section: str, command: str, lb: str) -> str:
    """`body` with `command`'s section replaced, or added at the end after a blank line."""
    start, end = markers(command)
    i = body.find(start)
    if i >= 0:
        j = body.find(end, i)
        return body[:i] + section + body[j + len(end) :]
    if body and not body.endswith(("\n", "\r")):
        body += lb
    return body + (lb if body.strip() else "") + section + lb
