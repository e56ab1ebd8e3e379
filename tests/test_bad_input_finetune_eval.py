"""Bad input to `finetune` and the evaluations (eval-xnli, eval-mlqa, eval-tatoeba), in-process: one `Error:` line
(exit 1) with what to do, never a traceback, nothing on stdout, no partial output."""

from __future__ import annotations

import sys

import pytest

from helpers import assert_error, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------------- finetune and evaluation


def test_finetune_bad_input(wp_teacher, task_files, tmp_path, monkeypatch, capsys):
    out = tmp_path / "ft"

    def finetune(*args, env=None):
        return run_main(monkeypatch, capsys, "finetune", "--model", str(wp_teacher), "--out", str(out), *args, env=env)

    assert_error(finetune("--train", str(tmp_path / "none.tsv")), "no such file")
    # QA windows that cannot advance: the message names the flag that exists, --max-seq-len.
    line = assert_error(
        finetune(
            "--task",
            "qa",
            "--train",
            str(task_files["squad"]),
            "--max-seq-len",
            "24",
            "--doc-stride",
            "16",
            "--max-query-length",
            "12",
        ),
        "--max-seq-len",
        "--doc-stride",
    )
    assert "--max-length" not in line
    monkeypatch.setitem(sys.modules, "datasets", None)
    assert_error(finetune("--train", "hf:multi_nli", env={"HF_HUB_OFFLINE": None}), "pip install 'mlminilm[hub]'")
    monkeypatch.delitem(sys.modules, "datasets")
    assert not out.exists()


def test_eval_bad_input(xnli_model, task_files, tmp_path, monkeypatch, capsys):
    out = tmp_path / "report"
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-xnli",
            "--model",
            str(xnli_model),
            "--data",
            str(tmp_path / "x"),
            "--out",
            str(out),
        ),
        str(tmp_path / "x"),
    )
    monkeypatch.setitem(sys.modules, "datasets", None)
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-xnli",
            "--model",
            str(xnli_model),
            "--data",
            "hf:xnli",
            "--langs",
            "de",
            env={"HF_HUB_OFFLINE": None},
        ),
        "pip install 'mlminilm[hub]'",
    )
    monkeypatch.delitem(sys.modules, "datasets")
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-mlqa",
            "--data",
            str(tmp_path / "none.json"),
            "--predictions",
            str(tmp_path / "preds"),
            "--out",
            str(out),
        )
    )
    assert_error(
        run_main(
            monkeypatch, capsys, "eval-tatoeba", "--model", str(xnli_model), "--data", str(tmp_path), "--langs", "deu"
        ),
        "use de for deu",
    )
    assert not out.exists()


def test_nli_json_lines_python_cannot_parse_are_one_line(wp_teacher, tmp_path, monkeypatch, capsys):
    """Issue 53: finetune --task xnli --train a MultiNLI .jsonl with a line nested 100,000 deep (RecursionError) or a
    5,000-digit number (ValueError) was a traceback; a null premise became the sentence "None"."""
    good = '{"gold_label": "neutral", "sentence1": "a b", "sentence2": "c d"}\n'
    out = tmp_path / "ft"
    for n, (line, needle) in enumerate(
        (
            ('{"sentence1": ' + "[" * 100_000, ":2: not a JSON line (nested more than 100 levels deep)"),
            ('{"gold_label": "neutral", "sentence1": ' + "1" * 5000 + "}", ":2: not a JSON line (an integer of 5,000"),
            ('{"gold_label": "neutral", "sentence1": null, "sentence2": "c"}', ":2: sentence1 should be text"),
        )
    ):
        train = tmp_path / f"train{n}.jsonl"
        train.write_text(good + line + "\n", encoding="utf-8")
        command = ("finetune", "--model", str(wp_teacher), "--train", str(train), "--out", str(out))
        assert_error(run_main(monkeypatch, capsys, *command), f"{train.name}{needle}")
    assert not out.exists()
