"""`mlminilm prepare`: the CLI translates options into a PrepareConfig and calls mlminilm.corpus.prepare.run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from mlminilm.config import PrepareConfig, default

P = PrepareConfig

EXAMPLES = """\b
Examples:
  mlminilm prepare --teacher xlm-roberta-base --input corpus/ --out data/
  mlminilm prepare --teacher xlm-roberta-base --input de=de.txt.gz --input fr=fr.jsonl --langs de,fr --out data/
"""


def command(
    teacher: Annotated[
        str, typer.Option("--teacher", help="Whose tokenizer: hub id (e.g. xlm-roberta-base) or local directory.")
    ],
    inputs: Annotated[
        list[str],
        typer.Option(
            "--input",
            help="Repeatable. A directory of <lang>.txt|.txt.gz|.jsonl|.jsonl.gz files, LANG=PATH, a <lang>.txt "
            "file, or hf:DATASET[:CONFIG] with {lang} in CONFIG (with --langs).",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output directory (created; must be empty unless --overwrite).")],
    seq_len: Annotated[int, typer.Option("--seq-len", min=3, help="Tokens per sequence, specials included.")] = default(
        P, "seq_len"
    ),
    workers: Annotated[int, typer.Option("--workers", min=0, help="Tokenizer processes; 0 = all cores.")] = default(
        P, "workers"
    ),
    shard_sequences: Annotated[
        int, typer.Option("--shard-sequences", min=1, help="Sequences per shard file.")
    ] = default(P, "shard_sequences"),
    text_field: Annotated[
        str, typer.Option("--text-field", help="Text key of JSON lines and Hub dataset rows.")
    ] = default(P, "text_field"),
    langs: Annotated[
        list[str], typer.Option("--langs", help="Only these languages, comma-separated or repeated (default: all).")
    ] = default(P, "langs"),
    max_docs: Annotated[
        Optional[int], typer.Option("--max-docs", min=1, help="At most this many documents per language.")
    ] = default(P, "max_docs"),
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace prepared data already in --out.")
    ] = default(P, "overwrite"),
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as one JSON document on stdout.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Only warnings and errors on stderr; no progress bar.")
    ] = default(P, "quiet"),
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Tokenize multilingual text with the teacher's tokenizer into fixed-length sequences, per-language shards."""
    from mlminilm import logging as mlog

    mlog.setup(quiet=quiet, verbose=verbose)
    config = PrepareConfig(
        teacher=teacher,
        inputs=tuple(inputs),
        out=out,
        seq_len=seq_len,
        workers=workers,
        shard_sequences=shard_sequences,
        text_field=text_field,
        langs=tuple(code.strip() for item in langs for code in item.split(",") if code.strip()),
        max_docs=max_docs,
        overwrite=overwrite,
        quiet=quiet,
    )
    from mlminilm.corpus import prepare

    result = prepare.run(config)
    if json_out:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        languages = len(result.languages)
        print(  # the result goes to stdout, like every command's
            f"{result.out}: {languages} language{'' if languages == 1 else 's'}, {result.documents:,} documents, "
            f"{result.tokens:,} tokens, {result.sequences:,} sequences of {result.seq_len} "
            f"({result.tokens_per_s:,.0f} tokens/s)"
        )
