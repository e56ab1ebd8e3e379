"""`mlminilm trim` on the command line: its JSON report, its per-language options, and bad input as one `Error:` line
(exit 1) or a usage error (exit 2) that leaves no output."""

from __future__ import annotations

import json

import pytest
from conftest import sample_lines

from helpers import assert_one_line_error, prepare_data, run_cli

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_cli_trims_and_reports_json(trim_teachers, tiny_corpus_dir, tmp_path):
    out = tmp_path / "trimmed"
    proc = run_cli(
        "trim",
        "--model",
        str(trim_teachers["wordpiece"]),
        "--corpus",
        str(tiny_corpus_dir),
        "--langs",
        "en,de",
        "--min-count",
        "2",
        "--workers",
        "1",
        "--out",
        str(out),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["vocab_size"]["after"] < doc["vocab_size"]["before"] and "old_ids" not in doc
    assert set(doc["counts"]["languages"]) == {"en", "de"} and doc["options"]["min_count"] == 2
    assert len(json.loads((out / "trim.json").read_text())["old_ids"]) == doc["vocab_size"]["after"]
    assert not list(tmp_path.glob(".tmp-*"))


def _errors(trim_teachers, tiny_corpus_dir, tmp_path):
    unigram, wordpiece = str(trim_teachers["unigram"]), str(trim_teachers["wordpiece"])
    wp_data = prepare_data(trim_teachers["wordpiece"], tiny_corpus_dir, tmp_path / "wp-data")
    no_counts = prepare_data(trim_teachers["unigram"], tiny_corpus_dir, tmp_path / "no-counts")
    (no_counts / "token_counts.npy").unlink()
    corpus = ("--corpus", str(tiny_corpus_dir), "--workers", "1")
    return [
        (("--model", unigram, "--data", str(no_counts)), "token counts"),
        (("--model", unigram, "--data", str(wp_data)), "was prepared with tokenizer"),
        (("--model", wordpiece, *corpus, "--min-count", "100000"), "nothing left to keep"),
        (("--model", wordpiece, *corpus, "--max-vocab", "3"), "--max-vocab 3 leaves no room"),
        (("--model", wordpiece), "give exactly one of --data"),
    ]


def test_cli_errors_are_one_line_and_leave_no_output(trim_teachers, tiny_corpus_dir, tmp_path):
    for i, (args, needle) in enumerate(_errors(trim_teachers, tiny_corpus_dir, tmp_path)):
        out = tmp_path / f"out-{i}"
        proc = run_cli("trim", *args, "--out", str(out))
        assert_one_line_error(proc, needle)
        assert not out.exists(), args
    assert not list(tmp_path.glob(".tmp-*"))


def test_cli_per_language_options_and_bad_input(trim_teachers, tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    from helpers import assert_error, run_main

    unigram = str(trim_teachers["unigram"])
    check = tmp_path / "check"
    check.mkdir()
    (check / "de.txt").write_text("\n".join(sample_lines("de", 6)) + "\n", encoding="utf-8")
    corpus = ("--corpus", str(tiny_corpus_dir), "--workers", "1")
    code, out, err = run_main(
        monkeypatch,
        capsys,
        "trim",
        "--model",
        unigram,
        *corpus,
        "--per-lang-top-k",
        "8",
        "--script-fill",
        "3",
        "--check",
        str(check),
        "--out",
        str(tmp_path / "ok"),
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["options"]["per_lang_top_k"] == 8 and doc["options"]["coverage"] is None
    assert doc["languages"]["de"]["held_out"]["sentences"] == 6 and doc["rules"]["added"]["script_fill"] > 0
    (check / "ru.txt").write_text("\n".join(sample_lines("ru", 4)) + "\n", encoding="utf-8")  # not counted
    code, out, err = run_main(
        monkeypatch, capsys, "trim", "--model", unigram, *corpus, "--check", str(check), "--out", str(tmp_path / "line")
    )
    assert code == 0, err
    share = json.loads((tmp_path / "line" / "trim.json").read_text())["languages"]["de"]["held_out"]["equal_share"]
    assert out.strip().endswith(
        f"held-out sentences tokenised as before: mean {100 * share:.1f}%, lowest {100 * share:.1f}% (de)"
    ), out  # the counted languages only: ru is left out
    assert "ru: 0 of 4 held-out sentences (0.0%) tokenise as before (not counted)" in err, err

    pooled_only = prepare_data(trim_teachers["unigram"], tiny_corpus_dir, tmp_path / "pooled-only")
    for shard in (pooled_only / "shards").iterdir():
        shard.unlink()
    bad = [
        (
            ("--model", unigram, "--data", str(pooled_only), "--per-lang-top-k", "5"),
            "--per-lang-top-k needs per-language counts",
            "holds only pooled counts",
        ),
        (("--model", unigram, *corpus, "--check", str(tmp_path / "absent")), "--check", "does not exist"),
        (("--model", unigram, *corpus, "--check", str(tmp_path)), "holds no <lang>.txt file"),
    ]
    for i, (args, *needles) in enumerate(bad):
        out_dir = tmp_path / f"bad-{i}"
        assert_error(run_main(monkeypatch, capsys, "trim", *args, "--out", str(out_dir)), *needles)
        assert not out_dir.exists(), args
    # Bad option values are usage errors (exit 2) naming the option, as the reliability guide's exit codes say.
    from helpers import assert_usage_error

    for option, value in (
        ("--per-lang-top-k", "0"),
        ("--per-lang-top-k", "-3"),
        ("--script-fill", "-1"),
        ("--coverage", "0"),
        ("--coverage", "1.5"),
        ("--coverage", "nan"),
        ("--min-count", "0"),
        ("--max-vocab", "0"),
        ("--workers", "-1"),
    ):
        out_dir = tmp_path / "bad-value"
        assert_usage_error(
            run_main(monkeypatch, capsys, "trim", "--model", unigram, *corpus, option, value, "--out", str(out_dir)),
            option,
        )
        assert not out_dir.exists(), option
    # --check file names are language codes, like --langs.
    wrong = tmp_path / "wrong-check"
    wrong.mkdir()
    (wrong / "notes.txt").write_text("hello\n", encoding="utf-8")
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "trim",
            "--model",
            unigram,
            *corpus,
            "--check",
            str(wrong),
            "--out",
            str(tmp_path / "bad-check"),
        ),
        "--check",
        "'notes'",
        "not an ISO 639",
    )
    assert not (tmp_path / "bad-check").exists()
    assert not list(tmp_path.glob(".tmp-*"))
    # The pooled counts alone still trim by the pooled rules (a warning says the per-language figures are absent).
    code, out, err = run_main(
        monkeypatch, capsys, "trim", "--model", unigram, "--data", str(pooled_only), "--out", str(tmp_path / "pooled")
    )
    assert code == 0 and "only its pooled counts are known" in err, err
