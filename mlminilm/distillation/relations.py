"""Self-attention relations and the masked KL between teacher and student relations.

MiniLM v1 and v2 losses are compositions of these (see `mlminilm.losses`). Two forms of the same quantity:

- `relation_loss(teacher_x, teacher_y, student_x, student_y, mask, heads)` goes from the Q/K/V-like inputs
  straight to the loss, a chunk of heads at a time, and recomputes each chunk in the backward: it never holds
  a whole [batch, heads, seq, seq] tensor when that would be large (seq 512 and up). The losses use it.
- `relation_logits` + `relation_kl` materialise the logits; kept for inspection and as the reference.

Beyond chunks of heads: a fused relation-KL kernel holds no [seq, seq] tensor at all. Per row, KL(P || Q) =
sum_j exp(t_j - m) (t_j - s_j) / sum_j exp(t_j - m) - LSE(t) + LSE(s), so one pass over blocks of keys with online
softmax (running maxima and sums for teacher and student, rescaled as each block raises the maximum) gives the KL
and both log-sum-exps per row; the backward recomputes each block's p = exp(t - LSE(t)), q = exp(s - LSE(s)) and
accumulates (q - p) g against the student's keys and queries. The design, its cost and its plain-torch reference
(proven against float64) are in `mlminilm.distillation.relation_blocks`; a Triton kernel of it is future work.

Everything is computed in float32 (float64 for float64 inputs) with autocast switched off, whatever the
inputs' dtype and whatever autocast is active: METHOD.md section 1 wants the relation logits and the KL in
float32 even under bf16 autocast, and autocast would otherwise run the matmuls (and the einsum of the KL,
which lowers to a bmm) in bf16.
"""

from __future__ import annotations

import contextlib
import math

import torch

# A large negative *finite* logit for masked keys: a bare -inf would turn a fully masked row into NaN.
MASKED_LOGIT = -1e9
# The automatic chunk holds at most this many elements per [batch, chunk, seq, seq] tensor. CPU: 8 MiB in fp32,
# so a chunk's few tensors stay in a server CPU's last-level cache (batch 8 x seq 512, 1 thread: chunks of 1
# head took 1.2 s against 2.1 s for chunks of 4 and 1.7 s materialised); batch 8 x seq 128 still fits all 12
# heads in one chunk. CUDA: 1/GPU_MEMORY_PER_CHUNK of the GPU's memory (`chunk_budget`), at least
# CHUNK_ELEMENTS_DEFAULT (64 MiB, also the budget of other devices and of a CUDA build without a GPU).
CHUNK_ELEMENTS = {"cpu": 1 << 21}
CHUNK_ELEMENTS_DEFAULT = 1 << 24
# Why 1/32 of the GPU: one chunk for every head (no recomputation in the backward: the forward keeps the softmax
# difference, the backward is one multiply and two matmuls) as long as a [batch, heads, seq, seq] fp32 tensor, U =
# 4 b h s^2 bytes, is at most 1/32 of the GPU. With T relation terms (MiniLM: 2, MiniLMv2: 3) the relation loss
# then holds T U from its forward to its backward and peaks at about (T + 3) U (the last term's logits,
# log-probabilities, probabilities and difference beside the T - 1 kept ones; measured on CPU in
# docs/BENCHMARKS.md's relation-memory rows). At 32 x 512: MiniLM, 12 heads, U = 384 MiB, peak 1.9 GiB (2.4 % of
# an 80 GB H100); MiniLMv2, 48 relation heads, U = 1.5 GiB, peak 9 GiB (11 %): both one chunk on an 80 GB GPU
# (budget 663M elements, 2.5 GB; U is 101M and 403M elements). The old 64 MiB budget split 32 x 512 x 12 heads
# into 6 chunks whose two softmaxes the backward computed again (a third more relation work). A 16 GiB GPU keeps
# MiniLM's 12 heads in one chunk at 32 x 512 and splits MiniLMv2's 48 into chunks of 16.
GPU_MEMORY_PER_CHUNK = 32


