"""The training step reads nothing from the device outside logging and checkpoint steps (issue 9, item 3).

On CUDA every `.item()`, `bool(tensor)`, `int(tensor)`, `.tolist()` or `.numpy()` stalls the host until the GPU has
caught up. On CPU there is nothing to stall, but the calls are the same Python calls, so counting them here proves
the GPU step free of them: every such call made during a real `distill` run is attributed to the optimizer step it
happened in, and only the steps that end a log interval or save a checkpoint may have any.
"""

from __future__ import annotations

import torch

from helpers import prepare_data, save_tiny_teacher
from mlminilm import distill, training
from mlminilm.config import DistillConfig

READS = ("item", "tolist", "__bool__", "__int__", "__float__", "numpy")


def test_distill_steps_read_nothing_from_the_device_between_log_steps(
    tiny_wordpiece_dir, tiny_corpus_dir, tmp_path, monkeypatch
):
    teacher = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "teacher")
    data = prepare_data(teacher, tiny_corpus_dir, tmp_path / "data")
    cfg = DistillConfig(
        out=tmp_path / "run",
        teacher=str(teacher),
        data=data,
        layers=2,
        hidden=32,
        heads=4,
        intermediate=64,
        max_steps=12,
        batch_size=8,
        log_every=4,
        save_every=6,
        lr=1e-3,
        warmup=2,
        max_grad_norm=1.0,
        precision="fp32",
        device="cpu",
        quiet=True,
    )

    events: list = []  # ("step", n) when step n starts; ("read", name) for every device read
    real_seed = training.step_seed

    def step_seed(seed, step, rank):
        events.append(("step", step))
        return real_seed(seed, step, rank)

    monkeypatch.setattr("mlminilm.training.loop.step_seed", step_seed)
    for name in READS:
        original = getattr(torch.Tensor, name)

        def spy(self, *args, _name=name, _original=original, **kwargs):
            events.append(("read", _name))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, spy)

    masks: dict[int, list[bool]] = {}  # per step: whether each micro-batch came with a padding mask
    real_terms = distill.distill_terms

    def distill_terms(teacher_model, layer, forward, input_ids, mask, c, *rest):
        current = [e[1] for e in events if e[0] == "step"][-1]
        masks.setdefault(current, []).append(mask is not None)
        return real_terms(teacher_model, layer, forward, input_ids, mask, c, *rest)

    monkeypatch.setattr(distill, "distill_terms", distill_terms)
    distill.run(cfg)
    monkeypatch.undo()

    reads_per_step: dict[int, list[str]] = {}
    current = None
    for kind, what in events:
        if kind == "step":
            current = what
            reads_per_step[current] = []
        elif current is not None:
            reads_per_step[current].append(what)
    assert sorted(reads_per_step) == list(range(12))
    boundary = {s for s in range(12) if (s + 1) % 4 == 0 or (s + 1) % 6 == 0 or s + 1 == 12}
    quiet = {s: reads for s, reads in reads_per_step.items() if s not in boundary}
    assert quiet and all(not reads for reads in quiet.values()), quiet
    # The boundaries do read (the losses, once), so the spies did see the loop's reads.
    assert all(reads_per_step[s] for s in boundary)
    # Padded batches (a language's last sequence) occurred at steps between the boundaries too.
    assert any(any(masks.get(s, [])) for s in quiet), masks
