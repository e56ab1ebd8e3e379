"""The running text (`--data`, prepared by `mlminilm prepare`): what run.json records of it and the --resume check
(distillation/run_inputs.py), and each step's micro-batch from the loader (corpus/loader.py), with its languages.

Without a term that reads running text the run still has this input: its prepared data is then a stand-in that
holds none (plan.NoRunningText), which gives the run its sequence length, and it draws nothing."""

from __future__ import annotations

from pathlib import Path

from mlminilm.distillation import run_inputs
from mlminilm.distillation.inputs.base import DistillInput, InputContext, StepRange

TEXT = "running text"


class TextInput(DistillInput):
    name = TEXT
    option = "--data"
    field = "data"
    info_prefix = "lang:"
    mix_key = "language_mix"

    def __init__(self, cfg, found, sentence=None):
        super().__init__(cfg, found, sentence)
        self.batches = None  # the loader's iterator, once prepared (None when no term reads running text)
        self.loader = None

    @classmethod
    def reads(cls, cfg) -> bool:
        from mlminilm.distillation.terms import uses_running_text

        return uses_running_text(cfg)

    def languages(self) -> list[str]:
        return list(self.found.languages)

    def record(self) -> dict:
        return {
            "data_manifest": self.found.manifest.get("tokenizer"),
            run_inputs.DATA_KEY: run_inputs.data_record(self.found),
        }

    def check_resume(self, old: dict, record: dict, out: Path) -> None:
        run_inputs.check_same_data(old, record, out)

    def prepare(self, ctx: InputContext, steps: StepRange) -> None:
        """The loader of this process's micro-batches of `steps` (workers started at its first read)."""
        if not self.reads(self.cfg):
            return
        from mlminilm.corpus.loader import default_pin_memory, default_workers, make_loader
        from mlminilm.corpus.sampling import BatchSampler

        cfg, rt, data = self.cfg, ctx.rt, self.found
        sampler = BatchSampler({lang: data.num_sequences(lang) for lang in data.languages}, cfg.alpha, cfg.seed)
        workers = cfg.data_workers if cfg.data_workers is not None else default_workers(rt.device.type, rt.local_world)
        self.loader = make_loader(
            data,
            sampler,
            batch_size=steps.micro_batch,
            accum=steps.accum,
            rank=rt.rank,
            world=steps.world,
            pad_id=data.tokenizer.get("pad_token_id"),
            start_step=steps.start,
            max_steps=steps.stop,
            workers=workers,
            pin_memory=default_pin_memory(rt.device.type),
        )
        self.batches = iter(self.loader)

    def batch(self, step: int, micro: int):
        if self.batches is None:
            return None
        batch = next(self.batches)
        if (batch.step, batch.micro) != (step, micro):  # the loader and the loop must never drift apart
            raise RuntimeError(f"data loader gave step {batch.step}.{batch.micro} for step {step}.{micro}")
        return batch

    def close(self) -> None:
        if self.loader is not None:
            self.loader.close()

    def tokens(self, batch) -> int:
        return batch.tokens

    def langs(self, batch) -> dict[str, int]:
        return batch.langs

    @classmethod
    def student_inputs(cls, batch) -> tuple:
        return ((batch.input_ids, batch.attention_mask),)
