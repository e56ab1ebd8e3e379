"""prepare: multilingual text to token shards."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import Config, quiet_option
from mlminilm.config.options import COMMA, EACH, option


@dataclass(frozen=True)
class PrepareConfig(Config):
    """`prepare`: multilingual text -> fixed-length token sequences in per-language shards."""

    # hub id or local directory whose tokenizer is used
    teacher: str = option(group="inputs", help="Whose tokenizer: hub id (e.g. xlm-roberta-base) or local directory.")
    # directories of <lang>.txt files, LANG=PATH, or hf:DATASET[:CONFIG_TEMPLATE]
    inputs: tuple[str, ...] = option(
        flag="--input",
        repeat=EACH,
        group="inputs",
        help="Repeatable. A directory of <lang>.txt|.txt.gz|.jsonl|.jsonl.gz files, "
        "LANG=PATH, a <lang>.txt file, or hf:DATASET[:CONFIG] with {lang} in CONFIG (with --langs).",
    )
    out: Path = option(
        group="output", help="Output directory (created; must be empty unless --overwrite).", replay=False
    )
    seq_len: int = option(128, min=3, group="method", help="Tokens per sequence, specials included.")
    # tokenizer processes; 0 = all cores, 1 = in-process
    workers: int = option(0, min=0, group="machine", help="Tokenizer processes; 0 = all cores.")
    shard_sequences: int = option(16_384, min=1, group="output", help="Sequences per shard file.")
    text_field: str = option("text", group="inputs", help="Text key of JSON lines and Hub dataset rows.")
    # only these languages (all found when empty)
    langs: tuple[str, ...] = option(
        (), repeat=COMMA, group="inputs", help="Only these languages, comma-separated or repeated (default: all)."
    )
    # per-language cap on documents; None = all
    max_docs: int | None = option(None, min=1, group="inputs", help="At most this many documents per language.")
    overwrite: bool = option(False, group="output", help="Replace prepared data already in --out.", replay=False)
    quiet: bool = quiet_option()

    def problems(self) -> list[str]:
        # Only what no single declaration says; the ranges: Config (options.declared_problems).
        p: list[str] = []
        if not self.teacher:
            p.append("--teacher is required (a hub id or a local model or tokenizer directory)")
        if not self.inputs:
            p.append("--input is required (a directory of <lang>.txt files, LANG=PATH, or hf:DATASET[:CONFIG])")
        if not self.text_field:
            p.append("--text-field must not be empty")
        return p
