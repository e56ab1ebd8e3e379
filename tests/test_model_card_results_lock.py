"""`--update-card` from two processes at once (issue 53, item 3): the card is read, merged and written under a lock
(`.README.md.lock` beside it, gone when released), so both evaluations' results stay in the card; a lock held too
long stops the waiter with one line and leaves the card as it was."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import threading
from pathlib import Path

import pytest
from taskdata import write_xnli_dir

from helpers import assert_error, run_main
from helpers import card_results as entries

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CARD = "---\nlicense: apache-2.0\n---\n\n# A model\n\nIts text.\n"
XNLI = {"task": "xnli", "protocol": "zero-shot", "languages": {"en": {"accuracy": 61.5}, "de": {"accuracy": 55.25}}}
MLQA = {
    "task": "mlqa",
    "protocol": "zero-shot",
    "languages": {
        "de": {"exact_match": 30.0, "f1": 41.5},
        "ar": {"exact_match": 20.0, "f1": 33.0},
        "zh": {"exact_match": 25.0, "f1": 37.75},
    },
}


def _update(card: Path, doc: dict) -> None:
    from mlminilm.models.card_results import update_card

    update_card(card, doc)


def test_two_updates_at_once_keep_both_results(tmp_path, monkeypatch):
    """Two processes both read the card before either writes (a barrier after the read makes the race happen every
    time): without the lock the second write drops the first's results; with it the second waits, reads the card
    the first wrote, and the card holds both."""
    from mlminilm.models import card_results

    model = tmp_path / "model"
    model.mkdir()
    card = model / "README.md"
    card.write_text(CARD, encoding="utf-8")
    fork = multiprocessing.get_context("fork")
    barrier = fork.Barrier(2, timeout=3)
    read_card = card_results.read_card

    def read_then_wait(path):
        found = read_card(path)
        try:
            barrier.wait()  # both have read the card: each now writes what it read plus its own results
        except threading.BrokenBarrierError:  # the other one waits for the lock: it reads after this one writes
            pass
        return found

    monkeypatch.setattr(card_results, "read_card", read_then_wait)
    writers = [fork.Process(target=_update, args=(card, doc)) for doc in (XNLI, MLQA)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert [w.exitcode for w in writers] == [0, 0]

    found = entries(card)
    xnli = {r.dataset_config: r.metric_value for r in found if r.dataset_type == "facebook/xnli"}
    f1 = {
        r.dataset_config: r.metric_value for r in found if r.dataset_type == "facebook/mlqa" and r.metric_type == "f1"
    }
    assert xnli == {"en": 61.5, "de": 55.25}
    assert f1 == {"de": 41.5, "ar": 33.0, "zh": 37.75}
    assert len(found) == 2 + 3 * 2
    text = card.read_text(encoding="utf-8")
    assert "<!-- mlminilm:eval-xnli:start -->" in text and "<!-- mlminilm:eval-mlqa:start -->" in text
    assert "license: apache-2.0" in text and "Its text." in text
    assert os.listdir(model) == ["README.md"]  # no lock file, no temporary left in the model directory


def test_a_card_held_too_long_stops_the_waiter_with_one_line(tmp_path, monkeypatch):
    from mlminilm.errors import CheckpointError
    from mlminilm.io.output_lock import OutputLock
    from mlminilm.models import card_results

    model = tmp_path / "model"
    model.mkdir()
    card = model / "README.md"
    card.write_text(CARD, encoding="utf-8")
    monkeypatch.setattr(card_results, "CARD_LOCK_WAIT", 0.3)
    with OutputLock(card, flag="--update-card"):  # another process's update, stuck
        assert (model / ".README.md.lock").is_file()
        with pytest.raises(CheckpointError) as info:
            card_results.update_card(card, XNLI)
    message = str(info.value)
    assert "\n" not in message
    assert f"--update-card {card} is still being written by another mlminilm process (pid {os.getpid()}" in message
    assert "after 0.3 s of waiting" in message and "the results of this evaluation are not in the card" in message
    assert card.read_text(encoding="utf-8") == CARD
    assert os.listdir(model) == ["README.md"]
    # Released: the next update goes through, and leaves nothing beside the card.
    card_results.update_card(card, XNLI)
    assert len(entries(card, "facebook/xnli")) == 2 and os.listdir(model) == ["README.md"]


def test_eval_xnli_update_card_waits_with_a_bound(card_models, tmp_path, monkeypatch, capsys):
    """Through the command: a card another process holds for longer than the bound is one `Error:` line, the report
    in --out whole, the card untouched; released, the same command writes it and the model directory holds no more
    than before (what from_pretrained, export and the own-files records see)."""
    from mlminilm.io.output_lock import OutputLock
    from mlminilm.models import card_results

    model = tmp_path / "my-xnli"
    shutil.copytree(card_models["xnli"], model)
    card = model / "README.md"
    card.write_text(CARD, encoding="utf-8")
    before = sorted(os.listdir(model))
    data = write_xnli_dir(tmp_path / "xnli", ("en", "de"), count=6)
    args = ("eval-xnli", "--model", str(model), "--data", str(data), "--update-card")
    monkeypatch.setattr(card_results, "CARD_LOCK_WAIT", 0.2)
    with OutputLock(card, flag="--update-card"):
        result = run_main(monkeypatch, capsys, *args, "--out", str(tmp_path / "report"))
    assert_error(result, f"--update-card {card} is still being written by another mlminilm process", "not in the card")
    assert (tmp_path / "report" / "metrics.json").is_file()
    assert card.read_text(encoding="utf-8") == CARD and sorted(os.listdir(model)) == before

    code, _, stderr = run_main(monkeypatch, capsys, *args)
    assert code == 0, stderr
    assert len(entries(card, "facebook/xnli")) == 2 and sorted(os.listdir(model)) == before


def test_a_left_card_lock_is_not_foreign_to_overwrite(tmp_path):
    """A process killed while it held the card's lock leaves `.README.md.lock`: --overwrite of that directory
    (export, trim) must not refuse it as a file mlminilm did not write; a user's own hidden file still is."""
    from mlminilm.io.output_checks import foreign_entries

    (tmp_path / "README.md").write_text("card", encoding="utf-8")
    (tmp_path / ".README.md.lock").write_text("", encoding="utf-8")
    assert foreign_entries(tmp_path, ["README.md"]) == []
    (tmp_path / ".notes.lock").write_text("", encoding="utf-8")
    assert foreign_entries(tmp_path, ["README.md"]) == [".notes.lock"]
