"""Per-language shard files: raw little-endian int32 arrays of shape [sequences, seq_len]."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mlminilm.corpus.manifest import ID_RANGE
from mlminilm.corpus.packing import DTYPE

SHARDS_DIR = "shards"


def shard_name(lang: str, index: int) -> str:
    return f"{SHARDS_DIR}/{lang}-{index:05d}.bin"


class ShardWriter:
    """Appends sequences of one language to `root/shards/<lang>-NNNNN.bin`, starting a new file every
    `shard_sequences` sequences. Files are fsynced on close, before any manifest can name them."""

    def __init__(self, root: Path, lang: str, shard_sequences: int):
        self.root, self.lang, self.shard_sequences = root, lang, shard_sequences
        # [{"file": "shards/de-00000.bin", "sequences": n, "id_range": [lowest, highest], "bytes": b, "digest": h}]
        self.shards: list[dict] = []
        self._file = None
        (root / SHARDS_DIR).mkdir(parents=True, exist_ok=True)

    def write(self, sequences: np.ndarray) -> None:
        start = 0
        while start < len(sequences):
            if self._file is None or self.shards[-1]["sequences"] == self.shard_sequences:
                self._open_next()
            room = self.shard_sequences - self.shards[-1]["sequences"]
            part = sequences[start : start + room]
            self._file.write(np.ascontiguousarray(part, DTYPE).tobytes())
            self.shards[-1]["sequences"] += len(part)
            self._record_ids(part)
            start += len(part)

    def _record_ids(self, part: np.ndarray) -> None:
        """Widen the current shard's id range (ID_RANGE in the manifest, checked against the vocabulary at open)."""
        if part.size == 0:
            return
        lowest, highest = int(part.min()), int(part.max())
        shard = self.shards[-1]
        if ID_RANGE in shard:
            lowest, highest = min(lowest, shard[ID_RANGE][0]), max(highest, shard[ID_RANGE][1])
        shard[ID_RANGE] = [lowest, highest]

    def close(self) -> list[dict]:
        """Close the last file; returns the shards, each with its size in bytes and digest (verified at open)."""
        from mlminilm.corpus.manifest import shard_digest

        self._close_current()
        for shard in self.shards:
            path = self.root / shard["file"]
            shard["bytes"] = path.stat().st_size
            shard["digest"] = shard_digest(path)
        return self.shards

    def _open_next(self) -> None:
        self._close_current()
        name = shard_name(self.lang, len(self.shards))
        self._file = open(self.root / name, "wb")
        self.shards.append({"file": name, "sequences": 0})

    def _close_current(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
