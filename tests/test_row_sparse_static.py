"""The row-sparse embedding reduce without a host synchronisation (issue 36 item 7): with the step's lookups
counted, the block of rows has a size the host knows (`torch.nonzero_static`), so nothing reads the device; the
result is the dense sum's. One gloo process here (the 2-process equality with DDP's own hook is in
tests/test_ddp.py, which runs distill, whose steps count their lookups)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from mlminilm.training import row_sparse_reduce

# What makes the host wait for a CUDA device: reading a value, or sizing a tensor by its content.
READS = ("item", "tolist", "__bool__", "__int__", "__float__", "numpy", "nonzero")


@pytest.fixture
def one_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def gradient(rows: int = 64, width: int = 8, used: tuple = (0, 3, 17, 40)) -> torch.Tensor:
    g = torch.zeros(rows, width)
    g[list(used)] = torch.randn(len(used), width, generator=torch.Generator().manual_seed(0))
    return g


def test_a_counted_step_reads_nothing_from_the_device(one_process_group, monkeypatch):
    grad = gradient()
    expected = grad.clone()  # one process: the sum is the gradient itself
    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, lambda *a, _n=name, **k: pytest.fail(f"host read: {_n}"))
    sent = row_sparse_reduce.reduce_rows(grad, 8)
    monkeypatch.undo()
    assert sent == 8 and torch.equal(grad, expected)


def test_uncounted_it_sizes_the_block_by_the_device_as_before(one_process_group, monkeypatch):
    grad = gradient()
    calls = []
    real = torch.Tensor.nonzero
    monkeypatch.setattr(torch.Tensor, "nonzero", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    assert row_sparse_reduce.reduce_rows(grad) == 4 and calls


def test_more_than_half_the_rows_is_reduced_whole(one_process_group):
    grad = gradient()
    assert row_sparse_reduce.reduce_rows(grad, 33) == 64


def test_a_row_used_as_padding_keeps_its_own_sum(one_process_group):
    """The block's padding gathers and adds at row 0: row 0 used or not, it ends as the dense sum's."""
    for used in ((0, 5), (5, 9)):
        grad = gradient(used=used)
        expected = grad.clone()
        assert row_sparse_reduce.reduce_rows(grad, 16) == 16
        assert torch.equal(grad, expected)


def test_the_step_counts_its_lookups_and_the_reduce_starts_afresh():
    state = row_sparse_reduce.RowState({1})

    class Wrapped(torch.nn.Module):
        pass

    model = Wrapped()
    row_sparse_reduce.note_lookups(model, 10)  # no hook registered: nothing to count
    model._mlminilm_rows = state
    row_sparse_reduce.note_lookups(model, 10)
    row_sparse_reduce.note_lookups(model, 6)
    assert state.lookups == 16 and 1 in state and 2 not in state
