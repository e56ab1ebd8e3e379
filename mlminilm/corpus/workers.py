"""Tokenize batches of documents in worker processes, results in submission order.

Order is what makes the output byte-identical whatever the number of workers; the bounded window of
batches in flight is what keeps memory flat (`Pool.imap` would read the whole input ahead).
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import sys
from collections.abc import Iterable, Iterator

import numpy as np

from mlminilm.corpus.packing import document_stream

BATCHES_PER_WORKER = 2  # in flight: enough to keep every worker busy while the main process packs

_tokenizer = None  # each worker's own copy, set once by _init_worker


def _init_worker(tokenizer) -> None:
    global _tokenizer
    # One process per core already; the Rust tokenizer's own threads would only oversubscribe the cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _tokenizer = tokenizer


def _tokenize(texts: list[str]) -> np.ndarray:
    return tokenize_batch(_tokenizer, texts)


def tokenize_batch(tokenizer, texts: list[str]) -> np.ndarray:
    """The batch's document stream: each document's ids (no special tokens) followed by the separator."""
    ids = tokenizer(
        texts,
        add_special_tokens=False,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,  # documents longer than the model's maximum are expected: they are packed, not truncated
    )["input_ids"]
    return document_stream(ids, tokenizer.sep_token_id)


class TokenizerPool:
    """`workers` processes (1: in-process, no pool). Enter it before starting threads (progress bars):
    on Linux the workers are forked and inherit the loaded tokenizer."""

    def __init__(self, tokenizer, workers: int):
        self.tokenizer, self.workers = tokenizer, workers
        self._pool = None

    def __enter__(self) -> TokenizerPool:
        if self.workers > 1:
            context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
            self._pool = context.Pool(self.workers, initializer=_init_worker, initargs=(self.tokenizer,))
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def tokenize(self, batches: Iterable[tuple[str, list[str]]]) -> Iterator[tuple[str, int, np.ndarray]]:
        """(lang, documents, stream) for each (lang, texts) batch, in input order."""
        if self._pool is None:
            for lang, texts in batches:
                yield lang, len(texts), tokenize_batch(self.tokenizer, texts)
            return
        in_flight: collections.deque = collections.deque()
        for lang, texts in batches:
            in_flight.append((lang, len(texts), self._pool.apply_async(_tokenize, (texts,))))
            if len(in_flight) >= BATCHES_PER_WORKER * self.workers:
                lang, count, result = in_flight.popleft()
                yield lang, count, result.get()
        while in_flight:
            lang, count, result = in_flight.popleft()
            yield lang, count, result.get()
