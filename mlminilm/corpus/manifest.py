"""`manifest.json` of a prepared data directory: what the shards hold and which tokenizer made them."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MANIFEST = "manifest.json"
TOKEN_COUNTS = "token_counts.npy"
FORMAT_VERSION = 1
SPECIAL_TOKENS = ("cls", "sep", "pad", "unk", "mask")
# Each shard's entry records the lowest and highest token id it holds, [lowest, highest], written by `prepare` as
# the shard is written. Reading checks it against the tokenizer's vocabulary without reading the shard; a manifest
# of an older prepare has none, and its shards are scanned once at open instead (PreparedData.open).
ID_RANGE = "id_range"


def tokenizer_identity(tokenizer) -> dict:
    """What makes two tokenizers interchangeable for prepared data: the same vocabulary and special ids.

    `vocab_sha256` hashes the sorted (token, id) pairs, so it ignores where the tokenizer was loaded from.
    """
    vocabulary = sorted(tokenizer.get_vocab().items())
    digest = hashlib.sha256(json.dumps(vocabulary, ensure_ascii=False).encode("utf-8")).hexdigest()
    identity = {
        "name_or_path": str(tokenizer.name_or_path),
        "class": type(tokenizer).__name__,
        "vocab_size": len(tokenizer),
        "vocab_sha256": digest,
    }
    for special in SPECIAL_TOKENS:
        identity[f"{special}_token_id"] = getattr(tokenizer, f"{special}_token_id")
    return identity


DIGEST_SAMPLE = 1 << 16  # bytes read from each end of a shard for its digest


def shard_digest(path: Path) -> str:
    """A cheap fingerprint of a shard: BLAKE2b of its size and its first and last 64 KiB. It catches a truncated,
    swapped or rewritten shard at open without reading gigabytes; it is no proof against deliberate tampering."""
    path = Path(path)
    size = path.stat().st_size
    digest = hashlib.blake2b(str(size).encode(), digest_size=16)
    with open(path, "rb") as f:
        digest.update(f.read(DIGEST_SAMPLE))
        if size > DIGEST_SAMPLE:
            f.seek(max(size - DIGEST_SAMPLE, DIGEST_SAMPLE))
            digest.update(f.read(DIGEST_SAMPLE))
    return digest.hexdigest()


def write_manifest(root: Path, manifest: dict) -> Path:
    """Write `root/manifest.json` atomically: readers see the old file, no file, or the whole new one."""
    path = root / MANIFEST
    tmp = path.with_name(f".{MANIFEST}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path
