"""`mlminilm prepare`: the CLI translates options into a PrepareConfig and calls mlminilm.corpus.prepare.run."""

from __future__ import annotations

import json

from mlminilm.commands._options import build
from mlminilm.config import PrepareConfig

EXAMPLES = """\b
Examples:
  mlminilm prepare --teacher xlm-roberta-base --input corpus/ --out data/
  mlminilm prepare --teacher xlm-roberta-base --input de=de.txt.gz --input fr=fr.jsonl --langs de,fr --out data/
"""


def main(config: PrepareConfig, json_out: bool) -> None:
    """Tokenize multilingual text with the teacher's tokenizer into fixed-length sequences, per-language shards."""
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


command = build(PrepareConfig, main)
