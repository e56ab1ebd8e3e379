"""Question-passage pairs for `distill --passages`: reading them, the stateless draw of each micro-batch, and what
run.json records of them.

A pairs file (`.tsv`, optionally gzipped) holds one pair per line, `question<TAB>passage`; a SQuAD-format file
(`.json`, optionally gzipped) gives each question with its context; a documents file (`.txt`, optionally gzipped)
holds one document per line, which corpus/documents.py makes into pairs by its stated rule. A file's name is its
language code (`ar.tsv`, `en.txt.gz`, `de.json`; a SQuAD file may bear its dataset's name, `xquad.de.json`,
`tydiqa.goldp.ar.dev.json`); `--passages` names one such file or a directory of them (the kinds may sit side by
side). Lines are read as the parallel readers read them
(mlminilm/corpus/parallel_files.py): the same cleaning, a pair's texts cut to MAX_SENTENCE_CHARS characters, a
damaged gzip one error line. A pairs line without a tab, or with an empty side, is skipped and counted (said once).

Each micro-batch draws its pairs from ONE language (a language with n pairs is chosen with probability
proportional to sqrt(n)) and never the same passage twice: the in-batch score term ranks a question's passage
among the batch's other passages, which must be other passages. The draw of micro-batch `micro` on process `rank`
is a function of (seed, step, micro * world + rank) alone, on a stream of its own: a resumed run draws what the
uninterrupted one drew, and N processes draw what one process with N times the accumulation draws.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from mlminilm import logging as mlog
from mlminilm.corpus.documents import DocumentRule, pairs_from_documents
from mlminilm.corpus.parallel import check_same_pairs, pad_length, pad_to
from mlminilm.corpus.parallel_files import MAX_SENTENCE_CHARS, SUFFIXES, clean, text_lines
from mlminilm.errors import DataError

log = mlog.get(__name__)

OPTION = "--passages"
DOCUMENT_SUFFIXES = (".txt", ".txt.gz")  # a documents file; the other SUFFIXES hold pairs
SQUAD_SUFFIXES = (".json", ".json.gz")  # a SQuAD-format file: each question with its context
FILE_SUFFIXES = (*SUFFIXES, *SQUAD_SUFFIXES)
# The passages' draw uses its own stream, apart from the running text's and the parallel pairs' (STREAM 7).
STREAM = 11


@dataclass(frozen=True)
class PassagePairs:
    questions: tuple[str, ...]
    passages: tuple[str, ...]
    langs: tuple[str, ...]  # each pair's language: its file's name
    skipped: int  # lines without a tab, or with an empty question or passage
    cut: int = 0  # texts cut to MAX_SENTENCE_CHARS
    documents: int = 0  # documents read from documents files (their pairs are among the pairs)
    single: int = 0  # passages cut from documents that held one sentence: no pair

    def __len__(self) -> int:
        return len(self.questions)

    def lang_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(self.langs).items()))


def file_language(path: Path) -> str:
    """The language code a passages file's name is (`ar.tsv.gz` -> ar; a SQuAD-format file may also bear its
    dataset's name, `tydiqa.goldp.ar.dev.json`); DataError for any other name."""
    from mlminilm.langs import accept_codes, warn_unregistered

    if path.name.endswith(SQUAD_SUFFIXES) and (lang := _squad_language(path)) is not None:
        return lang
    suffixes = sorted(FILE_SUFFIXES, key=len, reverse=True)
    stem = next((path.name[: -len(s)] for s in suffixes if path.name.endswith(s)), "")
    try:
        unknown = accept_codes([stem])
    except DataError as exc:
        raise DataError(
            f"{OPTION} {path}: a passages file is named by its language code (ar.tsv, en.txt.gz, de.json; "
            f"xquad.de.json), not {path.name!r} ({exc})"
        ) from None
    warn_unregistered(unknown, f"taken as {OPTION} languages")
    return stem


