"""The stages of a retention run in --work: each stage (the cut teacher, one evaluation of one row) keeps its result
and the inputs it was made from in WORK/stages/NAME.json. A stage done is read back and never rerun; a stage whose
inputs changed since (another model, other data files, other settings) is refused, never silently mixed."""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Callable

from mlminilm import logging as mlog
from mlminilm.errors import ConfigError

log = mlog.get(__name__)

STAGES = "stages"
MODEL_FILES = ("*.json", "*.safetensors", "*.bin", "*.model", "*.txt", "1_Pooling/*.json")


def slug(name: str) -> str:
    """A file name for a stage or row name: letters, digits, '.', '-' and '_' kept, every other run of characters
    one '-'; a short hash of the name keeps two names that differ only there apart."""
    plain = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "row"
    if plain == name:
        return name
    return f"{plain}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_fingerprint(folder: Path) -> dict:
    """Every file under a data folder: its path relative to the folder and its content's hash."""
    return {str(p.relative_to(folder)): file_hash(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def model_fingerprint(model: str) -> dict:
    """What identifies a model: its resolved directory and each of its files' size and modification time (weights
    are large: hashing them on every run would cost more than it tells); a hub id as given."""
    from mlminilm.models.loading import resolve_model

    path = Path(resolve_model(model))
    if not path.is_dir():
        return {"model": model}
    files = sorted({p for pattern in MODEL_FILES for p in path.glob(pattern) if p.is_file()})
    return {
        "model": str(path.resolve()),
        "files": {str(p.relative_to(path)): [p.stat().st_size, p.stat().st_mtime_ns] for p in files},
    }


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    keys = sorted(set(old) | set(new))
    out = []
    for key in keys:
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


class Stages:
    """The stages of one --work folder."""

    def __init__(self, work: Path):
        self.work = Path(work)
        self.seconds: dict[str, float] = {}

    def path(self, name: str) -> Path:
        return self.work / STAGES / f"{slug(name)}.json"

    def folder(self, name: str) -> Path:
        """Where stage `name` may write its files (an evaluation's report, the cut teacher)."""
        return self.work / slug(name)

    def run(self, name: str, inputs: dict, make: Callable[[], dict]) -> dict:
        """`make()` once for these `inputs`: its JSON result is kept and read back on a rerun; a kept result made
        from other inputs is refused (ConfigError naming what changed)."""
        inputs = json.loads(json.dumps(inputs, default=str))  # as it reads back
        path = self.path(name)
        if path.is_file():
            try:
                kept = json.loads(path.read_text(encoding="utf-8"))
                old_inputs, result = kept["inputs"], kept["result"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConfigError(
                    f"--work {self.work}: stage {name!r} ({path}) cannot be read ({exc}); remove it to rerun the stage"
                ) from None
            if old_inputs != inputs:
                changed = ", ".join(_differences(old_inputs, inputs)) or "its inputs"
                raise ConfigError(
                    f"--work {self.work}: stage {name!r} was made from other inputs (changed: {changed}); use another "
                    f"--work, or remove {path} to measure it again"
                )
            log.info("%s: read back from %s", name, path)
            self.seconds[name] = float(kept.get("seconds", 0.0))
            return result
        log.info("%s: start", name)
        t0 = time.perf_counter()
        result = make()
        seconds = round(time.perf_counter() - t0, 1)
        self.seconds[name] = seconds
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        record = {"stage": name, "inputs": inputs, "seconds": seconds, "result": result}
        tmp.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
        tmp.replace(path)  # a stage is done only once its whole record is in place
        log.info("%s: %.0f s", name, seconds)
        return result
