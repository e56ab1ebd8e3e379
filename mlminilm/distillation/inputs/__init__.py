"""`distill`'s inputs as one concept: each kind (the running text of --data, the translation pairs of --parallel,
the question-passage pairs of --passages) is one module holding one `DistillInput` subclass, which owns reading and
checking its files, its entry in run.json and the --resume check of it, its log line, the teacher's targets for
what the run will draw (through the one target cache, `InputContext.table`), its micro-batch of each step, its
language mix in metrics.jsonl and the summary, and its line in the model card.

The run (distillation/run.py) holds the list of inputs its loss terms read and asks each; the loss-term table
(distillation/terms.py) says which terms read which input (`LossTerm.reads` is an input's `name`). Adding a kind
is its module, its row in KINDS and its rows in the term table.

Which micro-batches steps [start, stop) draw, on every process, is said once: `StepRange.micro_batches`."""

from __future__ import annotations

from typing import Callable

from mlminilm.distillation.inputs.base import DistillInput, InputContext, StepRange
from mlminilm.distillation.inputs.pairs import PairsInput
from mlminilm.distillation.inputs.passages import PassagesInput
from mlminilm.distillation.inputs.text import TextInput

__all__ = ["DistillInput", "InputContext", "StepRange", "kinds", "kind_named", "optional_kinds", "register"]

BUILT_IN: list[type[DistillInput]] = [TextInput, PairsInput, PassagesInput]
REGISTERED: list[type[DistillInput]] = []  # kinds added from outside the package (a test's)


def kinds() -> list[type[DistillInput]]:
    """The kinds of input, in the order a step reads them (its losses depend on it): the running text, the pairs,
    the passages, then any registered."""
    return [*BUILT_IN, *REGISTERED]


def register(kind: type[DistillInput]) -> Callable[[], None]:
    """Add a kind after the built-in ones; returns what removes it again."""
    REGISTERED.append(kind)
    return lambda: REGISTERED.remove(kind)


def optional_kinds() -> list[type[DistillInput]]:
    """The kinds besides the running text (each given by an option of its own)."""
    return kinds()[1:]


def kind_named(name: str) -> type[DistillInput]:
    return next(k for k in kinds() if k.name == name)
