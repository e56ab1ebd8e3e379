"""`prepare`: multilingual text -> per-language shards of fixed-length token sequences, streaming.

Output directory:
  shards/<lang>-NNNNN.bin  little-endian int32, [sequences, seq_len], packed as described in `packing`
  token_counts.npy         int64 [len(tokenizer)]: how often each id is stored in the shards, counting every
                           stored id (each sequence's cls/sep wrapper and the padding included), so
                           token_counts.sum() == total sequences * seq_len
  manifest.json            written last and atomically: it exists only when every shard it names is complete
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path

import numpy as np

from mlminilm import logging as mlog
from mlminilm.config import PrepareConfig
from mlminilm.corpus import readers
from mlminilm.corpus.manifest import FORMAT_VERSION, MANIFEST, TOKEN_COUNTS, tokenizer_identity, write_manifest
from mlminilm.corpus.packing import SequencePacker
from mlminilm.corpus.pretokenised import TextShape
from mlminilm.corpus.shards import SHARDS_DIR, ShardWriter
from mlminilm.corpus.workers import TokenizerPool
from mlminilm.errors import ConfigError, MlminilmError, Problems
from mlminilm.version import __version__

log = mlog.get(__name__)

BATCH_DOCUMENTS = 1000  # documents per tokenizer call: large enough to amortise the call, small in memory
PACKING = (
    "each document's tokens followed by sep_token_id; the stream cut into chunks of seq_len - 2 wrapped as "
    "cls_token_id chunk sep_token_id; only a language's last sequence is shorter, padded with pad_token_id"
)


@dataclass
class LanguageStats:
    documents: int = 0
    tokens: int = 0  # content tokens, document separators included
    sequences: int = 0
    padded_tokens: int = 0
    shards: list[dict] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    pretokenised: str | None = None  # why the text looks word-split (see `pretokenised`), or None


@dataclass
class PrepareResult:
    """What `run` did; `to_dict` is the CLI's --json document."""

    out: Path
    seq_len: int
    languages: dict[str, LanguageStats]
    elapsed_s: float

    @property
    def documents(self) -> int:
        return sum(s.documents for s in self.languages.values())

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.languages.values())

    @property
    def sequences(self) -> int:
        return sum(s.sequences for s in self.languages.values())

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "out": str(self.out),
            "seq_len": self.seq_len,
            "documents": self.documents,
            "tokens": self.tokens,
            "sequences": self.sequences,
            "elapsed_s": round(self.elapsed_s, 3),
            "tokens_per_s": round(self.tokens_per_s, 1),
            "languages": {
                lang: {k: v for k, v in asdict(s).items() if k not in ("shards", "source")} | {"shards": len(s.shards)}
                for lang, s in self.languages.items()
            },
        }


def run(config: PrepareConfig) -> PrepareResult:
    """Validate everything, tokenize and pack every language into a new directory beside `config.out`, write the
    manifest last, then swap it in: data already at `config.out` stays whole until the new data is complete."""
    from mlminilm.io.outputs import Claim

    out = Path(config.out)
    # The output protocol (mlminilm.io.outputs): lock first, then check and claim --out, build beside, swap in.
    with Claim(out, "prepare", "prepared data", legacy=(MANIFEST, SHARDS_DIR, TOKEN_COUNTS)) as claim:
        sources, tokenizer = _validate(config, claim)
        with claim.staging() as work:
            start = time.perf_counter()
            stats, token_counts = _write_shards(config, sources, tokenizer, work)
            elapsed = time.perf_counter() - start
            np.save(work / TOKEN_COUNTS, token_counts)
            write_manifest(work, _manifest(config, tokenizer, stats))
    return PrepareResult(out, config.seq_len, stats, elapsed)


def _validate(config: PrepareConfig, claim):
    """Every cheap check, before anything is written; all problems in one error."""
    problems = Problems()
    attempt = problems.attempt

    # LANG=PATH inputs name their file after the '='; hub datasets and ids are not on disk and are skipped.
    paths = [i.split("=", 1)[1] if "=" in i and not Path(i).exists() else i for i in config.inputs]
    inputs = [("--teacher", config.teacher), *(("--input", path) for path in paths)]
    attempt(lambda: _check_out(claim, config.overwrite, inputs))
    sources = attempt(lambda: readers.resolve_inputs(config.inputs, config.langs, config.text_field))
    tokenizer = attempt(lambda: _load_tokenizer(config.teacher))
    problems.raise_any()
    return sources, tokenizer


def _check_out(claim, overwrite: bool, inputs: list) -> None:
    from mlminilm.io.outputs import refuse_overlap

    out = claim.given
    if claim.out.exists() and not claim.out.is_dir():
        raise ConfigError(f"--out {out} is a file; name a directory")
    refuse_overlap(claim.out, inputs)
    claim.check(
        overwrite, f"--out {out} is not empty; pass --overwrite to replace its prepared data, or choose another"
    )


