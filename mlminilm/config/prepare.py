"""prepare: multilingual text to token shards."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import problems_to_error
from mlminilm.config.limits import int_problems


@dataclass(frozen=True)
class PrepareConfig:
    """`prepare`: multilingual text -> fixed-length token sequences in per-language shards."""

    teacher: str  # hub id or local directory whose tokenizer is used
    inputs: tuple[str, ...]  # directories of <lang>.txt files, LANG=PATH, or hf:DATASET[:CONFIG_TEMPLATE]
    out: Path
    seq_len: int = 128
    workers: int = 0  # tokenizer processes; 0 = all cores, 1 = in-process
    shard_sequences: int = 16_384  # sequences per shard file
    text_field: str = "text"  # the text key of JSON lines and Hub dataset rows
    langs: tuple[str, ...] = ()  # only these languages (all found when empty)
    max_docs: int | None = None  # per-language cap on documents; None = all
    overwrite: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        p: list[str] = []
        if not self.teacher:
            p.append("--teacher is required (a hub id or a local model or tokenizer directory)")
        if not self.inputs:
            p.append("--input is required (a directory of <lang>.txt files, LANG=PATH, or hf:DATASET[:CONFIG])")
        if self.seq_len < 3:
            p.append(f"--seq-len must be at least 3: two specials and one token (got {self.seq_len})")
        if self.workers < 0:
            p.append(f"--workers must be 0 (all cores) or more (got {self.workers})")
        if self.shard_sequences < 1:
            p.append(f"--shard-sequences must be at least 1 (got {self.shard_sequences})")
        if not self.text_field:
            p.append("--text-field must not be empty")
        if self.max_docs is not None and self.max_docs < 1:
            p.append(f"--max-docs must be at least 1 (got {self.max_docs})")
        p += int_problems(self)
        problems_to_error(p)