@torch.compiler.assume_constant_result
def gpu_memory(index: int | None) -> int:
    """The CUDA device's total memory in bytes (0 without a GPU). A constant to torch.compile: evaluated once when
    the loss is traced, never a graph break."""
    if not torch.cuda.is_available():
        return 0
    return torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index).total_memory


def chunk_budget(device: torch.device | str) -> int:
    """The most elements of one automatic chunk's [batch, chunk, seq, seq] tensor on `device` (see CHUNK_ELEMENTS)."""
    device = torch.device(device)
    if device.type in CHUNK_ELEMENTS:
        return CHUNK_ELEMENTS[device.type]
    if device.type == "cuda":
        return max(CHUNK_ELEMENTS_DEFAULT, gpu_memory(device.index) // (4 * GPU_MEMORY_PER_CHUNK))
    return CHUNK_ELEMENTS_DEFAULT


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[batch, seq, hidden] -> [batch, heads, seq, hidden // heads] (heads in the model's concatenation order)."""
    b, s, h = x.shape
    if h % heads:
        raise ValueError(f"{heads} heads do not divide hidden size {h}")
    return x.view(b, s, heads, h // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[batch, heads, seq, d] -> [batch, seq, heads * d], the inverse of `split_heads`."""
    b, a, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, a * d)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for bf16 / fp16 / fp32 inputs, float64 for float64 ones (so gradcheck can run in float64)."""
    return torch.promote_types(x.dtype, torch.float32)


def no_autocast(device: torch.device):
    """A context in which autocast leaves the matmuls in the dtype of their inputs."""
    return torch.autocast(device_type=device.type, enabled=False)


def scaled_logits(xh: torch.Tensor, yh: torch.Tensor) -> torch.Tensor:
    """x_a y_a^T / sqrt(d) for heads [batch, heads, seq, d] (d of x, the model's own head size).

    On CUDA the scale comes after the product: under `tf32_relations` the matmul reads its fp32 inputs as TF32,
    which holds bf16 and fp16 values exactly, but not x / sqrt(d) (sqrt(32) is no power of two). The CPU keeps its
    order (and its bits)."""
    scale = 1.0 / math.sqrt(xh.shape[-1])
    if xh.is_cuda:
        return torch.matmul(xh, yh.transpose(-1, -2)).mul_(scale)
    return torch.matmul(xh * scale, yh.transpose(-1, -2))


@contextlib.contextmanager
def tf32_relations(device: torch.device | str, dtype: torch.dtype):
    """TF32 for fp32 matmuls while a CUDA run computes in bf16 or fp16; nothing anywhere else (CPU, fp32 runs).

    Why it changes nothing measurable in the relations' forward: their inputs are bf16 (or fp16) Q/K/V cast to fp32,
    and TF32 keeps 10 mantissa bits, bf16 7 and fp16 10, so the tensor cores read them exactly; their products (at
    most 22 significant bits) and fp32 accumulation are an fp32 matmul's. The scale comes after the product on CUDA
    (`scaled_logits`) to keep that true. The backward's fp32 softmax difference is rounded to TF32 (a relative
    2^-11 per element) where the rest of the step's gradients are bf16 (2^-8). Under bf16 autocast no other fp32
    matmul runs (the model's are bf16; the teacher runs in its bf16 weights). Checked on CPU with TF32 emulated in
    tests/test_relations_tf32.py; the GPU figure is left to `make gpu-check`."""
    if torch.device(device).type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        yield False
        return
    # The legacy flag alone, set and restored: it exists on every torch mlminilm allows (`fp32_precision` only from
    # 2.9), and after it the legacy getters (`allow_tf32`, `get_float32_matmul_precision`) still answer. Setting the
    # new `fp32_precision` made them raise "mix of legacy and new APIs" (torch 2.13), and inductor on torch 2.9/2.10
    # calls them while it lowers the relations' fp32 bmm (pytorch/pytorch#166387).
    matmul = torch.backends.cuda.matmul
    old = legacy_tf32()
    matmul.allow_tf32 = True
    try:
        yield True
    finally:
        matmul.allow_tf32 = old


def legacy_tf32() -> bool:
    """Whether fp32 matmuls may use TF32, read through the legacy flag; when the caller set it with the new API (a
    mix that makes the legacy getter raise), read from that."""
    matmul = torch.backends.cuda.matmul
    try:
        return bool(matmul.allow_tf32)
    except RuntimeError:
        return getattr(matmul, "fp32_precision", "ieee") == "tf32"


def relation_logits(x: torch.Tensor, y: torch.Tensor, heads: int) -> torch.Tensor:
    """Scaled dot-product relation logits x_a y_a^T / sqrt(d) per head a, in float32.

    x, y: [batch, seq, hidden]; returns [batch, heads, seq, seq]. Float32 even under bf16 autocast:
    the softmax of these logits is the distillation target, and bf16 logits lose too much of it.
    """
    dtype = compute_dtype(x)
    with no_autocast(x.device):
        return scaled_logits(split_heads(x, heads).to(dtype), split_heads(y, heads).to(dtype))


def key_padding(attention_mask: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(real-token mask [batch, seq] as bool, padded keys [batch, 1, 1, seq]), both None for a batch without padding.

    The caller says "no padding" with attention_mask=None (distill knows it from the host-side token ids): packed
    batches rarely hold padding (only a language's last sequence), and then the masking passes are skipped. The
    mask's content is never inspected here: that would cost a device->host read on CUDA."""
    if attention_mask is None:
        return None, None
    mask = attention_mask.to(torch.bool)
    return mask, ~mask[:, None, None, :]


def masked_log_softmax(logits: torch.Tensor, padded_keys: torch.Tensor | None) -> torch.Tensor:
    """log_softmax over keys with padded keys at MASKED_LOGIT (a new tensor: `logits` are the caller's)."""
    if padded_keys is not None:
        logits = logits.masked_fill(padded_keys, MASKED_LOGIT)
    return torch.log_softmax(logits, dim=-1)


def row_kl(log_p: torch.Tensor, log_q: torch.Tensor, p: torch.Tensor | None = None) -> torch.Tensor:
    """Per-row KL(P || Q) = sum_j P_j (log P_j - log Q_j) from log-probabilities (and P if the caller has it).

    Overwrites `log_p`. Masked keys have P = Q = 0 and finite logs, so they add 0.
    """
    p = log_p.exp() if p is None else p
    return torch.einsum("...j,...j->...", p, log_p.sub_(log_q))


def reduce_rows(per_row: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Batch mean of 1/(heads |x|) sum over heads and real query rows of the per-row KL [batch, heads, seq]
    (mask None: every position is real)."""
    if mask is None:
        return per_row.mean()
    per_row = torch.where(mask[:, None, :], per_row, 0.0)
    heads = per_row.shape[1]
    real_tokens = mask.sum(-1).clamp(min=1).to(per_row.dtype)
    return (per_row.sum((1, 2)) / (heads * real_tokens)).mean()


class _RowKL(torch.autograd.Function):
    """Per-row KL(softmax(t) || softmax(s)) over the last dimension of materialised logits, gradient written out.

    d KL_row / d s = softmax(s) - softmax(t): the backward needs that one difference and nothing else, where
    autograd through log_softmax + kl_div + where keeps and re-reads several [b, h, s, s] tensors
    (docs/BENCHMARKS.md). The teacher is a constant: it gets no gradient.
    """

    @staticmethod
    def forward(ctx, t: torch.Tensor, s: torch.Tensor, padded_keys: torch.Tensor | None) -> torch.Tensor:
        with no_autocast(s.device):
            log_p = masked_log_softmax(t, padded_keys)
            log_q = masked_log_softmax(s, padded_keys)
            p = log_p.exp()
            ctx.save_for_backward(log_q.exp().sub_(p))  # q - p
            per_row = row_kl(log_p, log_q, p)
        return per_row

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_row: torch.Tensor):
        (difference,) = ctx.saved_tensors
        return None, difference * grad_row.unsqueeze(-1), None


def relation_kl(
    teacher_logits: torch.Tensor, student_logits: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Batch mean of 1/(heads |x|) sum_heads sum_real_queries KL(softmax(teacher) || softmax(student)).

    Logits: [batch, heads, seq, seq]; attention_mask: [batch, seq] with 1 for real tokens. Padded keys get
    probability 0 on both sides, padded query rows are left out, and |x| counts the real tokens of each sequence.
    The teacher is the target: no gradient flows to it. Float32 (float64 for float64 logits), even under autocast.
    """
    mask, padded_keys = key_padding(attention_mask)
    dtype = compute_dtype(student_logits)
    per_row = _RowKL.apply(teacher_logits.detach().to(dtype), student_logits.to(dtype), padded_keys)
    return reduce_rows(per_row, mask)


# ------------------------------------------------------------------------------ chunked, with recomputation


def auto_chunk(batch: int, seq: int, heads: int, device: torch.device | str = "cpu") -> int:
    """Heads per chunk so that one [batch, chunk, seq, seq] tensor holds at most the device's `chunk_budget`."""
    budget = chunk_budget(device)
    return max(1, min(heads, budget // max(1, batch * seq * seq)))


def head_slices(heads: int, chunk: int) -> list[slice]:
    """Consecutive slices of `chunk` heads (the last one shorter when chunk does not divide heads)."""
    return [slice(lo, min(lo + chunk, heads)) for lo in range(0, heads, chunk)]


def chunk_heads(x: torch.Tensor, heads: int, part: slice, dtype: torch.dtype) -> torch.Tensor:
    return split_heads(x, heads)[:, part].to(dtype)


def chunk_logits(x, y, heads, part, padded_keys, dtype) -> torch.Tensor:
    """One chunk's relation logits [batch, chunk, seq, seq], padded keys at MASKED_LOGIT."""
    logits = scaled_logits(chunk_heads(x, heads, part, dtype), chunk_heads(y, heads, part, dtype))
    return logits if padded_keys is None else logits.masked_fill_(padded_keys, MASKED_LOGIT)


def chunk_difference(tx, ty, sx, sy, heads, part, padded_keys, dtype) -> torch.Tensor:
    """softmax(student) - softmax(teacher) of one chunk: the gradient of each row's KL w.r.t. the student logits."""
    p = torch.softmax(chunk_logits(tx, ty, heads, part, padded_keys, dtype), dim=-1)
    return torch.softmax(chunk_logits(sx, sy, heads, part, padded_keys, dtype), dim=-1).sub_(p)


class _ChunkedRelationKL(torch.autograd.Function):
    """Per-row KL(softmax(t_x t_y^T) || softmax(s_x s_y^T)) per head, [batch, heads, seq], a chunk of heads at a time.

    With several chunks the forward saves only its inputs (the four [batch, seq, hidden] tensors and the key
    mask) and the backward recomputes each chunk's two softmaxes, so the loss never holds more than a few
    [batch, chunk, seq, seq] tensors. With one chunk (short sequences) recomputation would buy nothing, so the
    forward keeps the single softmax difference the backward needs instead of recomputing it.
    """

    @staticmethod
    def forward(ctx, tx, ty, sx, sy, padded_keys, heads: int, chunk: int) -> torch.Tensor:
        # ty / sy None: the relation of x with itself (value relations, MiniLMv2's Q-Q, K-K, V-V). Passed once, not
        # twice: torch.compile cannot trace an autograd.Function that gets the same tensor as two inputs.
        ctx.self_t, ctx.self_s = ty is None, sy is None
        ty = tx if ty is None else ty
        sy = sx if sy is None else sy
        dtype = compute_dtype(sx)
        parts = head_slices(heads, chunk)
        keep = len(parts) == 1 and (ctx.needs_input_grad[2] or ctx.needs_input_grad[3])
        rows, difference = [], None
        with no_autocast(sx.device):
            for part in parts:
                log_p = torch.log_softmax(chunk_logits(tx, ty, heads, part, padded_keys, dtype), dim=-1)
                log_q = torch.log_softmax(chunk_logits(sx, sy, heads, part, padded_keys, dtype), dim=-1)
                p = log_p.exp()
                if keep:
                    difference = log_q.exp().sub_(p)
                rows.append(row_kl(log_p, log_q, p))
                del log_p, log_q, p  # free this chunk before the next one is built
        ctx.heads, ctx.chunk, ctx.dtype = heads, chunk, dtype
        ctx.save_for_backward(tx, ty, sx, sy, padded_keys, difference)
        return torch.cat(rows, dim=1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_row: torch.Tensor):
        tx, ty, sx, sy, padded_keys, difference = ctx.saved_tensors
        heads, dtype = ctx.heads, ctx.dtype
        want_x, want_y = ctx.needs_input_grad[2], ctx.needs_input_grad[3] or (ctx.self_s and ctx.needs_input_grad[2])
        b, s, _ = sx.shape
        d = sx.shape[-1] // heads
        scale = 1.0 / math.sqrt(d)
        grad_x = sx.new_empty((b, heads, s, d), dtype=dtype) if want_x else None  # every chunk fills its part
        grad_y = sy.new_empty((b, heads, s, d), dtype=dtype) if want_y else None
        if ctx.self_t:
            ty = tx
        if ctx.self_s:
            sy = sx
        with no_autocast(sx.device):
            for part in head_slices(heads, ctx.chunk):
                if difference is None:
                    g = chunk_difference(tx, ty, sx, sy, heads, part, padded_keys, dtype)
                    g.mul_(grad_row[:, part, :, None].to(dtype))
                else:
                    g = difference * grad_row[:, part, :, None].to(dtype)
                # logits = (x * scale) y^T, so d/dx = scale g y and d/dy = scale g^T x.
                if want_x:
                    grad_x[:, part] = torch.matmul(g, chunk_heads(sy, heads, part, dtype)).mul_(scale)
                if want_y:
                    g_t = g.transpose(-1, -2)
                    grad_y[:, part] = torch.matmul(g_t, chunk_heads(sx, heads, part, dtype)).mul_(scale)
                del g
        if ctx.self_s:  # x and y are one tensor: its gradient is the sum of both roles
            grad = (grad_x + grad_y) if want_x else None
            return None, None, merge_heads(grad).to(sx.dtype) if grad is not None else None, None, None, None, None
        return (
            None,
            None,
            merge_heads(grad_x).to(sx.dtype) if want_x else None,
            merge_heads(grad_y).to(sy.dtype) if want_y else None,
            None,
            None,
            None,
        )


def relation_loss(
    teacher_x: torch.Tensor,
    teacher_y: torch.Tensor,
    student_x: torch.Tensor,
    student_y: torch.Tensor,
    attention_mask: torch.Tensor,
    heads: int,
    chunk: int | None = None,
) -> torch.Tensor:
    """relation_kl(relation_logits(teacher_x, teacher_y), relation_logits(student_x, student_y)) without
    materialising the [batch, heads, seq, seq] logits: `chunk` heads at a time (default: `auto_chunk`).

    x, y: [batch, seq, hidden] (hidden may differ between teacher and student; `heads` must divide both).
    Same value and gradients as the materialised form; float32 (float64 for float64 inputs) under autocast too.
    The teacher is the target: no gradient flows to it.
    """
    for name, x in (("teacher", teacher_x), ("student", student_x)):
        if x.shape[-1] % heads:
            raise ValueError(f"{heads} heads do not divide the {name}'s hidden size {x.shape[-1]}")
    b, s, _ = student_x.shape
    chunk = auto_chunk(b, s, heads, student_x.device) if chunk is None else chunk
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1 head, got {chunk}")
    mask, padded_keys = key_padding(attention_mask)
    tx = teacher_x.detach()
    ty = None if teacher_y is teacher_x else teacher_y.detach()
    sy = None if student_y is student_x else student_y
    per_row = _ChunkedRelationKL.apply(tx, ty, student_x, sy, padded_keys, heads, chunk)
    return reduce_rows(per_row, mask)
