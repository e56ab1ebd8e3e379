"""A model's sentence-transformers files: what they say about embedding a sentence (`read_sentence_transformers`),
and carrying them over to a student.

Students of a sentence-transformers teacher load as sentence encoders too.

When the teacher's directory has sentence-transformers files (`modules.json` with Transformer, Pooling and
optionally Normalize, e.g. all-MiniLM-L6-v2 and multilingual-e5-small), the exported student gets the same
files, with the pooling's width set to the student's, so `SentenceTransformer(student_dir)` encodes the way the
teacher does (same pooling, normalisation and prompts). A teacher with modules that hold weights of the
teacher's width (Dense, ...) cannot be carried over: the student is exported without them and a warning says so.

The student's `default_prompt_name` is "query" when the teacher has a "query" prompt and no default of its own
(`student_default_prompt`): e5's rule is "query: " before every text of a symmetric task (similarity, bitext
mining, clustering, features), and the student's parallel terms were distilled on text with that prompt before
it (distill --parallel-prefix), so `model.encode(texts)` without a prompt would give it text it never saw. A
retrieval corpus still asks for its own prompt (`prompt_name="passage"`, or sentence-transformers'
`encode_document`, which picks "document" / "passage" / "corpus").
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.errors import ConfigError, DataError

log = mlog.get(__name__)

# Modules whose folder holds only configuration that does not depend on the model's weights.
_CARRIED = {"Transformer", "Pooling", "Normalize"}
_TOP_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")

# sentence-transformers' legacy boolean keys (before `pooling_mode`), in its concatenation order.
_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def _model_file(model: str, name: str) -> Path | None:
    """`name` in a local model directory, or in a hub repository's (cached) files; None when absent."""
    if os.path.isdir(model):
        path = Path(model) / name
        return path if path.is_file() else None
    try:
        from transformers.utils import cached_file

        found = cached_file(
            model, name, _raise_exceptions_for_missing_entries=False, _raise_exceptions_for_connection_errors=False
        )
    except Exception:  # offline, gated, not a repository: no sentence-transformers setup to read
        return None
    return Path(found) if found else None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc})") from None


@dataclass(frozen=True)
class SentenceTransformerSetup:
    """What a model's sentence-transformers files say about embedding a sentence."""

    pooling: tuple[str, ...]  # modes, concatenated in this order
    include_prompt: bool = True  # False: prompt tokens are left out of the pooling
    normalize: bool = False  # a Normalize module follows (cosine similarity makes it moot)
    not_applied: tuple[str, ...] = ()  # modules after Pooling that this evaluation does not run (Dense, ...)
    query_prompt: str | None = None
    passage_prompt: str | None = None  # the "passage" prompt, else the "document" one (retrieval's corpus side)
    default_prompt: str | None = None  # default_prompt_name: the prompt `encode` uses when given none
    prompts: tuple[tuple[str, str], ...] = ()  # every (name, text) of config_sentence_transformers.json
    transformer_path: str = ""  # the encoder's subfolder ("" = the model directory itself)
    max_seq_length: int | None = None


def read_sentence_transformers(model: str) -> SentenceTransformerSetup | None:
    """The sentence-transformers setup of `model`, or None when it has no modules.json with a Pooling module."""
    modules_path = _model_file(model, "modules.json")
    if modules_path is None:
        return None
    modules = _checked_modules(_read_json(modules_path), modules_path, Path(model) if os.path.isdir(model) else None)
    kinds = [(str(m.get("type", "")).rsplit(".", 1)[-1], str(m.get("path", ""))) for m in modules]
    pooling_at = next((i for i, (kind, _) in enumerate(kinds) if kind == "Pooling"), None)
    if pooling_at is None:
        return None
    pool_cfg_path = _model_file(model, f"{kinds[pooling_at][1]}/config.json".lstrip("/"))
    pool_cfg = _read_json(pool_cfg_path) if pool_cfg_path else {}
    mode = pool_cfg.get("pooling_mode")
    if mode:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    else:
        modes = tuple(m for key, m in _LEGACY_POOLING.items() if pool_cfg.get(key)) or ("mean",)
    after = [kind for kind, _ in kinds[pooling_at + 1 :]]
    st_cfg_path = _model_file(model, "config_sentence_transformers.json")
    st_cfg = (_read_json(st_cfg_path) or {}) if st_cfg_path else {}
    st_cfg = st_cfg if isinstance(st_cfg, dict) else {}
    prompts = st_cfg.get("prompts") or {}
    default = st_cfg.get("default_prompt_name")
    bert_cfg_path = _model_file(model, "sentence_bert_config.json")
    max_seq = _read_json(bert_cfg_path).get("max_seq_length") if bert_cfg_path else None
    transformer = next((path for kind, path in kinds if kind == "Transformer"), "")
    return SentenceTransformerSetup(
        pooling=modes,
        include_prompt=bool(pool_cfg.get("include_prompt", True)),
        normalize="Normalize" in after,
        not_applied=tuple(kind for kind in after if kind != "Normalize"),
        query_prompt=prompts.get("query") if isinstance(prompts, dict) else None,
        passage_prompt=(prompts.get("passage") or prompts.get("document")) if isinstance(prompts, dict) else None,
        default_prompt=default
        if isinstance(default, str) and isinstance(prompts, dict) and default in prompts
        else None,
        transformer_path=transformer,
        max_seq_length=max_seq,
        prompts=tuple((str(k), v) for k, v in prompts.items() if isinstance(v, str))
        if isinstance(prompts, dict)
        else (),
    )


