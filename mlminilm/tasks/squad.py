"""SQuAD-format QA data (SQuAD v1.1, MLQA, XQuAD, TyDiQA-GoldP): reading, validating and finding files.

`read_squad` keeps the parsed JSON (the official scorers walk it) next to a flat list of `QAExample`s (what
featurisation needs). It checks the structure and that every answer is the context span its `answer_start`
points at. The real MLQA dev (49 files) and TyDiQA-GoldP files have no such mismatch, so `strict=True` is the
default everywhere; `strict=False` keeps mismatched answers (scoring uses only their text) and counts them, for
third-party files that need it.

Question ids must be unique to score predictions (they are keyed by id), so duplicates raise by default. The
XTREME TyDiQA-GoldP English train file reuses ids (3,696 questions, 89 distinct ids: "0", "1", ...): training
needs no ids, so read training files with `unique_ids=False`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from mlminilm.errors import DataError
from mlminilm.io import user_json
from mlminilm.langs import MLQA_NEEDS, benchmark_languages, validate_codes
from mlminilm.tasks.textfile import read_text

__all__ = [
    "QAExample",
    "SquadData",
    "QAFile",
    "read_squad",
    "qa_file_info",
    "find_mlqa_files",
    "find_xquad_files",
    "find_tydiqa_files",
]


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: list[dict[str, Any]]  # [{"text": str, "answer_start": int}], possibly empty (nothing to train on)
    title: str | None = None


@dataclass
class SquadData:
    path: Path
    raw: dict  # the parsed JSON, as the official scorers expect it
    examples: list[QAExample] = field(default_factory=list)
    mismatched_answers: int = 0  # answers whose answer_start does not point at their text (strict=False only)
    duplicate_ids: int = 0  # questions whose id an earlier question already had (unique_ids=False only)

    @property
    def version(self) -> str | None:
        version = self.raw.get("version")
        return None if version is None else str(version)


# No real passage or question comes near these (MLQA, XQuAD and TyDiQA-GoldP: contexts up to about 20,000
# characters, questions up to about 200). A text beyond them is refused when read, before a tokenizer holds all of
# it at once: a 5 MB context took 1.3 GB and 30 s to featurise on a tiny model, so hundreds of megabytes need tens
# of gigabytes. A context cannot be cut instead: its answers are offsets into it.
MAX_CONTEXT_CHARS = 1_000_000
MAX_QUESTION_CHARS = 10_000


class QAFile(NamedTuple):
    path: Path
    context_lang: str  # the language to score in (answers are context spans)
    question_lang: str


def read_squad(path: str | Path, strict: bool = True, unique_ids: bool = True) -> SquadData:
    """Parse and validate a SQuAD-format JSON file (plain or `.gz`).

    Structural problems (not SQuAD, a missing key or a value of the wrong type) always raise a DataError naming
    the file and where. An answer whose `answer_start` does not match the context raises too when `strict` (keep
    it for training data); otherwise it is kept and counted in `mismatched_answers`. A question id seen twice
    raises when `unique_ids` (needed for scoring); otherwise duplicates are counted in `duplicate_ids`."""
    path = Path(path)
    raw = user_json.loads(read_text(path), path)
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise DataError(f"{path}: not SQuAD JSON: missing top-level 'data' (a list of articles)")
    data = SquadData(path=path, raw=raw)
    seen: set[str] = set()
    for a, article in enumerate(raw["data"]):
        paragraphs = _require(article, "paragraphs", list, path, f"data[{a}]")
        title = article.get("title")
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            context = _bounded(
                _require(paragraph, "context", str, path, where), MAX_CONTEXT_CHARS, path, f"{where}.context"
            )
            for q, qa in enumerate(_require(paragraph, "qas", list, path, where)):
                example = _read_question(qa, context, title, path, f"{where}.qas[{q}]")
                if example.id in seen:
                    if unique_ids:
                        shown = example.id if len(example.id) <= 40 else example.id[:40] + "..."
                        raise DataError(
                            f"{path}: question id {shown!r} appears twice; ids must be unique to score "
                            "predictions (training data may be read with unique_ids=False)"
                        )
                    data.duplicate_ids += 1
                seen.add(example.id)
                mismatches = _check_answers(example, path, strict)
                data.mismatched_answers += mismatches
                data.examples.append(example)
    if not data.examples:
        raise DataError(f"{path}: no questions in the file")
    return data


# JSON's names for the types a SQuAD file holds (a bool is a Python int, but not an integer in JSON).
_KINDS = {str: "a string", int: "an integer", list: "a list", dict: "an object", bool: "a boolean", float: "a number"}


def _require(node: Any, key: str, kind: type, path: Path, where: str) -> Any:
    if not isinstance(node, dict) or key not in node:
        raise DataError(f"{path}: not SQuAD format: {where} has no '{key}'")
    value = node[key]
    if not isinstance(value, kind) or (kind is int and not user_json.is_integer(value)):  # true is no answer_start
        raise DataError(f"{path}: {where}.{key} should be {_KINDS[kind]}, found {_KINDS.get(type(value), 'null')}")
    return value


def _bounded(text: str, limit: int, path: Path, where: str) -> str:
    if len(text) > limit:
        raise DataError(
            f"{path}: {where} is {len(text):,} characters long, over the {limit:,} allowed; split it or leave it out"
        )
    return text


def _read_question(qa: Any, context: str, title: str | None, path: Path, where: str) -> QAExample:
    question_id = _require(qa, "id", str, path, where)
    question = _bounded(_require(qa, "question", str, path, where), MAX_QUESTION_CHARS, path, f"{where}.question")
    answers = []
    for n, answer in enumerate(_require(qa, "answers", list, path, where)):
        text = _require(answer, "text", str, path, f"{where}.answers[{n}]")
        start = _require(answer, "answer_start", int, path, f"{where}.answers[{n}]")
        answers.append({"text": text, "answer_start": start})
    return QAExample(id=question_id, question=question, context=context, answers=answers, title=title)


def _check_answers(example: QAExample, path: Path, strict: bool) -> int:
    mismatches = 0
    for answer in example.answers:
        start, text = answer["answer_start"], answer["text"]
        found = example.context[start : start + len(text)] if start >= 0 else ""
        if found == text:
            continue
        if strict:
            raise DataError(
                f"{path}: question {example.id!r}: answer_start {start} does not match the context: "
                f"expected {text!r}, found {found!r}"
            )
        mismatches += 1
    return mismatches


# File names that carry their languages.
_MLQA_NAME = re.compile(r"^(?P<split>dev|test)-context-(?P<context>[a-z]+)-question-(?P<question>[a-z]+)\.json(\.gz)?$")
_XQUAD_NAME = re.compile(r"^xquad\.(?P<lang>[a-z]+)\.json(\.gz)?$")
_TYDIQA_NAME = re.compile(r"^tydiqa\.goldp\.(?P<lang>[a-z]+)\.(?P<split>dev|train)\.json(\.gz)?$")


def qa_file_info(path: str | Path, lang: str | None = None) -> QAFile:
    """The languages of one SQuAD-format file: from an explicit `lang` (context and question), else from an MLQA
    (`dev-context-C-question-Q.json`), XQuAD (`xquad.de.json`) or TyDiQA-GoldP (`tydiqa.goldp.ar.dev.json`) name."""
    path = Path(path)
    if lang is not None:
        validate_codes([lang], MLQA_NEEDS)
        return QAFile(path, lang, lang)
    name = path.name
    if match := _MLQA_NAME.match(name):
        context, question = match["context"], match["question"]
    elif match := (_XQUAD_NAME.match(name) or _TYDIQA_NAME.match(name)):
        context = question = match["lang"]
    else:
        raise DataError(
            f"{path}: cannot tell the language from the file name; name it like dev-context-de-question-de.json, "
            "xquad.de.json or tydiqa.goldp.de.dev.json, or give the language explicitly"
        )
    validate_codes([context, question], MLQA_NEEDS)
    return QAFile(path, context, question)


def find_mlqa_files(
    data_dir: str | Path, split: str = "dev", gxlt: bool = False, langs: Sequence[str] | None = None
) -> dict[str, QAFile]:
    """MLQA files of `split` under `data_dir` (or `data_dir/split/`), default languages: the 7 MLQA ones.

    Without `gxlt`: the monolingual files, keyed by language ("de"). With `gxlt`: every context x question pair
    of `langs` (49 by default), keyed "C-Q" with the context language first ("de-en": German context, English
    question). All missing files are named in one DataError."""
    langs = _resolve_langs(langs, "mlqa")
    folder = _split_folder(Path(data_dir), split, f"{split}-context-*-question-*.json*")
    pairs = [(c, q) for c in langs for q in langs] if gxlt else [(lang, lang) for lang in langs]
    found: dict[str, QAFile] = {}
    missing = []
    for context, question in pairs:
        path = _with_optional_gz(folder / f"{split}-context-{context}-question-{question}.json")
        key = f"{context}-{question}" if gxlt else context
        if path is None:
            missing.append(f"{split}-context-{context}-question-{question}.json")
        else:
            found[key] = QAFile(path, context, question)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise DataError(f"MLQA files missing in {folder}: {shown}")
    return found


def find_xquad_files(data_dir: str | Path, langs: Sequence[str] | None = None) -> dict[str, QAFile]:
    """XQuAD files (`xquad.XX.json`) under `data_dir`, by language (default: the 12 XQuAD languages)."""
    langs = _resolve_langs(langs, "xquad")
    return _find_single_language_files(Path(data_dir), "XQuAD", langs, "xquad.{lang}.json")


def find_tydiqa_files(
    data_dir: str | Path, split: str = "dev", langs: Sequence[str] | None = None
) -> dict[str, QAFile]:
    """TyDiQA-GoldP files (`tydiqa.goldp.XX.{split}.json`) under `data_dir`, by language (default: its 9)."""
    langs = _resolve_langs(langs, "tydiqa")
    return _find_single_language_files(Path(data_dir), "TyDiQA-GoldP", langs, f"tydiqa.goldp.{{lang}}.{split}.json")


def _find_single_language_files(data_dir: Path, benchmark: str, langs: list[str], pattern: str) -> dict[str, QAFile]:
    if not data_dir.is_dir():
        raise DataError(f"{benchmark} data directory {data_dir} does not exist")
    found, missing = {}, []
    for lang in langs:
        path = _with_optional_gz(data_dir / pattern.format(lang=lang))
        if path is None:
            missing.append(pattern.format(lang=lang))
        else:
            found[lang] = QAFile(path, lang, lang)
    if missing:
        raise DataError(f"{benchmark} files missing in {data_dir}: {', '.join(missing)}")
    return found


def _split_folder(data_dir: Path, split: str, pattern: str) -> Path:
    # Accept the MLQA root (with dev/ and test/ inside) as well as the split folder itself.
    for folder in (data_dir / split, data_dir):
        if folder.is_dir() and any(folder.glob(pattern)):
            return folder
    if not data_dir.is_dir():
        raise DataError(f"MLQA data directory {data_dir} does not exist")
    raise DataError(f"no MLQA {split} files ({pattern}) in {data_dir} or {data_dir / split}")


def _with_optional_gz(path: Path) -> Path | None:
    """The file or its .gz; else a directory of that name, which its reader then names as such (not as missing)."""
    gz = path.with_name(path.name + ".gz")
    for candidate in (path, gz):
        if candidate.is_file():
            return candidate
    return next((c for c in (path, gz) if c.exists()), None)


def _resolve_langs(langs: Sequence[str] | None, benchmark: str) -> list[str]:
    if langs is None:
        return benchmark_languages(benchmark)
    langs = list(dict.fromkeys(langs))
    if not langs:
        raise DataError("no languages requested")
    validate_codes(langs, MLQA_NEEDS)
    return langs
