"""TF32 for the relations' fp32 matmuls: on for CUDA runs computing in bf16 / fp16 only (the CPU path leaves the
setting alone), and, with TF32 emulated on CPU, the CUDA order of the scaled product reads bf16 inputs exactly."""

from __future__ import annotations

import math

import pytest
import torch

from mlminilm.distillation.relations import scaled_logits, tf32_relations


def setting() -> tuple:
    """The legacy getters: they raise while the legacy and new APIs are mixed (torch 2.9+)."""
    return torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()


@pytest.mark.parametrize(
    "device, dtype",
    [("cpu", torch.bfloat16), ("cpu", torch.float32), ("cpu", torch.float16), ("cuda", torch.float32)],
)
def test_tf32_untouched_off_cuda_or_in_fp32(device, dtype):
    before = setting()
    with tf32_relations(device, dtype) as on:
        assert not on and setting() == before
    assert setting() == before


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tf32_on_for_a_cuda_run_in_bf16_or_fp16_and_restored(dtype):
    before = setting()
    with tf32_relations(torch.device("cuda", 0), dtype) as on:  # only the flag: no CUDA tensor is made
        # Inductor (torch 2.9/2.10) reads the legacy getters while lowering the fp32 bmm: they must answer here.
        assert on and setting() == (True, "high")
        if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
            assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert setting() == before
    with pytest.raises(RuntimeError), tf32_relations("cuda", dtype):
        raise RuntimeError("restored on the way out of a failure too")
    assert setting() == before


def tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 rounded to TF32 (10 mantissa bits, round to nearest even), as tensor cores read fp32 inputs."""
    bits = x.view(torch.int32)
    lsb = (bits >> 13) & 1
    return ((bits + 0x0FFF + lsb) & ~0x1FFF).view(torch.float32)


def test_the_cuda_order_reads_bf16_inputs_exactly_in_tf32():
    g = torch.Generator().manual_seed(0)
    d = 32  # 384 / 12: 1 / sqrt(d) is no power of two
    x = torch.randn(2, 3, 64, d, generator=g).to(torch.bfloat16).float()  # bf16 Q/K/V cast to fp32
    y = torch.randn(2, 3, 64, d, generator=g).to(torch.bfloat16).float()
    scale = 1 / math.sqrt(d)
    assert torch.equal(tf32(x), x) and torch.equal(tf32(y), y)  # bf16 values are TF32 values
    exact = torch.matmul(x.double(), y.double().transpose(-1, -2)) * scale
    fp32 = torch.matmul(x, y.transpose(-1, -2)).mul_(scale)  # the CUDA order in fp32
    cuda_tf32 = torch.matmul(tf32(x), tf32(y).transpose(-1, -2)).mul_(scale)  # ... with TF32 inputs
    cpu_order_tf32 = torch.matmul(tf32(x * scale), tf32(y).transpose(-1, -2))  # the scale first, then TF32
    assert torch.equal(cuda_tf32, fp32)  # TF32 changes nothing in the CUDA order
    err_fp32 = (fp32.double() - exact).abs().max().item()
    err_scaled_first = (cpu_order_tf32.double() - exact).abs().max().item()
    assert err_fp32 < 1e-5 and err_scaled_first > 10 * err_fp32, (err_fp32, err_scaled_first)


def test_the_cpu_order_is_unchanged():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 3, 16, 32, generator=g), torch.randn(2, 3, 16, 32, generator=g)
    assert torch.equal(scaled_logits(x, y), torch.matmul(x * (1 / math.sqrt(32)), y.transpose(-1, -2)))


def test_a_setting_made_with_the_new_api_is_restored():
    """A caller that chose TF32 through torch's new `fp32_precision` gets it back; inside, the getters answer."""
    matmul = torch.backends.cuda.matmul
    if not hasattr(matmul, "fp32_precision"):
        pytest.skip("torch < 2.9 has no fp32_precision")
    matmul.fp32_precision = "tf32"
    try:
        with tf32_relations("cuda", torch.bfloat16):
            assert setting() == (True, "high")
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.allow_tf32 = False  # one API again (the default), whatever failed
