"""Vocabulary trimming: keep the ids a corpus uses, drop the rest from the embeddings and the tokenizer.

A multilingual encoder spends most of its parameters on its vocabulary (multilingual-e5-small: 96M of 118M in
250k embedding rows); a model for a known set of languages needs only the pieces those languages use.

- `counts`: how often each id occurs, pooled and per language (a `prepare` output's token_counts.npy and shards,
  or a corpus counted here), and which ids to keep (specials always; each language's top k; the pooled rule with
  `--min-count`, `--coverage`, `--max-vocab`; the ids of `scripts`);
- `scripts`: the scripts of each piece and of each language's counts, their single-character pieces, and the
  pieces a language's counts never show ranked by likelihood (`--script-chars`, `--script-fill`);
- `identity`: per language, the share of the counted tokens kept and of held-out sentences (`--check`) that
  tokenise exactly as before;
- `unseen`: per language, the share of new text's tokens its counts never show (Good-Turing), the warning when the
  counting corpus is small for it, and the default `--script-fill` (auto) that follows;
- `tokenizer`: the tokenizer.json with the dropped pieces removed and the rest renumbered (SentencePiece Unigram:
  the pieces keep their scores, so text that used only kept pieces segments exactly as before);
- `weights`: every vocabulary-indexed tensor (word embeddings, a tied or untied output layer and its bias)
  subset in the new id order;
- `trim`: `run(TrimConfig)`, which writes the trimmed model directory atomically with `trim.json`.

New id order is the old order restricted to the kept ids, so the special tokens keep their small ids.
"""

from mlminilm.vocab.trim import TrimResult, run

__all__ = ["TrimResult", "run"]
