"""What is checked of a model before it is built: its config's values, and its config against the tensors its
safetensors files hold, read from their headers (a few kB at each file's start) without loading a tensor.

A config that contradicts its weights used to be found late or never: `num_hidden_layers` 100000 over two layers'
weights built a model until killed, one of 2 over four layers' weights distilled from half the teacher, a negative
`layer_norm_eps` (NaN wherever a vector's variance falls below it) was taken as given. Here they are one line before
anything is built. A model whose weights cannot be read this way (only `pytorch_model.bin`, or a hub id not
in the local cache yet) gets the value checks only; its weights are checked as it loads (`loading.load_model`).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from mlminilm.config.limits import FFN_MAX, HEADS_MAX, LAYERS_MAX, WIDTH_MAX

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
_HEADER_LIMIT = 100 * 2**20  # a safetensors header is kilobytes; a length beyond this is not one

# config field -> (least, most): the bounds of a student's shape (mlminilm.config.limits), 2^24 ids (XLM-R: 250k)
# and 2^20 positions.
SIZE_LIMITS = {
    "num_hidden_layers": (1, LAYERS_MAX),
    "hidden_size": (1, WIDTH_MAX),
    "num_attention_heads": (1, HEADS_MAX),
    "intermediate_size": (1, FFN_MAX),
    "vocab_size": (1, 2**24),
    "max_position_embeddings": (1, 2**20),
    "type_vocab_size": (0, 2**16),
}
# float field -> (least, most, whether the least is allowed)
FLOAT_LIMITS = {
    "layer_norm_eps": (0.0, 1.0, False),
    "hidden_dropout_prob": (0.0, 1.0, True),
    "attention_probs_dropout_prob": (0.0, 1.0, True),
}
_LAYER = re.compile(r"^(.*?)encoder\.layer\.(\d+)\.(.+)$")
SHOWN = 3  # names listed in a message before "and N more"


def few(names, shown: int = SHOWN) -> str:
    """'a, b, c and 4 more' of sorted `names`."""
    names = sorted(names)
    head = ", ".join(names[:shown])
    return f"{head} and {len(names) - shown} more" if len(names) > shown else head


def tensors(count: int) -> str:
    return f"{count} tensor{'' if count == 1 else 's'}"


def config_problems(config) -> list[str]:
    """What is absurd or self-contradictory in an encoder config: sizes that are not positive integers or are
    beyond any model, attention heads that do not divide the hidden size, a layer-norm epsilon that is not a small
    positive number, dropout outside [0, 1)."""
    p: list[str] = []
    for field, (least, most) in SIZE_LIMITS.items():
        value = getattr(config, field, None)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            p.append(f"{field} must be an integer (got {value!r})")
        elif not least <= value <= most:
            p.append(f"{field} {value} is outside {least}..{most}")
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
    if (
        isinstance(hidden, int)
        and isinstance(heads, int)
        and heads >= 1
        and hidden >= 1
        and hidden % heads
        and getattr(config, "attention_head_size", None) is None
    ):
        p.append(f"num_attention_heads {heads} does not divide hidden_size {hidden}")
    for field, (least, most, least_ok) in FLOAT_LIMITS.items():
        value = getattr(config, field, None)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or not (least <= value < most) or (value == least and not least_ok):
            interval = f"{'[' if least_ok else '('}{least:g}, {most:g})"
            p.append(f"{field} {value!r} is outside {interval}")
    return p


# ---------------------------------------------------------------------------------------------- weight headers


def read_header(path: Path) -> dict[str, tuple[int, ...]] | None:
    """Tensor name -> shape from one safetensors file's header, or None when it is not a readable one."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 0 < size <= _HEADER_LIMIT:
                return None
            header = json.loads(f.read(size))
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    if not isinstance(header, dict):
        return None
    shapes = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(isinstance(n, int) for n in shape):
            return None
        shapes[name] = tuple(shape)
    return shapes


def _local_file(model: str, filename: str) -> Path | None:
    """`filename` of a model directory, or of a hub id's snapshot in the local cache (never the network)."""
    if Path(model).is_dir():
        path = Path(model) / filename
        return path if path.is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, filename)
    except Exception:  # noqa: BLE001 - a name huggingface_hub refuses: the loader reports it
        return None
    return Path(found) if isinstance(found, str) else None


def weight_shapes(model: str) -> dict[str, tuple[int, ...]] | None:
    """Every tensor's shape in the safetensors weights of `model` (a directory, or a hub id found in the cache):
    one file, or the shards its index names. None when there are none to read this way."""
    single = _local_file(model, SAFETENSORS)
    if single is not None:
        return read_header(single)
    index = _local_file(model, SAFETENSORS_INDEX)
    if index is None:
        return None
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    for shard in shards:
        path = index.parent / shard if isinstance(shard, str) else None
        header = read_header(path) if path is not None and path.is_file() else None
        if header is None:
            return None
        shapes.update(header)
    return shapes


