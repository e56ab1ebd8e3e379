"""mlminilm: MiniLM deep self-attention distillation for multilingual encoders.

The public Python API, one call per command (README "Python API"):

    from mlminilm import distill, DistillConfig
    result = distill(DistillConfig(teacher="multilingual-e5-small", data="data/", out="runs/s"))

Names load on first use, so `import mlminilm` stays cheap (no torch) for the command line.
"""

from mlminilm.version import __version__

# The commands, listed once: (name on the command line, the library module whose `run(config)` is the command,
# its config class in mlminilm.config), in the order `mlminilm --help` shows them. The CLI registers them from here
# (commands/app.py; the CLI module is the name with "_" for "-"), the Python API exposes them as that same name
# (`mlminilm.eval_xnli`), and the tests walk them. A command whose library module has its name (distill, assist,
# finetune, compare, export) is that module (or package), made callable (mlminilm.api.command_module): importing it
# binds the module to the package's attribute of that name, so it has to be the command itself.
COMMANDS = (
    ("prepare", "mlminilm.corpus.prepare", "PrepareConfig"),
    ("distill", "mlminilm.distill", "DistillConfig"),
    ("assist", "mlminilm.assist", "AssistConfig"),
    ("finetune", "mlminilm.finetune", "FinetuneConfig"),
    ("eval-xnli", "mlminilm.evaluation.xnli", "EvalXnliConfig"),
    ("eval-mlqa", "mlminilm.evaluation.mlqa", "EvalMlqaConfig"),
    ("eval-tatoeba", "mlminilm.evaluation.tatoeba", "EvalTatoebaConfig"),
    ("eval-retrieval", "mlminilm.evaluation.retrieval", "EvalRetrievalConfig"),
    ("trim", "mlminilm.vocab.trim", "TrimConfig"),
    ("compare", "mlminilm.compare", "CompareConfig"),
    ("retention", "mlminilm.retention", "RetentionConfig"),
    ("export", "mlminilm.export", "ExportConfig"),
)
_COMMANDS = {name.replace("-", "_"): (module, config) for name, module, config in COMMANDS}
_CONFIGS = tuple(config for _, _, config in COMMANDS)

__all__ = ["__version__", *_COMMANDS, *_CONFIGS]


def __getattr__(name: str):
    import importlib

    if name in _CONFIGS:
        from mlminilm import config

        return getattr(config, name)
    if name not in _COMMANDS:
        raise AttributeError(f"module 'mlminilm' has no attribute {name!r}")
    module_name, config_name = _COMMANDS[name]
    module = importlib.import_module(module_name)
    if module_name == f"mlminilm.{name}":
        return module  # callable: it calls command_module at its end
    from mlminilm import api, config

    function = api.command(module.run, getattr(config, config_name), name)
    globals()[name] = function  # built once
    return function


def __dir__():
    return sorted(set(globals()) | set(__all__))