def _squad_language(path: Path) -> str | None:
    """The language of a SQuAD-format file by its dataset's name (MLQA, XQuAD, TyDiQA-GoldP); None for another
    name. Its questions must share its passages' language: a micro-batch draws one language."""
    from mlminilm.tasks.squad import qa_file_info

    try:
        info = qa_file_info(path)
    except DataError:
        return None
    if info.context_lang != info.question_lang:
        raise DataError(
            f"{OPTION} {path}: questions in {info.question_lang} and passages in {info.context_lang}; the passage "
            "terms draw each micro-batch from one language: give the monolingual files"
        )
    return info.context_lang


def _pair_rows(path: Path) -> Iterator[tuple[str, str]]:
    """(question, passage) of each non-blank line of a pairs file (("", "") for a line without a tab: skipped),
    or of each question of a SQuAD-format file with its context (the answers are not read)."""
    if path.name.endswith(SQUAD_SUFFIXES):
        from mlminilm.tasks.squad import read_squad

        try:
            data = read_squad(path, strict=False, unique_ids=False)
        except DataError as exc:
            raise DataError(f"{OPTION} {exc}") from None
        yield from ((example.question, example.context) for example in data.examples)
        return
    for line in text_lines(path, OPTION):
        if line.strip():
            question, tab, passage = line.partition("\t")
            yield (question, passage) if tab else ("", "")


def _files(path: Path) -> list[Path]:
    if not path.exists():
        raise DataError(f"{OPTION} {path} does not exist")
    if path.is_file():
        if not path.name.endswith(FILE_SUFFIXES):
            raise DataError(f"{OPTION} {path}: not a passages file ({', '.join('*' + s for s in FILE_SUFFIXES)})")
        return [path]
    found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(FILE_SUFFIXES))
    if not found:
        raise DataError(
            f"{OPTION} {path} holds no passages files (LANG.tsv[.gz]: one question<TAB>passage pair per line; "
            "LANG.txt[.gz]: one document per line; LANG.json[.gz]: SQuAD format)"
        )
    return found


def _documents(path: Path, lang: str, rule: DocumentRule | None):
    """The pairs of one documents file (corpus/documents.py's rule); DataError for a line holding a tab."""
    if rule is None:
        raise DataError(f"{OPTION} {path}: a documents file is read only by distill, which knows the teacher")
    documents = []
    for number, line in enumerate(text_lines(path, OPTION), 1):
        if "\t" in line:
            raise DataError(
                f"{OPTION} {path}, line {number}: holds a tab, but a .txt file holds documents (one per line); "
                f"question<TAB>passage pairs go in {lang}.tsv"
            )
        text, _ = clean(line, limit=None)
        if text:
            documents.append(text)
    return pairs_from_documents(documents, lang, rule, f"{OPTION} {path}")


def read_passages(spec, rule: DocumentRule | None = None) -> PassagePairs:
    """Every (question, passage) pair of `spec` (a file or a directory of files named by language code): those of
    its pairs files as they are, those of its documents files made by `rule` (corpus/documents.py); DataError when
    a name is not a language code, a file is damaged, or nothing gives a pair."""
    files = [(f, file_language(f)) for f in _files(Path(spec))]  # every name checked before any file is read
    questions, passages, langs = [], [], []
    skipped = cut = documents = single = 0
    for path, lang in files:
        if path.name.endswith(DOCUMENT_SUFFIXES):
            made = _documents(path, lang, rule)
            questions += made.questions
            passages += made.passages
            langs += [lang] * len(made.questions)
            documents, single = documents + made.documents, single + made.single
            continue
        for row in _pair_rows(path):
            (question, cut_q), (passage, cut_p) = clean(row[0]), clean(row[1])
            cut += cut_q + cut_p
            if not question or not passage:
                skipped += 1
                continue
            questions.append(question)
            passages.append(passage)
            langs.append(lang)
    if not questions:
        said = f"; {skipped} line(s) had no tab or an empty side" if skipped else ""
        said += f"; {single} passage(s) of documents held one sentence" if single else ""
        raise DataError(
            f"{OPTION} {spec} holds no question-passage pairs (each .tsv line: a question, a tab, its passage; each "
            f".txt line: a document of two or more sentences{said})"
        )
    if skipped:
        log.warning("%s %s: %d line(s) without a question, a tab and a passage skipped", OPTION, spec, skipped)
    if cut:
        log.warning("%s %s: %d text(s) longer than %d characters cut", OPTION, spec, cut, MAX_SENTENCE_CHARS)
    if single:
        log.warning("%s %s: %d passage(s) of documents held one sentence and gave no question", OPTION, spec, single)
    return PassagePairs(tuple(questions), tuple(passages), tuple(langs), skipped, cut, documents, single)