def _load_tokenizer(teacher: str):
    from transformers import AutoTokenizer

    from mlminilm.models.loading import resolve_model

    try:
        tokenizer = AutoTokenizer.from_pretrained(resolve_model(teacher))
    except MlminilmError:
        raise
    except Exception as exc:  # noqa: BLE001 - missing files, offline Hub, bad name: one remedy
        from mlminilm.io import hub

        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        where = (
            "check the path"
            if Path(teacher).exists()
            else f"or a hub id with the network on ({hub.unreachable_hint()})"
        )
        raise ConfigError(
            f"cannot load a tokenizer from --teacher {teacher} ({reason}); pass a local model or tokenizer "
            f"directory, {where}"
        ) from None
    missing = [name for name in ("cls_token_id", "sep_token_id", "pad_token_id") if getattr(tokenizer, name) is None]
    if missing:
        raise ConfigError(f"the tokenizer of --teacher {teacher} has no {', '.join(missing)}; packing needs all three")
    return tokenizer


def _available_cores() -> int:
    # The cores this process may run on, which in a container can be fewer than the machine has.
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _batches(
    sources: dict[str, list], config: PrepareConfig, stats: dict[str, LanguageStats]
) -> Iterator[tuple[str, list[str]]]:
    for lang, lang_sources in sources.items():
        documents = islice(readers.documents(lang_sources, config.text_field), config.max_docs)
        shape: TextShape | None = TextShape()
        while batch := list(islice(documents, BATCH_DOCUMENTS)):
            if shape is not None:
                for text in batch:
                    shape.add(text)  # a no-op once its sample is full
                if shape.full:  # judge now, not hours later when the language is done
                    _judge_shape(lang, shape, stats[lang])
                    shape = None
            yield lang, batch
        if shape is not None:
            _judge_shape(lang, shape, stats[lang])


def _judge_shape(lang: str, shape: TextShape, stats: LanguageStats) -> None:
    stats.pretokenised = shape.verdict()
    if stats.pretokenised:
        log.warning(
            "%s: the text looks pre-tokenised (%s); distil on running text (e.g. XNLI sentences, MLQA or TyDiQA "
            "contexts), not word-split fragments such as wikiann",
            lang,
            stats.pretokenised,
        )


class _PackedWriter:
    """Packs and writes one language at a time, in the order the tokenized batches arrive."""

    def __init__(self, work: Path, config: PrepareConfig, tokenizer, stats: dict[str, LanguageStats]):
        self.work, self.shard_sequences, self.stats = work, config.shard_sequences, stats
        self.packer = SequencePacker(
            config.seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
        )
        self.token_counts = np.zeros(len(tokenizer), np.int64)
        self.shards: ShardWriter | None = None

    def add(self, lang: str, documents: int, stream: np.ndarray) -> None:
        if self.shards is None or self.shards.lang != lang:
            self.finish_language()
            self.shards = ShardWriter(self.work, lang, self.shard_sequences)
        self.stats[lang].documents += documents
        self.stats[lang].tokens += len(stream)
        self._store(self.packer.pack(stream))

    def finish_language(self) -> None:
        if self.shards is None:
            return
        last, padded = self.packer.finish()
        self._store(last)
        s = self.stats[self.shards.lang]
        s.padded_tokens = padded
        s.shards = self.shards.close()
        log.info(
            "%s: %s documents, %s tokens, %s sequences in %d shard(s)",
            self.shards.lang,
            f"{s.documents:,}",
            f"{s.tokens:,}",
            f"{s.sequences:,}",
            len(s.shards),
        )
        self.shards = None

    def close(self) -> None:
        if self.shards is not None:
            self.shards.close()

    def _store(self, sequences: np.ndarray) -> None:
        self.shards.write(sequences)
        self.token_counts += np.bincount(sequences.ravel(), minlength=len(self.token_counts))
        self.stats[self.shards.lang].sequences += len(sequences)


def _write_shards(config: PrepareConfig, sources: dict, tokenizer, work: Path):
    stats = {lang: LanguageStats(source=[s.name for s in lang_sources]) for lang, lang_sources in sources.items()}
    writer = _PackedWriter(work, config, tokenizer, stats)
    start, tokens = time.perf_counter(), 0
    # The pool starts before the progress bar's refresh thread: forking a threaded process is unsafe.
    with TokenizerPool(tokenizer, config.workers or _available_cores()) as pool, mlog.progress() as bar:
        task = bar.add_task("tokenizing", total=None, rate="")
        try:
            for lang, documents, stream in pool.tokenize(_batches(sources, config, stats)):
                writer.add(lang, documents, stream)
                tokens += len(stream)
                rate = tokens / max(time.perf_counter() - start, 1e-9)
                bar.update(task, advance=documents, description=f"tokenizing {lang}", rate=f"{rate:,.0f} tok/s")
            writer.finish_language()
        finally:
            writer.close()
    return stats, writer.token_counts


def _manifest(config: PrepareConfig, tokenizer, stats: dict[str, LanguageStats]) -> dict:
    import tokenizers
    import transformers

    return {
        "format_version": FORMAT_VERSION,
        "mlminilm_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tokenizer": tokenizer_identity(tokenizer),
        "seq_len": config.seq_len,
        "dtype": "int32",
        "byte_order": "little",
        "packing": PACKING,
        "languages": {lang: asdict(s) for lang, s in stats.items()},
        "token_counts": TOKEN_COUNTS,
        "token_counts_cover": "every id stored in the shards, wrappers and padding included",
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()},
        "versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
    }
