"""Tokenized documents -> fixed-length sequences.

A language's token stream is its documents' tokens, each document followed by the separator id. The stream
is cut into chunks of seq_len - 2 tokens, each wrapped as [cls] chunk [sep]; only the last sequence of a
language is shorter, padded to seq_len. The packer holds at most one partial chunk, whatever the corpus size.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

DTYPE = np.dtype("<i4")  # XLM-R ids go up to 250,001: they do not fit 16 bits


def document_stream(token_ids: list[list[int]], separator: int) -> np.ndarray:
    """The documents' tokens, each followed by `separator`, as one int32 array."""
    total = sum(len(ids) for ids in token_ids) + len(token_ids)
    return np.fromiter(chain.from_iterable(chain(ids, (separator,)) for ids in token_ids), DTYPE, count=total)


class SequencePacker:
    def __init__(self, seq_len: int, cls_id: int, sep_id: int, pad_id: int):
        self.seq_len = seq_len
        self.cls_id, self.sep_id, self.pad_id = cls_id, sep_id, pad_id
        self._pending = np.empty(0, DTYPE)

    def pack(self, stream: np.ndarray) -> np.ndarray:
        """Complete sequences [n, seq_len] from the pending tokens plus `stream`; keeps the remainder."""
        tokens = np.concatenate([self._pending, stream])
        chunk = self.seq_len - 2
        full = len(tokens) // chunk * chunk
        self._pending = tokens[full:].copy()
        return self._wrap(tokens[:full].reshape(-1, chunk))

    def finish(self) -> tuple[np.ndarray, int]:
        """The padded last sequence ([0 or 1, seq_len]) and its number of pad tokens; resets the packer."""
        rest, self._pending = self._pending, np.empty(0, DTYPE)
        if not len(rest):
            return np.empty((0, self.seq_len), DTYPE), 0
        last = np.full((1, self.seq_len), self.pad_id, DTYPE)
        last[0, 0] = self.cls_id
        last[0, 1 : 1 + len(rest)] = rest
        last[0, 1 + len(rest)] = self.sep_id
        return last, self.seq_len - 2 - len(rest)

    def _wrap(self, chunks: np.ndarray) -> np.ndarray:
        sequences = np.empty((len(chunks), self.seq_len), DTYPE)
        sequences[:, 0] = self.cls_id
        sequences[:, 1:-1] = chunks
        sequences[:, -1] = self.sep_id
        return sequences
