"""Lines of user text read with a bound: a line longer than the bound is cut while it is read, so a file holding one
line of hundreds of megabytes never becomes one string of that size (nor a tokenizer's input, which allocates
several times more and aborted the process where Python could not catch it)."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


def open_lines(path: Path, encoding: str = "utf-8") -> TextIO:
    """`path` as text (gzip by its name) in which `\\n` alone ends a line: a stray `\\r` or U+001D inside a
    sentence (XNLI's Greek has some) stays in it, as when the whole text is split at `\\n`."""
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding=encoding, newline="\n")
    return open(path, encoding=encoding, newline="\n")


def bounded_lines(handle: TextIO, limit: int | None) -> Iterator[tuple[str, bool]]:
    """Each line of `handle` (opened by `open_lines`) without its line break, and whether it was cut to `limit`
    characters; the rest of a cut line is read and dropped `limit` characters at a time. None: no bound."""
    if limit is None:
        for line in handle:
            yield line.rstrip("\r\n"), False
        return
    while True:
        line = handle.readline(limit + 1)
        if not line:
            return
        if line.endswith("\n") or len(line) <= limit:
            yield line.rstrip("\r\n"), False
            continue
        rest, cut = line[limit:], False
        while True:
            cut = cut or bool(rest.rstrip("\r\n"))  # a line of exactly `limit` before its `\r\n` is whole
            if rest.endswith("\n"):
                break
            rest = handle.readline(limit)
            if not rest:
                break
        yield line[:limit], cut
