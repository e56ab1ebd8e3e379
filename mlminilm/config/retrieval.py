"""eval-retrieval: question -> passage retrieval with an encoder as it is (no fine-tuning)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import (
    PRECISIONS,
    Config,
    device_option,
    quiet_option,
    unknown_langs,
)
from mlminilm.config.evaluation import (
    BACKEND_HELP,
    EVAL_BACKENDS,
    EVAL_SPLITS,
    OUT_HELP,
    OVERWRITE_HELP,
    PRECISION_HELP,
    TATOEBA_POOLINGS,
    UPDATE_CARD_HELP,
    backend_problems,
)
from mlminilm.config.options import COMMA, option

RETRIEVAL_MAX_LENGTH = 512  # tokens per query and per passage, unless the model's positions are fewer (MTEB's)
RETRIEVAL_BATCH_SIZE = 32  # passages are long: a batch of 32 x 512 tokens
QUERY_BACKENDS = ("auto", *EVAL_BACKENDS)  # --query-backend: auto = the query model directory's own


def lang_pair(text: str) -> tuple[str, str]:
    """(passage language, question language) of "de" or "de-en"; a code with a subtag (zh-Hant) is one language.
    ValueError when neither reading gives language codes."""
    from mlminilm.langs import is_language_code

    # A variant subtag is capitalised (zh-Hant, pt-BR); a second language is lower case (de-en, zh-Hant-en).
    for i, ch in enumerate(text):
        left, right = text[:i], text[i + 1 :]
        if ch == "-" and right[:1].islower() and is_language_code(left) and is_language_code(right):
            return left, right
    if is_language_code(text):
        return text, text
    raise ValueError(
        "not a language code (de) or a pair of them, passages first (de-en: German passages, English questions)"
    )


@dataclass(frozen=True)
class EvalRetrievalConfig(Config):
    """`eval-retrieval`: rank a corpus of passages for each question by cosine similarity of sentence embeddings.

    Layer and pooling follow eval-tatoeba's rules (the model's sentence-transformers setup, else XTREME's layer
    and mean pooling). `query_prompt` / `passage_prompt` None: the model's own sentence-transformers prompts
    ("query"; "passage", else "document"), else none. Lengths None: RETRIEVAL_MAX_LENGTH, or the model's position
    limit when smaller. `query_model` (asymmetric search): the questions' encoder, with its own embedding (its layer,
    pooling, query prompt and tokenizer) and backend (`query_backend`); the passages keep `model`'s."""

    model: str = option(
        "",
        required=True,
        group="inputs",
        help="Any encoder directory or hub id (a distilled student, a teacher, a sentence-transformers model).",
    )
    data: str = option(
        "",
        required=True,
        group="inputs",
        help="An MLQA directory ({split}-context-C-question-Q.json, also under {split}/), a directory of "
        "xquad.XX.json or tydiqa.goldp.XX.{split}.json files, one SQuAD-format file (the corpus: its distinct "
        "contexts), a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{split}.tsv) or a directory of BEIR folders "
        "named by language (de/, or de-en/ for German passages and English questions).",
    )
    langs: tuple[str, ...] = option(
        (),
        repeat=COMMA,
        group="inputs",
        help="Only these languages, on both sides (default: every language in --data; MLQA: its 7).",
    )
    out: Path | None = option(None, group="output", help=OUT_HELP, replay=False)
    split: str = option(
        "dev", choices=EVAL_SPLITS, group="inputs", help="dev or test: MLQA and TyDiQA file names, BEIR qrels."
    )
    monolingual: bool = option(
        False,
        group="inputs",
        help="MLQA and BEIR folders: only the pairs whose passages and questions share their language (default: "
        "every context x question pair present, as MLQA's G-XLT).",
    )
    lang: str | None = option(
        None,
        group="inputs",
        help="Language of a --data file or BEIR folder whose name does not tell it: de, or de-en for German "
        "passages and English questions.",
    )
    query_prompt: str | None = option(
        None,
        group="inputs",
        help="Text put before every question (default: the model's sentence-transformers 'query' prompt, e.g. "
        '"query: " for e5, else none; "" for none).',
    )
    passage_prompt: str | None = option(
        None,
        group="inputs",
        help="Text put before every passage (default: the model's 'passage' prompt, else its 'document' prompt, "
        'e.g. "passage: " for e5, else none; "" for none).',
    )
    query_max_length: int | None = option(
        None,
        min=2,
        group="inputs",
        help=f"Tokens per question, special tokens included (default: {RETRIEVAL_MAX_LENGTH}, or the model's "
        "position limit when smaller).",
    )
    passage_max_length: int | None = option(
        None,
        min=2,
        group="inputs",
        help=f"Tokens per passage, special tokens included (default: {RETRIEVAL_MAX_LENGTH}, or the model's "
        "position limit when smaller).",
    )
    layer: int | None = option(
        None,
        group="method",
        help="Hidden-states index to pool (0 = embedding output, -1 = last). Default: the last layer for "
        "sentence-transformers models, else XTREME's layers // 2 + 1.",
    )
    pooling: str = option(
        "auto",
        choices=TATOEBA_POOLINGS,
        group="method",
        help="auto (the model's sentence-transformers Pooling mode, else mean over real tokens), mean, cls or max.",
    )
    batch_size: int = option(
        RETRIEVAL_BATCH_SIZE, min=1, group="machine", help="Texts per forward pass (sorted by length)."
    )
    overwrite: bool = option(False, group="output", help=OVERWRITE_HELP, replay=False)
    update_card: bool = option(
        False,
        group="output",
        help=UPDATE_CARD_HELP + " With --query-model: into the query model's README.md, naming --model as the index.",
    )
    backend: str = option("torch", choices=EVAL_BACKENDS, group="machine", help=BACKEND_HELP)
    precision: str = option("auto", choices=PRECISIONS, group="machine", help=PRECISION_HELP)
    device: str = device_option()
    quiet: bool = quiet_option()
    query_model: str | None = option(
        None,
        group="inputs",
        help="Asymmetric search: embed the questions with this encoder (directory or hub id; e.g. a student, "
        "trimmed or int8) and the passages, the index, with --model. Each side has its own model's layer, pooling "
        "(--layer / --pooling set both), prompt and tokenizer; the two must give vectors of one size. Default: "
        "--model for both.",
    )
    query_backend: str = option(
        "auto",
        choices=QUERY_BACKENDS,
        group="machine",
        help="The backend of --query-model (--backend is --model's): auto = what its directory is (onnx or "
        "openvino for a `mlminilm export` directory, else torch; --backend when it is --model).",
    )

    def problems(self) -> list[str]:
        # Only what no single declaration says; the ranges and choices: Config (options.declared_problems).
        p: list[str] = []
        if not self.model:
            p.append("--model is required (an encoder directory or hub id, e.g. a distilled student)")
        if not self.data:
            p.append("--data is required (MLQA, XQuAD or TyDiQA-GoldP files, or a BEIR folder)")
        backend_problems(p, self.backend, self.precision, self.device)
        if self.query_model == "":
            p.append("--query-model is empty: give the encoder that embeds the questions, or leave it out")
        if self.query_backend != "auto" and self.query_model is None:
            p.append(f"--query-backend {self.query_backend} needs --query-model (--backend is --model's backend)")
        unknown_langs(p, self.langs, "--langs")
        if self.lang is not None:
            try:
                lang_pair(self.lang)
            except ValueError as exc:
                p.append(f"--lang {self.lang}: {exc}")
        return p
