"""The one reader of user JSON (`mlminilm.io.user_json`, issue 53): what Python's parser raises (RecursionError,
the int-digit limit's ValueError, JSONDecodeError, UnicodeDecodeError) and what it accepts but no later step can use
(Infinity, NaN, 1e400, a lone surrogate, nesting just under the recursion limit) are one DataError naming the file,
the line for JSON lines, and what is wrong. Hand-written inputs; the readers that route through it are tested in
the bad-input modules."""

from __future__ import annotations

import gzip
import math

import pytest

from helpers import assert_error, run_main
from mlminilm.errors import DataError
from mlminilm.io import user_json
from mlminilm.io.user_json import JsonError, load, loads


def refused(text, *needles: str, **kwargs) -> str:
    with pytest.raises(JsonError) as info:
        loads(text, "in.json", **kwargs)
    message = str(info.value)
    assert message.startswith("in.json: not JSON (") and message.endswith(")"), message
    for needle in needles:
        assert needle in message and needle in info.value.reason, message
    return message


def test_deep_nesting_is_refused_at_any_depth_past_the_limit():
    refused("[" * 100_000, "nested more than 100 levels deep")  # RecursionError in json.loads
    refused('{"a": ' * 100_000, "nested more than 100 levels deep")
    refused("[" * 101 + "]" * 101, "nested more than 100 levels deep")  # parses, but past the limit
    refused('{"a": [' + "[" * 500 + "]" * 500 + "]}", "nested more than 100 levels deep")
    deep = loads('{"a": ' * 99 + "[1]" + "}" * 99, "in.json")  # 100 levels: kept
    for _ in range(99):
        deep = deep["a"]
    assert deep == [1]


def test_integers_past_the_digit_limit_are_refused():
    refused("1" * 5000, "an integer of 5,000 digits, over the 4,300 allowed")
    refused('{"answer_start": -' + "9" * 4301 + "}", "an integer of 4,301 digits")
    assert loads("7" * 4300, "in.json") == int("7" * 4300)
    assert loads("[-12, 0, 3]", "in.json") == [-12, 0, 3]


def test_non_finite_numbers_are_refused_unless_asked_for():
    for text, needle in (
        ("Infinity", "Infinity is not a number JSON allows"),
        ("[-Infinity]", "-Infinity is not a number JSON allows"),
        ('{"f1": NaN}', "NaN is not a number JSON allows"),
        ("1e400", "the number 1e400 is too large for a float"),
        ("-" + "9" * 400 + ".5", "is too large for a float"),
    ):
        refused(text, needle)
    values = loads("[NaN, Infinity, -Infinity, 1e400, 2.5]", "in.json", finite=False)
    assert math.isnan(values[0]) and values[1:4] == [math.inf, -math.inf, math.inf] and values[4] == 2.5
    assert loads("[1e308, -0.0, 1E-400]", "in.json") == [1e308, 0.0, 0.0]


def test_text_that_is_not_utf8_or_not_characters_is_refused(tmp_path):
    refused(b'{"text": "caf\xe9"}', "not UTF-8 text: invalid continuation byte at byte 13")
    refused(b"\xff[1]", "not UTF-8 text: invalid start byte at byte 0")
    refused('{"q": "\\ud800"}', "lone UTF-16 surrogate")  # json.loads accepts it; encoding it later fails
    refused('{"\\udc00x": 1}', "lone UTF-16 surrogate")
    assert loads('["\\ud83d\\ude00", "\\\\ud800"]', "in.json") == ["\U0001f600", "\\ud800"]  # a pair; a backslash
    assert loads('"\\\\ud83d\\\\ude00"', "in.json") == "\\ud83d\\ude00"  # twelve characters of text
    refused('"\\\\ud83d\\ude00"', "lone UTF-16 surrogate")  # text "\ud83d", then a lone low half
    refused('"\\ud83d\\\\ude00"', "lone UTF-16 surrogate")  # a lone high half, then text
    refused('["\\ud83d", "\\ude00"]', "lone UTF-16 surrogate")  # two halves in two strings are no pair
    assert loads(b'\xef\xbb\xbf{"a": "\xc3\xa9"}', "in.json") == {"a": "é"}  # a byte-order mark is dropped
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(JsonError, match=r"bad\.json: not JSON \(not UTF-8 text: invalid start byte at byte 7\)$"):
        load(path)


def test_syntax_errors_name_the_place():
    refused('{"a": 1,\n "b": }', "Expecting value at line 2 column 7")
    refused("", "Expecting value at line 1 column 1")
    with pytest.raises(JsonError) as info:
        loads('{"a" 1}', "/data/corpus.jsonl", line=7)
    assert str(info.value) == "/data/corpus.jsonl:7: not a JSON line (Expecting ':' delimiter at column 6)"
    with pytest.raises(JsonError, match=r"^q\.jsonl:2: not a JSON line \(nested more than 100 levels deep\)$"):
        loads("[" * 100_000, "q.jsonl", line=2)
    assert isinstance(info.value, DataError)  # the CLI prints it as one Error: line


def test_load_reads_plain_gzip_and_says_why_a_file_cannot_be_read(tmp_path):
    (tmp_path / "a.json").write_text('{"a": [1, 2]}', encoding="utf-8")
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(b'{"a": [1, 2]}'))
    assert load(tmp_path / "a.json") == load(tmp_path / "a.json.gz") == {"a": [1, 2]}
    with pytest.raises(DataError, match=r"nowhere\.json: no such file$"):
        load(tmp_path / "nowhere.json")
    with pytest.raises(DataError, match="is a directory, not a file"):
        load(tmp_path)
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(b'{"a": [1, 2]}' * 100)[:30])
    with pytest.raises(DataError, match=r"cut\.json\.gz: cannot read .*not a whole gzip file"):
        load(tmp_path / "cut.json.gz")
    (tmp_path / "deep.json.gz").write_bytes(gzip.compress(b"[" * 100_000))
    with pytest.raises(JsonError, match=r"deep\.json\.gz: not JSON \(nested more than 100 levels deep\)"):
        load(tmp_path / "deep.json.gz")


def test_a_bool_is_no_integer():
    assert [user_json.is_integer(v) for v in (0, -3, 10**50, True, False, 1.0, "1", None)] == [
        True,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
    ]


def test_compare_says_a_metrics_file_is_damaged_in_one_line(tmp_path, monkeypatch, capsys):
    """compare's metrics.json: nesting 100,000 deep was a RecursionError traceback, 5,000 digits a ValueError."""
    for name, text in (("deep", "[" * 100_000), ("digits", '{"task": ' + "1" * 5000 + "}")):
        for folder in (tmp_path / f"{name}-a", tmp_path / f"{name}-b"):
            folder.mkdir()
            (folder / "metrics.json").write_text(text, encoding="utf-8")
        out = tmp_path / "cmp"
        reason = "nested more than 100 levels deep" if name == "deep" else "an integer of 5,000 digits"
        line = assert_error(
            run_main(
                monkeypatch,
                capsys,
                "compare",
                str(tmp_path / f"{name}-a"),
                str(tmp_path / f"{name}-b"),
                "--out",
                str(out),
            ),
            f"{tmp_path / f'{name}-a' / 'metrics.json'} is damaged: not valid JSON ({reason}",
            "run the evaluation again",
        )
        assert line.count("is damaged") == 2  # both reports, in the one line
        assert not out.exists()
