"""The documented path of the distillation losses (README, Python API); they live in `mlminilm.distillation.losses`."""

from mlminilm.distillation.losses import (
    HIDDEN_DISTANCES,
    embedding_mse,
    hidden_cosine,
    hidden_mse,
    minilm_v1_loss,
    minilm_v1_terms,
    minilm_v2_loss,
    minilm_v2_terms,
    sentence_embedding,
)

__all__ = [
    "HIDDEN_DISTANCES", "embedding_mse", "hidden_cosine", "hidden_mse", "minilm_v1_loss", "minilm_v1_terms",
    "minilm_v2_loss", "minilm_v2_terms", "sentence_embedding",
]
