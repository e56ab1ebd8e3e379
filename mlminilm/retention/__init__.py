"""`mlminilm retention`: what students keep of their teacher, per task and language, beside the teacher cut to their
depth (untrained), measured by the evaluation commands themselves (never a second implementation of them).

- `pipeline`: `run(config)`, the checks, the stages and the report written into --out;
- `rows`: the teacher, the cut teacher (built as `distill --init teacher --init-layers first --max-steps 0`
  starts a student) and the named students;
- `datasets`: what each task reads from --data, and one line per task that misses it;
- `stages`: the --work folder (a stage done is read back, a stage whose inputs changed is refused);
- `measures`: one row on Tatoeba or retrieval, by its evaluation command, read back to per-item scores;
- `probe`: the frozen-encoder XNLI probe (sentence vectors as eval-tatoeba makes them);
- `finetuned`: XNLI and MLQA after English fine-tuning (`finetune`, then `eval-xnli` / `eval-mlqa`);
- `table`: scores, shares of the teacher, bootstrap intervals (mlminilm.metrics.retention), above-baseline counts;
- `report`: retention.md and retention.json; `page`: chart.png and retention.html.
"""

from mlminilm.config import RetentionConfig
from mlminilm.retention.pipeline import run

__all__ = ["run"]

# `from mlminilm import retention` may give this package: calling it runs the command (mlminilm.api).
from mlminilm.api import command_module  # noqa: E402

command_module(__name__, RetentionConfig)
