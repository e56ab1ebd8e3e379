"""The configurations benchmarks/distill_step.py times (teacher and student shapes, batch, sequence, device) and
their model FLOPs per token (the formula is in distill_step.py's docstring).

The step_* modules that reach mlminilm import this one: importing it puts the repository on sys.path (their
mlminilm imports run inside functions) and keeps Hugging Face offline, as the benchmark always has.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The benchmark's command line: the child processes that measure memory run it again with a hidden option.
ENTRY_POINT = Path(__file__).resolve().with_name("distill_step.py")


def run_child(options: list[str], **env: str) -> subprocess.CompletedProcess:
    """distill_step.py with `options` in a child process, offline, on this process's torch threads (and `env`)."""
    import torch

    cmd = [sys.executable, str(ENTRY_POINT), *options, "--threads", str(torch.get_num_threads())]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", **env})


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    ffn: int


@dataclass(frozen=True)
class Bench:
    name: str
    teacher: Shape
    student: Shape
    vocab: int
    batch: int
    seq: int
    objective: str = "minilm"  # minilm (v1) or minilm-v2
    relation_heads: int = 48
    device: str = "cpu"
    warmup: int = 2
    steps: int = 5  # timed steps per path


XLMR_VOCAB = 250_002
BASE = Shape(12, 768, 12, 3072)
LARGE = Shape(24, 1024, 16, 4096)

CONFIGS = {
    # The default: XLM-R-shaped (type xlm-roberta, vocabulary cut to 30k so it builds fast) 6x384 teacher,
    # 3x192 student with the teacher's 12 heads (v1), batch 8 x 128. Runs in well under a minute on 2 cores.
    "cpu": Bench("cpu", Shape(6, 384, 12, 1536), Shape(3, 192, 12, 768), 30_000, 8, 128, steps=10),
    # METHOD.md section 6's probe: XLM-R-base-shaped teacher -> 6x384, batch 8 x 128 (about 1-2 minutes on 2 cores).
    "cpu-probe": Bench("cpu-probe", BASE, Shape(6, 384, 12, 1536), XLMR_VOCAB, 8, 128, steps=3),
    "gpu-base-6x384-s128": Bench(
        "gpu-base-6x384-s128", BASE, Shape(6, 384, 12, 1536), XLMR_VOCAB, 256, 128, device="cuda", warmup=3, steps=10
    ),
    "gpu-base-12x384-s128": Bench(
        "gpu-base-12x384-s128", BASE, Shape(12, 384, 12, 1536), XLMR_VOCAB, 256, 128, device="cuda", warmup=3, steps=10
    ),
    "gpu-base-6x384-s512": Bench(
        "gpu-base-6x384-s512", BASE, Shape(6, 384, 12, 1536), XLMR_VOCAB, 64, 512, device="cuda", warmup=3, steps=10
    ),
    "gpu-base-12x384-s512": Bench(
        "gpu-base-12x384-s512", BASE, Shape(12, 384, 12, 1536), XLMR_VOCAB, 64, 512, device="cuda", warmup=3, steps=10
    ),
    # XLM-R large: v1 needs the teacher's head count, so the 6x384 student has 16 heads (head size 24).
    "gpu-large-6x384-s128": Bench(
        "gpu-large-6x384-s128", LARGE, Shape(6, 384, 16, 1536), XLMR_VOCAB, 128, 128, device="cuda", warmup=3, steps=10
    ),
}
GPU_CONFIGS = [name for name in CONFIGS if name.startswith("gpu-")]


# ------------------------------------------------------------------------------------------------ FLOPs


def layer_flops(h: int, f: int, s: int) -> float:
    return 2 * (4 * h * h + 2 * h * f) + 4 * s * h


def qkv_flops(h: int) -> float:
    return 2 * 3 * h * h


def flops_per_token(b: Bench) -> dict:
    t, st, s = b.teacher, b.student, b.seq
    relations = 2 if b.objective == "minilm" else 3
    teacher = (t.layers - 1) * layer_flops(t.hidden, t.ffn, s) + qkv_flops(t.hidden)
    student_fwd = (st.layers - 1) * layer_flops(st.hidden, st.ffn, s) + qkv_flops(st.hidden)
    rel = relations * 2 * s * t.hidden + 3 * relations * 2 * s * st.hidden
    total = teacher + 3 * student_fwd + rel
    issue = t.layers * layer_flops(t.hidden, t.ffn, s) + 3 * st.layers * layer_flops(st.hidden, st.ffn, s)
    return {
        "teacher_mflop": teacher / 1e6,
        "student_fwd_bwd_mflop": 3 * student_fwd / 1e6,
        "relations_mflop": rel / 1e6,
        "total_mflop": total / 1e6,
        "issue_mflop": issue / 1e6,
    }
