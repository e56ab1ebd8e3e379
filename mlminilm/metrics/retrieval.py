"""Ranked-retrieval metrics as BEIR and MTEB compute them (through pytrec_eval, i.e. trec_eval's definitions), in %.

For one query with ranked documents d_1, d_2, ... and graded relevance rel(d) (> 0 relevant, absent or 0 not):

- nDCG@k = DCG@k / IDCG@k, DCG@k = sum_{i<=k} rel(d_i) / log2(i + 1) (linear gain, trec_eval's `ndcg_cut`), IDCG@k
  the DCG of the relevant documents sorted by relevance; 0 for a query with no relevant document;
- MRR@k = 1 / the rank of the first relevant document within the top k, else 0 (BEIR's `mrr`);
- recall@k = relevant documents in the top k / all relevant documents; 0 with none (trec_eval's `recall_k`).

Every metric is the unweighted mean over the queries scored. The ranking itself (cosine similarity, ties to the
lower corpus index) is the evaluation's (mlminilm.evaluation.retrieval.rank); trec_eval breaks ties by document id
instead, so two documents of exactly equal score may be ranked differently there.
"""

from __future__ import annotations

import math
from typing import Sequence

NDCG_AT = 10
MRR_AT = 10
RECALL_AT = (1, 10, 100)
METRICS = (f"ndcg_at_{NDCG_AT}", f"mrr_at_{MRR_AT}", *(f"recall_at_{k}" for k in RECALL_AT))
DEPTH = max(NDCG_AT, MRR_AT, *RECALL_AT)  # how many ranked documents per query the metrics read


def query_scores(ranked: Sequence[int], relevant: dict[int, int]) -> dict[str, float]:
    """The metrics (fractions in [0, 1]) of one query: `ranked` corpus indices, best first (at least DEPTH of them,
    or the whole corpus); `relevant`: corpus index -> gain (> 0)."""
    gains = [relevant.get(int(d), 0) for d in ranked[:DEPTH]]
    out: dict[str, float] = {}
    ideal = sorted(relevant.values(), reverse=True)[:NDCG_AT]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains[:NDCG_AT]))
    out[METRICS[0]] = dcg / idcg if idcg > 0 else 0.0
    first = next((i for i, g in enumerate(gains[:MRR_AT]) if g > 0), None)
    out[METRICS[1]] = 0.0 if first is None else 1.0 / (first + 1)
    for k in RECALL_AT:
        found = sum(1 for g in gains[:k] if g > 0)
        out[f"recall_at_{k}"] = found / len(relevant) if relevant else 0.0
    return out


def mean_scores(ranked: Sequence[Sequence[int]], qrels: Sequence[dict[int, int]]) -> dict[str, float]:
    """Each metric's mean over the queries, in %."""
    if len(ranked) != len(qrels):
        raise ValueError(f"{len(ranked)} rankings for {len(qrels)} queries")
    totals = dict.fromkeys(METRICS, 0.0)
    for row, relevant in zip(ranked, qrels):
        for name, value in query_scores(row, relevant).items():
            totals[name] += value
    n = max(len(qrels), 1)
    return {name: 100.0 * total / n for name, total in totals.items()}
