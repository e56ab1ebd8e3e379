"""The interface every kind of `distill` input implements (`DistillInput`), what one asks of the run to make its
teacher targets (`InputContext`), and the steps whose micro-batches it draws (`StepRange`): which micro-batches
steps [start, stop) draw, on every process, is said once, `StepRange.micro_batches`. The kinds themselves are the
other modules of this package; the package's `__init__` lists them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterator


@dataclass(frozen=True)
class StepRange:
    """Optimizer steps [start, stop) of a run whose steps are `accum` micro-batches of `micro_batch` rows on each
    of `world` processes."""

    start: int
    stop: int
    micro_batch: int
    accum: int
    world: int

    def micro_batches(self) -> Iterator[tuple[int, int, int]]:
        """Every (step, micro, rank) of the range: what the teacher targets made before training must cover."""
        for step in range(self.start, self.stop):
            for micro in range(self.accum):
                for rank in range(self.world):
                    yield step, micro, rank


@dataclass(frozen=True)
class InputContext:
    """What an input needs to make its teacher targets and its draw: the run's plan, runtime, loaded teacher (and
    its targets.module_digest), and the teacher-target cache's folder with how an error writing it says to move it."""

    plan: object  # distillation.plan.DistillPlan
    rt: object  # training.Runtime
    teacher: object
    teacher_digest: str | None
    cache: Path
    advice: str

    def table(self, texts: list[str], *, prefix: str, max_length: int, what: str):
        """The teacher's sentence embeddings of `texts` (under `prefix`, cut at `max_length`), from the cache or
        computed once now (under DDP each rank a share): a targets.TargetTable."""
        from mlminilm.distillation import targets

        plan, rt = self.plan, self.rt
        return targets.prepare(
            self.cache,
            self.teacher,
            plan.tokenizer,
            texts,
            plan.head.modes,
            plan.head.normalize,
            prefix=prefix,
            max_length=max_length,
            device=rt.device,
            rank=rt.rank,
            world=rt.world,
            barrier=rt.barrier,
            advice=self.advice,
            teacher_digest=self.teacher_digest,
            what=what,
        )


class DistillInput:
    """One kind of input of a run. Class attributes say what it is; an instance holds what was read (`found`) and,
    once `prepare`d, its draw. Every method has the default of an input that has nothing of that to say."""

    name: ClassVar[str]  # what the term table's rows read (terms.LossTerm.reads), and its batch's key in a step
    option: ClassVar[str]  # the option that gives it (--parallel)
    field: ClassVar[str]  # its DistillConfig field
    info_prefix: ClassVar[str]  # its language counts' prefix in a step's info
    mix_key: ClassVar[str]  # its language mix's key in metrics.jsonl and the summary
    describes: ClassVar[str] = ""  # what its language mix is of, in the log line

    def __init__(self, cfg, found, sentence=None):
        self.cfg, self.found, self.sentence = cfg, found, sentence

    # ----------------------------------------------------------------- before anything loads (the plan)

    @classmethod
    def read(cls, cfg, tokenizer=None, sentence=None):
        """Its files read and checked (DataError); None when its option is not given. `tokenizer` and `sentence`
        are the teacher's (its sentence-transformers setup), for a kind that cuts what it reads by tokens."""
        return None

    @classmethod
    def reads(cls, cfg) -> bool:
        """Whether a loss term on reads it."""
        from mlminilm.distillation.terms import terms_on

        return bool(terms_on(cfg, (cls.name,)))

    @classmethod
    def max_lengths(cls, cfg) -> list[tuple[str, int]]:
        """The token limits it cuts at (option without --, value): checked against the teacher's positions."""
        return []

    def words(self) -> dict:
        """Its part of the loss in words (terms.Words fields)."""
        return {}

    def languages(self) -> list[str]:
        return list(self.found.lang_counts()) if self.found is not None else []

    def card(self) -> dict:
        """Its entries in the model card."""
        return {self.field: str(getattr(self.cfg, self.field))}

    # ----------------------------------------------------------------- the run record and --resume

    def record(self) -> dict:
        """Its entries in run.json."""
        return {}

    def check_resume(self, old: dict, record: dict, out: Path) -> None:
        """On --resume: CheckpointError unless what it reads is what the run recorded (only the recorded run's
        record `old` and this run's `record` are read)."""

    def log(self) -> None:
        """Its log line as the run starts."""

    # ----------------------------------------------------------------- the steps

    def prepare(self, ctx: InputContext, steps: StepRange) -> None:
        """Its teacher targets for every micro-batch of `steps` and its draw, before the first step."""

    def batch(self, step: int, micro: int):
        """This process's micro-batch `micro` of `step`, on the host (None: it draws nothing)."""
        return None

    def close(self) -> None:
        """Let go of what `prepare` started (a loader's workers)."""

    # what a step asks of its batch
    def tokens(self, batch) -> int:
        return 0

    def langs(self, batch) -> dict[str, int]:
        return {}

    @classmethod
    def student_inputs(cls, batch) -> tuple:
        """The (ids, mask) pairs the student's forward runs on, in order."""
        return ()

    @classmethod
    def teacher_side(cls, teacher, batch, cfg, head):
        """What the teacher computes of the batch for the terms (no gradient); None when nothing."""
        return None

    @classmethod
    def tensors(cls, batch, teacher_side, hidden: tuple) -> dict:
        """The terms.StepTensors fields of this input: its batch, the teacher's side and the student's last
        hidden states of `student_inputs` (`hidden`, in that order)."""
        return {}

    def longest(self, plan, cfg, size: int, generator, device):
        """The largest batch of `size` rows it can draw, random ids (the --batch-size auto probe on CUDA)."""
        return None
