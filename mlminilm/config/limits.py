"""The bounds of every integer option, in one table: an integer beyond them used to end in a traceback deep in numpy
or torch (`--seed -1`, `--seed 2**70`, `--max-steps 2e19` as an integer) or in a process killed for memory
(`prepare --seq-len 2000000000`). Every integer option's rule (mlminilm.config.options.rules) adds them to its own
bounds: the command line refuses a value beyond them at parse time (a usage error), a config's `__post_init__` for
Python callers (one ConfigError)."""

from __future__ import annotations

SEED_MAX = 2**32 - 1  # numpy takes non-negative seeds, torch up to 64 bits: 32 bits suit every generator
COUNT_MAX = 2**31 - 1  # steps, counts and sizes: far beyond any run, and within every index type on the way
TOKENS_MAX = 65_536  # tokens per sequence: more positions than any encoder has
BATCH_MAX = 65_536  # sequences per forward pass
PROCESSES_MAX = 1024  # worker processes
# Model shapes (student options here, teacher configs in mlminilm/models/checks.py): far beyond any encoder there is
# (XLM-R XXL: 48 layers of 4096, 32 heads), low enough that a typo cannot ask for a model no machine can build.
LAYERS_MAX = 1024
WIDTH_MAX = 65_536  # hidden size, relation heads
HEADS_MAX = 1024
FFN_MAX = 262_144  # intermediate (feed-forward) size
# ONNX opsets (export --opset; torch's exporter writes 18 and converts): below 17 there is no LayerNormalization,
# so the converter leaves the graph at 18; at 23 the graph uses the Attention op, which onnxruntime's int8 quantiser
# turns into an invalid graph.
ONNX_OPSET_MIN = 17
ONNX_OPSET_MAX = 22

# field (= option without its leading --, dashes as underscores) -> (least, most). `least` None: the option's own
# lower bound stands (most are at least 1), only -COUNT_MAX is added. Any integer field not named: +-COUNT_MAX.
INT_LIMITS: dict[str, tuple[int | None, int]] = {
    "seed": (0, SEED_MAX),
    "seq_len": (None, TOKENS_MAX),
    "max_seq_len": (None, TOKENS_MAX),
    "max_length": (None, TOKENS_MAX),
    "query_max_length": (None, TOKENS_MAX),
    "passage_max_length": (None, TOKENS_MAX),
    "parallel_max_length": (None, TOKENS_MAX),
    "doc_stride": (None, TOKENS_MAX),
    "max_query_length": (None, TOKENS_MAX),
    "max_answer_length": (None, TOKENS_MAX),
    "batch_size": (None, BATCH_MAX),
    "eval_batch_size": (None, BATCH_MAX),
    "workers": (None, PROCESSES_MAX),
    "data_workers": (None, PROCESSES_MAX),
    "layers": (None, LAYERS_MAX),
    "hidden": (None, WIDTH_MAX),
    "heads": (None, HEADS_MAX),
    "relation_heads": (None, WIDTH_MAX),
    "freeze_layers": (None, LAYERS_MAX),
    "intermediate": (None, FFN_MAX),
    "opset": (ONNX_OPSET_MIN, ONNX_OPSET_MAX),
}


def int_limits(field: str) -> tuple[int, int]:
    """(least, most) of an integer option or field: its entry in INT_LIMITS, else +-COUNT_MAX."""
    least, most = INT_LIMITS.get(field, (None, COUNT_MAX))
    return (-COUNT_MAX if least is None else least), most
