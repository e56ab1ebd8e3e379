"""eval-retrieval's data: which layout a --data path holds and its retrieval sets, keyed "de" (monolingual) or
"de-en" (German passages, English questions), all read and checked before any model runs."""

from __future__ import annotations

from pathlib import Path

from mlminilm.config.retrieval import lang_pair
from mlminilm.errors import ConfigError, DataError, MlminilmError
from mlminilm.evaluation.qa_files import find_qa_files
from mlminilm.langs import accept_codes
from mlminilm.tasks.retrieval import (
    RetrievalSet,
    beir_problems,
    from_squad,
    is_beir_folder,
    looks_like_beir,
    pair_key,
    read_beir,
)
from mlminilm.tasks.squad import QAFile, qa_file_info

BEIR_LAYOUT = "BEIR layout: corpus.jsonl, queries.jsonl and qrels/<split>.tsv, each optionally .gz"
ONE_LANG = "--lang names the language of one --data file or BEIR folder; for a directory use --langs"


def find_retrieval_sets(
    data: str | Path, split: str, langs: list[str] | None, lang: str | None, monolingual: bool
) -> tuple[str, dict[str, RetrievalSet], list[str]]:
    """(benchmark, {key: RetrievalSet}, codes the language registry does not know) for --data: a BEIR folder (its
    languages from `lang`), a directory of BEIR folders named by language or pair, or QA files (one file, an MLQA
    directory, XQuAD or TyDiQA-GoldP files). Every problem found is raised in one DataError / ConfigError."""
    path = Path(data)
    if is_beir_folder(path):
        if lang is None:
            raise ConfigError(
                f"--data {path} is one BEIR folder, which does not say its language: add --lang (de, or de-en for "
                "German passages and English questions)"
            )
        context, question = lang_pair(lang)
        sets = {f"{context}-{question}" if context != question else context: read_beir(path, split, context, question)}
        return "beir", sets, accept_codes({context, question})
    if looks_like_beir(path):  # corpus.jsonl, queries.jsonl or qrels/ there, but not all of them as files
        raise DataError(f"--data {path} is not a whole BEIR folder: {'; '.join(beir_problems(path))} ({BEIR_LAYOUT})")
    if path.is_dir() and not any(path.glob("*.json*")) and any(looks_like_beir(p) for p in path.iterdir()):
        if lang is not None:
            raise ConfigError(ONE_LANG)
        return "beir", *_beir_folders(path, split, langs, monolingual)
    folder = _mlqa_folder(path, split)
    if folder is not None:
        if lang is not None:
            raise ConfigError(ONE_LANG)
        benchmark, files = "mlqa", _mlqa_files(folder, split, langs, monolingual)
    else:
        benchmark, files = find_qa_files(path, split, gxlt=False, langs=langs, lang=lang)
    sets: dict[str, RetrievalSet] = {}
    problems: list[str] = []
    for info in files.values():
        try:
            found = from_squad(info)
            sets[found.key] = found
        except MlminilmError as exc:
            problems.append(str(exc))
    if problems:
        raise DataError("; ".join(problems))
    return benchmark, sets, []


def _mlqa_folder(path: Path, split: str) -> Path | None:
    """The folder of an MLQA directory's `split` files (the directory or its `split/`), None when not MLQA."""
    for folder in (path / split, path):
        if folder.is_dir() and any(folder.glob(f"{split}-context-*-question-*.json*")):
            return folder
    return None


def _mlqa_files(folder: Path, split: str, langs: list[str] | None, monolingual: bool) -> dict[str, QAFile]:
    """Every MLQA file of `split` in `folder` whose two languages are in `langs` (default: all there are), only the
    monolingual ones with `monolingual`; a DataError naming the monolingual files missing for `langs`."""
    files: dict[str, QAFile] = {}
    for candidate in sorted(folder.glob(f"{split}-context-*-question-*.json*")):
        info = qa_file_info(candidate)
        if langs and not (info.context_lang in langs and info.question_lang in langs):
            continue
        if monolingual and info.context_lang != info.question_lang:
            continue
        files.setdefault(pair_key(info.context_lang, info.question_lang), info)
    missing = [f"{split}-context-{code}-question-{code}.json" for code in langs or [] if code not in files]
    if missing:
        raise DataError(f"MLQA files missing in {folder}: {', '.join(missing)}")
    return files


def _beir_folders(
    path: Path, split: str, langs: list[str] | None, monolingual: bool
) -> tuple[dict[str, RetrievalSet], list[str]]:
    """The BEIR folders under `path`, each named by its language (de) or pair (de-en)."""
    sets: dict[str, RetrievalSet] = {}
    problems: list[str] = []
    codes: set[str] = set()
    for folder in sorted(p for p in path.iterdir() if looks_like_beir(p)):
        try:
            context, question = lang_pair(folder.name)
        except ValueError as exc:
            problems.append(f"{folder}: the folder's name is {exc}")
            continue
        if langs and not (context in langs and question in langs):
            continue
        if monolingual and context != question:
            continue
        if not is_beir_folder(folder):  # never left out without a word
            problems.append(f"{folder} is not a whole BEIR folder: {'; '.join(beir_problems(folder))}")
            continue
        try:
            found = read_beir(folder, split, context, question)
            sets[found.key] = found
            codes |= {context, question}
        except MlminilmError as exc:
            problems.append(str(exc))
    if problems:
        raise DataError("; ".join(problems))
    if not sets:
        raise DataError(f"no BEIR folder in {path} for the languages asked ({', '.join(langs or [])})")
    missing = [code for code in langs or [] if code not in codes]
    if missing:
        raise DataError(
            f"no BEIR folder in {path} for {', '.join(missing)} (--langs): folders are named by language (de) or "
            "pair (de-en)"
        )
    return sets, accept_codes(codes)
