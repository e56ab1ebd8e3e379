"""Reading `prepare` output: memory-mapped shards, sequences addressed by (language, index)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlminilm.corpus.manifest import FORMAT_VERSION, MANIFEST
from mlminilm.corpus.packing import DTYPE
from mlminilm.errors import DataError


def sampling_probabilities(counts: dict[str, int | float], alpha: float) -> dict[str, float]:
    """XLM-R's language sampling: q_i = p_i^alpha / sum_j p_j^alpha with p_i = counts_i / sum(counts).

    alpha < 1 flattens the distribution towards low-resource languages (alpha = 0: uniform; 1: proportional).
    """
    if alpha < 0:
        raise ValueError(f"alpha must be non-negative (got {alpha})")
    total = float(sum(counts.values()))
    if total <= 0 or any(c < 0 for c in counts.values()):
        raise ValueError(f"counts must be non-negative with a positive sum (got {counts})")
    weights = {lang: (c / total) ** alpha if c > 0 else 0.0 for lang, c in counts.items()}
    norm = sum(weights.values())
    return {lang: w / norm for lang, w in weights.items()}


class PreparedData:
    """A validated `prepare` output directory. Shards are memory-mapped on first use, never read whole."""

    def __init__(self, root: Path, manifest: dict):
        self.root = root
        self.manifest = manifest
        self.seq_len: int = manifest["seq_len"]
        self.tokenizer: dict = manifest["tokenizer"]
        self.languages: list[str] = sorted(manifest["languages"])
        self._shards = {lang: manifest["languages"][lang]["shards"] for lang in self.languages}
        self._counts = {lang: sum(s["sequences"] for s in shards) for lang, shards in self._shards.items()}
        # Per language: the global index of each shard's first sequence, to find a sequence's shard.
        self._starts = {
            lang: np.cumsum([0] + [s["sequences"] for s in shards])[:-1] for lang, shards in self._shards.items()
        }
        self._maps: dict[str, np.memmap] = {}

    @classmethod
    def open(cls, path: str | Path) -> PreparedData:
        root = Path(path)
        manifest = _read_manifest(root)
        problems = []
        for lang, info in sorted(manifest["languages"].items()):
            for shard in info["shards"]:
                file = root / shard["file"]
                expected = shard["sequences"] * manifest["seq_len"] * DTYPE.itemsize
                if not file.is_file():
                    problems.append(f"shard {shard['file']} is missing")
                elif file.stat().st_size != expected:
                    problems.append(f"shard {shard['file']} has {file.stat().st_size} bytes, expected {expected}")
        if not (root / manifest["token_counts"]).is_file():
            problems.append(f"{manifest['token_counts']} is missing")
        if problems:
            raise DataError(f"{root}: {'; '.join(problems)}; run `mlminilm prepare` again")
        return cls(root, manifest)

    def num_sequences(self, lang: str) -> int:
        try:
            return self._counts[lang]
        except KeyError:
            raise DataError(f"{self.root} holds no language {lang!r}; it has: {', '.join(self.languages)}") from None

    def get(self, lang: str, index: int) -> np.ndarray:
        """Sequence `index` of `lang`: int32 [seq_len], a copy (not a view of the memory map)."""
        count = self.num_sequences(lang)
        if not 0 <= index < count:
            raise IndexError(f"sequence {index} out of range for {lang!r} ({count} sequences)")
        shard = int(np.searchsorted(self._starts[lang], index, side="right")) - 1
        return np.array(self._map(lang, shard)[index - self._starts[lang][shard]])

    def batch(self, pairs: list[tuple[str, int]]) -> np.ndarray:
        """int32 [len(pairs), seq_len]: the sequences named by (language, index) pairs, in order."""
        out = np.empty((len(pairs), self.seq_len), np.int32)
        for row, (lang, index) in enumerate(pairs):
            out[row] = self.get(lang, index)
        return out

    def language_shares(self) -> dict[str, float]:
        """p_i: each language's share of all sequences."""
        counts = {lang: self.num_sequences(lang) for lang in self.languages}
        total = sum(counts.values())
        return {lang: c / total for lang, c in counts.items()}

    def token_counts(self) -> np.ndarray:
        """int64 [vocab_size]: how often each id is stored in the shards (wrappers and padding included)."""
        return np.load(self.root / self.manifest["token_counts"])

    def _map(self, lang: str, shard: int) -> np.memmap:
        key = f"{lang}/{shard}"
        if key not in self._maps:
            info = self._shards[lang][shard]
            self._maps[key] = np.memmap(
                self.root / info["file"], dtype=DTYPE, mode="r", shape=(info["sequences"], self.seq_len)
            )
        return self._maps[key]


def _read_manifest(root: Path) -> dict:
    path = root / MANIFEST
    if not path.is_file():
        raise DataError(
            f"{path} not found: {root} is not prepared data, or `mlminilm prepare` did not finish; "
            f"run `mlminilm prepare --out {root}`"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path} cannot be read ({exc}); run `mlminilm prepare` again") from None
    if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
        found = manifest.get("format_version") if isinstance(manifest, dict) else None
        raise DataError(
            f"{path} has format version {found}, this mlminilm reads {FORMAT_VERSION}; run `mlminilm prepare` again"
        )
    missing = [k for k in ("seq_len", "tokenizer", "languages", "token_counts") if k not in manifest]
    if missing or manifest.get("dtype") != "int32":
        raise DataError(f"{path} is incomplete or not int32 (missing: {missing}); run `mlminilm prepare` again")
    return manifest
