"""distill's inputs as one concept (mlminilm/distillation/inputs): a kind is one module and its rows in the loss-term
table, shown by a test-only kind registered from here; every input's language mix reaches metrics.jsonl and the
summary (a passages-only run's and a pairs-only run's were dropped); and "which micro-batches do steps [start,
stop) draw" is one function, whose union is what the whole steps' draws hold."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import sample_lines

from helpers import TINY_STUDENT, run_main
from helpers import objective_config as config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------------ a fourth kind


@dataclass
class ShoutBatch:
    ids: torch.Tensor
    mask: torch.Tensor
    lang: str

    def to(self, device, non_blocking: bool = False) -> ShoutBatch:
        return ShoutBatch(self.ids.to(device), self.mask.to(device), self.lang)


@dataclass(frozen=True)
class Shouts:
    lines: tuple[str, ...]
    langs: tuple[str, ...]

    def lang_counts(self) -> dict[str, int]:
        return {lang: self.langs.count(lang) for lang in sorted(set(self.langs))}


def _shout_kind():
    """A kind of input as a module would hold it: lines of text files named by language (--shouts), drawn two a
    micro-batch from one language; its one term pulls the student's states of them towards 0."""
    from mlminilm.distillation.inputs import DistillInput

    class ShoutInput(DistillInput):
        name = "shouts"
        option = "--shouts"
        field = "shouts"
        info_prefix = "shout:"
        mix_key = "shout_language_mix"
        describes = "shout"

        @classmethod
        def read(cls, cfg, tokenizer=None, sentence=None):
            if cfg.shouts is None:
                return None
            files = sorted(Path(cfg.shouts).glob("*.txt"))
            rows = [(line, f.stem) for f in files for line in f.read_text(encoding="utf-8").splitlines() if line]
            return Shouts(tuple(r[0] for r in rows), tuple(r[1] for r in rows))

        def record(self) -> dict:
            return {"shout_lines": {"lines": len(self.found.lines), "languages": self.found.lang_counts()}}

        def prepare(self, ctx, steps) -> None:
            self.tokenizer, self.steps, self.rank = ctx.plan.tokenizer, steps, ctx.rt.rank

        def batch(self, step: int, micro: int):
            slot = micro * self.steps.world + self.rank
            rng = np.random.default_rng([self.cfg.seed, 99, step, slot])
            lang = sorted(set(self.found.langs))[int(rng.integers(len(set(self.found.langs))))]
            mine = [line for line, g in zip(self.found.lines, self.found.langs) if g == lang]
            picked = [mine[int(i)] for i in rng.integers(len(mine), size=2)]
            enc = self.tokenizer(picked, padding=True, truncation=True, max_length=16, return_tensors="pt")
            return ShoutBatch(enc["input_ids"], enc["attention_mask"], lang)

        def tokens(self, batch) -> int:
            return int(batch.mask.sum())

        def langs(self, batch) -> dict[str, int]:
            return {batch.lang: int(batch.ids.shape[0])}

        @classmethod
        def student_inputs(cls, batch) -> tuple:
            return ((batch.ids, batch.mask),)

        @classmethod
        def tensors(cls, batch, teacher_side, hidden: tuple) -> dict:
            return {"shouts": (batch, hidden[0])}

    return ShoutInput


@pytest.fixture
def shout_kind(monkeypatch):
    """The kind registered, and its rows in the loss-term table: nothing else of distillation/ changes."""
    from mlminilm.distillation import inputs, terms

    kind = _shout_kind()
    row = terms.LossTerm(
        "shout",
        "shout_loss_weight",
        "shouts",
        lambda t: t.extra["shouts"][1].float().square().mean(),
        lambda cfg, w: f"{cfg.shout_loss_weight:g} x shouted states",
    )
    monkeypatch.setitem(terms.TERMS, "shout", row)
    monkeypatch.setitem(terms.INPUT_FIELDS, "shouts", "shouts")
    remove = inputs.register(kind)
    yield kind
    remove()


def _shout_config(teacher, data, out, shouts):
    from mlminilm.config import DistillConfig

    @dataclass(frozen=True)
    class ShoutConfig(DistillConfig):  # the kind's option and its term's weight, as DistillConfig would declare them
        shouts: Path | None = None
        shout_loss_weight: float = 0.5

    base = config(teacher, data, out, max_steps=2, save_every=2, hidden_loss_weight=0.0, embedding_loss_weight=0.0)
    return ShoutConfig(**{f: getattr(base, f) for f in base.__dataclass_fields__}, shouts=shouts)


