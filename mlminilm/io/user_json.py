"""The one reader of JSON a user gives (SQuAD-format QA files, BEIR and MultiNLI JSON lines, prediction files,
`prepare`'s JSON lines, the metrics.json that `compare` reads): every way a document can fail to be usable JSON
ends in one `DataError` naming the file (and the line, for JSON lines) and what is wrong, never a traceback.

Python's parser raises more than JSONDecodeError: RecursionError at nesting about 1,000 levels deep, ValueError at
an integer of more than 4,300 digits, UnicodeDecodeError at bytes that are not UTF-8. It also accepts what a later
step cannot use: `NaN`, `Infinity` and numbers too large for a float (which become `inf`), escapes of a lone UTF-16
surrogate (`"\\ud800"`: a string no encoder writes back, so a prediction file or a tokenizer fails on it later), and
nesting deep enough that the first walk over it (`str`, `json.dumps`) runs out of stack. All of these are refused
here, with the same words whichever command reads the file.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from pathlib import Path
from typing import Any

from mlminilm.errors import DataError

__all__ = ["JsonError", "MAX_DEPTH", "MAX_INT_DIGITS", "is_integer", "load", "loads"]

# No file a command reads nests deeper than about 10 levels (SQuAD: 9). Parsing stops at Python's recursion limit
# (about 1,000), and a document just under it still breaks the first recursive walk over it.
MAX_DEPTH = 100
# Python's own limit on converting digits to an int (sys.int_info.default_max_str_digits), held on every version.
MAX_INT_DIGITS = 4300
# Where a string may hold a lone surrogate, found in the text (a walk over every parsed string costs as much as the
# parse): an escaped high surrogate without an escaped low one after it, a low one without a high one before it, or
# an escaped backslash before "uD8.." (the JSON "\\ud800" is six characters of text, which fools the first two).
# The parsed strings then settle it: the parser joins a pair into one character, so a surrogate left is lone.
_MAYBE_LONE_SURROGATE = re.compile(
    r"\\(?:u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|u[dD][c-fC-F][0-9a-fA-F]{2}(?<!\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|\\u[dD][89a-fA-F])"
)
_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonError(DataError):
    """User JSON that cannot be read. `reason` says what is wrong in words, without the file or line, for a reader
    whose messages frame it in their own way."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class _Refused(ValueError):
    """A number or constant the hooks below refuse while the parser runs (their reason)."""


def is_integer(value: Any) -> bool:
    """An integer as JSON means it: `true` and `false` are bools, which Python counts as ints."""
    return isinstance(value, int) and not isinstance(value, bool)


def loads(text: str | bytes, source: str | Path, *, line: int | None = None, finite: bool = True) -> Any:
    """The value `text` holds. A DataError (`JsonError`) otherwise: `{source}: not JSON (reason)`, or for line
    `line` of a JSON-lines file `{source}:{line}: not a JSON line (reason)`. `finite=False` accepts `NaN` and
    `Infinity` (Python's `json.dumps` writes them: the project's own reports may hold them)."""
    try:
        return _parse(text, finite, line is not None)
    except _Refused as exc:
        reason = str(exc)
    if line is None:
        raise JsonError(f"{source}: not JSON ({reason})", reason) from None
    raise JsonError(f"{source}:{line}: not a JSON line ({reason})", reason) from None


def load(path: str | Path, *, finite: bool = True) -> Any:
    """The value the JSON file at `path` holds (gzip when its name ends in `.gz`; UTF-8, a byte-order mark
    dropped); a DataError naming the file for anything that keeps it from being read or parsed."""
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path} is a directory, not a file")
    try:
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError; a damaged stream, zlib.error
        damaged = path.name.endswith(".gz") and not isinstance(exc, PermissionError)
        advice = " (not a whole gzip file: download or compress it again)" if damaged else ""
        raise DataError(f"{path}: cannot read ({exc}){advice}") from None
    return loads(data, path, finite=finite)


def _parse(text: str | bytes, finite: bool, one_line: bool) -> Any:
    """json.loads with every failure turned into `_Refused` and the checks it does not make."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise _Refused(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    hooks: dict[str, Any] = {"parse_int": _parse_int}
    if finite:
        hooks.update(parse_float=_parse_float, parse_constant=_refuse_constant)
    try:
        value = json.loads(text, **hooks)
    except json.JSONDecodeError as exc:
        where = f"column {exc.colno}" if one_line else f"line {exc.lineno} column {exc.colno}"
        raise _Refused(f"{exc.msg} at {where}") from None
    except RecursionError:
        raise _Refused(f"nested more than {MAX_DEPTH} levels deep") from None
    except (ValueError, OverflowError) as exc:  # a hook's own refusal, or whatever else Python refuses in a number
        raise _Refused(str(exc) if isinstance(exc, _Refused) else f"a number Python cannot read: {exc}") from None
    if isinstance(value, (dict, list)) and _deeper_than(value, MAX_DEPTH):
        raise _Refused(f"nested more than {MAX_DEPTH} levels deep")
    if _MAYBE_LONE_SURROGATE.search(text) and _lone_surrogate(value):
        raise _Refused("a \\u escape of a lone UTF-16 surrogate (half of a pair), which is no character")
    return value


def _parse_int(digits: str) -> int:
    count = len(digits.lstrip("-"))
    if count > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {count:,} digits, over the {MAX_INT_DIGITS:,} allowed")
    return int(digits)


def _parse_float(digits: str) -> float:
    value = float(digits)
    if math.isinf(value):
        shown = digits if len(digits) <= 20 else f"{digits[:20]}... ({len(digits):,} characters)"
        raise _Refused(f"the number {shown} is too large for a float")
    return value


def _refuse_constant(name: str) -> float:
    raise _Refused(f"{name} is not a number JSON allows")


def _deeper_than(value: dict | list, limit: int) -> bool:
    """Whether containers nest more than `limit` levels, walked a level at a time (no recursion)."""
    level, depth = [value], 1
    while level:
        if depth > limit:
            return True
        inner = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, (dict, list)):
                    inner.append(child)
        level, depth = inner, depth + 1
    return False


def _lone_surrogate(value: Any) -> bool:
    """Whether a string (or key) anywhere in `value` holds a surrogate code point (a lone half)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False
