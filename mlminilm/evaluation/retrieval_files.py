"""eval-retrieval's data: which layout a --data path holds and its retrieval sets, keyed "de" (monolingual) or
"de-en" (German passages, English questions), all read and checked before any model runs."""

from __future__ import annotations

import re
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

# What str.split() splits on (Unicode whitespace, the ASCII separators \x1c-\x1f included): the TREC run file's
# fields are separated by whitespace, so an id holding any of it is read as other fields (or other lines).
_WHITESPACE = re.compile(r"\s")
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
        found = checked_ids(read_beir(path, split, context, question))
        sets = {found.key: found}
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
            found = checked_ids(from_squad(info))
            sets[found.key] = found
        except MlminilmError as exc:
            problems.append(str(exc))
    if problems:
        raise DataError("; ".join(problems))
    return benchmark, sets, []


def checked_ids(rset: RetrievalSet) -> RetrievalSet:
    """`rset`, once its query and document ids are fit for predictions/<key>.trec: a TREC run line is six fields
    separated by whitespace (trec_eval, pytrec_eval), so an id that is empty or holds whitespace (a space, a tab, a
    line break, any character str.split() splits on) would shift the fields or add lines. A DataError naming the
    first such id of each side and its file otherwise, before any model runs."""
    if rset.layout == "beir":
        sides = (("query", rset.query_ids, rset.files["queries"]), ("document", rset.doc_ids, rset.files["corpus"]))
    else:  # SQuAD format: the questions' ids (document ids are c<N>, made here)
        sides = (("question", rset.query_ids, rset.files["qa"]), ("passage", rset.doc_ids, rset.files["qa"]))
    problems = []
    for what, ids, file in sides:
        bad = [i for i in ids if not i or _WHITESPACE.search(i)]
        if bad:
            first = bad[0] if len(bad[0]) <= 40 else bad[0][:40] + "..."
            more = f" (and {len(bad) - 1:,} more)" if len(bad) > 1 else ""
            problems.append(f"{what} id {first!r} {'is empty' if not first else 'holds whitespace'}{more} in {file}")
    if problems:
        raise DataError(
            f"{'; '.join(problems)}: the TREC run file (predictions/{rset.key}.trec) separates its fields with "
            "whitespace, so an id must be non-empty and hold no whitespace (a space, a tab, a line break); "
            "rename them in the data"
        )
    return rset


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
            found = checked_ids(read_beir(folder, split, context, question))
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
