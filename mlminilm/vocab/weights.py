"""The model side of a trim: load any encoder with its head, subset every vocabulary-indexed tensor."""

from __future__ import annotations

import torch
from torch import nn

from mlminilm import logging as mlog
from mlminilm.errors import ConfigError

log = mlog.get(__name__)

# Parameters of these names have a first dimension that may equal the vocabulary size by coincidence.
_NOT_VOCABULARY = ("position", "token_type")


def load_any_model(name: str) -> tuple[nn.Module, set[str]]:
    """The model of `name` as it was saved, head included (the class in config.architectures; AutoModel when
    the config names none), in the dtype it was stored in; and the names of the weights its files do not hold
    (e.g. the pooler of an encoder saved without one), which a trimmed copy must not invent either."""
    import transformers

    from mlminilm.models.loading import load_config, load_model

    config = load_config(name)
    arch = (config.architectures or [None])[0]
    cls = getattr(transformers, arch, None) if arch else None
    if cls is None or not hasattr(cls, "from_pretrained"):
        cls = transformers.AutoModel
    # Strict: nothing randomly initialised but a pooler the files never had (returned, so it is not saved either).
    return load_model(cls, name, dtype="auto")


def vocabulary_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """Every parameter indexed by token id (first dimension = the embedding rows), by name: the word
    embeddings, an output (MLM) layer's weight when not tied and its bias, and any other such parameter."""
    embeddings = model.get_input_embeddings()
    if embeddings is None or not isinstance(embeddings, nn.Embedding):
        raise ConfigError(f"{type(model).__name__} has no word-embedding matrix that trim can subset")
    rows = embeddings.weight.shape[0]
    known = {id(embeddings.weight)}
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if output is not None:
        known |= {id(p) for p in (getattr(output, "weight", None), getattr(output, "bias", None)) if p is not None}
    found: dict[str, nn.Parameter] = {}
    for name, param in model.named_parameters(remove_duplicate=True):
        by_shape = param.dim() >= 1 and param.shape[0] == rows and not any(w in name for w in _NOT_VOCABULARY)
        if id(param) in known or by_shape:
            found[name] = param
    return found


def trim_model(model: nn.Module, old_ids) -> list[str]:
    """Keep only rows `old_ids` (ascending) of every vocabulary-indexed parameter, in place; tied parameters stay
    tied. Sets config.vocab_size and renumbers the config's special-token ids. Returns the trimmed names."""
    targets = vocabulary_parameters(model)
    rows = model.get_input_embeddings().weight.shape[0]
    index = torch.as_tensor(list(old_ids), dtype=torch.long)
    if int(index.max()) >= rows:
        raise ConfigError(
            f"the tokenizer has ids up to {int(index.max())} but the model only {rows} embedding "
            "rows: tokenizer and model do not belong together"
        )
    replaced = {
        id(p): nn.Parameter(p.detach().index_select(0, index).clone(), requires_grad=p.requires_grad)
        for p in targets.values()
    }
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None and id(param) in replaced:
                module._parameters[name] = replaced[id(param)]
        if isinstance(module, nn.Embedding) and module.weight.shape[0] != module.num_embeddings:
            module.num_embeddings = module.weight.shape[0]
        if isinstance(module, nn.Linear) and module.weight.shape[0] != module.out_features:
            module.out_features = module.weight.shape[0]
    new = {int(old): i for i, old in enumerate(index.tolist())}
    embeddings = model.get_input_embeddings()
    if embeddings.padding_idx is not None:
        embeddings.padding_idx = new.get(int(embeddings.padding_idx))
    remap_config(model.config, new, len(new))
    return sorted(targets)


def token_id_fields(config) -> dict[str, int | list[int]]:
    """The config's special-token ids (pad_token_id, bos_token_id, ...), top level only."""
    return {
        key: value
        for key, value in config.to_dict().items()
        if key.endswith("_token_id") and isinstance(value, (int, list))
    }


def config_token_ids(config) -> set[int]:
    ids: set[int] = set()
    for value in token_id_fields(config).values():
        ids |= {int(v) for v in (value if isinstance(value, list) else [value]) if isinstance(v, int)}
    return ids


def remap_config(config, new: dict[int, int], vocab_size: int) -> None:
    config.vocab_size = vocab_size
    for key, value in token_id_fields(config).items():
        if isinstance(value, list):
            setattr(config, key, [new.get(int(v)) for v in value])
        elif isinstance(value, int):
            setattr(config, key, new.get(value))


def count_parameters(model: nn.Module, leave_out: set[str] = frozenset()) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if name not in leave_out)


def saved_state(model: nn.Module, leave_out: set[str]) -> dict | None:
    """The state dict to save: all of it but `leave_out` (None when nothing is left out: save_pretrained's own)."""
    if not leave_out:
        return None
    return {k: v for k, v in model.state_dict().items() if k not in leave_out}
