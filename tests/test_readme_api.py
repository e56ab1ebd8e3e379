"""The Python API guide (docs/guides/python-api.md, linked from the README): its code runs as written, and every
`mlminilm....` name it mentions exists."""

from __future__ import annotations

import importlib
import re

import pytest
import torch

from helpers import REPO


def api_section() -> str:
    return (REPO / "docs" / "guides" / "python-api.md").read_text(encoding="utf-8")


def resolve(dotted: str):
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_the_python_api_example_runs(one_torch_thread):
    from transformers import BertConfig, BertModel

    block = re.search(r"```python\n(.*?)```", api_section(), re.S).group(1)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    model = BertModel(config).eval()
    student = BertModel(BertConfig(**{**config.to_dict(), "num_hidden_layers": 1})).eval()
    input_ids = torch.randint(5, 100, (2, 12))
    attention_mask = torch.ones(2, 12, dtype=torch.long)
    attention_mask[1, 9:] = 0
    from mlminilm.distillation.capture import layer_qkv

    namespace = {
        "teacher_qkv": layer_qkv(model, input_ids, attention_mask, -1),
        "student_qkv": layer_qkv(student, input_ids, attention_mask, -1),
        "attention_mask": attention_mask,
        "num_heads": 4,
        "relation_heads": 8,
        "model": model,
        "input_ids": input_ids,
        "layer": -1,
    }
    exec(compile(block, "docs/guides/python-api.md", "exec"), namespace)  # noqa: S102 - the project's own guide
    assert namespace["loss"].dim() == 0 and torch.isfinite(namespace["loss"])
    assert [t.shape for t in (namespace["q"], namespace["k"], namespace["v"])] == [(2, 12, 32)] * 3


def test_every_name_the_api_section_mentions_exists():
    names = sorted(set(re.findall(r"`(mlminilm(?:\.\w+)+)", api_section())))
    assert len(names) >= 10
    for name in names:
        assert resolve(name) is not None, name


def test_a_missing_name_is_caught():
    with pytest.raises(AttributeError):
        resolve("mlminilm.models.no_such_function")
