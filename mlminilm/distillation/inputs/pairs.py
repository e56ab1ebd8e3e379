"""The translation pairs of `--parallel` (corpus/parallel.py reads and draws them): what run.json records of them
and the --resume check, the log line, the teacher's embedding of every source sentence the run will draw (computed
once into the target cache, so no step runs the teacher on pairs), each step's pairs and their languages."""

from __future__ import annotations

from pathlib import Path

import torch

from mlminilm import logging as mlog
from mlminilm.corpus.parallel import (
    ParallelBatch,
    ParallelPairs,
    ParallelSampler,
    check_same_pairs,
    pairs_record,
    read_parallel,
    step_draw,
)
from mlminilm.distillation.inputs.base import DistillInput, InputContext, StepRange
from mlminilm.distillation.terms import PAIRS

log = mlog.get("mlminilm.distill")  # the command's own logger

RECORD_KEY = "parallel_pairs"


def drawn_sources(pairs: ParallelPairs, seed: int, steps: StepRange) -> list[str]:
    """Every source sentence the pairs' draw of `seed` takes in `steps` on every process, in pair order (what the
    target cache must hold before the sampler is made with it)."""
    found: set[int] = set()
    drawn, at = None, None
    size = steps.micro_batch * steps.accum * steps.world
    for step, micro, rank in steps.micro_batches():
        if step != at:  # a step's draw once, for all its micro-batches
            drawn, at = step_draw(pairs, seed, step, size), step
        start = (micro * steps.world + rank) * steps.micro_batch
        found.update(drawn[start : start + steps.micro_batch].tolist())
    return [pairs.sources[i] for i in sorted(found)]


class PairsInput(DistillInput):
    name = PAIRS
    option = "--parallel"
    field = "parallel"
    info_prefix = "pair:"
    mix_key = "pair_language_mix"
    describes = "pair"

    def __init__(self, cfg, found, sentence=None):
        super().__init__(cfg, found, sentence)
        # --parallel-prefix, or by default the teacher's sentence-transformers "query" prompt (what eval-tatoeba
        # puts before each sentence), else none
        if cfg.parallel_prefix is not None:
            self.prefix = cfg.parallel_prefix
        else:
            self.prefix = (sentence.query_prompt or "") if sentence is not None else ""
        self.sampler: ParallelSampler | None = None
        self.steps: StepRange | None = None
        self.rank = 0

    @classmethod
    def read(cls, cfg, tokenizer=None, sentence=None):
        return read_parallel(cfg.parallel) if cfg.parallel is not None else None

    @classmethod
    def max_lengths(cls, cfg) -> list[tuple[str, int]]:
        return [("parallel-max-length", cfg.parallel_max_length)]

    def words(self) -> dict:
        return {"prefix": self.prefix}

    def record(self) -> dict:
        return {RECORD_KEY: pairs_record(self.found)}

    def check_resume(self, old: dict, record: dict, out: Path) -> None:
        # Exact resume is promised for the pairs the run started on only: another --parallel path is the options'
        # check to name.
        if old.get("config", {}).get("parallel") == record["config"]["parallel"]:
            check_same_pairs(old.get(RECORD_KEY), record[RECORD_KEY], self.cfg.parallel, out)

    def log(self) -> None:
        found = self.found
        langs = ", ".join(f"{k} {v:,}" for k, v in found.lang_counts().items())
        log.info(
            "parallel term: %s pairs from %s (%s), prefix %r%s",
            f"{len(found):,}",
            self.cfg.parallel,
            langs,
            self.prefix,
            f"; {found.skipped} line(s) without a translation skipped" if found.skipped else "",
        )

    def prepare(self, ctx: InputContext, steps: StepRange) -> None:
        cfg = self.cfg
        texts = drawn_sources(self.found, cfg.seed, steps)
        table = ctx.table(texts, prefix=self.prefix, max_length=cfg.parallel_max_length, what="source sentences")
        self.sampler = ParallelSampler(
            self.found,
            ctx.plan.tokenizer,
            prefix=self.prefix,
            max_length=cfg.parallel_max_length,
            seed=cfg.seed,
            target_table=table,
        )
        self.steps, self.rank = steps, ctx.rt.rank

    def batch(self, step: int, micro: int):
        s = self.steps
        return self.sampler.batch(step, micro, s.micro_batch, s.accum, self.rank, s.world)

    def tokens(self, batch) -> int:
        return int(batch.both_mask.sum())  # counted on the host, before the copy

    def langs(self, batch) -> dict[str, int]:
        return batch.langs

    @classmethod
    def student_inputs(cls, batch) -> tuple:
        return ((batch.both_ids, batch.both_mask),)

    @classmethod
    def teacher_side(cls, teacher, batch, cfg, head):
        """The teacher's embeddings of the sources: from the target cache, or computed here."""
        if batch.targets is not None:
            return batch.targets
        from mlminilm.distillation.capture import teacher_embedding

        return teacher_embedding(teacher, batch.source_ids, batch.source_mask, head)

    @classmethod
    def tensors(cls, batch, teacher_side, hidden: tuple) -> dict:
        return {"pairs": batch, "t_pairs": teacher_side, "s_pairs": hidden[0]}

    def longest(self, plan, cfg, size: int, generator, device):
        """The longest pairs the term can draw."""
        vocab_size = plan.data.tokenizer.get("vocab_size") or 2
        src = torch.randint(0, vocab_size, (size, cfg.parallel_max_length), generator=generator).to(device)
        both = torch.cat([src, src])
        return ParallelBatch(src, torch.ones_like(src), both, torch.ones_like(both), {})
