"""eval-xnli and eval-mlqa --update-card: the report's results in the model's README.md as Hub `model-index` metadata
(read back with huggingface_hub.ModelCard) and a table; the rest of the card byte for byte; re-runs replace, other
datasets stay; refusals (a malformed or unreadable card, a Hub id, predictions without a model) leave the card
untouched. The card_models: tests/conftest.py (card_models)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from taskdata import squad_doc, write_json, write_mlqa_dir, write_xnli_dir

from helpers import assert_error, by_config, card_results, read_report, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


QA_WINDOWS = ("--max-seq-len", "64", "--doc-stride", "16", "--max-query-length", "12")

FRONT = """\
---
license: apache-2.0
language:
- de
- en
# kept as written, comments included
tags: [mlminilm, distillation]   # a flow list
base_model: xlm-roberta-base
pipeline_tag: text-classification
---
"""
BODY = """
# A tiny classifier

Body text with trailing spaces   
and Unicode: Größe, 北京.
"""


def copy_model(card_models, kind: str, dest: Path) -> Path:
    shutil.copytree(card_models[kind], dest)
    return dest


def split_card(text: str, command: str) -> tuple[str, str, str, str]:
    """(front matter before model-index, model-index and the rest of the front matter, body before the section,
    body after it)."""
    end = text.index("\n---\n", 4) + len("\n---\n")
    front, body = text[:end], text[end:]
    start_marker, end_marker = f"<!-- mlminilm:{command}:start -->", f"<!-- mlminilm:{command}:end -->"
    assert body.count(start_marker) == 1 and body.count(end_marker) == 1, body
    i = front.index("model-index:")
    return front[:i], front[i:], body[: body.index(start_marker)], body[body.index(end_marker) + len(end_marker) :]


# ---------------------------------------------------------------------------------------------------- XNLI


def test_eval_xnli_update_card(card_models, tmp_path, monkeypatch, capsys):
    model = copy_model(card_models, "xnli", tmp_path / "my-xnli")
    card = model / "README.md"
    card.write_text(FRONT + BODY, encoding="utf-8")
    data = write_xnli_dir(tmp_path / "xnli", ("en", "de", "zh"), count=9)
    out = tmp_path / "report"
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-xnli",
        "--model",
        str(model),
        "--data",
        str(data),
        "--out",
        str(out),
        "--update-card",
        "--json",
    )
    assert code == 0, stderr
    assert json.loads(stdout)["card"] == str(card)
    assert f"model card {card} updated with 3 eval-xnli results" in stderr
    assert "card" not in read_report(out)  # the card is written after the report
    scores = {lang: s["accuracy"] for lang, s in read_report(out)["languages"].items()}
    found = card_results(card, "facebook/xnli")
    assert by_config(found) == scores and len(found) == 3
    for r in found:
        assert (r.task_type, r.task_name, r.dataset_name, r.dataset_split) == (
            "text-classification",
            "Natural Language Inference",
            "XNLI",
            "test",
        )
        assert r.metric_name == "Accuracy (%)" and r.source_name.startswith("mlminilm eval-xnli ")
        assert "zero-shot cross-lingual transfer (XTREME)" in r.source_name and r.source_url.startswith("https://")
    from huggingface_hub import ModelCard

    loaded = ModelCard.load(card)
    assert loaded.data.model_name == "my-xnli"  # no model-index before: the directory's name
    assert (loaded.data.license, loaded.data.language, loaded.data.tags) == (
        "apache-2.0",
        ["de", "en"],
        ["mlminilm", "distillation"],
    )
    # Every other front-matter line and the body outside the section, byte for byte.
    text = card.read_text(encoding="utf-8")
    before, index, body_before, body_after = split_card(text, "eval-xnli")
    assert before == FRONT[: -len("---\n")]
    assert body_before == BODY + "\n" and body_after == "\n"
    for lang, value in scores.items():
        assert f"| XNLI | test | {lang} | {value:.2f} |" in body_before + text
    assert f"| XNLI | test | average of 3 | {read_report(out)['average']['accuracy']:.2f} |" in text

    # A re-run on other data for one language replaces that entry; the others stay; nothing is duplicated.
    other = write_xnli_dir(tmp_path / "xnli2", ("de",), count=12)
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "eval-xnli", "--model", str(model), "--data", str(other), "--update-card", "--json"
    )  # no --out: the card is still written
    assert code == 0, stderr
    rerun = json.loads(stdout)
    found = card_results(card, "facebook/xnli")
    assert len(found) == 3
    assert by_config(found) == {**scores, "de": rerun["languages"]["de"]["accuracy"]}
    text2 = card.read_text(encoding="utf-8")
    before2, _, body_before2, body_after2 = split_card(text2, "eval-xnli")
    assert (before2, body_before2, body_after2) == (before, body_before, body_after)

    # --split dev: other entries (the Hub's "validation" split) beside the test ones.
    write_xnli_dir(tmp_path / "xnli", ("en",), split="dev", count=6)
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-xnli",
        "--model",
        str(model),
        "--data",
        str(tmp_path / "xnli"),
        "--split",
        "dev",
        "--langs",
        "en",
        "--update-card",
        "--json",
    )
    assert code == 0, stderr
    found = card_results(card, "facebook/xnli")
    assert len(found) == 4
    dev = [r for r in found if r.dataset_split == "validation"]
    assert len(dev) == 1 and dev[0].metric_value == json.loads(stdout)["languages"]["en"]["accuracy"]
    assert "| XNLI | validation | en |" in card.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------------- MLQA


def test_eval_mlqa_update_card_minimal_card_and_other_datasets(card_models, tmp_path, monkeypatch, capsys):
    model = copy_model(card_models, "qa", tmp_path / "qa-model")
    card = model / "README.md"
    assert not card.exists()
    mlqa = write_mlqa_dir(tmp_path / "mlqa", ("en", "de"), count=3)
    out = tmp_path / "report"
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-mlqa",
        "--model",
        str(model),
        "--data",
        str(mlqa),
        "--langs",
        "en,de",
        "--out",
        str(out),
        *QA_WINDOWS,
        "--update-card",
        "--json",
    )
    assert code == 0, stderr
    assert json.loads(stdout)["card"] == str(card)
    doc = read_report(out)
    from huggingface_hub import ModelCard

    loaded = ModelCard.load(card)  # a minimal card: model-index only, a title and the table
    assert loaded.data.model_name == "qa-model"
    assert set(loaded.data.to_dict()) == {"model-index"}
    assert loaded.text.startswith("\n# qa-model\n\n<!-- mlminilm:eval-mlqa:start -->")
    found = card_results(card, "facebook/mlqa")
    for metric in ("exact_match", "f1"):
        assert by_config(found, metric) == {lang: s[metric] for lang, s in doc["languages"].items()}
    for r in found:
        assert (r.task_type, r.dataset_name, r.dataset_split) == ("question-answering", "MLQA", "validation")
        assert "MLQA scorer" in r.source_name and r.source_url == "https://github.com/facebookresearch/MLQA"

    # XQuAD (the SQuAD v1.1 scorer): another dataset, kept beside MLQA in the metadata and in the one table.
    xquad = tmp_path / "xquad"
    xquad.mkdir()
    for lang in ("en", "de"):
        write_json(xquad / f"xquad.{lang}.json", squad_doc(lang, count=3, seed=5))
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-mlqa",
        "--model",
        str(model),
        "--data",
        str(xquad),
        *QA_WINDOWS,
        "--update-card",
        "--json",
    )
    assert code == 0, stderr
    second = json.loads(stdout)
    assert by_config(card_results(card, "facebook/mlqa"), "f1") == {
        lang: s["f1"] for lang, s in doc["languages"].items()
    }
    xq = card_results(card, "google/xquad")
    assert by_config(xq, "f1") == {lang: s["f1"] for lang, s in second["languages"].items()}
    assert all("SQuAD v1.1 scorer" in r.source_name for r in xq)
    text = card.read_text(encoding="utf-8")
    assert text.count("<!-- mlminilm:eval-mlqa:start -->") == 1
    for lang, s in second["languages"].items():
        assert f"| XQuAD | validation | {lang} | {s['exact_match']:.2f} | {s['f1']:.2f} |" in text
    for lang, s in doc["languages"].items():
        assert f"| MLQA | validation | {lang} | {s['exact_match']:.2f} | {s['f1']:.2f} |" in text


# ------------------------------------------------------------------------------------------------ refusals


MALFORMED = {
    "yaml": ("---\nlicense: [apache-2.0\n---\n# x\n", "front matter of the model card"),
    "not a mapping": ("---\n- a\n- b\n---\n# x\n", "not a mapping"),
    "model-index without a name": ("---\nmodel-index:\n- results: []\n---\n# x\n", "front matter of the model card"),
    "unclosed": ("---\nlicense: mit\n# x\n", "does not close"),
    "unmatched marker": ("---\nlicense: mit\n---\n<!-- mlminilm:eval-xnli:start -->\n", "unmatched"),
    "unmatched marker, no front matter": ("# x\n<!-- mlminilm:eval-mlqa:end -->\n", "unmatched"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_card_is_refused_before_the_evaluation(case, card_models, tmp_path, monkeypatch, capsys):
    model = copy_model(card_models, "xnli", tmp_path / "m")
    content, needle = MALFORMED[case]
    (model / "README.md").write_bytes(content.encode())
    data = write_xnli_dir(tmp_path / "xnli", ("en",), count=3)
    result = run_main(
        monkeypatch,
        capsys,
        "eval-xnli",
        "--model",
        str(model),
        "--data",
        str(data),
        "--out",
        str(tmp_path / "report"),
        "--update-card",
    )
    assert_error(result, "--update-card", str(model / "README.md"), needle)
    assert (model / "README.md").read_bytes() == content.encode()
    assert not (tmp_path / "report").exists()  # refused before any work


def test_unreadable_card_is_refused(card_models, tmp_path, monkeypatch, capsys):
    model = copy_model(card_models, "qa", tmp_path / "m")
    content = b"---\nlicense: mit\n---\n\xff\xfe not UTF-8\n"
    (model / "README.md").write_bytes(content)
    mlqa = write_mlqa_dir(tmp_path / "mlqa", ("en",), count=2)
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-mlqa",
            "--model",
            str(model),
            "--data",
            str(mlqa),
            "--langs",
            "en",
            "--update-card",
        ),
        "cannot read the model card",
        str(model / "README.md"),
    )
    assert (model / "README.md").read_bytes() == content


def test_hub_id_and_predictions_are_refused(card_models, tmp_path, monkeypatch, capsys):
    data = write_xnli_dir(tmp_path / "xnli", ("en",), count=3)
    assert_error(
        run_main(
            monkeypatch, capsys, "eval-xnli", "--model", "some-org/some-model", "--data", str(data), "--update-card"
        ),
        "--update-card",
        "--model some-org/some-model is not one",
        "hf download some-org/some-model",
    )
    tatoeba = tmp_path / "t"
    tatoeba.mkdir()
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-tatoeba",
            "--model",
            "intfloat/multilingual-e5-small",
            "--data",
            str(tatoeba),
            "--update-card",
        ),
        "--update-card",
        "is not one",
    )
    mlqa = write_mlqa_dir(tmp_path / "mlqa", ("en",), count=2)
    preds = tmp_path / "preds"
    preds.mkdir()
    assert_error(
        run_main(monkeypatch, capsys, "eval-mlqa", "--data", str(mlqa), "--predictions", str(preds), "--update-card"),
        "--update-card",
        "--predictions",
    )
    assert not list(tmp_path.rglob("README.md"))
