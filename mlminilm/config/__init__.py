"""Run configurations: one frozen dataclass per command, the single home of every default and every option.

Each field that is a command-line option declares it in its metadata (`options.option`: flag, help, range,
choices...), from which the CLI builds its options; `__post_init__` validates and names the CLI flag in its
message, so a bad option fails before any expensive work starts.

`options` says how a field declares its option; then one module per command family: `common` (device,
precision, the helpers), `training` (what distill, assist and finetune share), `distill` (and assist), `prepare`,
`finetune`, `evaluation` (eval-xnli, eval-mlqa, eval-tatoeba), `trim`, `compare`, `export`. Every name is
importable from `mlminilm.config`.
"""

from mlminilm.config.options import (  # noqa: F401
    option,
    setting,
    redeclare,
    option_fields,
    resume_keys,
    resume_changeable,
    replay_skips,
)
from mlminilm.config.common import (  # noqa: F401
    PRECISIONS,
    DEVICES,
    COMPILE_MODES,
    AUTO,
    default,
)
from mlminilm.config.training import (  # noqa: F401
    REPORT_TO,
    TrainConfig,
)
from mlminilm.config.distill import (  # noqa: F401
    OBJECTIVES,
    INITS,
    INIT_LAYER_RULES,
    DEFAULT_INIT_LAYERS,
    HIDDEN_DISTANCES,
    OUTPUT_TERMS_WEIGHT,
    StudentShape,
    DistillConfig,
    parse_init_layers,
    init_layers_problems,
    AssistConfig,
)
from mlminilm.config.prepare import (  # noqa: F401
    PrepareConfig,
)
from mlminilm.config.finetune import (  # noqa: F401
    TASKS,
    TaskDefaults,
    TASK_DEFAULTS,
    QA_DOC_STRIDE,
    QA_MAX_QUERY_LENGTH,
    QA_N_BEST,
    QA_MAX_ANSWER_LENGTH,
    FinetuneConfig,
)
from mlminilm.config.evaluation import (  # noqa: F401
    QA_SCORERS,
    EVAL_SPLITS,
    EVAL_BACKENDS,
    EvalConfig,
    EvalXnliConfig,
    EvalMlqaConfig,
    TATOEBA_MAX_LENGTH,
    TATOEBA_POOLINGS,
    EvalTatoebaConfig,
)
from mlminilm.config.trim import (  # noqa: F401
    TrimConfig,
)
from mlminilm.config.compare import (  # noqa: F401
    CompareConfig,
)
from mlminilm.config.export import (  # noqa: F401
    EXPORT_FORMATS,
    QUANTIZATIONS,
    ONNX_OPSET,
    ExportConfig,
)
