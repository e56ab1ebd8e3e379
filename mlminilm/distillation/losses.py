"""MiniLM (v1) and MiniLMv2 distillation losses (METHOD.md sections 1 and 3).

`*_qkv` are (q, k, v) tuples of [batch, seq, hidden] tensors, heads concatenated in the model's order;
`attention_mask` is [batch, seq] with 1 for real tokens, or None for a batch without padding. Each loss is the
batch mean of the per-sequence loss, a 0-dim tensor. The `*_terms` variants return the parts by name. Each
relation is computed by `relations.relation_loss`, `chunk` heads at a time (default: automatic, so that no
[batch, heads, seq, seq] tensor is materialised at long sequences), in float32 even under bf16 autocast.
"""

from __future__ import annotations

import torch

from mlminilm.config.distill import HIDDEN_DISTANCES  # noqa: F401 (its one home: the --hidden-distance choices)
from mlminilm.distillation.relations import relation_loss

QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _check(teacher_qkv: QKV, student_qkv: QKV, attention_mask: torch.Tensor | None) -> None:
    if len(teacher_qkv) != 3 or len(student_qkv) != 3:
        raise ValueError("teacher_qkv and student_qkv must be (q, k, v) tuples")
    bt, st, _ = teacher_qkv[0].shape
    bs, ss, _ = student_qkv[0].shape
    if (bt, st) != (bs, ss) or (attention_mask is not None and tuple(attention_mask.shape) != (bt, st)):
        raise ValueError(
            f"batch/sequence shapes differ: teacher {tuple(teacher_qkv[0].shape)}, "
            f"student {tuple(student_qkv[0].shape)}, mask {tuple(attention_mask.shape)}"
        )


def minilm_v1_terms(
    teacher_qkv: QKV, student_qkv: QKV, attention_mask: torch.Tensor, num_heads: int, chunk: int | None = None
) -> dict:
    """{"attention": L_AT, "value": L_VR}: per-head attention distributions and value relations."""
    _check(teacher_qkv, student_qkv, attention_mask)
    tq, tk, tv = teacher_qkv
    sq, sk, sv = student_qkv
    return {
        "attention": relation_loss(tq, tk, sq, sk, attention_mask, num_heads, chunk),
        "value": relation_loss(tv, tv, sv, sv, attention_mask, num_heads, chunk),
    }


def minilm_v1_loss(
    teacher_qkv: QKV, student_qkv: QKV, attention_mask: torch.Tensor, num_heads: int, chunk: int | None = None
) -> torch.Tensor:
    """L_AT + L_VR of MiniLM v1; teacher and student must have `num_heads` attention heads."""
    terms = minilm_v1_terms(teacher_qkv, student_qkv, attention_mask, num_heads, chunk)
    return terms["attention"] + terms["value"]


def minilm_v2_terms(
    teacher_qkv: QKV, student_qkv: QKV, attention_mask: torch.Tensor, relation_heads: int, chunk: int | None = None
) -> dict:
    """{"qq": ..., "kk": ..., "vv": ...}: multi-head self-attention relations over `relation_heads` heads."""
    _check(teacher_qkv, student_qkv, attention_mask)
    return {
        name: relation_loss(t, t, s, s, attention_mask, relation_heads, chunk)
        for name, t, s in zip(("qq", "kk", "vv"), teacher_qkv, student_qkv)
    }


def minilm_v2_loss(
    teacher_qkv: QKV, student_qkv: QKV, attention_mask: torch.Tensor, relation_heads: int, chunk: int | None = None
) -> torch.Tensor:
    """Sum of the Q-Q, K-K and V-V relation losses of MiniLMv2; `relation_heads` must divide both hidden sizes."""
    terms = minilm_v2_terms(teacher_qkv, student_qkv, attention_mask, relation_heads, chunk)
    return terms["qq"] + terms["kk"] + terms["vv"]


# ------------------------------------------------------------------------------ output terms (opt-in)
# The relation losses above shape only the top layer's Q/K/V: nothing holds the student's output space to the
# teacher's, so a student started from teacher layers drifts away from what the teacher is used for (sentence
# embeddings, the features a fine-tuned head reads). These terms compare outputs directly. They need equal hidden
# sizes (distill refuses a width mismatch: a learned projection would not be part of the exported student, whose
# vectors would then not live in the teacher's space). Computed in float32 under autocast.


