"""The machine under benchmarks/distill_step.py and distill_profile.py: AVX2 emulation (the same command in a fresh
process with an AVX2-only CPU's kernels), the CPU's and the GPU's peak FLOP/s (estimated, and a measured GEMM),
and this process's resident-set size and high-water mark (peak memory on the CPU)."""

from __future__ import annotations

import os
import platform
import re
import sys
import time
from pathlib import Path

import torch

# ------------------------------------------------------------------------------------- AVX2 emulation

# Set before torch is imported, these make this CPU run the kernels an AVX2-only CPU (a laptop, a CI runner
# without AVX-512) would: ATen's vectorised kernels (softmax, GELU, layer norm, fused AdamW, ...) at the AVX2
# level (torch.backends.cpu.get_cpu_capability() then says AVX2), oneDNN at AVX2 (bf16 matmuls are then
# emulated and very slow), MKL's AVX2 code path, FBGEMM's (int8) AVX2 kernels. What they cannot change: the
# clock, the caches, and the CPU flags that train.cpu_has_native_bf16 reads (it still says True here, so the
# emulated runs pass --precision fp32, as an AVX2 machine's `auto` would choose). On AMD CPUs MKL takes its AVX2
# path anyway (it reports "Intel(R) Architecture processors"), so the fp32 GEMM rate hardly moves.
AVX2_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
}


def reexec_emulating_avx2(script: str, args: list[str]) -> None:
    """Replace this process by `python script args` with AVX2_ENV set; returns at once when it already is set
    (the re-executed process, or a caller that set the variables itself)."""
    if emulating_avx2():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, script, *args], {**os.environ, **AVX2_ENV})


def emulating_avx2() -> bool:
    return all(os.environ.get(k) == v for k, v in AVX2_ENV.items())


# ------------------------------------------------------------------------------------------------ peaks

# Dense bf16 tensor-core peaks from NVIDIA's data sheets (half the "with sparsity" figure), FLOP/s, per part: an
# "H100" is three parts whose peaks differ by 30 %. Matched in order on torch.cuda.get_device_name, which says
# "NVIDIA H100 80GB HBM3" for the SXM part, "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200" (SXM), "NVIDIA
# H200 NVL". A name matching none (a bare "NVIDIA H100", a part not listed) has no peak: None, and callers say so.
GPU_PARTS = (
    ("H100 NVL", r"H100.*\bNVL\b", 835e12),
    ("H100 PCIe", r"H100.*\bPCIe\b", 756e12),
    ("H100 SXM", r"H100.*\b(SXM\w*|HBM3)\b", 989.4e12),
    ("H200 NVL", r"H200.*\bNVL\b", 835e12),
    ("H200 SXM", r"H200", 989.4e12),
    ("A100", r"A100", 312e12),
    ("L40S", r"L40S", 362e12),
    ("A10", r"\bA10\b", 125e12),
)


def gpu_part(device_name: str) -> tuple[str, float] | None:
    """(the part, its dense bf16 peak FLOP/s) for a CUDA device name, or None when the name does not say which."""
    for part, pattern, flops in GPU_PARTS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return part, flops
    return None


def cpu_info() -> dict:
    info = {"model": platform.processor() or "unknown", "cores": os.cpu_count() or 1, "mhz": None, "flags": set()}
    try:
        text = Path("/proc/cpuinfo").read_text()
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name":
                info["model"] = value.strip()
            elif key == "cpu MHz" and info["mhz"] is None:
                info["mhz"] = float(value)
            elif key == "flags" and not info["flags"]:
                info["flags"] = set(value.split())
    except OSError:
        pass
    info["threads"] = torch.get_num_threads()
    return info


def cpu_peaks(info: dict) -> dict:
    """Estimated fp32 / bf16 peaks: threads x clock x FLOP/cycle (two 512-bit FMA pipes per core assumed)."""
    flags = info["flags"]
    ghz = (info["mhz"] or 2000.0) / 1000
    if "avx512f" in flags:
        fp32_cycle = 64.0  # 2 pipes x 16 lanes x 2 (FMA)
    elif "avx2" in flags:
        fp32_cycle = 32.0
    else:
        fp32_cycle = 16.0
    bf16_cycle = 2 * fp32_cycle if "avx512_bf16" in flags or "amx_bf16" in flags else fp32_cycle
    cores = info["threads"]
    return {
        "fp32": cores * ghz * 1e9 * fp32_cycle,
        "bf16": cores * ghz * 1e9 * bf16_cycle,
        "native_bf16": bf16_cycle > fp32_cycle,
        "assumption": f"{cores} threads x {ghz:.2f} GHz x {fp32_cycle:.0f} fp32 / {bf16_cycle:.0f} bf16 FLOP/cycle",
    }


def measured_gemm(device: torch.device, dtype: torch.dtype, n: int, reps: int) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------------------- resident set


def status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_rss_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> tuple[int, str]:
    hwm = status_kb("VmHWM")
    if hwm is not None:
        return hwm * 1024, "VmHWM"
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "ru_maxrss"
