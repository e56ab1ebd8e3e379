"""Students of a sentence-transformers teacher load as sentence encoders too.

When the teacher's directory has sentence-transformers files (`modules.json` with Transformer, Pooling and
optionally Normalize, e.g. all-MiniLM-L6-v2 and multilingual-e5-small), the exported student gets the same
files, with the pooling's width set to the student's, so `SentenceTransformer(student_dir)` encodes the way the
teacher does (same pooling, normalisation and prompts). A teacher with modules that hold weights of the
teacher's width (Dense, ...) cannot be carried over: the student is exported without them and a warning says so.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from mlminilm import logging as mlog

log = mlog.get(__name__)

# Modules whose folder holds only configuration that does not depend on the model's weights.
_CARRIED = {"Transformer", "Pooling", "Normalize"}
_TOP_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


def sentence_transformers_modules(model_dir: str | Path) -> list[dict] | None:
    """The modules listed in `model_dir/modules.json`, or None when the directory has no such file."""
    path = Path(model_dir) / "modules.json"
    if not path.is_file():
        return None
    try:
        modules = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return modules if isinstance(modules, list) else None


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
            "so the student is exported as a plain encoder", teacher_dir, ", ".join(sorted(kinds - _CARRIED)),
            ", ".join(sorted(_CARRIED)),
        )
        return False
    for name in _TOP_FILES:
        if (teacher_dir / name).is_file():
            shutil.copyfile(teacher_dir / name, out / name)
    for module in modules:
        folder = str(module.get("path", ""))
        if not folder:
            continue
        (out / folder).mkdir(parents=True, exist_ok=True)
        for source in (teacher_dir / folder).glob("*.json") if (teacher_dir / folder).is_dir() else []:
            config = json.loads(source.read_text(encoding="utf-8"))
            if "word_embedding_dimension" in config:  # Pooling: its input width is the student's
                config["word_embedding_dimension"] = hidden
            (out / folder / source.name).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return True
