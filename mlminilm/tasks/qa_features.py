"""Extractive-QA featurisation and post-processing: the standard Hugging Face `run_qa.py` approach.

A question/context pair becomes one or more features (windows over the context), tokenised as a pair with
`truncation="only_second"`, so the question is whole in each window and the context overflows into further
windows. Works with any fast tokenizer: WordPiece BERT (`[CLS] q [SEP] c [SEP]`, token type ids) and SentencePiece
XLM-R (`<s> q </s></s> c </s>`, no token type ids) alike, because context tokens are found with
`sequence_ids()`, never with token type ids, and answers are located with character offsets.

`doc_stride` is the number of context tokens two consecutive windows SHARE (the tokenizers' `stride`, as in
`run_qa.py`), not the step between window starts as in the original BERT `run_squad.py`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mlminilm.errors import ConfigError, DataError
from mlminilm.tasks.squad import QAExample

__all__ = ["prepare_train_features", "prepare_eval_features", "postprocess_predictions"]


def prepare_train_features(
    examples: Sequence[QAExample],
    tokenizer,
    max_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    pad_to_max_length: bool = True,
) -> dict[str, list]:
    """Training features: the model inputs plus `start_positions` / `end_positions`.

    The positions are the token indices of the first answer's first and last tokens, or the CLS index (0) for
    both when the answer is not wholly inside the window (or an example has no answer). Returns a dict of
    lists, one entry per feature, ready for `torch.tensor` (padded to `max_length` unless told otherwise)."""
    encoded = _encode(examples, tokenizer, max_length, doc_stride, max_query_length, pad_to_max_length)
    context_index = _context_sequence_index(tokenizer)
    starts, ends = [], []
    for i, offsets in enumerate(encoded["offset_mapping"]):
        cls_index = _cls_index(encoded["input_ids"][i], tokenizer)
        example = examples[encoded["overflow_to_sample_mapping"][i]]
        span = None
        if example.answers:
            answer = example.answers[0]
            start_char = answer["answer_start"]
            end_char = start_char + len(answer["text"])
            span = _token_span(offsets, encoded.sequence_ids(i), context_index, start_char, end_char)
        start, end = span if span is not None else (cls_index, cls_index)
        starts.append(start)
        ends.append(end)
    features = _model_inputs(encoded)
    features["start_positions"] = starts
    features["end_positions"] = ends
    return features


def prepare_eval_features(
    examples: Sequence[QAExample],
    tokenizer,
    max_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    pad_to_max_length: bool = True,
) -> dict[str, list]:
    """Evaluation features: the model inputs plus `example_id` (the QAExample id each feature comes from) and
    `offset_mapping` ((start, end) character offsets into the context, None for every non-context token).

    Pass only the model inputs to the model: drop `example_id` and `offset_mapping`, keep them for
    `postprocess_predictions`."""
    encoded = _encode(examples, tokenizer, max_length, doc_stride, max_query_length, pad_to_max_length)
    context_index = _context_sequence_index(tokenizer)
    example_ids, offset_mapping = [], []
    for i, offsets in enumerate(encoded["offset_mapping"]):
        sequence_ids = encoded.sequence_ids(i)
        example_ids.append(examples[encoded["overflow_to_sample_mapping"][i]].id)
        offset_mapping.append(
            [tuple(offset) if sequence_ids[k] == context_index else None for k, offset in enumerate(offsets)]
        )
    features = _model_inputs(encoded)
    features["example_id"] = example_ids
    features["offset_mapping"] = offset_mapping
    return features


def postprocess_predictions(
    examples: Sequence[QAExample],
    features: Mapping[str, Sequence],
    start_logits,
    end_logits,
    n_best: int = 20,
    max_answer_length: int = 30,
) -> dict[str, str]:
    """Map per-feature start/end logits back to one answer string per example: {example id: answer text}.

    For every feature of an example, the `n_best` highest start and end logits are paired; a pair counts when
    both tokens are in the context, end >= start and the span is at most `max_answer_length` tokens. The best
    pair over all the example's features (highest start + end logit) is cut from the ORIGINAL context by
    character offsets, so no detokenisation is involved. An example with no valid pair gets "".

    `features` is what `prepare_eval_features` returned (only `example_id` and `offset_mapping` are read);
    `start_logits` / `end_logits` hold one row of logits per feature: a [num_features, sequence_length] array
    (numpy, or a CPU float torch tensor) or a list of per-feature rows of any lengths (unpadded features)."""
    feature_count = len(features["example_id"])
    if len(start_logits) != feature_count or len(end_logits) != feature_count:
        raise DataError(
            f"logits for {len(start_logits)} / {len(end_logits)} features, but there are {feature_count} features"
        )
    if len({example.id for example in examples}) != len(examples):
        raise DataError("example ids are not unique, so features cannot be mapped back to their examples")
    features_of: dict[str, list[int]] = defaultdict(list)
    for index, example_id in enumerate(features["example_id"]):
        features_of[example_id].append(index)

    predictions = {}
    for example in examples:
        best_score, best_span = -np.inf, None
        for index in features_of.get(example.id, []):
            offsets = features["offset_mapping"][index]
            starts = np.asarray(start_logits[index], dtype=np.float64)
            ends = np.asarray(end_logits[index], dtype=np.float64)
            found = _best_span(starts, ends, offsets, n_best, max_answer_length)
            if found is not None and found[0] > best_score:
                best_score, best_span = found
        predictions[example.id] = "" if best_span is None else example.context[best_span[0] : best_span[1]]
    return predictions


def _best_span(start_logits, end_logits, offsets, n_best: int, max_answer_length: int):
    """(score, (start char, end char)) of the best valid span in one feature, or None."""
    usable = min(len(offsets), len(start_logits), len(end_logits))  # logits may be padded beyond the tokens
    # argsort descending, limited to tokens that exist in this feature.
    start_candidates = np.argsort(start_logits[:usable])[::-1][:n_best]
    end_candidates = np.argsort(end_logits[:usable])[::-1][:n_best]
    best = None
    for start in start_candidates:
        if offsets[start] is None:
            continue
        for end in end_candidates:
            if offsets[end] is None or end < start or end - start + 1 > max_answer_length:
                continue
            score = float(start_logits[start] + end_logits[end])
            if best is None or score > best[0]:
                best = (score, (offsets[start][0], offsets[end][1]))
    return best


def _encode(examples, tokenizer, max_length, doc_stride, max_query_length, pad_to_max_length):
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError("QA featurisation needs a fast tokenizer (offsets); load it with AutoTokenizer")
    if not examples:
        raise DataError("no QA examples to featurise")
    # The context must have room for more than `doc_stride` tokens in every window, or windows cannot advance.
    room = max_length - max_query_length - tokenizer.num_special_tokens_to_add(pair=True)
    if room <= doc_stride:
        raise ConfigError(
            f"--max-seq-len {max_length} leaves {room} context tokens after a {max_query_length}-token question "
            f"and special tokens, not more than --doc-stride {doc_stride}: raise --max-seq-len or lower "
            "--doc-stride / --max-query-length"
        )
    # Some SQuAD questions start with long runs of spaces that would waste the budget.
    questions = _truncate_questions([example.question.lstrip() for example in examples], tokenizer, max_query_length)
    contexts = [example.context for example in examples]
    on_right = tokenizer.padding_side == "right"
    return tokenizer(
        questions if on_right else contexts,
        contexts if on_right else questions,
        truncation="only_second" if on_right else "only_first",
        max_length=max_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length" if pad_to_max_length else False,
    )


def _truncate_questions(questions: list[str], tokenizer, max_query_length: int) -> list[str]:
    """Every question cut to at most `max_query_length` tokens (one batch call; only long ones are revisited)."""
    lengths = [len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]]
    return [
        _truncate_question(question, tokenizer, max_query_length) if length > max_query_length else question
        for question, length in zip(questions, lengths)
    ]


def _truncate_question(question: str, tokenizer, max_query_length: int) -> str:
    """Cut the question text after its `max_query_length`-th token (by character offsets), so that the pair
    encoding sees at most that many question tokens. Re-tokenising a cut word can add a piece, hence the loop."""
    limit = max_query_length
    while True:
        encoded = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
        if len(encoded["input_ids"]) <= max_query_length or limit <= 1:
            return question
        question = question[: encoded["offset_mapping"][limit - 1][1]]
        limit -= 1


def _token_span(offsets, sequence_ids, context_index: int, start_char: int, end_char: int):
    """Token indices (first, last) of the characters [start_char, end_char) when the window holds all of them."""
    context_tokens = [k for k, sid in enumerate(sequence_ids) if sid == context_index]
    if not context_tokens:
        return None
    first, last = context_tokens[0], context_tokens[-1]
    if offsets[first][0] > start_char or offsets[last][1] < end_char:
        return None
    start = first
    # The last token starting at or before the answer's first character (SentencePiece can emit a bare "▁"
    # whose offsets overlap the next token's, so "the last such token" is the one to take).
    while start <= last and offsets[start][0] <= start_char:
        start += 1
    end = last
    while end >= first and offsets[end][1] >= end_char:
        end -= 1
    return start - 1, end + 1


def _context_sequence_index(tokenizer) -> int:
    return 1 if tokenizer.padding_side == "right" else 0


def _cls_index(input_ids: list[int], tokenizer) -> int:
    cls_id = tokenizer.cls_token_id
    return input_ids.index(cls_id) if cls_id is not None and cls_id in input_ids else 0


def _model_inputs(encoded) -> dict[str, Any]:
    """The encoding without the bookkeeping keys a model must not receive."""
    return {key: value for key, value in encoded.items() if key not in ("offset_mapping", "overflow_to_sample_mapping")}
