"""Where `export --format openvino --quantize int8` takes its calibration text from when --calibration is not given
(issue 55, item 2): the text the student was distilled on, as its mlminilm.json records it (--data, --parallel,
--passages), or one `Error:` line naming what is gone and showing --calibration. The CLI's cases, which load
OpenVINO: tests/openvino_cases.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import sample_lines

from helpers import prepare_data, save_tiny_teacher

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bert(tiny_wordpiece_dir, tmp_path_factory) -> Path:
    return save_tiny_teacher(
        tiny_wordpiece_dir, tmp_path_factory.mktemp("calbert"), layers=1, hidden=32, heads=4, intermediate=64
    )


@pytest.fixture(scope="module")
def tokenizer(bert):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(bert)


def pairs_file(path: Path, lang: str, count: int, seed: int = 0) -> Path:
    """`count` English sentences, a tab, their "translation" in `lang` (sample lines of each language)."""
    lines = zip(sample_lines("en", count, seed), sample_lines(lang, count, seed))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{a}\t{b}\n" for a, b in lines), encoding="utf-8")
    return path


def student(folder: Path, **record) -> Path:
    """A model directory whose mlminilm.json records what distill writes there (distillation.plan.card_info)."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"title": "mlminilm distill 1x32", "data": "none (only the parallel / passage terms, no running text)"}
    (folder / "mlminilm.json").write_text(json.dumps({**doc, **record}), encoding="utf-8")
    return folder


def test_the_recipe_students_parallel_pairs_calibrate_it(tokenizer, tmp_path, caplog):
    """A recipe student reads no prepared data: its --parallel pairs (both sides) are the calibration text, and one
    log line names the file."""
    from mlminilm.export.calibration import calibration_text

    pairs = pairs_file(tmp_path / "pairs" / "en-de.tsv", "de", 30)
    model = student(tmp_path / "student", parallel=str(pairs))
    with caplog.at_level(logging.INFO, logger="mlminilm"):
        text = calibration_text(None, str(model), "runs/e5/student", tokenizer, per_language=10)
    assert text.kind == "parallel pairs" and text.source == f"--parallel {pairs}"
    assert sorted(text.sentences) == ["de", "en"]
    assert set(text.sentences["de"]) <= set(sample_lines("de", 30)) and len(text.sentences["de"]) == 10
    assert set(text.sentences["en"]) <= set(sample_lines("en", 30)) and len(text.sentences["en"]) == 10
    said = [r.getMessage() for r in caplog.records if "calibration text" in r.getMessage()]
    assert len(said) == 1 and str(pairs) in said[0] and "was distilled on" in said[0], said
    # The same draw twice (seeded), and what the record says.
    assert calibration_text(None, str(model), "m", tokenizer, per_language=10) == text
    assert text.record()["languages"] == {"de": 10, "en": 10}


def test_gone_text_is_one_error_naming_the_path_and_calibration(tokenizer, tmp_path):
    from mlminilm.errors import ConfigError, DataError
    from mlminilm.export.calibration import ACCEPTS, calibration_text

    model = student(tmp_path / "student", parallel=str(tmp_path / "moved.tsv"), passages="qp")
    with pytest.raises(DataError) as info:
        calibration_text(None, str(model), "runs/e5/student", tokenizer)
    message = str(info.value)
    assert f"--parallel {tmp_path / 'moved.tsv'}, --passages qp" in message and "no longer there" in message
    assert "--calibration PATH" in message and ACCEPTS in message and "relative path" in message
    assert "\n" not in message

    # Nothing recorded (a teacher, a model of another tool): the same advice, a ConfigError.
    bare = student(tmp_path / "bare")
    with pytest.raises(ConfigError) as info:
        calibration_text(None, str(bare), "bare", tokenizer)
    assert "records no text it was distilled on" in str(info.value) and ACCEPTS in str(info.value)
    assert "--format onnx" in str(info.value)


def test_the_recorded_texts_are_pooled_and_a_trimmed_model_reads_its_bases(bert, tokenizer, tmp_path, caplog):
    """--data (prepared with the model's vocabulary), --parallel and --passages together: every language of each,
    drawn again from the pooled draws; a trimmed (or fine-tuned) model's record names its base_model, whose
    text is read."""
    from mlminilm.export.calibration import calibration_text

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "ru.txt").write_text("\n".join(sample_lines("ru", 20, seed=3)) + "\n", encoding="utf-8")
    data = prepare_data(bert, corpus, tmp_path / "data", seq_len=32)
    pairs = pairs_file(tmp_path / "fr.tsv", "fr", 8, seed=1)
    passages = tmp_path / "qp"
    passages.mkdir()
    qp = zip(sample_lines("zh", 6, seed=2), sample_lines("zh", 6, seed=4))
    (passages / "zh.tsv").write_text("".join(f"{q}\t{p}\n" for q, p in qp), encoding="utf-8")
    model = student(tmp_path / "student", data=str(data), parallel=str(pairs), passages=str(passages))
    text = calibration_text(None, str(model), "s", tokenizer, per_language=5)
    assert text.kind == "prepared data + parallel pairs + question-passage pairs"
    assert text.source == f"--data {data}; --parallel {pairs}; --passages {passages}"
    assert {lang: len(s) for lang, s in text.sentences.items()} == {"en": 5, "fr": 5, "ru": 5, "zh": 5}
    assert set(text.sentences["zh"]) <= set(sample_lines("zh", 6, seed=2)) | set(sample_lines("zh", 6, seed=4))

    trimmed = tmp_path / "trimmed"
    trimmed.mkdir()
    (trimmed / "mlminilm.json").write_text(json.dumps({"title": "t", "base_model": str(model), "vocabulary": "x"}))
    assert calibration_text(None, str(trimmed), "t", tokenizer, per_language=5).sentences == text.sentences


def test_calibration_takes_parallel_pairs(tokenizer, tmp_path):
    """--calibration PAIRS.tsv (or a folder of them): read as --parallel reads it, its errors naming
    --calibration; a path that is not there says what --calibration takes."""
    from mlminilm.errors import DataError
    from mlminilm.export.calibration import ACCEPTS, read_calibration

    pairs = pairs_file(tmp_path / "pairs" / "de.tsv", "de", 12)
    for given in (pairs, pairs.parent):
        text = read_calibration(given, tokenizer, per_language=12)
        assert text.kind == "parallel pairs" and text.source == str(given)
        assert sorted(text.sentences["de"]) == sorted(set(sample_lines("de", 12)))
    # The README's layout: a folder of en-<lang>.tsv files, as `distill --parallel pairs/` reads it.
    readme = tmp_path / "readme-pairs"
    for i, lang in enumerate(("de", "fr")):
        pairs_file(readme / f"en-{lang}.tsv", lang, 12, seed=i)
    text = read_calibration(readme, tokenizer, per_language=5)
    assert {lang: len(s) for lang, s in text.sentences.items()} == {"de": 5, "en": 5, "fr": 5}
    assert set(text.sentences["fr"]) <= set(sample_lines("fr", 12, seed=1))
    with pytest.raises(DataError) as info:
        read_calibration(tmp_path / "absent.tsv", tokenizer)
    assert str(info.value) == f"--calibration {tmp_path / 'absent.tsv'} does not exist; give {ACCEPTS}"
    empty = tmp_path / "empty.tsv"
    empty.write_text("no tab here\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        read_calibration(empty, tokenizer)
    assert str(info.value).startswith(f"--calibration {empty} holds no sentence pairs")
