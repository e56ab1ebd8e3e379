"""Opening task data files: plain or gzip, UTF-8 (a byte-order mark is dropped), with one-line errors."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import TextIO

from mlminilm.errors import DataError


def open_text(path: Path) -> TextIO:
    """Open `path` for reading as text; `.gz` files are decompressed on the fly."""
    if path.is_dir():
        raise DataError(f"{path} is a directory, not a file")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    # newline="" keeps a stray "\r" inside a field from splitting the line; readers strip "\r\n" themselves.
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def read_text(path: Path) -> str:
    """The whole decoded file; undecodable bytes become a DataError naming the file."""
    try:
        with open_text(path) as handle:
            return handle.read()
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError; a damaged stream, zlib.error
        damaged = path.suffix == ".gz" and isinstance(exc, (EOFError, zlib.error, gzip.BadGzipFile))
        advice = " (not a whole gzip file: download or compress it again)" if damaged else ""
        raise DataError(f"{path}: cannot read ({exc}){advice}") from None
