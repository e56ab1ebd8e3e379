"""Question -> passage retrieval sets (`eval-retrieval`): a corpus, its queries and which documents answer each.

Two sources, one shape (`RetrievalSet`):
- a SQuAD-format QA file (MLQA `dev-context-C-question-Q.json`, XQuAD `xquad.XX.json`, TyDiQA-GoldP), read as MTEB
  reads MLQA for retrieval: the corpus is the file's distinct contexts (the context text alone, no title), each
  question's one relevant document its own context. Contexts of identical text are one document (`merged`
  counts the paragraphs folded into an earlier one), relevant to every question asked of any of them;
- a BEIR folder (`corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`, each optionally `.gz`), as BEIR and MTEB
  read it: a document's text is its title and text joined by a space; the queries scored are those with a qrels
  row (in `queries.jsonl` order); a qrels score above 0 is relevant, its value the graded gain. Documents with
  equal text stay apart (`duplicate_texts` counts them), as BEIR keeps them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from mlminilm.errors import DataError
from mlminilm.io import user_json
from mlminilm.tasks.squad import QAFile, read_squad
from mlminilm.tasks.textfile import read_text

BEIR_FILES = ("corpus.jsonl", "queries.jsonl")


@dataclass
class RetrievalSet:
    """One scored unit: documents in `context_lang`, queries in `question_lang`. `qrels[i]` maps the corpus
    indices relevant to query i to their gain (> 0)."""

    key: str  # "de" (monolingual) or "de-en" (context language, question language)
    context_lang: str
    question_lang: str
    layout: str  # "squad" or "beir"
    files: dict[str, str]
    queries: list[str]
    query_ids: list[str]
    corpus: list[str]
    doc_ids: list[str]
    qrels: list[dict[int, int]]
    merged: int = 0  # SQuAD: paragraphs whose context repeats an earlier one's text (one document)
    duplicate_texts: int = 0  # BEIR: documents whose text another document also has (kept apart)
    unjudged: int = 0  # BEIR: queries without a qrels row (not scored)
    no_relevant: int = 0  # BEIR: judged queries with no relevant document (scored 0, as pytrec_eval)
    duplicate_ids: int = 0  # SQuAD: questions whose id an earlier question already had (scored apart)
    extra: dict = field(default_factory=dict)


def pair_key(context: str, question: str) -> str:
    return context if context == question else f"{context}-{question}"


def from_squad(info: QAFile) -> RetrievalSet:
    """The retrieval set of one SQuAD-format file (see the module's docstring). Document ids are `c<N>`, N the
    0-based index of the distinct context in file order; query ids are the questions' own ids."""
    data = read_squad(info.path, strict=False, unique_ids=False)  # answers are not read; ids may repeat
    index: dict[str, int] = {}
    corpus: list[str] = []
    paragraphs = merged = 0
    for article in data.raw["data"]:
        for paragraph in article["paragraphs"]:
            paragraphs += 1
            if paragraph["context"] in index:
                merged += 1
            else:
                index[paragraph["context"]] = len(corpus)
                corpus.append(paragraph["context"])
    return RetrievalSet(
        key=pair_key(info.context_lang, info.question_lang),
        context_lang=info.context_lang,
        question_lang=info.question_lang,
        layout="squad",
        files={"qa": str(info.path)},
        queries=[e.question for e in data.examples],
        query_ids=[e.id for e in data.examples],
        corpus=corpus,
        doc_ids=[f"c{i}" for i in range(len(corpus))],
        qrels=[{index[e.context]: 1} for e in data.examples],
        merged=merged,
        duplicate_ids=data.duplicate_ids,
        extra={"paragraphs": paragraphs},
    )


def beir_file(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def is_beir_folder(folder: Path) -> bool:
    return folder.is_dir() and all(beir_file(folder, name) for name in BEIR_FILES)


def _entry(folder: Path, name: str) -> Path | None:
    """`name` or `name.gz` in `folder`, whatever it is (a file, a directory, a dangling link)."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return None


def _not_a_file(path: Path) -> str:
    return f"{path.name} is {'a directory' if path.is_dir() else 'not a readable file'}, not a file"


def looks_like_beir(folder: Path) -> bool:
    """A folder meant as BEIR: it holds corpus.jsonl, queries.jsonl (either may be broken) or a qrels folder."""
    return folder.is_dir() and (any(_entry(folder, n) for n in BEIR_FILES) or (folder / "qrels").is_dir())


def beir_problems(folder: Path) -> list[str]:
    """What keeps a folder that looks like BEIR from being one: a missing corpus.jsonl / queries.jsonl, or one
    that is a directory."""
    problems = []
    for name in BEIR_FILES:
        entry = _entry(folder, name)
        if entry is None:
            problems.append(f"no {name}")
        elif not entry.is_file():
            problems.append(_not_a_file(entry))
    return problems


def shown(ids) -> str:
    """Up to 3 ids for an error line, each cut at 40 characters (an id can be a whole damaged line)."""
    ids = sorted(ids)
    cut = [i if len(i) <= 40 else i[:40] + "..." for i in ids[:3]]
    return ", ".join(cut) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def _lines(path: Path) -> list[str]:
    """The file's lines, split at "\n" alone: str.splitlines() also breaks at U+2028, U+0085 and U+001D, which
    JSON strings may hold raw (web text has them) and a line of JSON must keep."""
    return [line.rstrip("\r") for line in read_text(path).split("\n")]


def _jsonl(path: Path, fields: tuple[str, ...]) -> list[dict]:
    """Every object of a JSON-lines file (blank lines skipped), each with string values for `fields` (`_id` and
    `text` required, the others default to "")."""
    rows = []
    for n, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        try:
            obj = user_json.loads(line, path, line=n)
        except user_json.JsonError as exc:
            raise DataError(f"{path}: line {n} is not JSON ({exc.reason})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}: line {n} is not a JSON object")
        row = {}
        for key in fields:
            value = obj.get(key, None if key in ("_id", "text") else "")
            if (user_json.is_integer(value) or isinstance(value, float)) and key == "_id":
                value = str(value)  # some BEIR sets write numeric ids
            if value is None or not isinstance(value, str):
                raise DataError(f"{path}: line {n} has no string {key!r} (BEIR layout: _id, title, text)")
            row[key] = value
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no entries")
    return rows


def _unique_ids(rows: list[dict], path: Path, what: str) -> dict[str, int]:
    """Each row's `_id` -> its index; a DataError naming the ids that appear more than once."""
    index: dict[str, int] = {}
    twice = set()
    for i, row in enumerate(rows):
        if row["_id"] in index:
            twice.add(row["_id"])
        index.setdefault(row["_id"], i)
    if twice:
        raise DataError(f"{path}: {len(twice)} {what} id(s) appear more than once ({shown(twice)}); ids must be unique")
    return index


def _qrels(path: Path) -> list[tuple[str, str, int]]:
    """(query id, document id, score) rows of a BEIR qrels TSV; its `query-id corpus-id score` header is optional."""
    rows = []
    for n, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        cells = line.rstrip("\r").split("\t")
        if n == 1 and cells[0].strip().lower() in ("query-id", "query_id", "qid"):
            continue
        if len(cells) != 3:
            raise DataError(
                f"{path}: line {n} has {len(cells)} tab-separated fields; expected query-id, corpus-id, score"
            )
        rows.append((cells[0].strip(), cells[1].strip(), _score(cells[2], path, n)))
    if not rows:
        raise DataError(f"{path}: no relevance judgements")
    return rows


# trec_eval holds a relevance judgement in a C int.
MAX_QRELS_SCORE = 2**31 - 1


def _score(cell: str, path: Path, n: int) -> int:
    """A qrels score as BEIR reads it (`int(float(cell))`: "1.0" is 1), refused unless a finite number in a C
    int's range (`inf`, `nan` or 400 digits would make every nDCG nan, or fail the conversion)."""
    shown = repr(cell) if len(cell) <= 20 else f"{cell[:20]!r}... ({len(cell):,} characters)"
    try:
        value = float(cell)
    except ValueError:
        raise DataError(f"{path}: line {n}: score {shown} is not a number") from None
    if not math.isfinite(value) or abs(value) > MAX_QRELS_SCORE:
        raise DataError(
            f"{path}: line {n}: score {shown} is not a finite number between -{MAX_QRELS_SCORE:,} and "
            f"{MAX_QRELS_SCORE:,}; a score is a graded relevance (0 not relevant, 1 or more relevant)"
        )
    return int(value)


def read_beir(folder: Path, split: str, context_lang: str, question_lang: str) -> RetrievalSet:
    """The retrieval set of a BEIR folder (see the module's docstring); DataError naming the file and line for
    anything that does not fit the layout, and for judgements of unknown queries or documents."""
    qrels_path = beir_file(folder / "qrels", f"{split}.tsv")
    if qrels_path is None:
        entry = _entry(folder / "qrels", f"{split}.tsv")
        if entry is not None:
            raise DataError(f"{folder}: qrels/{_not_a_file(entry)} (BEIR layout)")
        present = sorted(p.name for p in (folder / "qrels").glob("*.tsv*") if p.is_file())
        have = f"; it has {', '.join(present)}" if present else ""
        raise DataError(f"{folder}: no qrels/{split}.tsv (BEIR layout){have}")
    corpus_path, queries_path = beir_file(folder, "corpus.jsonl"), beir_file(folder, "queries.jsonl")
    docs = _jsonl(corpus_path, ("_id", "title", "text"))
    doc_index = _unique_ids(docs, corpus_path, "document")
    queries = _jsonl(queries_path, ("_id", "text"))
    _unique_ids(queries, queries_path, "query")  # one id, two texts: which one a judgement means is unknown
    query_text = {q["_id"]: q["text"] for q in queries}
    judged: dict[str, dict[int, int]] = {}
    unknown_docs, unknown_queries = set(), set()
    for qid, did, score in _qrels(qrels_path):
        if qid not in query_text:
            unknown_queries.add(qid)
        if did not in doc_index:
            unknown_docs.add(did)
        elif score > 0:
            judged.setdefault(qid, {})[doc_index[did]] = score
        else:
            judged.setdefault(qid, {})
    if unknown_queries or unknown_docs:
        parts = [
            f"{len(s)} {what} ({shown(s)})"
            for what, s in (
                ("query ids not in queries.jsonl", unknown_queries),
                ("document ids not in corpus.jsonl", unknown_docs),
            )
            if s
        ]
        raise DataError(f"{qrels_path}: judgements of {' and '.join(parts)}")
    if not any(judged.values()):
        raise DataError(
            f"{qrels_path}: no judgement marks a document relevant (every score is 0 or below), so every question "
            "would score 0; give the qrels of relevant documents (score 1 or more)"
        )
    order = [q["_id"] for q in queries if q["_id"] in judged]
    texts = [f"{d['title']} {d['text']}".strip() for d in docs]
    return RetrievalSet(
        key=pair_key(context_lang, question_lang),
        context_lang=context_lang,
        question_lang=question_lang,
        layout="beir",
        files={"corpus": str(corpus_path), "queries": str(queries_path), "qrels": str(qrels_path)},
        queries=[query_text[q] for q in order],
        query_ids=order,
        corpus=texts,
        doc_ids=[d["_id"] for d in docs],
        qrels=[judged[q] for q in order],
        duplicate_texts=len(texts) - len(set(texts)),
        unjudged=len(queries) - len(order),
        no_relevant=sum(1 for q in order if not judged[q]),
    )
