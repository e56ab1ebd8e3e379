"""Under torchrun, ranks above 0 say only what goes wrong, marked with their rank, and show no progress bar."""

from __future__ import annotations

import logging

from mlminilm import logging as mlog


def test_rank_above_zero_is_quiet_and_marked(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(mlog.stderr_console, "_force_terminal", True)  # a terminal: rank 0 would show a bar
    mlog.setup()
    try:
        log = mlog.get("test")
        log.info("an information line")
        log.warning("a warning line")
        assert not mlog.progress_enabled()
        err = capsys.readouterr().err
        assert "an information line" not in err
        assert "rank 1: a warning line" in err
    finally:
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setattr(mlog.stderr_console, "_force_terminal", None)
        mlog.setup()


def test_rank_zero_informs(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    mlog.setup()
    mlog.get("test").info("an information line")
    err = capsys.readouterr().err
    assert "an information line" in err and "rank" not in err
    assert logging.getLogger("mlminilm").level == logging.INFO
