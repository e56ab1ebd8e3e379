"""One distill step's micro-batch: each of the run's inputs' batch through the loss terms, and the language mix of
each input over the steps the loop logs."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from torch import nn

from mlminilm import training
from mlminilm.distillation.inputs.text import TEXT
from mlminilm.distillation.terms import logged, weighted_loss
from mlminilm.training import row_sparse_reduce


def _shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values()) or 1
    return {k: round(v / total, 4) for k, v in sorted(counts.items())}


class DistillStep:
    """One micro-batch of each of `run`'s inputs (its `inputs`, prepared: the running text first) through the terms
    (`terms_fn`) with the student's forward `model` (DDP-wrapped when distributed): `compute`; and each input's
    language mix of the logged steps (`on_log`, `mixes`). The plan, the runtime, the teacher and the batch are the
    run's."""

    def __init__(self, run, model: nn.Module, terms_fn: Callable):  # run: run.DistillRun (it imports this)
        self.plan, self.rt, self.teacher, self.inputs = run.plan, run.rt, run.teacher, run.inputs
        self.batch, self.model, self.terms_fn = run.batch, model, terms_fn
        self.mix_total = {inp.info_prefix: Counter() for inp in self.inputs}

    def compute(self, step: int, micro: int) -> training.StepOutput:
        rt, plan = self.rt, self.plan
        tokens, info, looked_up, batches = 0, {}, 0, {}
        for inp in self.inputs:
            batch = inp.batch(step, micro)
            if batch is None:
                continue
            tokens += inp.tokens(batch)  # counted on the host, before the copy
            for k, v in inp.langs(batch).items():
                info[inp.info_prefix + k] = info.get(inp.info_prefix + k, 0) + v
            # The row-sparse embedding reduce sizes its block by the ids the student looks up (shapes: host ints).
            looked_up += sum(ids.numel() for ids, _ in inp.student_inputs(batch))
            batches[inp.name] = batch.to(rt.device, non_blocking=True)
        row_sparse_reduce.note_lookups(self.model, looked_up)
        text = batches.pop(TEXT, None)
        # attention_mask is None unless the batch holds padding (a language's last sequence): known on the host,
        # so no step reads the device to find out, and unpadded steps skip every masking pass.
        parts = self.terms_fn(
            self.teacher,
            plan.teacher_layer,
            self.model,
            text and text.input_ids,
            text and text.attention_mask,
            plan.cfg,
            plan.head,
            batches,
        )
        loss = weighted_loss(parts, plan.cfg)
        return training.StepOutput(loss, logged(parts), tokens, info)

    def on_log(self, step: int, payload: dict) -> None:
        info = payload["info"]
        for inp in self.inputs:
            n = len(inp.info_prefix)
            drawn = {k[n:]: v for k, v in info.items() if k.startswith(inp.info_prefix)}
            if drawn:
                payload["record"][inp.mix_key] = _shares(drawn)
            self.mix_total[inp.info_prefix].update(drawn)

    def mixes(self) -> dict[str, dict[str, float]]:
        """Each input's language mix over the logged steps, by its key (the running text's `language_mix`)."""
        return {inp.mix_key: _shares(self.mix_total[inp.info_prefix]) for inp in self.inputs}
