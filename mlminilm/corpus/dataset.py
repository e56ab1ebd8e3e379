"""Reading `prepare` output: memory-mapped shards, sequences addressed by (language, index)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlminilm.corpus.manifest import FORMAT_VERSION, MANIFEST, shard_digest
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
        """Read and check `path/manifest.json` and every shard it names (existence, size, digest), all problems at
        once. The manifest is not trusted: its paths must stay inside `path`, its values must have their types."""
        root = Path(path)
        manifest = _read_manifest(root)
        problems = []
        for lang, info in sorted(manifest["languages"].items()):
            for shard in info["shards"]:
                file = root / shard["file"]
                expected = shard["sequences"] * manifest["seq_len"] * DTYPE.itemsize
                if not file.is_file():
                    problems.append(f"shard {shard['file']} is missing")
                    continue
                size = file.stat().st_size
                if size != expected or shard.get("bytes", size) != size:
                    problems.append(f"shard {shard['file']} has {size} bytes, expected {expected}")
                elif "digest" in shard and shard_digest(file) != shard["digest"]:
                    problems.append(f"shard {shard['file']} does not match its digest (changed since prepare)")
        if not (root / manifest["token_counts"]).is_file():
            problems.append(f"{manifest['token_counts']} is missing")
        if problems:
            raise DataError(f"{root}: {'; '.join(problems)}; run `mlminilm prepare` again")
        return cls(root, manifest)

    def highest_token_id(self) -> int | None:
        """The largest token id stored in the shards (from token_counts.npy), or None when it cannot be read."""
        try:
            counts = self.token_counts()
        except (OSError, ValueError):
            return None
        used = np.flatnonzero(counts)
        return int(used[-1]) if len(used) else None

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

    def __getstate__(self) -> dict:
        """Pickled (to a DataLoader worker) without the open maps: a pickled np.memmap carries its whole data;
        each process maps the shards itself on first use."""
        return {**self.__dict__, "_maps": {}}

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
    problems = _manifest_problems(root, manifest)
    if problems:
        raise DataError(f"{path} is not a valid manifest ({'; '.join(problems[:5])}"
                        f"{f'; and {len(problems) - 5} more' if len(problems) > 5 else ''}); run `mlminilm prepare` again")
    return manifest


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _inside(root: Path, relative) -> bool:
    """Whether `relative` is a relative path that stays inside `root` (no absolute path, no way out by ..)."""
    if not isinstance(relative, str) or not relative or Path(relative).is_absolute():
        return False
    base = root.resolve()
    return (base / relative).resolve().is_relative_to(base)


def _manifest_problems(root: Path, manifest: dict) -> list[str]:
    """Type and path checks of a manifest: what PreparedData relies on."""
    p = []
    if not _is_int(manifest["seq_len"]) or manifest["seq_len"] < 3:
        p.append(f"seq_len must be an integer of at least 3 (got {manifest['seq_len']!r})")
    tokenizer = manifest["tokenizer"]
    if not isinstance(tokenizer, dict):
        p.append("tokenizer must be an object")
    else:
        if not _is_int(tokenizer.get("vocab_size")) or tokenizer["vocab_size"] < 1:
            p.append(f"tokenizer.vocab_size must be a positive integer (got {tokenizer.get('vocab_size')!r})")
        pad = tokenizer.get("pad_token_id")
        if pad is not None and not _is_int(pad):
            p.append(f"tokenizer.pad_token_id must be an integer or null (got {pad!r})")
    if not _inside(root, manifest["token_counts"]):
        p.append(f"token_counts must be a file inside the data directory (got {manifest['token_counts']!r})")
    languages = manifest["languages"]
    if not isinstance(languages, dict):
        return p + ["languages must be an object of language -> shards"]
    for lang, info in languages.items():
        shards = info.get("shards") if isinstance(info, dict) else None
        if not isinstance(shards, list):
            p.append(f"languages.{lang}.shards must be a list")
            continue
        for i, shard in enumerate(shards):
            where = f"languages.{lang}.shards[{i}]"
            if not isinstance(shard, dict):
                p.append(f"{where} must be an object")
                continue
            if not _inside(root, shard.get("file")):
                p.append(f"{where}.file must be a file inside the data directory (got {shard.get('file')!r})")
            if not _is_int(shard.get("sequences")) or shard["sequences"] < 0:
                p.append(f"{where}.sequences must be a non-negative integer (got {shard.get('sequences')!r})")
            if "bytes" in shard and not _is_int(shard["bytes"]):
                p.append(f"{where}.bytes must be an integer (got {shard['bytes']!r})")
            if "digest" in shard and not isinstance(shard["digest"], str):
                p.append(f"{where}.digest must be a string (got {shard['digest']!r})")
    return p
