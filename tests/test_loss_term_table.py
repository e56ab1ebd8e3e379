"""The loss terms are one table (mlminilm/distillation/terms.py TERMS): a term added there, the documented way,
trains at its own weight and is logged under its key; a loss weight that no row uses stops the run at start-up."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from helpers import objective_config as config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _toy_config(base):
    """A DistillConfig with one more weight option, as a new term's would be declared."""
    from mlminilm.config import DistillConfig

    @dataclass(frozen=True)
    class ToyConfig(DistillConfig):
        toy_loss_weight: float = 0.0

    fields = {k: getattr(base, k) for k in base.__dataclass_fields__}
    return lambda **kw: ToyConfig(**{**fields, **kw})


def _toy_term():
    from mlminilm.distillation.terms import OUTPUT, LossTerm

    # The student's last hidden states pulled towards zero: reads the output, so the top layer trains whole.
    return LossTerm(
        "toy",
        "toy_loss_weight",
        OUTPUT,
        lambda t: t.s_out.float().pow(2).mean(),
        lambda cfg, words: f"{cfg.toy_loss_weight:g} x toy norm",
        metric="toy_norm",
    )


def _records(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]


def test_a_registered_term_trains_at_its_own_weight_and_is_logged(st_teacher, st_data, tmp_path, monkeypatch):
    from mlminilm import distill
    from mlminilm.distillation import terms

    monkeypatch.setitem(terms.TERMS, "toy", _toy_term())  # the one place a term is added
    make = _toy_config(config(st_teacher, st_data, tmp_path / "x", hidden_loss_weight=0.0, embedding_loss_weight=0.0))
    distill.run(make(out=tmp_path / "toy", toy_loss_weight=0.25))
    records = _records(tmp_path / "toy")
    assert records and all({"attention", "value", "toy_norm"} <= set(r) for r in records)
    assert "toy" not in records[0]
    for r in records:
        assert r["loss"] == pytest.approx(r["attention"] + r["value"] + 0.25 * r["toy_norm"], rel=1e-5)
    # The loss in words (run.json, the log, the card) says it as its row does, after the relation terms.
    said = "MiniLM attention + value relations + 0.25 x toy norm"
    assert json.loads((tmp_path / "toy" / "run.json").read_text())["objective"] == said
    assert said in (tmp_path / "toy" / "student" / "README.md").read_text()
    # Its weight is its own: at 0 it is off (not computed, not logged), whatever the relation terms weigh.
    distill.run(make(out=tmp_path / "off", toy_loss_weight=0.0))
    assert all("toy_norm" not in r for r in _records(tmp_path / "off"))
    # At another weight, the same term weighs that much.
    distill.run(make(out=tmp_path / "heavy", toy_loss_weight=3.0, relation_loss_weight=0.5))
    r = _records(tmp_path / "heavy")[-1]
    assert r["loss"] == pytest.approx(0.5 * (r["attention"] + r["value"]) + 3.0 * r["toy_norm"], rel=1e-5)


def test_an_unregistered_term_fails_at_start_up(st_teacher, st_data, tmp_path, monkeypatch):
    from mlminilm import distill
    from mlminilm.distillation import terms
    from mlminilm.errors import ConfigError

    make = _toy_config(config(st_teacher, st_data, tmp_path / "x"))
    # A weight option with no row in the table: it would weigh nothing, silently.
    with pytest.raises(ConfigError, match="'toy_loss_weight' weighs no loss term"):
        distill.run(make(out=tmp_path / "a", toy_loss_weight=1.0))
    assert not (tmp_path / "a").exists()  # nothing written
    # A row whose weight option the config does not have.
    monkeypatch.setitem(terms.TERMS, "toy", _toy_term())
    with pytest.raises(ConfigError, match="loss term 'toy' is weighed by 'toy_loss_weight'"):
        distill.run(config(st_teacher, st_data, tmp_path / "b"))
    assert not (tmp_path / "b").exists()


def test_a_part_outside_the_table_has_no_weight():
    from mlminilm.config import DistillConfig
    from mlminilm.distillation.terms import TERMS, check_table, weighted_loss

    cfg = DistillConfig(teacher="t", out=Path("o"))
    check_table(cfg)  # the shipped table and config agree
    assert [t.name for t in TERMS.values()] == [
        "parallel",
        "contrastive",
        "passage_embedding",
        "passage_scores",
        "passage_hidden",
        "attention",
        "value",
        "qq",
        "kk",
        "vv",
        "hidden",
        "embedding",
    ]
    with pytest.raises(KeyError, match="toy"):
        weighted_loss({"attention": torch.tensor(1.0), "toy": torch.tensor(1.0)}, cfg)
