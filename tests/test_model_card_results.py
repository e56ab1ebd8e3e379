"""eval-xnli, eval-mlqa and eval-tatoeba --update-card: the report's results in the model's README.md as Hub
`model-index` metadata (read back with huggingface_hub.ModelCard) and a table; the rest of the card byte for byte;
re-runs replace, other datasets stay; refusals leave the card untouched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import sample_lines
from taskdata import save_head_model, squad_doc, write_json, write_mlqa_dir, write_xnli_dir

from helpers import assert_error, run_main, save_tiny_teacher

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


@pytest.fixture(scope="module")
def models(tiny_wordpiece_dir, tmp_path_factory) -> dict[str, Path]:
    """Tiny models with their heads (no training needed to evaluate); each test copies the one it writes into."""
    folder = tmp_path_factory.mktemp("card-models")
    return {
        "xnli": save_head_model(tiny_wordpiece_dir, folder / "xnli", "xnli", max_positions=160),
        "qa": save_head_model(tiny_wordpiece_dir, folder / "qa", "qa", max_positions=160),
        "encoder": save_tiny_teacher(tiny_wordpiece_dir, folder / "enc", layers=2, hidden=16, heads=2, intermediate=32),
    }


def copy_model(models, kind: str, dest: Path) -> Path:
    shutil.copytree(models[kind], dest)
    return dest


def results(card_path: Path, dataset_type: str | None = None) -> list:
    from huggingface_hub import ModelCard

    found = ModelCard.load(card_path).data.eval_results or []
    return [r for r in found if dataset_type is None or r.dataset_type == dataset_type]


def by_config(found: list, metric: str = "accuracy", metric_config: str | None = None) -> dict[str, float]:
    values = {}
    for r in found:
        if r.metric_type == metric and r.metric_config == metric_config:
            assert r.dataset_config not in values, f"duplicate entry for {r.dataset_config}"
            values[r.dataset_config] = r.metric_value
    return values


def report(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


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


def test_eval_xnli_update_card(models, tmp_path, monkeypatch, capsys):
    model = copy_model(models, "xnli", tmp_path / "my-xnli")
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
    assert "card" not in report(out)  # the card is written after the report
    scores = {lang: s["accuracy"] for lang, s in report(out)["languages"].items()}
    found = results(card, "facebook/xnli")
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
    assert f"| XNLI | test | average of 3 | {report(out)['average']['accuracy']:.2f} |" in text

    # A re-run on other data for one language replaces that entry; the others stay; nothing is duplicated.
    other = write_xnli_dir(tmp_path / "xnli2", ("de",), count=12)
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "eval-xnli", "--model", str(model), "--data", str(other), "--update-card", "--json"
    )  # no --out: the card is still written
    assert code == 0, stderr
    rerun = json.loads(stdout)
    found = results(card, "facebook/xnli")
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
    found = results(card, "facebook/xnli")
    assert len(found) == 4
    dev = [r for r in found if r.dataset_split == "validation"]
    assert len(dev) == 1 and dev[0].metric_value == json.loads(stdout)["languages"]["en"]["accuracy"]
    assert "| XNLI | validation | en |" in card.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------------- MLQA


def test_eval_mlqa_update_card_minimal_card_and_other_datasets(models, tmp_path, monkeypatch, capsys):
    model = copy_model(models, "qa", tmp_path / "qa-model")
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
    doc = report(out)
    from huggingface_hub import ModelCard

    loaded = ModelCard.load(card)  # a minimal card: model-index only, a title and the table
    assert loaded.data.model_name == "qa-model"
    assert set(loaded.data.to_dict()) == {"model-index"}
    assert loaded.text.startswith("\n# qa-model\n\n<!-- mlminilm:eval-mlqa:start -->")
    found = results(card, "facebook/mlqa")
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
    assert by_config(results(card, "facebook/mlqa"), "f1") == {lang: s["f1"] for lang, s in doc["languages"].items()}
    xq = results(card, "google/xquad")
    assert by_config(xq, "f1") == {lang: s["f1"] for lang, s in second["languages"].items()}
    assert all("SQuAD v1.1 scorer" in r.source_name for r in xq)
    text = card.read_text(encoding="utf-8")
    assert text.count("<!-- mlminilm:eval-mlqa:start -->") == 1
    for lang, s in second["languages"].items():
        assert f"| XQuAD | validation | {lang} | {s['exact_match']:.2f} | {s['f1']:.2f} |" in text
    for lang, s in doc["languages"].items():
        assert f"| MLQA | validation | {lang} | {s['exact_match']:.2f} | {s['f1']:.2f} |" in text


# ------------------------------------------------------------------------------------------------- Tatoeba


def sentence_transformers_model(models, top: Path) -> Path:
    """A sentence-transformers layout whose transformer sits in 0_Transformer/ (config.json also at the top, which
    eval-tatoeba reads first)."""
    shutil.copytree(models["encoder"], top / "0_Transformer")
    shutil.copy(models["encoder"] / "config.json", top / "config.json")
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


def test_eval_tatoeba_update_card_refuses_a_subset(models, tmp_path, monkeypatch, capsys):
    """A folder cut to fewer pairs than a language's full test is not the test MTEB's dataset id names: one Error
    line naming the languages and their counts, before any evaluation; the card and --out untouched."""
    model = sentence_transformers_model(models, tmp_path / "st-model")
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


def test_eval_tatoeba_update_card_sentence_transformers_top_directory(models, tmp_path, monkeypatch, capsys):
    model = sentence_transformers_model(models, tmp_path / "st-model")
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
    doc = report(out)
    found = results(card, "mteb/tatoeba-bitext-mining")
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
    sts = results(card, "mteb/stsbenchmark-sts")
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
def test_malformed_card_is_refused_before_the_evaluation(case, models, tmp_path, monkeypatch, capsys):
    model = copy_model(models, "xnli", tmp_path / "m")
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


def test_unreadable_card_is_refused(models, tmp_path, monkeypatch, capsys):
    model = copy_model(models, "qa", tmp_path / "m")
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


def test_hub_id_and_predictions_are_refused(models, tmp_path, monkeypatch, capsys):
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


# ----------------------------------------------------------------------------------------- card text, direct


def xnli_doc(**accuracies) -> dict:
    return {
        "task": "xnli",
        "split": "test",
        "protocol": "zero-shot cross-lingual transfer (XTREME): ...",
        "data": {"source": "x"},
        "languages": {k: {"accuracy": v} for k, v in accuracies.items()},
    }


def test_line_breaks_bom_and_a_section_inside_the_body(tmp_path):
    from huggingface_hub import ModelCard

    from mlminilm.models.card_results import update_card

    card = tmp_path / "m" / "README.md"
    card.parent.mkdir()
    original = "\ufeff---\r\nlicense: mit\r\n---\r\n\r\n# Title\r\n\r\nEnd text.\r\n"
    card.write_bytes(original.encode())
    update_card(card, xnli_doc(de=50.0))
    text = card.read_bytes().decode()
    assert text.startswith("\ufeff---\r\nlicense: mit\r\nmodel-index:\r\n") and "\n" not in text.replace("\r\n", "")
    assert by_config(results(card)) == {"de": 50.0}
    # Text written after the section by hand stays where it is when the section is replaced.
    card.write_bytes(text.encode() + b"\r\nA note after the table.\r\n")
    update_card(card, xnli_doc(de=75.0, en=25.0))
    after = card.read_bytes().decode()
    assert after.endswith("<!-- mlminilm:eval-xnli:end -->\r\n\r\nA note after the table.\r\n")
    assert "\r\n\r\n# Title\r\n\r\nEnd text.\r\n\r\n<!-- mlminilm:eval-xnli:start -->" in after
    assert by_config(results(card)) == {"de": 75.0, "en": 25.0}
    assert ModelCard.load(card).data.license == "mit"


def test_card_without_front_matter_gets_one_and_keeps_its_text(tmp_path):
    from mlminilm.models.card_results import update_card

    card = tmp_path / "plain" / "README.md"
    card.parent.mkdir()
    original = "# Plain card\n\nNo metadata here."  # no final line break
    card.write_text(original, encoding="utf-8")
    update_card(card, xnli_doc(de=50.0, en=40.0))
    text = card.read_text(encoding="utf-8")
    assert text.startswith("---\nmodel-index:\n- name: plain\n")
    assert text.split("\n---\n", 1)[1].startswith(original + "\n\n<!-- mlminilm:eval-xnli:start -->")
    assert by_config(results(card)) == {"de": 50.0, "en": 40.0} and "| XNLI | test | average of 2 | 45.00 |" in text


def test_front_matter_in_flow_style_is_dumped_again_with_the_same_fields(tmp_path):
    import yaml

    from mlminilm.models.card_results import update_card

    card = tmp_path / "m" / "README.md"
    card.parent.mkdir()
    card.write_text("---\n{license: mit, tags: [a, b], base_model: x/y}\n---\nBody.\n", encoding="utf-8")
    update_card(card, xnli_doc(de=50.0))
    text = card.read_text(encoding="utf-8")
    fields = yaml.safe_load(text.split("---\n")[1])
    assert {k: v for k, v in fields.items() if k != "model-index"} == {
        "license": "mit",
        "tags": ["a", "b"],
        "base_model": "x/y",
    }
    assert text.split("\n---\n", 1)[1].startswith("Body.\n\n<!-- mlminilm:eval-xnli:start -->")
    assert by_config(results(card)) == {"de": 50.0}


def test_merge_replaces_in_place():
    from huggingface_hub import EvalResult

    from mlminilm.models.card_results import merge

    def result(dataset: str, config: str, value: float):
        return EvalResult(
            task_type="t",
            dataset_type=dataset,
            dataset_name=dataset,
            dataset_config=config,
            dataset_split="test",
            metric_type="accuracy",
            metric_value=value,
        )

    old = [result("a", "de", 1), result("x", "de", 2), result("x", "en", 3), result("b", "de", 4)]
    merged = merge(old, [result("x", "en", 30), result("x", "fr", 40)])
    assert [(r.dataset_type, r.dataset_config, r.metric_value) for r in merged] == [
        ("a", "de", 1),
        ("x", "de", 2),
        ("x", "en", 30),
        ("x", "fr", 40),
        ("b", "de", 4),
    ]


def test_a_card_of_many_tags_is_updated_in_time_linear_in_its_size(tmp_path):
    """Issue 27: 300,000 tags took > 400 s (huggingface_hub dedups tags in quadratic time). With 20,000 tags the
    update now costs a few reads of the YAML (the old code: 8 or more)."""
    import time

    import yaml

    from mlminilm.models.card_results import update_card

    card = tmp_path / "m" / "README.md"
    card.parent.mkdir()
    front = yaml.safe_dump({"license": "mit", "tags": [f"tag{i}" for i in range(20_000)]})
    card.write_text(f"---\n{front}---\n\nBody.\n", encoding="utf-8")
    start = time.perf_counter()
    yaml.safe_load(front)
    one_read = time.perf_counter() - start
    start = time.perf_counter()
    update_card(card, xnli_doc(de=50.0))
    assert time.perf_counter() - start < 5 * one_read + 1.0
    fields = yaml.safe_load(card.read_text(encoding="utf-8").split("---\n")[1])
    assert len(fields["tags"]) == 20_000 and fields["license"] == "mit"
    assert by_config(results(card)) == {"de": 50.0}