def _token_mean(per_token: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """[batch, seq] values -> mean over each sequence's real tokens, then over the batch (as the relation losses)."""
    if attention_mask is None:
        return per_token.mean()
    m = attention_mask.to(per_token.dtype)
    return ((per_token * m).sum(1) / m.sum(1).clamp(min=1.0)).mean()


def hidden_cosine(
    teacher_hidden: torch.Tensor, student_hidden: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    """1 - cos(h_T, h_S) of each real token's last hidden state, averaged over tokens then sequences."""
    t, s = teacher_hidden.float(), student_hidden.float()
    cos = torch.nn.functional.cosine_similarity(s, t, dim=-1, eps=1e-8)
    return _token_mean(1.0 - cos, attention_mask)


def hidden_mse(
    teacher_hidden: torch.Tensor, student_hidden: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    """Mean squared error over the hidden dimension of each real token (TinyBERT's hidden-state loss, no
    projection), averaged over tokens then sequences."""
    t, s = teacher_hidden.float(), student_hidden.float()
    return _token_mean((s - t).pow(2).mean(-1), attention_mask)


def embedding_mse(teacher_embedding: torch.Tensor, student_embedding: torch.Tensor) -> torch.Tensor:
    """Squared L2 distance between sentence embeddings, averaged over the batch: sentence-transformers'
    multilingual distillation loss (MSELoss, a mean over batch and dimensions) times the embedding dimension, so
    that a weight of 1 is on the scale of the relation losses (for unit vectors it equals 2 - 2 cos)."""
    t, s = teacher_embedding.float(), student_embedding.float()
    return (s - t).pow(2).sum(-1).mean()


def sentence_embedding(
    hidden: torch.Tensor, attention_mask: torch.Tensor | None, modes: tuple[str, ...], normalize: bool
) -> torch.Tensor:
    """The sentence-transformers embedding of a model's last hidden states: its Pooling modes, then Normalize."""
    from mlminilm.models.pooling import pool

    vectors = pool(hidden, attention_mask, modes)
    return torch.nn.functional.normalize(vectors, dim=-1, eps=1e-12) if normalize else vectors


def translation_ranking(
    sources: torch.Tensor, translations: torch.Tensor, temperature: float, not_negative: torch.Tensor | None = None
) -> torch.Tensor:
    """In-batch translation ranking (the contrastive loss LaBSE and LEALLA train on, without their margin): each
    source embedding [B, H] must rank its own translation first among the batch's B translations by cosine
    similarity over `temperature`, and each translation its own source (cross-entropy, both directions averaged).
    `not_negative` [B, B] (bool, False on the diagonal) marks off-diagonal pairs that are not negatives, e.g. the
    same source sentence drawn twice with two translations: they are left out of the softmax."""
    s = torch.nn.functional.normalize(sources.float(), dim=-1, eps=1e-12)
    t = torch.nn.functional.normalize(translations.float(), dim=-1, eps=1e-12)
    logits = s @ t.T / temperature
    if not_negative is not None:
        logits = logits.masked_fill(not_negative, float("-inf"))
    labels = torch.arange(logits.shape[0], device=logits.device)
    ce = torch.nn.functional.cross_entropy
    return (ce(logits, labels) + ce(logits.T, labels)) / 2


def score_kl(
    teacher_queries: torch.Tensor,
    teacher_keys: torch.Tensor,
    student_queries: torch.Tensor,
    student_keys: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """KL(teacher || student) of the in-batch query -> key score distributions (retrieval pairs: query, text).

    Each side's embeddings of a batch's B queries and B keys [B, H] are made unit vectors and scored
    S = Q @ K.T / `temperature` [B, B]. Row i softmaxed is query i's distribution over the batch's keys, column j
    softmaxed key j's over its queries; the loss is the KL divergence of the student's distributions from the
    teacher's, summed over each distribution's entries and averaged over the B rows (batchmean), the row and the
    column directions averaged. Zero when the student scores as the teacher does."""

    def scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q = torch.nn.functional.normalize(queries.float(), dim=-1, eps=1e-12)
        k = torch.nn.functional.normalize(keys.float(), dim=-1, eps=1e-12)
        return q @ k.T / temperature

    teacher = scores(teacher_queries, teacher_keys).detach()
    student = scores(student_queries, student_keys)
    log_softmax, kl = torch.nn.functional.log_softmax, torch.nn.functional.kl_div

    def direction(t: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return kl(log_softmax(s, dim=1), log_softmax(t, dim=1), log_target=True, reduction="batchmean")

    return (direction(teacher, student) + direction(teacher.T, student.T)) / 2
