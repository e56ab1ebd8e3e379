"""mlminilm: MiniLM deep self-attention distillation for multilingual encoders.

The public Python API, one call per command (README "Python API"):

    from mlminilm import distill, DistillConfig
    result = distill(DistillConfig(teacher="intfloat/multilingual-e5-small", data="data/", out="runs/s"))

Names load on first use, so `import mlminilm` stays cheap (no torch) for the command line.
"""

from mlminilm.version import __version__

# Python name -> (module, attribute): the commands and their configs. A command whose module has its name
# (distill, assist, finetune, compare) is that module, made callable (mlminilm.api.command_module).
_COMMANDS = {
    "prepare": ("mlminilm.corpus.prepare", "run", "PrepareConfig"),
    "distill": ("mlminilm.distill", None, "DistillConfig"),
    "assist": ("mlminilm.assist", None, "AssistConfig"),
    "finetune": ("mlminilm.finetune", None, "FinetuneConfig"),
    "eval_xnli": ("mlminilm.evaluation.xnli", "run", "EvalXnliConfig"),
    "eval_mlqa": ("mlminilm.evaluation.mlqa", "run", "EvalMlqaConfig"),
    "eval_tatoeba": ("mlminilm.evaluation.tatoeba", "run", "EvalTatoebaConfig"),
    "trim": ("mlminilm.vocab.trim", "run", "TrimConfig"),
    "compare": ("mlminilm.compare", None, "CompareConfig"),
    "export": ("mlminilm.models.onnx_export", "run", "ExportConfig"),
}
_CONFIGS = tuple(config for _, _, config in _COMMANDS.values())

__all__ = ["__version__", *_COMMANDS, *_CONFIGS]


def __getattr__(name: str):
    import importlib

    if name in _CONFIGS:
        from mlminilm import config

        return getattr(config, name)
    if name not in _COMMANDS:
        raise AttributeError(f"module 'mlminilm' has no attribute {name!r}")
    module_name, attribute, config_name = _COMMANDS[name]
    module = importlib.import_module(module_name)
    if attribute is None:
        return module  # callable: it calls command_module at its end
    from mlminilm import api, config

    function = api.command(getattr(module, attribute), getattr(config, config_name), name)
    globals()[name] = function  # built once
    return function


def __dir__():
    return sorted(set(globals()) | set(__all__))
