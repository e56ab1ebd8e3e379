"""Experiment tracking: where a training run's metrics records go (`--report-to`).

The loop, the distillation probe and finetune's dev evaluation each build a metrics record (a JSON object with its
`step`; some values are objects themselves, as `language_mix`) and hand it to one `Tracker`, which passes it on to
its sinks:

- `metrics.jsonl` (`run_dir.MetricsLog`), always: --resume truncates and continues it and finetune's checkpoint
  selection reads its dev scores back, so no --report-to turns it off;
- TensorBoard (`TensorBoardSink`, --report-to tensorboard), in OUT/tb/: every number of every record as a scalar
  named by its key at the record's step, the keys of nested objects joined with "/" (`language_mix/de`,
  `probe_tatoeba/de/xx_to_en`), and the run record (run.json) as text.

Only the main process writes (rank 0 under torchrun). A resumed run's TensorBoard sink starts at the checkpoint
with `purge_step`: TensorBoard drops what an earlier process logged past it, as --resume drops those records from
metrics.jsonl, so each step shows once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Protocol

from mlminilm.config import TrainConfig
from mlminilm.errors import ConfigError
from mlminilm.training.run_dir import METRICS, TENSORBOARD, MetricsLog, read_run_record
from mlminilm.training.runtime import Runtime

TENSORBOARD_EXTRA = "pip install 'mlminilm[tensorboard]'"
MISSING_TENSORBOARD = (
    "--report-to tensorboard needs the optional package tensorboard, which is not installed: "
    f"{TENSORBOARD_EXTRA} (or leave out --report-to: metrics.jsonl is written in any case)"
)


class Sink(Protocol):
    """Where metrics records go: `write` each as it is made, `close` at the end of the run."""

    def write(self, record: dict) -> None: ...

    def close(self) -> None: ...


def summary_writer_class():
    """torch's TensorBoard `SummaryWriter`, or None when the optional package tensorboard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter


def check_report_to(report_to: str) -> None:
    """Before any work: a sink whose package is missing is one error that says how to install it."""
    if report_to == "tensorboard" and summary_writer_class() is None:
        raise ConfigError(MISSING_TENSORBOARD)


def scalars(record: dict, prefix: str = "") -> Iterator[tuple[str, float]]:
    """(tag, value) of every number in a metrics record but its step: the tag is the key, the keys of nested
    objects joined with "/". Strings, booleans and lists are not scalars and are left out."""
    for key, value in record.items():
        if not prefix and key == "step":
            continue
        tag = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from scalars(value, tag + "/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield tag, float(value)


def record_text(record: dict) -> str:
    """The run record for TensorBoard's text dashboard (Markdown): its JSON as an indented code block."""
    return "\n".join("    " + line for line in json.dumps(record, indent=2, default=str).splitlines())


class TensorBoardSink:
    """Event files in `log_dir` through torch's SummaryWriter, flushed after every record, so that a run that is
    killed leaves in TensorBoard what it left in metrics.jsonl."""

    def __init__(self, log_dir: Path, start: int = 0, run_record: dict | None = None):
        writer_class = summary_writer_class()
        if writer_class is None:
            raise ConfigError(MISSING_TENSORBOARD)
        # TensorBoard drops every event of this directory from `purge_step` on. Resumed at checkpoint `start`, the
        # records up to it stay (metrics.jsonl keeps them too); started at 0 (a new run, or a resume that found no
        # checkpoint), nothing of an earlier process stays.
        self.writer = writer_class(log_dir=str(log_dir), purge_step=start + 1 if start > 0 else 0)
        if run_record is not None:
            self.writer.add_text("run_record", record_text(run_record), global_step=start)
        self.writer.flush()

    def write(self, record: dict) -> None:
        step = int(record.get("step", 0))
        for tag, value in scalars(record):
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class Tracker:
    """The sinks of one run, written as one: metrics.jsonl first (`jsonl`), then any --report-to asked for."""

    def __init__(self, jsonl: MetricsLog, extra: list[Sink] | tuple = ()):
        self.jsonl = jsonl
        self.sinks: list[Sink] = [jsonl, *extra]

    def write(self, record: dict) -> None:
        for sink in self.sinks:
            sink.write(record)

    def truncate_after(self, step: int) -> None:
        """On --resume: metrics.jsonl drops the records past the checkpoint (TensorBoard's sink purges them)."""
        self.jsonl.truncate_after(step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_tracker(cfg: TrainConfig, out: Path, rt: Runtime, start: int = 0) -> Tracker:
    """The tracker of the run in `out` as `cfg.report_to` asks, starting at step `start` (the resume point).
    Off the main process it writes nothing. The run record must be written before (the TensorBoard sink shows
    it)."""
    out = Path(out)
    extra: list[Sink] = []
    if rt.is_main and cfg.report_to == "tensorboard":
        found = read_run_record(out)
        extra.append(TensorBoardSink(out / TENSORBOARD, start, found[1] if found else None))
    return Tracker(MetricsLog(out / METRICS, enabled=rt.is_main), extra)
