"""A word-embedding gradient that reuses its memory from step to step (CPU, one process).

The gradient of an embedding lookup is dense, [vocabulary, hidden]: zeros except the rows the batch looked up.
torch allocates it anew at every backward (`embedding_dense_backward`), and `zero_grad(set_to_none=True)` frees it
again. For a student with XLM-R's 250,002-id vocabulary at width 384 that is 384 MB per step: above glibc's
largest mmap threshold (32 MiB), so every step maps fresh pages, the kernel zeroes each of them at its first touch,
torch then fills the tensor with zeros once more, and the next zero_grad unmaps it. That costs ~150 ms a step on the
benchmark machine (docs/BENCHMARKS.md), for a value that is only zeros plus a few thousand rows.

`keep_embedding_gradient(model)` makes the model's input embedding compute the same gradient into the tensor that
held the previous step's: zero it in place (no page faults), `index_add_` the looked-up rows, zero the padding
row, exactly what `embedding_dense_backward` computes (the same values, bit for bit). The optimizer sees a dense
gradient as before, so AdamW's semantics are unchanged: every row still decays and moves with its moments.

Where it steps aside (plain nn.Embedding behaviour): no gradient wanted, weights off the CPU (CUDA's caching
allocator already reuses memory, and its index_add_ is atomic, so not deterministic), under torch.compile,
`max_norm`, `scale_grad_by_freq`, `sparse`, and whenever the weight already holds a gradient (accumulation over
micro-batches, or zero_grad without set_to_none: the new part is then added to it as torch does). Under DDP the
gradient is computed the same way and DDP copies it into its bucket as it would copy torch's.

Memory: the kept tensor stays allocated between steps (it used to be freed by zero_grad and allocated again in
the next backward), so the resident set between steps grows by one [vocabulary, hidden] fp32 tensor; the
step's peak does not (the gradient existed during every backward and optimizer step anyway).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import nn


class _Lookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight: torch.Tensor, ids: torch.Tensor, owner: "ReusedGradEmbedding") -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.owner = weakref.ref(owner)
        return F.embedding(ids, weight, owner.padding_idx)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        owner = ctx.owner()
        if owner is None:  # the module is gone: nothing kept to reuse, compute the gradient as torch does
            raise RuntimeError("the embedding module was released before its backward ran")
        out = owner._take_buffer()
        out.index_add_(0, ids.reshape(-1), grad.reshape(-1, grad.shape[-1]).to(out.dtype))
        if owner.padding_idx is not None:
            out[owner.padding_idx] = 0
        return out, None, None


class ReusedGradEmbedding(nn.Embedding):
    """nn.Embedding whose weight gradient reuses the previous step's tensor (see the module docstring)."""

    _kept: torch.Tensor | None = None
    _hooked = None  # weakref to the Parameter that carries our post-accumulate hook (deepcopy drops hooks)

    def _plain(self) -> bool:
        return (
            not (torch.is_grad_enabled() and self.weight.requires_grad)
            or self.weight.device.type != "cpu"  # CUDA: cached allocations already; index_add_ there is atomic
            or torch.compiler.is_compiling()
            or self.max_norm is not None
            or self.scale_grad_by_freq
            or self.sparse
            or self.weight.grad is not None  # accumulating into an existing gradient: torch's own path adds to it
        )

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self._plain():
            return super().forward(input)
        if self._hooked is None or self._hooked() is not self.weight:
            ref = weakref.ref(self)
            self.weight.register_post_accumulate_grad_hook(lambda w: (m := ref()) is not None and m._keep(w))
            self._hooked = weakref.ref(self.weight)
        return _Lookup.apply(self.weight, input, self)

    def _take_buffer(self) -> torch.Tensor:
        """A zeroed tensor for the gradient: the kept one when it is free to overwrite, else a new one."""
        kept, self._kept = self._kept, None
        w = self.weight
        if (
            kept is None
            or kept is w.grad  # still the live gradient (zero_grad did not run): never overwrite it
            or kept.shape != w.shape
            or kept.dtype != w.dtype
            or kept.device != w.device
            or not kept.is_contiguous()
        ):
            return torch.zeros_like(w, memory_format=torch.contiguous_format)
        return kept.zero_()

    def _keep(self, weight: torch.Tensor) -> None:
        # After the gradient has been accumulated: remember the tensor, whoever allocated it. The next step
        # overwrites it only after zero_grad(set_to_none=True) has detached it from the weight.
        self._kept = weight.grad


def keep_embedding_gradient(model: nn.Module) -> bool:
    """Make `model`'s input embedding a ReusedGradEmbedding (same weight Parameter, same state dict, same
    gradient values). Returns False, changing nothing, when the model has no plain nn.Embedding input layer."""
    old = model.get_input_embeddings()
    if type(old) is not nn.Embedding:
        return isinstance(old, ReusedGradEmbedding)
    new = ReusedGradEmbedding.__new__(ReusedGradEmbedding)
    new.__dict__.update(old.__dict__)  # the same Parameter object, hooks, padding_idx, training flag
    model.set_input_embeddings(new)
    return True


def plain_embedding(model: nn.Module) -> None:
    """Undo keep_embedding_gradient: the input embedding as a plain nn.Embedding (same weight Parameter)."""
    old = model.get_input_embeddings()
    if isinstance(old, ReusedGradEmbedding):
        new = nn.Embedding.__new__(nn.Embedding)
        new.__dict__.update({k: v for k, v in old.__dict__.items() if k not in ("_kept", "_hooked")})
        model.set_input_embeddings(new)