def test_a_kind_is_one_module_and_table_rows(shout_kind, st_teacher, st_data, tmp_path):
    from mlminilm import distill

    shouts = tmp_path / "shouts"
    shouts.mkdir()
    for lang in ("de", "fr"):
        (shouts / f"{lang}.txt").write_text("\n".join(sample_lines(lang, 6)) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    result = distill.run(_shout_config(st_teacher, st_data, out, shouts))
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "loss" in r]
    assert len(steps) == 2 and all(r["shout"] > 0 and "attention" in r for r in steps)
    assert all(set(r["shout_language_mix"]) <= {"de", "fr"} and r["language_mix"] for r in steps)
    record = json.loads((out / "run.json").read_text())
    assert record["shout_lines"] == {"lines": 12, "languages": {"de": 6, "fr": 6}}
    assert "0.5 x shouted states" in record["objective"]
    assert json.loads((out / "student" / "mlminilm.json").read_text())["shouts"] == str(shouts)
    summary = result.to_dict()
    assert set(summary["shout_language_mix"]) <= {"de", "fr"} and summary["language_mix"]


# ------------------------------------------------------------------------------------------ the language mixes


def _qp(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for lang, n in (("de", 12), ("fr", 10)):
        questions, lines = sample_lines(lang, n, seed=1), sample_lines(lang, 2 * n, seed=2)
        rows = [f"{q}?\t{i}. {lines[2 * i]} {lines[2 * i + 1]}" for i, q in enumerate(questions)]
        (folder / f"{lang}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def _pairs(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for lang in ("de", "ar"):
        rows = [f"{a}\t{b}" for a, b in zip(sample_lines("en", 20), sample_lines(lang, 20, seed=1))]
        (folder / f"en-{lang}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("given", ["passages", "parallel"])
def test_a_run_without_running_text_reports_its_inputs_languages(given, monkeypatch, capsys, st_teacher, tmp_path):
    """A passages-only (or pairs-only) run's metrics.jsonl and summary say which languages its steps drew; the
    running text's mix, of no text, stays empty."""
    path = _qp(tmp_path / "qp") if given == "passages" else _pairs(tmp_path / "par")
    key, langs = ("passage_language_mix", {"de", "fr"}) if given == "passages" else ("pair_language_mix", {"de", "ar"})
    out = tmp_path / "run"
    args = ["distill", "--teacher", str(st_teacher), "--out", str(out), *TINY_STUDENT, "--batch-size", "4"]
    args += ["--relation-loss-weight", "0", "--hidden-loss-weight", "0", "--embedding-loss-weight", "0"]
    args += ["--device", "cpu", "--log-every", "1", "--max-steps", "4", "--passage-max-length", "64"]
    args += [f"--{given}", str(path), "--json"]
    code, stdout, err = run_main(monkeypatch, capsys, *args)
    assert code == 0, err
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "loss" in r]
    assert len(steps) == 4
    for r in steps:
        assert "language_mix" not in r and set(r[key]) <= langs and sum(r[key].values()) == pytest.approx(1, abs=1e-3)
    summary = json.loads(stdout)
    assert summary["language_mix"] == {} and set(summary[key]) <= langs and len(summary[key]) >= 1
    assert sum(summary[key].values()) == pytest.approx(1, abs=1e-3)


# ------------------------------------------------------------------------------------------ the step range


def test_the_micro_batches_of_a_step_range_are_the_whole_steps_draws(tmp_path):
    """The pairs' sources a range draws, by micro-batch and process, are those of the whole steps' global batches;
    ranges split anywhere add up to the whole."""
    from mlminilm.corpus.parallel import ParallelPairs, step_draw
    from mlminilm.distillation.inputs import StepRange
    from mlminilm.distillation.inputs.pairs import drawn_sources

    sources = tuple(f"s{i}" for i in range(200))
    pairs = ParallelPairs(sources, sources, ("de",) * 200, 0)
    steps = StepRange(3, 9, 4, 2, 3)
    assert len(list(steps.micro_batches())) == 6 * 2 * 3
    assert list(steps.micro_batches())[:4] == [(3, 0, 0), (3, 0, 1), (3, 0, 2), (3, 1, 0)]
    whole = sorted({int(i) for step in range(3, 9) for i in step_draw(pairs, 5, step, 4 * 2 * 3)})
    assert drawn_sources(pairs, 5, steps) == [sources[i] for i in whole]
    halves = drawn_sources(pairs, 5, StepRange(3, 6, 4, 2, 3)) + drawn_sources(pairs, 5, StepRange(6, 9, 4, 2, 3))
    assert sorted(set(halves)) == sorted(drawn_sources(pairs, 5, steps))
    assert drawn_sources(pairs, 5, StepRange(9, 9, 4, 2, 3)) == []
