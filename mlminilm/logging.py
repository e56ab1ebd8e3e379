"""Logs and progress bars go to stderr; stdout is kept for results."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

stderr_console = Console(stderr=True)
_QUIET = False


def setup(quiet: bool = False, verbose: bool = False) -> None:
    global _QUIET
    # Under torchrun only rank 0 reports progress and information; the other ranks say only what goes wrong, their
    # lines marked with their rank, so N processes do not print N copies of every line and bar.
    rank = int(os.environ.get("RANK", "0"))
    quiet = quiet or rank != 0
    _QUIET = quiet
    level = logging.WARNING if quiet else (logging.DEBUG if verbose else logging.INFO)
    prefix = f"rank {rank}: " if rank else ""
    root = logging.getLogger("mlminilm")
    root.handlers.clear()
    if stderr_console.is_terminal or stderr_console.is_jupyter:  # a notebook renders rich's output as HTML
        handler: logging.Handler = RichHandler(console=stderr_console, show_path=False, show_time=False, markup=False)
        handler.setFormatter(logging.Formatter(prefix + "%(message)s"))
    else:
        # A log file or a pipe: whole lines, never wrapped at rich's default 80 columns (which would cut paths and
        # numbers in two), with a time stamp, since nobody watches them as they come.
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-8s " + prefix + "%(message)s", "%H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    _quiet_libraries()


def configured() -> bool:
    """Whether logging has a home already: `setup` ran (the command line does it), or the caller gave mlminilm's
    logger or the root logger a handler. The Python API (mlminilm.api) calls `setup` only when not, so that a
    notebook shows the logs without the caller configuring anything, and a caller's own configuration wins."""
    return bool(logging.getLogger("mlminilm").handlers or logging.getLogger().handlers)


class _StderrHandler(logging.StreamHandler):
    """A plain stream handler on whatever `sys.stderr` is at the time of each record (tests swap it)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ sets it; the property always reads sys.stderr
        pass


def _quiet_libraries() -> None:
    """Our own progress bars and logs replace the libraries' tqdm bars (weights loading, shard writing)."""
    try:
        import transformers

        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
    except Exception:  # transformers not importable: nothing to quiet
        pass
    try:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except Exception:
        pass


def get(name: str) -> logging.Logger:
    return logging.getLogger(name if name.startswith("mlminilm") else f"mlminilm.{name}")


def progress_enabled() -> bool:
    # A terminal, or a notebook (rich draws the bar as a live widget there; ipywidgets makes it update in place).
    shown = stderr_console.is_terminal or stderr_console.is_jupyter
    return not _QUIET and shown and os.environ.get("MLMINILM_NO_PROGRESS") != "1"


class _NullProgress:
    def add_task(self, *a, **k):
        return 0

    def update(self, *a, **k):
        pass

    def advance(self, *a, **k):
        pass


@contextlib.contextmanager
def progress(unit: str = "it", window_s: float = 30.0):
    """A rich progress bar on stderr with rate and ETA; a no-op when stderr is not a terminal.

    Tasks take a `rate` field (text) that the caller keeps up to date, e.g. "12,345 tok/s". The ETA is the
    remaining work at the speed of the last `window_s` seconds (rich keeps at most 1000 `advance` samples): it
    shows once two updates fall within the window, so work whose updates come further apart needs a longer one.
    """
    if not progress_enabled():
        yield _NullProgress()
        return
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=stderr_console,
        transient=True,
        speed_estimate_period=window_s,
    )
    with bar:
        yield bar


@contextlib.contextmanager
def counter(description: str, total: int, unit: str):
    """A progress bar over `total` items that shows their rate: yields `advance(n)`, which counts n more done."""
    start = time.perf_counter()
    done = 0
    with progress() as bar:
        task = bar.add_task(description, total=total, rate="")

        def advance(n: int) -> None:
            nonlocal done
            done += n
            rate = done / max(time.perf_counter() - start, 1e-9)
            bar.update(task, completed=done, rate=f"{rate:,.0f} {unit}/s")

        yield advance


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0
