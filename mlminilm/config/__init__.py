"""Run configurations: one frozen dataclass per command, the single home of every default and every option.

Each field that is a command-line option declares it in its metadata (`options.option`: flag, help, range,
choices...), from which the CLI builds its options. Each config's `__post_init__` (common.Config) refuses what
those declarations rule out, by the same check and in the same words as the command line (options.Rule), and what
its own `problems` finds across options, naming the CLI flags, so a bad option fails before any expensive work.

`options` says how a field declares its option; then one module per command family: `common` (device,
precision, the helpers), `training` (what distill, assist and finetune share), `distill`, `assist`, `prepare`,
`finetune`, `evaluation` (eval-xnli, eval-mlqa, eval-tatoeba), `retrieval`
(eval-retrieval), `trim`, `compare`, `export`. Every name is
importable from `mlminilm.config`.
"""

from mlminilm.config.assist import (  # noqa: F401
    AssistConfig,
)
from mlminilm.config.common import (  # noqa: F401
    AUTO,
    COMPILE_MODES,
    DEVICES,
    PRECISIONS,
    default,
)
from mlminilm.config.compare import (  # noqa: F401
    CompareConfig,
)
from mlminilm.config.distill import (  # noqa: F401
    DEFAULT_INIT_LAYERS,
    HIDDEN_DISTANCES,
    INIT_LAYER_RULES,
    INITS,
    OBJECTIVES,
    OUTPUT_TERMS_WEIGHT,
    DistillConfig,
    StudentShape,
    init_layers_problems,
    parse_init_layers,
)
from mlminilm.config.evaluation import (  # noqa: F401
    EVAL_BACKENDS,
    EVAL_SPLITS,
    QA_SCORERS,
    TATOEBA_MAX_LENGTH,
    TATOEBA_POOLINGS,
    EvalConfig,
    EvalMlqaConfig,
    EvalTatoebaConfig,
    EvalXnliConfig,
)
from mlminilm.config.export import (  # noqa: F401
    EXPORT_FORMATS,
    ONNX_OPSET,
    QUANTIZATIONS,
    ExportConfig,
)
from mlminilm.config.finetune import (  # noqa: F401
    QA_DOC_STRIDE,
    QA_MAX_ANSWER_LENGTH,
    QA_MAX_QUERY_LENGTH,
    QA_N_BEST,
    TASK_DEFAULTS,
    TASKS,
    FinetuneConfig,
    TaskDefaults,
)
from mlminilm.config.options import (  # noqa: F401
    option,
    option_fields,
    redeclare,
    replay_skips,
    resume_changeable,
    resume_keys,
    setting,
)
from mlminilm.config.prepare import (  # noqa: F401
    PrepareConfig,
)
from mlminilm.config.retention import (  # noqa: F401
    RETENTION_TASKS,
    RetentionConfig,
)
from mlminilm.config.retrieval import (  # noqa: F401
    RETRIEVAL_BATCH_SIZE,
    RETRIEVAL_MAX_LENGTH,
    EvalRetrievalConfig,
)
from mlminilm.config.training import (  # noqa: F401
    REPORT_TO,
    TrainConfig,
)
from mlminilm.config.trim import (  # noqa: F401
    TrimConfig,
)
