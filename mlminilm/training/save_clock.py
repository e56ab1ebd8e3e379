"""When distill and assist save a checkpoint by time (`--save-every-minutes`), beside the step cadence.

A step cadence is a cadence in compute: `--save-every 1000` is an hour on a CPU and a few seconds on an H100,
where each 1.3 GB checkpoint would wait for the previous one's write. What a checkpoint protects is wall-clock
work, so the default cadence is by time.

Under DDP the ranks' clocks differ, and a rank that saved (or skipped a save) alone would stall the others at the
next collective. Only rank 0 reads its clock, and only at a log boundary, where the loop all-reduces its losses
anyway: the decision rides in that all-reduce (`_Window.read` in loop.py), so no step reads the device for it and
every rank saves at the same step. A time-based save therefore comes at the first log boundary (every
`--log-every` steps) after the interval has passed.
"""

from __future__ import annotations

import math
import time

now = time.monotonic  # the clock the cadence reads (tests replace it)


class SaveClock:
    """Whether `minutes` have passed since the last save (or since the loop started); never on ranks other than 0,
    whose decision the loop shares. `minutes` None or 0: no time-based saves."""

    def __init__(self, minutes: float | None, is_main: bool):
        self.interval = minutes * 60.0 if minutes and math.isfinite(minutes) else None
        self.is_main = is_main
        self.last = now()

    def due(self) -> bool:
        return self.interval is not None and self.is_main and now() - self.last >= self.interval

    def saved(self) -> None:
        self.last = now()
