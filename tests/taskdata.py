"""Tiny task data and task models for the fine-tuning and evaluation tests, written by the tests themselves."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import sample_lines

LABELS = ("entailment", "neutral", "contradiction")
# Answer phrases planted in the QA contexts, per language (their words are in the tiny tokenizers' corpus).
ANSWERS = {
    "en": ["old ships", "every morning", "the park", "a book"],
    "de": ["jeden Morgen", "über Schiffe", "durch den Park", "ein Buch"],
}
QUESTIONS = {"en": "What does she read about?", "de": "Was lesen wir?"}


def write_nli_tsv(path: Path, lang: str, count: int, seed: int = 0) -> Path:
    """XTREME layout: premise<TAB>hypothesis<TAB>label, no header, labels balanced."""
    premises = sample_lines(lang, count, seed=seed)
    hypotheses = sample_lines(lang, count, seed=seed + 1000)
    rows = [f"{p}\t{h}\t{LABELS[i % 3]}" for i, (p, h) in enumerate(zip(premises, hypotheses))]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def write_xnli_dir(folder: Path, langs=("en", "de", "zh"), split: str = "test", count: int = 9) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, lang in enumerate(langs):
        write_nli_tsv(folder / f"{split}-{lang}.tsv", lang, count, seed=10 + i)
    return folder


def squad_doc(
    lang: str = "en", question_lang: str | None = None, count: int = 4, seed: int = 0, context_lines: int = 8
) -> dict:
    """SQuAD v1.1 JSON whose contexts are long enough to need several windows at a short max length; every
    answer is a span planted at a different depth of its context."""
    question_lang = question_lang or lang
    paragraphs = []
    for i in range(count):
        before = " ".join(sample_lines(lang, 1 + (i * context_lines) // max(count - 1, 1), seed=seed + i))
        after = " ".join(sample_lines(lang, context_lines, seed=seed + 100 + i))
        answer = ANSWERS[lang][i % len(ANSWERS[lang])]
        context = f"{before} {answer}. {after}"
        start = len(before) + 1
        paragraphs.append(
            {
                "context": context,
                "qas": [
                    {
                        "id": f"{lang}-{question_lang}-{seed}-{i}",
                        "question": QUESTIONS[question_lang],
                        "answers": [{"text": answer, "answer_start": start}],
                    }
                ],
            }
        )
    return {"version": "1.1", "data": [{"title": f"t{seed}", "paragraphs": paragraphs}]}


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


def write_mlqa_dir(folder: Path, langs=("en", "de"), split: str = "dev", count: int = 3) -> Path:
    """The MLQA layout: {split}-context-C-question-Q.json for every pair of `langs`."""
    folder.mkdir(parents=True, exist_ok=True)
    for c in langs:
        for q in langs:
            write_json(folder / f"{split}-context-{c}-question-{q}.json", squad_doc(c, q, count=count, seed=7))
    return folder


def save_head_model(
    tokenizer_dir: Path,
    out: Path,
    task: str,
    layers: int = 1,
    hidden: int = 16,
    heads: int = 2,
    intermediate: int = 32,
    max_positions: int = 512,
) -> Path:
    """A randomly initialised tiny BERT that already has the task's head (no fine-tuning needed to evaluate)."""
    import torch
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoTokenizer,
        BertConfig,
    )

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    extra = (
        {"num_labels": 3, "id2label": dict(enumerate(LABELS)), "label2id": {l: i for i, l in enumerate(LABELS)}}
        if task == "xnli"
        else {}
    )
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_positions,
        pad_token_id=tok.pad_token_id,
        **extra,
    )
    torch.manual_seed(0)
    cls = AutoModelForSequenceClassification if task == "xnli" else AutoModelForQuestionAnswering
    cls.from_config(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out
