"""Bad input to `prepare`, in-process: one `Error:` line (exit 1) with what to do, never a traceback, nothing on
stdout, no partial output; offline runs that need the Hub say so at once."""

from __future__ import annotations

import gzip
import sys

import pytest

from helpers import assert_error, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------------------- prepare: exit 1


def test_prepare_bad_inputs(wp_teacher, tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"

    def prepare(*args, env=None):
        return run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            str(wp_teacher),
            "--out",
            str(out),
            "--workers",
            "1",
            *args,
            env=env,
        )

    assert_error(prepare("--input", str(tmp_path / "nowhere")), "does not exist")
    # --langs naming a language no input holds: the message lists what the inputs do hold.
    assert_error(prepare("--input", str(tiny_corpus_dir), "--langs", "fr"), "--langs fr", "ar, de, en, zh")
    # A corrupt .gz (valid header, damaged body): the file is named, no zlib traceback.
    good = gzip.compress(("Der Hund läuft jeden Morgen durch den Park.\n" * 2000).encode())
    damaged = good[:200] + bytes(b ^ 0x5A for b in good[200:400]) + good[400:]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "de.txt.gz").write_bytes(damaged)
    line = assert_error(prepare("--input", str(corpus)), str(corpus / "de.txt.gz"), "gzip")
    assert "zlib" not in line or "Error -3" in line
    # An unknown language file: the known codes are listed.
    (tmp_path / "xx.txt").write_text("some text\n")
    assert_error(prepare("--input", f"xx={tmp_path / 'xx.txt'}"), "unknown language", "de")
    # --out is a file.
    out.write_text("not a directory")
    assert_error(prepare("--input", str(tiny_corpus_dir)), "is a file")
    out.unlink()
    # hf: without the optional datasets package: one clear install hint (not "check the network").
    monkeypatch.setitem(sys.modules, "datasets", None)
    line = assert_error(
        prepare("--input", "hf:wikimedia/wikipedia:20231101.{lang}", "--langs", "de", env={"HF_HUB_OFFLINE": None}),
        "pip install 'mlminilm[hub]'",
    )
    assert "network" not in line
    monkeypatch.delitem(sys.modules, "datasets")
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))


def test_offline_fails_fast_and_says_so(tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    # A hub id that is not in the cache: refused at once, naming HF_HUB_OFFLINE=1.
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            "someone/not-cached-model",
            "--input",
            str(tiny_corpus_dir),
            "--out",
            str(out),
            env={"HF_HUB_OFFLINE": "1"},
        ),
        "someone/not-cached-model",
        "HF_HUB_OFFLINE=1",
    )
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-tatoeba",
            "--model",
            "someone/not-cached-model",
            "--data",
            str(tmp_path),
            env={"HF_HUB_OFFLINE": "1"},
        ),
        "HF_HUB_OFFLINE=1",
    )
    # Online, a hub id that could not be fetched: the hint names HF_HUB_OFFLINE=1 (no network is used here).
    from mlminilm.models.loading import _load_error

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert "set HF_HUB_OFFLINE=1" in str(_load_error("model config", "someone/model", OSError("cannot connect")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # Streaming a Hub dataset cannot work offline: said before any request.
    pytest.importorskip("datasets")
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            "someone/not-cached-model",
            "--input",
            "hf:wikimedia/wikipedia:20231101.{lang}",
            "--langs",
            "de",
            "--out",
            str(out),
            env={"HF_HUB_OFFLINE": "1"},
        ),
        "HF_HUB_OFFLINE=1",
    )
    assert not out.exists()


def test_json_lines_python_cannot_parse_are_one_line(wp_teacher, tmp_path, monkeypatch, capsys):
    """Issue 53: a JSON line nested 100,000 deep (RecursionError) or holding a 5,000-digit number (ValueError) was a
    traceback, found at the check (first line) or in the middle of the run (a later line): one line, no output."""
    out = tmp_path / "out"
    good = '{"text": "Der Hund läuft jeden Morgen durch den Park."}\n'
    for n, (lines, needle) in enumerate(
        (
            (['{"text": ' + "[" * 100_000], "de.jsonl:1: not a JSON line (nested more than 100 levels deep)"),
            ([good] * 50 + ['{"text": "x", "id": ' + "1" * 5000 + "}"], "de.jsonl:51: not a JSON line (an integer of"),
            ([good, '{"text": "\\udfff"}'], "de.jsonl:2: not a JSON line (a \\u escape of a lone UTF-16 surrogate"),
        )
    ):
        corpus = tmp_path / f"corpus{n}"
        corpus.mkdir()
        (corpus / "de.jsonl").write_text("".join(line if line.endswith("\n") else line + "\n" for line in lines))
        code = run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            str(wp_teacher),
            "--out",
            str(out),
            "--workers",
            "1",
            "--input",
            str(corpus),
        )
        assert_error(code, str(corpus / needle))
        assert not out.exists() and not list(tmp_path.glob(".tmp-*"))