def weights_problems(config, shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """Where config.json and the weights' tensors disagree: the number of layers, a layer missing a tensor its
    siblings have, the embedding matrix against vocab_size and hidden_size, the feed-forward width."""
    p: list[str] = []
    layers: dict[int, set[str]] = {}
    for name in shapes:
        match = _LAYER.match(name)
        if match:
            layers.setdefault(int(match.group(2)), set()).add(match.group(3))
    declared = getattr(config, "num_hidden_layers", None)
    if layers and isinstance(declared, int):
        held = sorted(layers)
        if held != list(range(declared)):
            holes = sorted(set(range(max(held) + 1)) - set(held))
            what = f"0..{max(held)}" + (f" without {few(map(str, holes))}" if holes else "")
            p.append(
                f"num_hidden_layers is {declared}, but the weights hold {len(held)} layer{'s' * (len(held) != 1)} "
                f"({what})"
            )
        # Every layer holds the same tensors: what most layers have and one lacks is missing from it, what one
        # holds and most lack is extra.
        lacking, extra = [], []
        for suffix in sorted(set().union(*layers.values())):
            having = [i for i in held if suffix in layers[i]]
            if len(having) == len(held):
                continue
            if 2 * len(having) > len(held):
                lacking += [f"encoder.layer.{i}.{suffix}" for i in held if i not in having]
            else:
                extra += [f"encoder.layer.{i}.{suffix}" for i in having]
        if lacking:
            p.append(f"the weights lack {few(lacking)} ({tensors(len(lacking))} that the other layers have)")
        if extra:
            p.append(f"the weights hold {few(extra)} ({tensors(len(extra))} that the other layers lack)")
    embeddings = _one(shapes, "embeddings.word_embeddings.weight")
    width = getattr(config, "embedding_size", None) or getattr(config, "hidden_size", None)
    if embeddings is not None and len(embeddings) == 2:
        rows, columns = embeddings
        if rows != getattr(config, "vocab_size", rows):
            p.append(f"vocab_size is {config.vocab_size}, but the weights hold {rows} embedding rows")
        if columns != width:
            p.append(f"hidden_size is {width}, but the weights' embeddings are {columns} wide")
    positions = _one(shapes, "embeddings.position_embeddings.weight")
    declared_positions = getattr(config, "max_position_embeddings", None)
    if positions is not None and isinstance(declared_positions, int) and positions[0] != declared_positions:
        p.append(f"max_position_embeddings is {declared_positions}, but the weights hold {positions[0]} positions")
    ffn = _one(shapes, "encoder.layer.0.intermediate.dense.weight")
    if ffn is not None and len(ffn) == 2 and ffn[0] != getattr(config, "intermediate_size", ffn[0]):
        p.append(
            f"intermediate_size is {config.intermediate_size}, but the weights' feed-forward layers are {ffn[0]} wide"
        )
    return p


def _one(shapes: dict[str, tuple[int, ...]], suffix: str) -> tuple[int, ...] | None:
    """The shape of the tensor named `suffix` (after any prefix such as `roberta.`), when exactly one is."""
    found = [shape for name, shape in shapes.items() if name == suffix or name.endswith("." + suffix)]
    return found[0] if len(found) == 1 else None


# The tokenizer_config.json keys transformers opens as files (the `vocab_files_names` of its tokenizer classes).
# Transformers 4 lets such a value win over the folder's own file, used as given: a stranger's model could point it
# anywhere (docs/guides/reliability.md: paths from files stay inside their directory). `special_tokens_map_file`
# and `name_or_path` are records only, never opened (often an absolute path of the machine that saved them).
TOKENIZER_PATH_KEYS = (
    "tokenizer_file",
    "vocab_file",
    "merges_file",
    "spm_file",
    "monolingual_vocab_file",
    "entity_vocab_file",
    "src_vocab_file",
    "tgt_vocab_file",
    "target_vocab_file",
    "emoji_file",
    "normalizer_file",
    "word_shape_file",
    "word_pronunciation_file",
)


def check_tokenizer_paths(model_dir: str | Path) -> None:
    """Refuse (DataError, one line) a model directory whose tokenizer_config.json names a tokenizer file that is
    absolute or lies outside the directory (mlminilm.io.paths.confined, as modules.json's paths); a plain name
    inside it, null or no such key is fine. A file that does not parse is left to the tokenizer's loader."""
    from mlminilm.errors import DataError
    from mlminilm.io.paths import confined

    path = Path(model_dir) / "tokenizer_config.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return
    if not isinstance(doc, dict):
        return
    for key in TOKENIZER_PATH_KEYS:
        value = doc.get(key)
        if isinstance(value, str) and value:
            try:
                confined(model_dir, value, f"{path}: {key!r}")
            except DataError as exc:
                raise DataError(
                    f"{exc}; remove {key!r} from it (transformers finds the folder's own tokenizer files by name)"
                ) from None
