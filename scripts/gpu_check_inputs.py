"""The inputs of scripts/gpu_check.py: a random-init XLM-R-shaped teacher with the local XLM-R tokenizer, and a
few MB of multilingual text."""

from __future__ import annotations

import random
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def build_teacher(tokenizer_dir: Path, shape: tuple[int, int, int, int], dest: Path) -> int:
    """A randomly initialised XLM-R encoder of `shape` (layers, hidden, heads, FFN) with the tokenizer: its
    vocabulary size."""
    import torch
    from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaModel

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    layers, hidden, heads, ffn = shape
    config = XLMRobertaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        max_position_embeddings=514,
        type_vocab_size=1,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    XLMRobertaModel(config, add_pooling_layer=False).save_pretrained(dest)
    tok.save_pretrained(dest)
    return len(tok)


SCRIPTS = {  # generated text when ../shared/data is absent: words of each script's letters
    "en": "abcdefghijklmnopqrstuvwxyz",
    "ru": "абвгдежзийклмнопрстуфхцчшщыэюя",
    "el": "αβγδεζηθικλμνξοπρστυφχψω",
    "ar": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "hi": "कखगघचछजझटठडढणतथदधनपफबभमयरलवशसह",
    "zh": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
}


def write_text(dest: Path, size: int) -> str:
    """About `size` bytes of text in <lang>.txt files: real multilingual text when ../shared/data has it."""
    dest.mkdir(parents=True, exist_ok=True)
    real = sorted((SHARED / "corpus" / "wikiann").glob("*.txt"))
    if real:
        share = size // len(real)
        for path in real:
            with open(path, encoding="utf-8") as f:
                lines, used = [], 0
                for line in f:
                    if used >= share:
                        break
                    lines.append(line)
                    used += len(line.encode("utf-8"))
            (dest / path.name).write_text("".join(lines), encoding="utf-8")
        return f"{len(real)} languages of {SHARED / 'corpus' / 'wikiann'}"
    rng = random.Random(0)
    for lang, letters in SCRIPTS.items():
        words = ["".join(rng.choices(letters, k=rng.randint(2, 8))) for _ in range(2000)]
        lines = [" ".join(rng.choices(words, k=rng.randint(5, 25))) for _ in range(size // len(SCRIPTS) // 60)]
        (dest / f"{lang}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f"generated ({len(SCRIPTS)} scripts)"


XLMR_VOCAB = 250_002  # XLM-R's ids: the embedding is most of the student's parameters, and of its optimizer step


def generate_tokenizer(dest: Path, vocab_size: int = XLMR_VOCAB) -> Path:
    """An XLM-R-shaped Unigram tokenizer of `vocab_size` ids (<s> <pad> </s> <unk>, pieces, <mask>), made in-process
    in seconds, saved to `dest`: the lent GPU machine has no network and no ../shared, and a file of 17 MB would
    travel with every call. Its pieces are the letters of `SCRIPTS` (alone and after the word mark) and seeded random
    strings of 2-6 of them, so the text of `write_text` splits into pieces of a few letters, as real text does under
    XLM-R. The vocabulary's size, not its pieces, is what the throughput and memory figures depend on."""
    from transformers import XLMRobertaTokenizer

    rng = random.Random(0)
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    pieces: dict[str, float] = {"\u2581": -5.0}
    for letters in SCRIPTS.values():
        for ch in letters:
            pieces.setdefault(ch, -8.0)
            pieces.setdefault("\u2581" + ch, -8.0)
    alphabets = list(SCRIPTS.values())
    while len(pieces) < vocab_size - len(specials) - 1:
        k = rng.randint(2, 6)
        piece = "".join(rng.choices(rng.choice(alphabets), k=k))
        pieces.setdefault(("\u2581" if rng.random() < 0.5 else "") + piece, -10.0 - k - rng.random())
    vocab = [(s, 0.0) for s in specials] + list(pieces.items()) + [("<mask>", 0.0)]
    XLMRobertaTokenizer(vocab=vocab).save_pretrained(dest)
    return dest