def passages_record(pairs: PassagePairs) -> dict:
    """What run.json records of the passages a run reads (`passage_pairs`): counts, languages and a digest of
    every pair in order, so that --resume can tell when they changed."""
    h = hashlib.blake2b(digest_size=16)
    for triple in zip(pairs.questions, pairs.passages, pairs.langs):
        h.update("\0".join(triple).encode() + b"\0\0")  # NUL never survives cleaning
    counts = {"pairs": len(pairs), "skipped_lines": pairs.skipped, "languages": pairs.lang_counts()}
    made = {"documents": pairs.documents, "one_sentence_passages": pairs.single} if pairs.documents else {}
    return {**counts, **made, "digest": h.hexdigest()}


def check_same_passages(recorded: dict | None, now: dict, spec, out) -> None:
    """On --resume: CheckpointError unless the passages read now are those the run recorded (`passage_pairs`),
    the parallel pairs' check with the passages' words (their record always has its digest)."""
    check_same_pairs(recorded, now, spec, out, OPTION, "the passages as they were", "the new ones")


@dataclass
class PassageBatch:
    """One micro-batch of question-passage pairs of one language, tokenised (question_* [B, Sq], passage_*
    [B, Sp]), with the teacher's embeddings of the questions and of the passages ([B, H] each) from the target
    cache."""

    question_ids: torch.Tensor
    question_mask: torch.Tensor
    passage_ids: torch.Tensor
    passage_mask: torch.Tensor
    lang: str
    question_targets: torch.Tensor
    passage_targets: torch.Tensor

    def to(self, device, non_blocking: bool = False) -> PassageBatch:
        moved = [
            t.to(device, non_blocking=non_blocking)
            for t in (self.question_ids, self.question_mask, self.passage_ids, self.passage_mask)
        ]
        targets = [t.to(device, non_blocking=non_blocking) for t in (self.question_targets, self.passage_targets)]
        return PassageBatch(*moved, self.lang, *targets)


NEAREST_ROWS = 1024  # rows of the similarity matrix held at once: a language's n x n matrix need not fit in memory


def nearest(vectors: np.ndarray, k: int) -> np.ndarray:
    """[n, min(k, n-1)]: each row's k nearest other rows by cosine similarity, nearest first (ties: the lower
    index first)."""
    v = np.asarray(vectors, dtype=np.float64)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    k = min(k, len(v) - 1)
    found = np.empty((len(v), k), dtype=np.int64)
    for start in range(0, len(v), NEAREST_ROWS):
        sims = v[start : start + NEAREST_ROWS] @ v.T
        rows = np.arange(len(sims))
        sims[rows, start + rows] = -np.inf  # a row is not its own neighbour
        found[start : start + len(sims)] = np.argsort(-sims, axis=1, kind="stable")[:, :k]  # stable: ties by index
    return found


