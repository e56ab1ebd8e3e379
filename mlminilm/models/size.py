"""How big an evaluated model is: its parameters (read from the safetensors headers, so nothing is loaded), how
many of them are the word embeddings, and the bytes of its weight files on disk. Evaluation reports record it and
`compare` shows it: a student with the teacher's vocabulary keeps most of its size in the embeddings (multilingual
e5-small: 96M of 118M parameters), which `mlminilm trim` removes."""

from __future__ import annotations

import math
from pathlib import Path

# The weight files of a model directory: PyTorch's, and an export's graph with its data files (its export.json aside).
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "onnx/*", "openvino/*")


def _weights(path: Path) -> bool:
    return path.is_file() and path.suffix != ".json"


def model_size(model: str) -> dict | None:
    """{"parameters", "embedding_parameters", "disk_bytes", "files"} of the model directory (or cached hub id)
    `model`; a figure that cannot be read this way is None; None when nothing can be read."""
    from mlminilm.models.checks import _local_file, weight_shapes
    from mlminilm.models.loading import resolve_model

    try:
        resolved = resolve_model(str(model))
    except Exception:  # noqa: BLE001 - a report is written for a model that loaded; its size is a side record
        return None
    shapes = weight_shapes(resolved)
    folder = Path(resolved)
    if folder.is_dir():
        files = sorted({p for pattern in WEIGHT_FILES for p in folder.glob(pattern) if _weights(p)})
    else:  # a hub id: its cached weights, if any
        single = _local_file(resolved, "model.safetensors")
        files = [single] if single is not None else []
    if shapes is None and not files:
        return None
    return {
        "parameters": sum(math.prod(s) for s in shapes.values()) if shapes else None,
        "embedding_parameters": (
            sum(math.prod(s) for name, s in shapes.items() if name.endswith("word_embeddings.weight"))
            if shapes
            else None
        ),
        "disk_bytes": sum(p.stat().st_size for p in files) if files else None,
        "files": [str(p.relative_to(folder)) if folder.is_dir() else p.name for p in files],
    }
