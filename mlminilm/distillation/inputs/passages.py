"""The question-passage pairs of `--passages` (corpus/passages.py reads and draws them): what run.json records of
them and the --resume check, the log line, the teacher's embeddings of every question and passage the run will
draw (two tables of the target cache: the fingerprint holds the prompt and the length), each micro-batch's pairs
(one language each) and their languages."""

from __future__ import annotations

from pathlib import Path

import torch

from mlminilm import logging as mlog
from mlminilm.corpus.documents import DocumentRule
from mlminilm.corpus.passages import (
    PassageBatch,
    PassageDraw,
    PassageSampler,
    check_same_passages,
    nearest,
    passages_record,
    read_passages,
)
from mlminilm.distillation.inputs.base import DistillInput, InputContext, StepRange
from mlminilm.distillation.terms import PASSAGES, teacher_reads_passages

log = mlog.get("mlminilm.distill")  # the command's own logger

RECORD_KEY = "passage_pairs"  # run.json's record of the passages (as `parallel_pairs` of the pairs)


def prompts_of(sentence) -> tuple[str, str]:
    """The prompts of the questions and the passages: the teacher's sentence-transformers 'query' prompt and its
    'passage' (else 'document') one, as eval-retrieval embeds them (models.sentence_encoder reads them); none for a
    teacher without them."""
    return ("", "") if sentence is None else (sentence.query_prompt or "", sentence.passage_prompt or "")


def drawn_texts(draw: PassageDraw, steps: StepRange) -> tuple[list[str], list[str]]:
    """Every question and every passage `draw` takes in `steps` on every process, in pair order (what the target
    cache must hold)."""
    found: set[int] = set()
    for step, micro, rank in steps.micro_batches():
        found.update(draw.indices(step, micro * steps.world + rank, steps.micro_batch)[1])
    order = sorted(found)
    return [draw.pairs.questions[i] for i in order], [draw.pairs.passages[i] for i in order]


class PassagesInput(DistillInput):
    name = PASSAGES
    option = "--passages"
    field = "passages"
    info_prefix = "passage:"
    mix_key = "passage_language_mix"
    describes = "passage"

    def __init__(self, cfg, found, sentence=None):
        super().__init__(cfg, found, sentence)
        self.prompts = prompts_of(sentence)
        self.sampler: PassageSampler | None = None
        self.steps: StepRange | None = None
        self.rank = 0

    @classmethod
    def read(cls, cfg, tokenizer=None, sentence=None):
        if cfg.passages is None:
            return None
        # Documents are cut into passages of --passage-max-length tokens under the passages' prompt
        # (corpus/documents.py); pairs files are read as they are.
        rule = DocumentRule(tokenizer, cfg.passage_max_length, prompts_of(sentence)[1], cfg.seed)
        return read_passages(cfg.passages, rule)

    @classmethod
    def max_lengths(cls, cfg) -> list[tuple[str, int]]:
        return [("parallel-max-length", cfg.parallel_max_length), ("passage-max-length", cfg.passage_max_length)]

    def words(self) -> dict:
        return {"prompts": self.prompts}

    def record(self) -> dict:
        return {RECORD_KEY: passages_record(self.found)}

    def check_resume(self, old: dict, record: dict, out: Path) -> None:
        # Documents make other pairs under another length or seed: the check of those options names them.
        made_by = ("passages", "passage_max_length", "seed")
        if all(old.get("config", {}).get(k) == record["config"][k] for k in made_by):
            check_same_passages(old.get(RECORD_KEY), record[RECORD_KEY], self.cfg.passages, out)

    def log(self) -> None:
        found = self.found
        langs = ", ".join(f"{k} {v:,}" for k, v in found.lang_counts().items())
        made = ""
        if found.documents:
            made = (
                f" ({found.documents:,} documents cut into passages of at most {self.cfg.passage_max_length} tokens, "
                "one sentence of each taken out as its question)"
            )
        log.info(
            "passage terms: %s question-passage pairs%s from %s (%s), prompts %r / %r%s",
            f"{len(found):,}",
            made,
            self.cfg.passages,
            langs,
            *self.prompts,
            f"; {found.skipped} line(s) without a tab or a side skipped" if found.skipped else "",
        )

    def prepare(self, ctx: InputContext, steps: StepRange) -> None:
        """The draw, with the teacher's embedding of every question (its prompt, cut at --parallel-max-length) and
        every passage (its prompt, cut at --passage-max-length) of `steps`. With --passage-neighbours every passage
        is embedded first: the draw groups passages by those embeddings."""
        cfg, found = self.cfg, self.found
        lengths = (cfg.parallel_max_length, cfg.passage_max_length)

        def table(texts: list[str], side: int):
            what = ("questions", "passages")[side]
            return ctx.table(texts, prefix=self.prompts[side], max_length=lengths[side], what=what)

        draw = PassageDraw(found, cfg.seed)
        passage_table = None
        if cfg.passage_neighbours:
            passage_table = table(sorted(set(found.passages)), 1)
            neighbours = {
                lang: nearest(passage_table(draw.passage_groups(lang)).float().numpy(), cfg.passage_neighbours)
                for lang in draw.langs
            }
            draw = PassageDraw(found, cfg.seed, neighbours)
        questions, passages = drawn_texts(draw, steps)
        tables = (table(questions, 0), table(passages, 1) if passage_table is None else passage_table)
        self.sampler = PassageSampler(draw, ctx.plan.tokenizer, prompts=self.prompts, lengths=lengths, tables=tables)
        self.steps, self.rank = steps, ctx.rt.rank

    def batch(self, step: int, micro: int):
        s = self.steps
        return self.sampler.batch(step, micro, s.micro_batch, s.accum, self.rank, s.world)

    def tokens(self, batch) -> int:
        return int(batch.question_mask.sum() + batch.passage_mask.sum())

    def langs(self, batch) -> dict[str, int]:
        return {batch.lang: int(batch.question_ids.shape[0])}  # the pairs drawn, all of one language

    @classmethod
    def student_inputs(cls, batch) -> tuple:
        return ((batch.question_ids, batch.question_mask), (batch.passage_ids, batch.passage_mask))

    @classmethod
    def teacher_side(cls, teacher, batch, cfg, head):
        """The teacher's last hidden states of the passages when a term reads them (token states are too many to
        cache)."""
        if not teacher_reads_passages(cfg):
            return None
        from mlminilm.distillation.capture import last_hidden

        return last_hidden(teacher, batch.passage_ids, batch.passage_mask)

    @classmethod
    def tensors(cls, batch, teacher_side, hidden: tuple) -> dict:
        return {"passages": batch, "s_passages": (hidden[0], hidden[1]), "t_passage_hidden": teacher_side}

    def longest(self, plan, cfg, size: int, generator, device):
        """The longest question-passage batch the terms can draw (random ids, unit targets)."""
        vocab_size = plan.data.tokenizer.get("vocab_size") or 2
        q = torch.randint(0, vocab_size, (size, cfg.parallel_max_length), generator=generator).to(device)
        p = torch.randint(0, vocab_size, (size, cfg.passage_max_length), generator=generator).to(device)
        width = plan.teacher_config.hidden_size * len(plan.head.modes)
        target = torch.nn.functional.normalize(torch.randn(size, width, generator=generator), dim=-1).to(device)
        return PassageBatch(q, torch.ones_like(q), p, torch.ones_like(p), "", target, target)
