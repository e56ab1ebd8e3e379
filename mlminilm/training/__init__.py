"""What every training loop shares (distill, assist, finetune), one concept per module:

- `runtime`: device, precision and the torchrun process group (`setup_runtime`, `Runtime`);
- `optim`: AdamW and the linear warmup-then-decay schedule;
- `run_dir`: the output directory, the run record and its --resume check, the metrics log;
- `checkpoint_layout`, `checkpoints`, `checkpoint_writer`: where checkpoints live, loading and resuming, writing
  (synchronously or in a background thread);
- `loop`: `setup_training` and `run_steps`;
- `tracking`: where the metrics records go (metrics.jsonl, and TensorBoard with --report-to tensorboard);
- `batch_size`: the micro-batch `--batch-size auto` picks.

The names below are the ones the commands use, importable from `mlminilm.training` directly.
"""

from mlminilm.io.atomic import write_json_atomic
from mlminilm.training.checkpoint_layout import CHECKPOINTS, checkpoint_dirs
from mlminilm.training.checkpoint_writer import save_checkpoint
from mlminilm.training.checkpoints import check_same_run_everywhere, load_checkpoint, resume_point
from mlminilm.training.loop import (
    LoopResult,
    Reporting,
    StepOutput,
    Steps,
    TrainingState,
    run_steps,
    setup_training,
    step_seed,
)
from mlminilm.training.optim import linear_schedule, make_optimizer
from mlminilm.training.run_dir import (
    METRICS,
    PREVIOUS_RUN,
    RUN_RECORD,
    TENSORBOARD,
    MetricsLog,
    RunLayout,
    check_resume_compatible,
    claimed_output,
    failed_run_leftovers,
    prepare_output_dir,
    read_run_record,
    record_resume,
    run_record,
)
from mlminilm.training.runtime import Runtime, cpu_has_native_bf16, setup_runtime, teardown_runtime
from mlminilm.training.tracking import Tracker, check_report_to, open_tracker

__all__ = [
    "CHECKPOINTS",
    "METRICS",
    "RUN_RECORD",
    "LoopResult",
    "MetricsLog",
    "Reporting",
    "Runtime",
    "StepOutput",
    "Steps",
    "run_steps",
    "PREVIOUS_RUN",
    "RunLayout",
    "TrainingState",
    "check_resume_compatible",
    "check_same_run_everywhere",
    "claimed_output",
    "checkpoint_dirs",
    "cpu_has_native_bf16",
    "failed_run_leftovers",
    "linear_schedule",
    "load_checkpoint",
    "make_optimizer",
    "prepare_output_dir",
    "read_run_record",
    "record_resume",
    "resume_point",
    "run_record",
    "save_checkpoint",
    "setup_runtime",
    "setup_training",
    "step_seed",
    "teardown_runtime",
    "write_json_atomic",
    "TENSORBOARD",
    "Tracker",
    "check_report_to",
    "open_tracker",
]
