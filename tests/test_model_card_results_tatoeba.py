"""eval-tatoeba --update-card: only a run on the full-size Tatoeba sets writes the card, and a sentence-transformers
model's card is its top directory's README.md, its hand-written text kept."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import sample_lines

from helpers import assert_error, by_config, card_results, read_report, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------------------- Tatoeba


def sentence_transformers_model(card_models, top: Path) -> Path:
    """A sentence-transformers layout whose transformer sits in 0_Transformer/ (config.json also at the top, which
    eval-tatoeba reads first)."""
    shutil.copytree(card_models["encoder"], top / "0_Transformer")
    shutil.copy(card_models["encoder"] / "config.json", top / "config.json")
    modules = [
        {"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (top / "modules.json").write_text(json.dumps(modules))
    (top / "1_Pooling").mkdir()
    (top / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 16, "pooling_mode": "mean"}))
    return top


HAND_MADE = """\
---
language: multilingual
model-index:
- name: my-sentence-model
  results:
  - task:
      type: sentence-similarity
    dataset:
      name: STS Benchmark
      type: mteb/stsbenchmark-sts
      split: test
    metrics:
    - type: cos_sim_spearman
      value: 81.5
library_name: sentence-transformers
---

# my-sentence-model

Text.
"""


def full_size_tatoeba(data: Path, sizes: dict | None = None) -> Path:
    """Tatoeba files of tzl and swg, at `sizes` pairs (default: their full test's, 104 and 112); tzl's English side
    is its own text, so each line retrieves itself."""
    data.mkdir()
    for iso, n in (sizes or {"tzl": 104, "swg": 112}).items():
        lines = [f"{i} {line}" for i, line in enumerate(sample_lines("de", n, seed=3))]  # numbered: no duplicates
        english = lines if iso == "tzl" else sample_lines("en", n, seed=4)
        (data / f"tatoeba.{iso}-eng.{iso}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (data / f"tatoeba.{iso}-eng.eng").write_text("\n".join(english) + "\n", encoding="utf-8")
    return data


def test_eval_tatoeba_update_card_refuses_a_subset(card_models, tmp_path, monkeypatch, capsys):
    """A folder cut to fewer pairs than a language's full test is not the test MTEB's dataset id names: one Error
    line naming the languages and their counts, before any evaluation; the card and --out untouched."""
    model = sentence_transformers_model(card_models, tmp_path / "st-model")
    card = model / "README.md"
    card.write_text(HAND_MADE, encoding="utf-8")
    data = full_size_tatoeba(tmp_path / "tatoeba", {"tzl": 104, "swg": 20})
    out = tmp_path / "report"
    args = ("eval-tatoeba", "--model", str(model), "--data", str(data), "--out", str(out), "--update-card")
    assert_error(
        run_main(monkeypatch, capsys, *args),
        "--update-card",
        "swg: 20 pairs, the full test 112",
        "mteb/tatoeba-bitext-mining",
        "leave out --update-card",
    )
    assert card.read_text(encoding="utf-8") == HAND_MADE and not out.exists()
    code, _, err = run_main(monkeypatch, capsys, *args[:-1])  # the same folder without --update-card: a report
    assert code == 0, err


def test_eval_tatoeba_update_card_sentence_transformers_top_directory(card_models, tmp_path, monkeypatch, capsys):
    model = sentence_transformers_model(card_models, tmp_path / "st-model")
    card = model / "README.md"
    card.write_text(HAND_MADE, encoding="utf-8")
    # Two of the Tatoeba test's small languages at their full size (104 and 112 pairs): --update-card takes only
    # a language's full test (test_eval_tatoeba_update_card_refuses_a_subset).
    data = full_size_tatoeba(tmp_path / "tatoeba")
    out = tmp_path / "report"
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-tatoeba",
        "--model",
        str(model),
        "--data",
        str(data),
        "--out",
        str(out),
        "--precision",
        "fp32",
        "--update-card",
        "--json",
    )
    assert code == 0, stderr
    assert json.loads(stdout)["card"] == str(card) and not (model / "0_Transformer" / "README.md").exists()
    doc = read_report(out)
    found = card_results(card, "mteb/tatoeba-bitext-mining")
    pairs = {s["iso639_3"] + "-eng": s for s in doc["languages"].values()}
    assert set(pairs) == {"tzl-eng", "swg-eng"} and pairs["tzl-eng"]["xx_to_en"] > 50
    for direction in ("xx_to_en", "en_to_xx"):
        assert by_config(found, "accuracy", direction) == {pair: s[direction] for pair, s in pairs.items()}
    for r in found:
        assert (r.task_type, r.task_name, r.dataset_name, r.dataset_split) == (
            "sentence-similarity",
            "Bitext Mining",
            "Tatoeba",
            "test",
        )
        assert r.source_name.startswith("mlminilm eval-tatoeba ") and "layer 2 of 2, mean pooling" in r.source_name
        assert r.source_name.endswith("; the full test files, 216 pairs")
    # The hand-made model-index: its name and its STS result stay.
    from huggingface_hub import ModelCard

    loaded = ModelCard.load(card)
    assert loaded.data.model_name == "my-sentence-model"
    sts = card_results(card, "mteb/stsbenchmark-sts")
    assert [(r.metric_type, r.metric_value, r.dataset_split) for r in sts] == [("cos_sim_spearman", 81.5, "test")]
    assert (loaded.data.language, loaded.data.library_name) == ("multilingual", "sentence-transformers")
    text = card.read_text(encoding="utf-8")
    assert text.startswith("---\nlanguage: multilingual\nmodel-index:\n")
    assert text.split("\n---\n", 1)[0].endswith("\nlibrary_name: sentence-transformers")  # after the block, as it was
    body = HAND_MADE.split("\n---\n", 1)[1]
    assert text.split("\n---\n", 1)[1].startswith(body + "\n<!-- mlminilm:eval-tatoeba:start")
    for s in doc["languages"].values():
        assert f"| Tatoeba | test | {s['iso639_3']}-eng | {s['xx_to_en']:.2f} | {s['en_to_xx']:.2f} |" in text
    assert "STS Benchmark" not in text.split("<!-- mlminilm:eval-tatoeba:start -->")[1]  # the table: ours only
