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


def test_every_command_is_named():
    """Issue 55, item 8: the list of names left out eval_retrieval (and retention)."""
    from mlminilm import COMMANDS

    text = api_section()
    missing = [name for name, _, _ in COMMANDS if f"`{name.replace('-', '_')}`" not in text]
    assert missing == [] and "`EvalRetrievalConfig`" in text


def test_the_command_example_runs_offline_on_tiny_inputs(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path, monkeypatch):
    """The second example as written, offline, in a folder with its `corpus/` and `tatoeba/`: only the packaged
    teacher's name is swapped for a tiny teacher, and 2000 steps of the default 6x384 student for 2 of a tiny one
    (the same keyword options, more of them)."""
    import shutil

    from conftest import sample_lines

    from helpers import save_tiny_teacher

    block = re.findall(r"```python\n(.*?)```", api_section(), re.S)[1]
    # The example names a teacher that works offline, not a hub id (issue 55, item 8).
    assert block.count('teacher="multilingual-e5-small"') == 2 and "/" not in block.split("teacher=")[1].split(",")[0]
    teacher = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "teacher", layers=2, hidden=32, heads=4)
    tiny = "max_steps=2, layers=1, hidden=32, heads=4, intermediate=64, batch_size=4"
    block = block.replace('"multilingual-e5-small"', repr(str(teacher))).replace("max_steps=2000", tiny)
    shutil.copytree(tiny_corpus_dir, tmp_path / "corpus")
    for iso, lang in (("deu", "de"), ("cmn", "zh")):
        lines = "".join(line + "\n" for line in dict.fromkeys(sample_lines(lang, 12, seed=5)))
        (tmp_path / "tatoeba").mkdir(exist_ok=True)
        (tmp_path / "tatoeba" / f"tatoeba.{iso}-eng.{iso}").write_text(lines, encoding="utf-8")
        (tmp_path / "tatoeba" / f"tatoeba.{iso}-eng.eng").write_text(lines, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    namespace: dict = {}
    exec(compile(block, "docs/guides/python-api.md", "exec"), namespace)  # noqa: S102 - the project's own guide
    result, report = namespace["result"], namespace["report"]
    assert result.steps == 2 and (tmp_path / "runs" / "s" / "student" / "config.json").is_file()
    assert report["task"] == "tatoeba" and list(report["languages"]) == ["de", "zh"]
