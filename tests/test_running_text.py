"""benchmarks/running_text.py: the distillation text holds XNLI test sentences and TyDiQA dev contexts, and never
the MLQA contexts that the retention benchmark evaluates (retrieval and QA after fine-tuning)."""

from __future__ import annotations

import json
import sys

import pytest

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import running_text  # noqa: E402


def _squad(path, contexts):
    doc = {"data": [{"title": "t", "paragraphs": [{"context": c, "qas": []} for c in contexts]}]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")


def _shared(tmp_path):
    shared = tmp_path / "data"
    (shared / "xnli").mkdir(parents=True)
    (shared / "xnli" / "test-ar.tsv").write_text(
        "P one.\tH one.\tentailment\nP one.\tH two.\tneutral\n", encoding="utf-8"
    )
    _squad(shared / "mlqa" / "dev" / "dev-context-ar-question-ar.json", ["An evaluated MLQA passage."])
    _squad(shared / "tydiqa" / "tydiqa.goldp.ar.dev.json", ["A TyDiQA\npassage."])
    return shared


def test_lines_are_xnli_then_tydiqa_without_mlqa(tmp_path):
    # Worked by hand: the distinct premises and hypotheses in file order, then the TyDiQA context on one line.
    assert running_text.running_text("ar", _shared(tmp_path)) == ["P one.", "H one.", "H two.", "A TyDiQA passage."]


def test_written_corpus_holds_no_mlqa_context(tmp_path):
    counts = running_text.write_corpus(tmp_path / "out", langs=("ar",), shared=_shared(tmp_path))
    text = (tmp_path / "out" / "ar.txt").read_text(encoding="utf-8")
    assert counts == {"ar": 4}
    assert "MLQA" not in text


@pytest.mark.realdata
@pytest.mark.parametrize("lang", ["ar", "de", "en", "es", "hi", "vi", "zh"])
def test_real_text_shares_no_line_with_mlqa_dev(lang, shared_data):
    mlqa = json.loads((shared_data / "mlqa" / "dev" / f"dev-context-{lang}-question-{lang}.json").read_text("utf-8"))
    contexts = {p["context"].replace("\n", " ").strip() for a in mlqa["data"] for p in a["paragraphs"]}
    lines = running_text.running_text(lang, shared_data)
    assert len(lines) > 1000  # XNLI test alone gives thousands of distinct sentences
    assert not contexts & set(lines)


def test_an_output_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setattr(running_text, "SHARED", _shared(tmp_path))
    monkeypatch.setattr(sys, "argv", ["running_text.py", str(blocker / "out")])
    assert running_text.main() == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: cannot write") and "Not a directory" in err[0]