class PassageDraw:
    """The stateless draw of question-passage pairs: which pairs micro-batch `slot` of `step` holds.

    With `neighbours` (per language, [groups, k] of mlminilm.corpus.passages.nearest over the teacher's passage
    embeddings, in the order of `passage_groups`), a micro-batch is made of groups: a passage drawn at random, then
    those of its k nearest not in the batch yet, until the batch is full (--passage-neighbours)."""

    def __init__(self, pairs: PassagePairs, seed: int, neighbours: dict[str, np.ndarray] | None = None):
        self.pairs, self.seed, self.neighbours = pairs, seed, neighbours
        self.langs = sorted(set(pairs.langs))
        # Per language, its distinct passages, each with the indices of the pairs that have it.
        groups: dict[str, dict[str, list[int]]] = {lang: {} for lang in self.langs}
        for i, (passage, lang) in enumerate(zip(pairs.passages, pairs.langs)):
            groups[lang].setdefault(passage, []).append(i)
        self.groups = {lang: list(found.values()) for lang, found in groups.items()}
        per_lang = pairs.lang_counts()
        counts = np.array([per_lang[lang] for lang in self.langs], dtype=np.float64)
        self.probabilities = np.sqrt(counts) / np.sqrt(counts).sum()

    def indices(self, step: int, slot: int, batch: int) -> tuple[str, list[int]]:
        """The language and the pairs of micro-batch `slot` (micro * world + rank) of `step`: `batch` pairs (fewer
        when the language has fewer distinct passages), no passage twice."""
        rng = np.random.default_rng([self.seed, STREAM, step, slot])
        lang = self.langs[int(rng.choice(len(self.langs), p=self.probabilities))]
        groups = self.groups[lang]
        size = min(batch, len(groups))
        if self.neighbours is None:
            picked = rng.choice(len(groups), size=size, replace=False)
        else:
            picked = _grouped(rng.permutation(len(groups)), self.neighbours[lang], size)
        return lang, [groups[g][int(rng.integers(len(groups[g])))] for g in picked]

    def passage_groups(self, lang: str) -> list[str]:
        """The distinct passages of `lang` in the order the draw numbers them (the rows `neighbours` expects)."""
        return [self.pairs.passages[members[0]] for members in self.groups[lang]]


def _grouped(anchors: np.ndarray, neighbours: np.ndarray, size: int) -> list[int]:
    """`size` distinct groups: each anchor in turn that is not in yet, followed by those of its neighbours not in
    yet."""
    picked: list[int] = []
    seen: set[int] = set()
    for anchor in anchors:
        if int(anchor) in seen:
            continue
        for g in (int(anchor), *(int(n) for n in neighbours[anchor])):
            if len(picked) == size:
                return picked
            if g not in seen:
                seen.add(g)
                picked.append(g)
    return picked


class PassageSampler:
    """Each micro-batch's question-passage pairs, tokenised, with their targets (`question_table`,
    `passage_table`: distillation.targets.TargetTable of the teacher's embeddings under the two prompts)."""

    def __init__(self, draw: PassageDraw, tokenizer, *, prompts: tuple[str, str], lengths: tuple[int, int], tables):
        self.draw, self.tokenizer = draw, tokenizer
        self.prompts, self.lengths, self.tables = prompts, lengths, tables

    def _encode(self, texts: list[str], prompt: str, max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.tokenizer(
            [prompt + t for t in texts],
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
            return_token_type_ids=False,
        )
        ids, mask = enc["input_ids"], enc["attention_mask"]
        length, side = pad_length(ids.shape[1], max_length), self.tokenizer.padding_side
        return pad_to(ids, length, self.tokenizer.pad_token_id, side), pad_to(mask, length, 0, side)

    def batch(self, step: int, micro: int, batch: int, accum: int, rank: int, world: int) -> PassageBatch:
        lang, picked = self.draw.indices(step, micro * world + rank, batch)
        questions = [self.draw.pairs.questions[i] for i in picked]
        passages = [self.draw.pairs.passages[i] for i in picked]
        q_ids, q_mask = self._encode(questions, self.prompts[0], self.lengths[0])
        p_ids, p_mask = self._encode(passages, self.prompts[1], self.lengths[1])
        return PassageBatch(q_ids, q_mask, p_ids, p_mask, lang, self.tables[0](questions), self.tables[1](passages))
