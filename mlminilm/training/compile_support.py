"""Whether `--compile` can work where the run computes, decided before the first step.

torch.compile's default backend, inductor, generates Triton kernels for CUDA; without a working Triton (not
installed, or a GPU older than compute capability 7.0) the first compiled step fails, minutes into a run. So:
`--compile auto` on CUDA without Triton falls back to eager with one warning, and `--compile on` there stops at
start-up with one `Error:` line, before anything is written. On the CPU inductor writes C++ and needs no Triton.
"""

from __future__ import annotations

from mlminilm.errors import ConfigError

FALLBACK_WARNING = (
    "--compile auto: no working Triton for this CUDA device (torch.compile's inductor needs it), so the step runs "
    "eagerly; install the Triton that matches torch (pip install triton) to compile"
)


def triton_works() -> bool:
    """Triton imports and torch finds a device it can generate code for (torch.utils._triton.has_triton: CUDA
    compute capability 7.0 or newer). Any failure to find out counts as no."""
    try:
        from torch.utils._triton import has_triton, has_triton_package

        return bool(has_triton_package() and has_triton())
    except Exception:  # a broken install raises anything from its import: it does not work
        return False


def needs_triton(device_type: str) -> bool:
    """Inductor compiles for this device through Triton (CUDA); the CPU's code is C++."""
    return device_type == "cuda"


def compiles_by_default(device_type: str) -> bool:
    """`--compile auto` compiles here: on CUDA (on the CPU compiling costs a minute and does not pay, see
    docs/BENCHMARKS.md section 11)."""
    return device_type == "cuda"


def device_type_of(device: str) -> str:
    """The device type `--device` resolves to, as training.setup_runtime resolves it, without touching the device."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_compile(mode: str, device_type: str) -> None:
    """Refuse `--compile on` where it cannot work (start-up, before anything is written)."""
    if mode == "on" and needs_triton(device_type) and not triton_works():
        raise ConfigError(
            "--compile on needs a working Triton on CUDA (torch.compile's inductor generates Triton kernels) and "
            "none was found (not installed, or a GPU older than compute capability 7.0); install the Triton that "
            "matches torch (pip install triton), or use --compile off or auto"
        )


def resolve_compile(mode: str, device_type: str) -> tuple[bool, str | None]:
    """(compile the step, a warning to log or None) for `--compile mode` on `device_type`."""
    if mode == "off":
        return False, None
    check_compile(mode, device_type)
    if mode == "on":
        return True, None
    if not compiles_by_default(device_type):
        return False, None
    if needs_triton(device_type) and not triton_works():
        return False, FALLBACK_WARNING
    return True, None
