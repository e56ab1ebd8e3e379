"""One distill step's micro-batch: the running text and the parallel pairs through the loss terms, and the
language mix of the steps the loop logs."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from torch import nn

from mlminilm import training
from mlminilm.distillation.terms import logged, weighted_loss
from mlminilm.training import row_sparse_reduce


class DistillStep:
    """One micro-batch of `run`'s running text (`batches`: the loader's iterator, None when no term reads it) and
    its pairs through the terms (`terms_fn`) with the student's forward `model` (DDP-wrapped when distributed):
    `compute`; and the language mix of the logged steps (`on_log`). The plan, the runtime, the teacher, the pairs'
    sampler and the batch are the run's."""

    def __init__(self, run, model: nn.Module, batches, terms_fn: Callable):  # run: run.DistillRun (it imports this)
        self.plan, self.rt, self.teacher, self.pairs = run.plan, run.rt, run.teacher, run.pairs
        self.passages = run.passages  # corpus.passages.PassageSampler, or None without --passages
        self.batch, self.model, self.batches, self.terms_fn = run.batch, model, batches, terms_fn
        self.mix_total: Counter = Counter()

    def compute(self, step: int, micro: int) -> training.StepOutput:
        rt, plan, pairs = self.rt, self.plan, self.pairs
        tokens, info, batch = 0, {}, None
        if self.batches is not None:
            batch = next(self.batches)
            if (batch.step, batch.micro) != (step, micro):  # the loader and the loop must never drift apart
                raise RuntimeError(f"data loader gave step {batch.step}.{batch.micro} for step {step}.{micro}")
            batch = batch.to(rt.device, non_blocking=True)
            tokens, info = batch.tokens, {f"lang:{k}": v for k, v in batch.langs.items()}
        pair_batch = None
        if pairs is not None:
            pair_batch = pairs.batch(step, micro, self.batch.micro_batch, self.batch.grad_accum, rt.rank, rt.world)
            tokens += int(pair_batch.both_mask.sum())  # counted on the host, before the copy
            info.update({f"pair:{k}": v for k, v in pair_batch.langs.items()})
            pair_batch = pair_batch.to(rt.device, non_blocking=True)
        passage_batch = None
        if self.passages is not None:
            passage_batch = self.passages.batch(
                step, micro, self.batch.micro_batch, self.batch.grad_accum, rt.rank, rt.world
            )
            tokens += int(passage_batch.question_mask.sum() + passage_batch.passage_mask.sum())
            info[f"passage:{passage_batch.lang}"] = info.get(f"passage:{passage_batch.lang}", 0) + 1
            passage_batch = passage_batch.to(rt.device, non_blocking=True)
        # The row-sparse embedding reduce sizes its block by the ids the student looks up (shapes: host ints).
        looked_up = (batch.input_ids.numel() if batch is not None else 0) + (
            pair_batch.both_ids.numel() if pair_batch is not None else 0
        )
        if passage_batch is not None:
            looked_up += passage_batch.question_ids.numel() + passage_batch.passage_ids.numel()
        row_sparse_reduce.note_lookups(self.model, looked_up)
        # attention_mask is None unless the batch holds padding (a language's last sequence): known on the host,
        # so no step reads the device to find out, and unpadded steps skip every masking pass.
        parts = self.terms_fn(
            self.teacher,
            plan.teacher_layer,
            self.model,
            batch and batch.input_ids,
            batch and batch.attention_mask,
            plan.cfg,
            plan.head,
            pair_batch,
            passage_batch,
        )
        loss = weighted_loss(parts, plan.cfg)
        return training.StepOutput(loss, logged(parts), tokens, info)

    def on_log(self, step: int, payload: dict) -> None:
        info = payload["info"]
        drawn = {k[5:]: v for k, v in info.items() if k.startswith("lang:")}
        total = sum(drawn.values()) or 1
        if drawn:
            payload["record"]["language_mix"] = {k: round(v / total, 4) for k, v in sorted(drawn.items())}
        self.mix_total.update(drawn)

    def mix(self) -> dict[str, float]:
        total = sum(self.mix_total.values()) or 1
        return {k: round(v / total, 4) for k, v in sorted(self.mix_total.items())}
