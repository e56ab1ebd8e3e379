"""Reading `prepare` output: memory-mapped shards, sequences addressed by (language, index)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlminilm import logging as mlog
from mlminilm.corpus.manifest import FORMAT_VERSION, ID_RANGE, MANIFEST, shard_digest
from mlminilm.corpus.packing import DTYPE
from mlminilm.errors import DataError

log = mlog.get(__name__)
SCAN_CHUNK = 1 << 22  # token ids read at a time when a shard's id range has to be found by reading it


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
        # Each shard's (lowest, highest) token id: from the manifest, or found by `open` for an older manifest.
        self._id_ranges: dict[str, tuple[int, int]] = {
            shard["file"]: tuple(shard[ID_RANGE])
            for shards in self._shards.values()
            for shard in shards
            if ID_RANGE in shard
        }
        self._vocab_size: int = self.tokenizer["vocab_size"]

    @classmethod
    def open(cls, path: str | Path) -> PreparedData:
        """Read and check `path/manifest.json` and every shard it names (existence, size, digest, token ids within
        the tokenizer's vocabulary), all problems at once. The manifest is not trusted: its paths must stay inside
        `path`, its values must have their types. The ids are checked from each shard's recorded range; the shards
        of a manifest without ranges (an older prepare) are read once to find them."""
        root = Path(path)
        manifest = _read_manifest(root)
        vocab = manifest["tokenizer"]["vocab_size"]
        problems, scanned, outside = [], {}, []
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
                    continue
                if "digest" in shard and shard_digest(file) != shard["digest"]:
                    problems.append(f"shard {shard['file']} does not match its digest (changed since prepare)")
                    continue
                if ID_RANGE not in shard:
                    if not scanned:
                        log.info(
                            "%s: the manifest records no token id range (written by an older prepare): reading "
                            "the shards to check their ids; prepare again to record it",
                            root,
                        )
                    scanned[shard["file"]] = _scan_ids(file)
                ids = shard.get(ID_RANGE) or scanned[shard["file"]]
                if ids is not None and (ids[0] < 0 or ids[1] >= vocab):
                    outside.append(f"{shard['file']} ({ids[0]}..{ids[1]})")
        if outside:
            problems.append(
                f"token ids outside the tokenizer's 0..{vocab - 1} in shard(s) {', '.join(outside[:3])}"
                f"{f' and {len(outside) - 3} more' if len(outside) > 3 else ''}"
            )
        if not (root / manifest["token_counts"]).is_file():
            problems.append(f"{manifest['token_counts']} is missing")
        if problems:
            raise DataError(f"{root}: {'; '.join(problems)}; run `mlminilm prepare` again")
        data = cls(root, manifest)
        data._id_ranges.update({file: ids for file, ids in scanned.items() if ids is not None})
        return data

    def token_id_range(self) -> tuple[int, int] | None:
        """The lowest and highest token id stored in the shards, or None when no shard's range is known."""
        if not self._id_ranges:
            return None
        return min(lo for lo, _ in self._id_ranges.values()), max(hi for _, hi in self._id_ranges.values())

    def highest_token_id(self) -> int | None:
        """The largest token id stored in the shards (from their id ranges, else token_counts.npy), or None when
        it cannot be read."""
        known = self.token_id_range()
        if known is not None and len(self._id_ranges) == sum(len(s) for s in self._shards.values()):
            return known[1]
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
        sequence = self._read(lang, index)
        self._check_ids(sequence[None], [(lang, index)])
        return sequence

    def batch(self, pairs: list[tuple[str, int]]) -> np.ndarray:
        """int32 [len(pairs), seq_len]: the sequences named by (language, index) pairs, in order."""
        out = np.empty((len(pairs), self.seq_len), np.int32)
        for row, (lang, index) in enumerate(pairs):
            out[row] = self._read(lang, index)
        self._check_ids(out, pairs)
        return out

    def _read(self, lang: str, index: int) -> np.ndarray:
        count = self.num_sequences(lang)
        if not 0 <= index < count:
            raise IndexError(f"sequence {index} out of range for {lang!r} ({count} sequences)")
        shard = int(np.searchsorted(self._starts[lang], index, side="right")) - 1
        return np.array(self._map(lang, shard)[index - self._starts[lang][shard]])

    def _check_ids(self, rows: np.ndarray, pairs: list[tuple[str, int]]) -> None:
        """Every id read must index the vocabulary. A shard changed where its digest does not look (between its
        first and last 64 KiB) is one line here, not an index error in the embedding (or a CUDA assert) later."""
        if rows.size == 0 or (rows.min() >= 0 and rows.max() < self._vocab_size):
            return
        row = int(np.flatnonzero((rows < 0).any(axis=1) | (rows >= self._vocab_size).any(axis=1))[0])
        lang, index = pairs[row]
        shard = int(np.searchsorted(self._starts[lang], index, side="right")) - 1
        raise DataError(
            f"{self.root}: sequence {index} of {lang} ({self._shards[lang][shard]['file']}) holds token ids "
            f"{int(rows[row].min())}..{int(rows[row].max())}, outside the tokenizer's 0..{self._vocab_size - 1} "
            "(the shard changed since prepare); run `mlminilm prepare` again"
        )

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


def _scan_ids(file: Path) -> tuple[int, int] | None:
    """The lowest and highest id in a shard, read in chunks (memory stays flat); None for an empty shard."""
    ids = np.memmap(file, dtype=DTYPE, mode="r") if file.stat().st_size else np.empty(0, DTYPE)
    lowest = highest = None
    for start in range(0, len(ids), SCAN_CHUNK):
        chunk = ids[start : start + SCAN_CHUNK]
        lo, hi = int(chunk.min()), int(chunk.max())
        lowest = lo if lowest is None else min(lowest, lo)
        highest = hi if highest is None else max(highest, hi)
    return None if lowest is None else (lowest, highest)


def _read_manifest(root: Path) -> dict:
    path = root / MANIFEST
    if not path.is_file():
        raise DataError(
            f"{path} not found: {root} is not prepared data, or `mlminilm prepare` did not finish; "
            f"make it with `mlminilm prepare --teacher TEACHER --input TEXT_DIR --out {root}`"
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
        raise DataError(
            f"{path} is not a valid manifest ({'; '.join(problems[:5])}"
            f"{f'; and {len(problems) - 5} more' if len(problems) > 5 else ''}); run `mlminilm prepare` again"
        )
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
            ids = shard.get(ID_RANGE, [0, 0])
            if not (isinstance(ids, list) and len(ids) == 2 and all(map(_is_int, ids)) and ids[0] <= ids[1]):
                p.append(f"{where}.{ID_RANGE} must be [lowest, highest], two integers (got {ids!r})")
    return p