def _checked_modules(modules, where: Path, model_dir: Path | None) -> list[dict]:
    """`modules.json`'s list, checked: a list of objects whose `type` and `path` are strings, and every path a
    relative one that stays inside the model directory (mlminilm.io.paths: a stranger's model must not make an
    export read or write elsewhere). DataError naming the file otherwise."""
    from mlminilm.io.paths import confined

    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise DataError(f"{where}: expected a list of module objects (type, path), as sentence-transformers writes")
    for m in modules:
        for key in ("type", "path"):
            if not isinstance(m.get(key, ""), str):
                raise DataError(f"{where}: a module's {key!r} must be a string, not {m.get(key)!r}")
        if m.get("path") and model_dir is not None:
            confined(model_dir, m["path"], str(where))
    return modules


def sentence_transformers_modules(model_dir: str | Path) -> list[dict] | None:
    """The modules listed in `model_dir/modules.json` (checked: see `_checked_modules`), or None when the
    directory has no such file."""
    path = Path(model_dir) / "modules.json"
    if not path.is_file():
        return None
    return _checked_modules(_read_json(path), path, Path(model_dir))


def check_sentence_transformers_files(model_dir: str | Path) -> None:
    """Read every file an export will copy from `model_dir` (modules.json and each module folder's JSON), so a
    damaged one stops a command before its work rather than at the export after it."""
    modules = sentence_transformers_modules(model_dir) if os.path.isdir(model_dir) else None
    for module in modules or []:
        folder = Path(model_dir) / module.get("path", "")
        if module.get("path") and folder.is_dir():
            for source in sorted(folder.glob("*.json")):
                _read_json(source)
    for name in _TOP_FILES[1:]:
        if (Path(model_dir) / name).is_file():
            _read_json(Path(model_dir) / name)


def copy_sentence_transformers_tree(model_dir: str | Path, out: Path) -> bool:
    """Copy a model's sentence-transformers files unchanged into `out` (the same model in another form: trimmed,
    exported): modules.json and the top-level configs, and each module's folder whole. True when there were any."""
    from mlminilm.io.paths import confined

    source = Path(model_dir)
    modules = sentence_transformers_modules(source) if source.is_dir() else None
    if not modules:
        return False
    for name in _TOP_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)
    for module in modules:
        folder = str(module.get("path", ""))  # checked to stay inside the model directory when read
        if folder and (source / folder).is_dir():
            shutil.copytree(source / folder, confined(out, folder, str(source / "modules.json")), dirs_exist_ok=True)
    return True


def copy_sentence_transformers_files(teacher_dir: str | Path, out: Path, hidden: int) -> bool:
    """Copy the teacher's sentence-transformers files into the student directory `out`; True when done."""
    teacher_dir = Path(teacher_dir)
    if not os.path.isdir(teacher_dir):
        return False
    modules = sentence_transformers_modules(teacher_dir)
    if not modules:
        return False
    kinds = {str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules}
    if not kinds <= _CARRIED or "Pooling" not in kinds:
        log.warning(
            "teacher %s has sentence-transformers modules %s; only %s carry over to a student of another width, "
            "so the student is exported as a plain encoder",
            teacher_dir,
            ", ".join(sorted(kinds - _CARRIED)),
            ", ".join(sorted(_CARRIED)),
        )
        return False
    for name in _TOP_FILES:
        if (teacher_dir / name).is_file():
            shutil.copyfile(teacher_dir / name, out / name)
    _set_default_prompt(out / "config_sentence_transformers.json")
    from mlminilm.io.paths import confined

    for module in modules:
        folder = str(module.get("path", ""))
        if not folder:
            continue
        target = confined(out, folder, str(teacher_dir / "modules.json"))
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted((teacher_dir / folder).glob("*.json")) if (teacher_dir / folder).is_dir() else []:
            config = _read_json(source)
            if isinstance(config, dict) and "word_embedding_dimension" in config:  # Pooling: the student's width
                config["word_embedding_dimension"] = hidden
            (target / source.name).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return True


def student_default_prompt(prompts, default: str | None) -> str | None:
    """The `default_prompt_name` of a student whose teacher has `prompts` and `default`: the teacher's own, else
    "query" when the teacher has that prompt (the module's docstring says why), else None."""
    if default is not None or not isinstance(prompts, dict):
        return default
    return "query" if isinstance(prompts.get("query"), str) and prompts["query"] else None


def _set_default_prompt(path: Path) -> None:
    """The student's config_sentence_transformers.json (copied from the teacher) with its default prompt set."""
    if not path.is_file():
        return
    config = _read_json(path)
    if not isinstance(config, dict):
        return
    default = student_default_prompt(config.get("prompts"), config.get("default_prompt_name"))
    if default != config.get("default_prompt_name"):
        config["default_prompt_name"] = default
        path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
