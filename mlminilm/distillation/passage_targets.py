"""`distill --passages` in a run: what run.json records of the passages, the --resume check, the log line, and the
passages' sampler made with the teacher's embeddings of every question and passage the run will draw (computed
once into the teacher-target cache, as the parallel term's sources are: distillation/targets.py)."""

from __future__ import annotations

from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.corpus.passages import PassageDraw, PassageSampler, check_same_passages, nearest, passages_record
from mlminilm.distillation import targets

log = mlog.get("mlminilm.distill")  # the command's own logger

RECORD_KEY = "passage_pairs"  # run.json's record of the passages (as `parallel_pairs` of the pairs)


def record(run_record: dict, plan) -> None:
    """Add the passages' record (count, languages, digest) to the run record."""
    if plan.passages is not None:
        run_record[RECORD_KEY] = passages_record(plan.passages)


def check_resume(old: dict, run_record: dict, plan, out: Path) -> None:
    """On --resume with the same --passages path: CheckpointError unless the passages are those the run began on."""
    if plan.passages is not None and old.get("config", {}).get("passages") == run_record["config"]["passages"]:
        check_same_passages(old.get(RECORD_KEY), run_record[RECORD_KEY], plan.cfg.passages, out)


def log_passages(plan) -> None:
    found = plan.passages
    if found is None:
        return
    langs = ", ".join(f"{k} {v:,}" for k, v in found.lang_counts().items())
    log.info(
        "passage terms: %s question-passage pairs from %s (%s), prompts %r / %r%s",
        f"{len(found):,}",
        plan.cfg.passages,
        langs,
        *plan.prompts,
        f"; {found.skipped} line(s) without a tab or a side skipped" if found.skipped else "",
    )


def passage_sampler(
    plan, rt, teacher, batch, start: int, root: Path, advice: str, teacher_digest: str | None = None
) -> PassageSampler:
    """The passages' per-micro-batch draw, with the teacher's embedding of every question (its prompt, cut at
    --parallel-max-length) and every passage (its prompt, cut at --passage-max-length) that steps [start,
    max_steps) draw on any process: two tables of the cache (the fingerprint holds the prompt and the length).
    With --passage-neighbours every passage is embedded first: the draw groups passages by those embeddings.
    `teacher_digest`: the teacher's targets.module_digest when the run has it (else each table computes it)."""
    cfg = plan.cfg
    lengths = (cfg.parallel_max_length, cfg.passage_max_length)

    def table(texts: list[str], side: int):
        return targets.prepare(
            root,
            teacher,
            plan.tokenizer,
            texts,
            plan.head.modes,
            plan.head.normalize,
            prefix=plan.prompts[side],
            max_length=lengths[side],
            device=rt.device,
            rank=rt.rank,
            world=rt.world,
            barrier=rt.barrier,
            advice=advice,
            teacher_digest=teacher_digest,
            what=("questions", "passages")[side],
        )

    draw = PassageDraw(plan.passages, cfg.seed)
    passage_table = None
    if cfg.passage_neighbours:
        passage_table = table(sorted(set(plan.passages.passages)), 1)
        neighbours = {
            lang: nearest(passage_table(draw.passage_groups(lang)).float().numpy(), cfg.passage_neighbours)
            for lang in draw.langs
        }
        draw = PassageDraw(plan.passages, cfg.seed, neighbours)
    questions, passages = draw.drawn_texts(start, cfg.max_steps, batch.micro_batch, batch.grad_accum * rt.world)
    tables = (table(questions, 0), table(passages, 1) if passage_table is None else passage_table)
    return PassageSampler(draw, plan.tokenizer, prompts=plan.prompts, lengths=lengths, tables=tables)
