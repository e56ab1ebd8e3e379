"""The chunked relation path under torch.compile: several chunks (the backward's recompute branch), compiled with
the aot_eager backend (dynamo + AOT autograd trace the graphs, as `distill --compile on` does; inductor's C++
code generation would take minutes on a 2-core CPU), equal to eager execution in value and gradients."""

from __future__ import annotations

import pytest
import torch

from mlminilm.distillation import relations
from mlminilm.distillation.losses import minilm_v1_terms, minilm_v2_terms

# fp32 tolerance: the compiled graph runs the same ops in the same order; AOT autograd may reorder the additions of
# the two roles' gradients of a self relation, which is a few ulps of fp32.
RTOL, ATOL = 1e-5, 1e-7


def inputs(batch=2, seq=24, hidden=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    teacher = [torch.randn(batch, seq, 2 * hidden, generator=g) for _ in range(3)]
    student = [torch.randn(batch, seq, hidden, generator=g) for _ in range(3)]
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, seq - 5 :] = 0  # padded keys and query rows in the second sequence
    return teacher, student, mask


def run(fn, teacher, student, mask):
    """(the terms' values, the gradients of their sum w.r.t. the student's q, k, v)."""
    student = [s.clone().requires_grad_(True) for s in student]
    terms = fn(tuple(teacher), tuple(student), mask)
    sum(terms.values()).backward()
    return {k: v.detach() for k, v in terms.items()}, [s.grad for s in student]


@pytest.mark.parametrize("terms, heads", [(minilm_v1_terms, 6), (minilm_v2_terms, 12)], ids=["minilm", "minilm-v2"])
@pytest.mark.parametrize("padded", [True, False], ids=["mask", "packed"])
def test_compiled_chunked_relations_equal_eager(terms, heads, padded, monkeypatch):
    teacher, student, mask = inputs()
    mask = mask if padded else None
    batch, seq = student[0].shape[:2]
    # A budget of 5 heads' [batch, seq, seq] each: chunks of 5 heads (5 + 1 of 6, 5 + 5 + 2 of 12), so the forward
    # keeps nothing of size seq x seq and the backward recomputes every chunk.
    monkeypatch.setitem(relations.CHUNK_ELEMENTS, "cpu", 5 * batch * seq * seq)
    chunk = relations.auto_chunk(batch, seq, heads)
    assert chunk == 5 and heads % chunk  # 2 or 3 chunks, the last one shorter

    recomputed = []
    real_difference = relations.chunk_difference
    monkeypatch.setattr(
        relations, "chunk_difference", lambda *a: recomputed.append(1) or real_difference(*a), raising=True
    )

    def loss(t, s, m):
        return terms(t, s, m, heads)

    eager = run(loss, teacher, student, mask)
    eager_recomputes = len(recomputed)
    assert eager_recomputes >= 2 * len(eager[0])  # the backward recomputed each term's chunks
    monkeypatch.setattr(relations, "chunk_difference", real_difference)  # no side effect for dynamo to refuse
    torch._dynamo.reset()
    compiled_loss = torch.compile(loss, backend="aot_eager", dynamic=False, fullgraph=True)
    compiled = run(compiled_loss, teacher, student, mask)
    torch._dynamo.reset()
    for name, value in eager[0].items():
        torch.testing.assert_close(compiled[0][name], value, rtol=RTOL, atol=ATOL, msg=name)
    for got, expected in zip(compiled[1], eager[1]):
        torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)
    # and the eager values are the materialised reference's (one chunk, nothing recomputed)
    monkeypatch.setitem(relations.CHUNK_ELEMENTS, "cpu", 1 << 30)
    whole = run(loss, teacher, student, mask)
    for name, value in whole[0].items():
        torch.testing.assert_close(eager[0][name], value, rtol=RTOL, atol=ATOL, msg=name)
    for got, expected in zip(eager[1], whole[1]):
        torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)
