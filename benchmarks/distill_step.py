#!/usr/bin/env python
"""Time one full distill step: mlminilm's path against a naive baseline, same models, same batches, one process.

    python benchmarks/distill_step.py                      # the small CPU configuration (under a minute)
    python benchmarks/distill_step.py --config cpu-probe   # METHOD.md section 6's probe shape (XLM-R-base teacher)
    python benchmarks/distill_step.py --gpu --out gpu.json # every GPU configuration, plus the largest batch
    python benchmarks/distill_step.py --config gpu-base-6x384-s128 --config gpu-large-6x384-s128 --out part.json
                                                           # a subset (each --config adds one), e.g. to stay
                                                           # under a per-call time limit
    python benchmarks/distill_step.py --relation-memory    # the relation loss alone at batch 8 x seq 512:
                                                           # peak memory and time, materialised vs chunked
    python benchmarks/distill_step.py --precision fp32 --threads 1 --emulate-avx2
                                                           # fp32, with the kernels of an AVX2-only CPU
                                                           # (a laptop, a CI runner): see AVX2_ENV

benchmarks/distill_profile.py times each part of both steps (teacher, student, relations, backward, optimizer)
with torch.profiler's top operators; benchmarks/distill_variants.py sets variants of the project's step (exact
ones and opt-ins) against each other in one process.

A step is: teacher forward, student forward and backward, the relation loss, the optimizer and schedule
step, and one host sync on the loss (the training loop checks it is finite). Data loading is not timed:
both paths get the same pre-built token batches.

mlminilm's path (`project`) uses the project's own functions: `models.load_teacher` (the teacher saved to a
temporary directory and loaded as `distill` loads it: sdpa attention, truncated at the distilled layer, in
the compute dtype), `models.build_student` (whose word embedding writes its gradient into the previous step's
tensor on CPU, mlminilm/embedding_grad.py) / `freeze_unused`, `distill.StudentQKV` and `distill.distill_terms`
(capture.layer_qkv + the MiniLM losses) with attention_mask=None as distill's loader passes it for a batch
without padding, `train.make_optimizer`, `train.linear_schedule`, and `train.setup_runtime`'s precision under
`Runtime.autocast`.

The naive baseline (`naive`) is written here the way public distillation code usually does it: the whole
teacher and the whole student run with eager attention and `output_attentions=True`, the teacher's and the
student's value vectors are taken from a forward hook on the last layer's `value` Linear, and the losses are
KL divergences of materialised probabilities (the returned attention probabilities, and softmaxed value
relations). It runs in fp32 on CPU and under bf16 autocast with fp32 weights on CUDA; its optimizer is
`torch.optim.AdamW` with its defaults (foreach on CUDA, the for-loop on CPU) over all student parameters. Its
student is a plain Hugging Face model (torch's own embedding gradient) and gets the all-ones mask.

Both paths start from the same teacher and student weights (the naive student is a copy of the project's
student at the start) and see the same batches; steps alternate project / naive after warm-up, and the
reported figures are medians.

Model FLOPs (matmul multiply-adds x 2, per token, sequence length s; embeddings, softmax, layer norm and
the optimizer are not counted). For a layer of width h and FFN width f:

    layer(h, f, s) = 2 * (4 h^2 + 2 h f) + 4 s h      # Q, K, V, O projections + FFN + QK^T and AV
    qkv(h)         = 2 * 3 h^2                         # the distilled layer: its Q, K, V projections only

    teacher    = k_T * layer(h_T, f_T, s) + qkv(h_T)   # k_T layers below the distilled layer
    student    = 3 * [(M - 1) * layer(h_S, f_S, s) + qkv(h_S)]      # forward + backward ~ 3 x forward
    relations  = R * 2 s h_T + 3 * R * 2 s h_S        # R = 2 relations (v1: QK^T, VV^T), 3 (v2: QQ, KK, VV)
    per token  = teacher + student + relations

This is the work distillation needs, so it is the same number for both paths (what the naive path computes
on top of it, the teacher's unused top layer and the student's, counts as waste, not as model FLOPs); model
FLOPs utilisation (MFU) = per-token FLOPs x tokens/s / peak. The issue's arithmetic (all teacher and student
layers, 175 + 67 MFLOP/token at seq 128 for XLM-R base -> 6x384) is printed alongside as `issue_mflop`.

Peaks. MFU is against one hardware peak for both paths (what the machine can do, whatever dtype a path
chose). CUDA: the device's dense bf16 peak from its data sheet (H100/H200 SXM 989 TFLOP/s, A100 312); a bf16
8192^3 GEMM is also measured at start. CPU: the larger of an estimate (threads x the clock /proc/cpuinfo
reports x FLOP/cycle, assuming two 512-bit FMA pipes per core: 64 fp32 FLOP/cycle with AVX-512, 128 bf16
FLOP/cycle with AVX512-BF16 dot products) and a measured 2048^3 GEMM, in bf16 where the CPU has native bf16
(the reported clock is the nominal one; a boosting CPU's GEMM beats the estimate). `GEMM%` is the achieved
model FLOP/s against the measured GEMM of the dtype the path's matmuls run in.

Relation memory (`--relation-memory`): the MiniLM v1 loss alone (attention and value relation, forward +
backward) on random Q/K/V of an XLM-R-base-wide teacher (hidden 768) and a 384-wide student, 12 heads, batch 8 x
seq 512 by default (`--relation-batch`, `--relation-seq`), fp32 or, with `--precision bf16`, bf16 inputs under
bf16 autocast. `materialised` composes `relation_kl(relation_logits(...))` as the losses did before chunking;
`chunked` is `losses.minilm_v1_loss` (chunks of heads, recomputed in the backward; `--relation-chunk` overrides
the automatic chunk). Memory: the resident-set high-water mark of a child process per mode, over its RSS just
before the step (inputs, library set-up and a warm-up at seq 32 excluded), with `MALLOC_MMAP_THRESHOLD_=65536`
so freed tensors leave the RSS at once. Time: the median of `--steps` (default 3) alternating steps in this
process, after one warm-up each.

Peak memory. CUDA: `torch.cuda.max_memory_allocated`, separated per path in one process as
(that path's resident tensors: teacher and student weights, optimizer state) + (the step's peak over what
was allocated before it). CPU: the resident-set high-water mark (VmHWM from /proc/self/status, reset through
/proc/self/clear_refs after set-up) of a child process that builds the models and runs only that path.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


# ------------------------------------------------------------------------------------------ configurations


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
    "gpu-base-6x384-s128": Bench("gpu-base-6x384-s128", BASE, Shape(6, 384, 12, 1536), XLMR_VOCAB, 256, 128,
                                 device="cuda", warmup=3, steps=10),
    "gpu-base-12x384-s128": Bench("gpu-base-12x384-s128", BASE, Shape(12, 384, 12, 1536), XLMR_VOCAB, 256, 128,
                                  device="cuda", warmup=3, steps=10),
    "gpu-base-6x384-s512": Bench("gpu-base-6x384-s512", BASE, Shape(6, 384, 12, 1536), XLMR_VOCAB, 64, 512,
                                 device="cuda", warmup=3, steps=10),
    "gpu-base-12x384-s512": Bench("gpu-base-12x384-s512", BASE, Shape(12, 384, 12, 1536), XLMR_VOCAB, 64, 512,
                                  device="cuda", warmup=3, steps=10),
    # XLM-R large: v1 needs the teacher's head count, so the 6x384 student has 16 heads (head size 24).
    "gpu-large-6x384-s128": Bench("gpu-large-6x384-s128", LARGE, Shape(6, 384, 16, 1536), XLMR_VOCAB, 128, 128,
                                  device="cuda", warmup=3, steps=10),
}
GPU_CONFIGS = [name for name in CONFIGS if name.startswith("gpu-")]


# ------------------------------------------------------------------------------------- AVX2 emulation

# Set before torch is imported, these make this CPU run the kernels an AVX2-only CPU (a laptop, a CI runner
# without AVX-512) would: ATen's vectorised kernels (softmax, GELU, layer norm, fused AdamW, ...) at the AVX2
# level (torch.backends.cpu.get_cpu_capability() then says AVX2), oneDNN at AVX2 (bf16 matmuls are then
# emulated and very slow), MKL's AVX2 code path, FBGEMM's (int8) AVX2 kernels. What they cannot change: the
# clock, the caches, and the CPU flags that train.cpu_has_native_bf16 reads (it still says True here, so the
# emulated runs pass --precision fp32, as an AVX2 machine's `auto` would choose). On AMD CPUs MKL takes its AVX2
# path anyway (it reports "Intel(R) Architecture processors"), so the fp32 GEMM rate hardly moves.
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}


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
    return {"teacher_mflop": teacher / 1e6, "student_fwd_bwd_mflop": 3 * student_fwd / 1e6,
            "relations_mflop": rel / 1e6, "total_mflop": total / 1e6, "issue_mflop": issue / 1e6}


# ------------------------------------------------------------------------------------------------ peaks

# Dense bf16 tensor-core peaks from the data sheets (SXM parts), FLOP/s.
COMPILE = "auto"  # --compile: the project path's torch.compile, as distill's option (auto: on for CUDA)
GPU_PEAKS = {"H200": 989.4e12, "H100": 989.4e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}


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
    return {"fp32": cores * ghz * 1e9 * fp32_cycle, "bf16": cores * ghz * 1e9 * bf16_cycle,
            "native_bf16": bf16_cycle > fp32_cycle,
            "assumption": f"{cores} threads x {ghz:.2f} GHz x {fp32_cycle:.0f} fp32 / {bf16_cycle:.0f} bf16 FLOP/cycle"}


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


# ----------------------------------------------------------------------------------------------- models


def teacher_config(b: Bench):
    from transformers import XLMRobertaConfig

    t = b.teacher
    return XLMRobertaConfig(
        vocab_size=b.vocab, hidden_size=t.hidden, num_hidden_layers=t.layers, num_attention_heads=t.heads,
        intermediate_size=t.ffn, max_position_embeddings=max(514, b.seq + 2), type_vocab_size=1,
        pad_token_id=1, bos_token_id=0, eos_token_id=2,
    )


def make_batches(b: Bench, count: int, device: torch.device, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Packed sequences as `prepare` writes them: <s> ... </s>, no padding (the mask is still passed)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(3, b.vocab - 1, (b.batch, b.seq), generator=g)
        ids[:, 0], ids[:, -1] = 0, 2
        out.append((ids.to(device), torch.ones_like(ids).to(device)))
    return out


def tensor_bytes(*objs) -> int:
    """Bytes of the distinct tensors (parameters, buffers, optimizer state) held by modules / optimizers."""
    seen, total = set(), 0

    def add(t):
        nonlocal total
        if isinstance(t, torch.Tensor) and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()

    for obj in objs:
        if isinstance(obj, nn.Module):
            for t in list(obj.parameters()) + list(obj.buffers()):
                add(t)
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for t in state.values():
                    add(t)
    return total


class Path_:
    """One way of doing the step; `step(ids, mask)` returns the loss as a float."""

    name = ""
    matmul_dtype = torch.float32

    def step(self, input_ids, mask) -> float:
        raise NotImplementedError

    def resident_bytes(self) -> int:
        raise NotImplementedError

    def free(self) -> None:
        pass


class ProjectPath(Path_):
    """mlminilm's distill step, assembled from the functions `distill` itself calls."""

    name = "project"

    def __init__(self, b: Bench, teacher_dir: Path, student: nn.Module, device: torch.device, precision: str):
        from mlminilm import train
        from mlminilm.config import DistillConfig
        from mlminilm.distill import StudentQKV
        from mlminilm.models import freeze_unused, load_teacher

        self.rt = train.setup_runtime(device.type, precision)
        self.matmul_dtype = self.rt.dtype
        self.cfg = DistillConfig(
            teacher=str(teacher_dir), out=Path("unused"), layers=b.student.layers, hidden=b.student.hidden,
            heads=b.student.heads, intermediate=b.student.ffn, objective=b.objective,
            relation_heads=b.relation_heads, batch_size=b.batch, max_steps=10_000, warmup=0.06,
        )
        self.teacher, self.layer = load_teacher(str(teacher_dir), -1, self.rt.dtype, self.rt.device)
        self.student = student.to(self.rt.device)
        freeze_unused(self.student, -1)
        self.forward = StudentQKV(self.student)
        self.optimizer = train.make_optimizer(self.student, self.cfg, self.rt.device)
        self.scheduler = train.linear_schedule(self.optimizer, self.cfg.warmup_steps(), self.cfg.max_steps)
        self.student.train()
        # As `distill --compile auto` does: compiled on CUDA, eager on CPU (where compiling does not pay,
        # docs/BENCHMARKS.md section 11). The warm-up steps absorb the compilation.
        from mlminilm.distill import distill_terms

        self.compiled = COMPILE == "on" or (COMPILE == "auto" and device.type == "cuda")
        self.terms = torch.compile(distill_terms, dynamic=False) if self.compiled else distill_terms

    def step(self, input_ids, mask) -> float:

        # The body of train.train_loop for one micro-batch (grad_accum 1, one process). distill's loader hands
        # attention_mask=None for a batch without padding (mlminilm/corpus/loader.py), as these batches are.
        self.optimizer.zero_grad(set_to_none=True)
        with self.rt.autocast():
            parts = self.terms(self.teacher, self.layer, self.forward, input_ids, self.loader_mask(mask), self.cfg)
            loss = sum(parts.values())
        loss.backward()
        value = loss.detach().float().item()
        if not math.isfinite(value):
            raise RuntimeError(f"{self.name} loss is {value}")
        self.optimizer.step()
        self.scheduler.step()
        return value

    @staticmethod
    def loader_mask(mask: torch.Tensor) -> torch.Tensor | None:
        """The attention mask as distill's loader gives it: None when no position is padding. make_batches'
        batches have none, and the loader knows that on the host, so no device read is timed here."""
        return None

    def resident_bytes(self) -> int:
        return tensor_bytes(self.teacher, self.student, self.optimizer)

    def free(self) -> None:
        del self.teacher, self.student, self.forward, self.optimizer, self.scheduler


def naive_kl(p_teacher: torch.Tensor, p_student: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) of probability tensors [b, h, s, s], mean over heads and real query tokens."""
    pointwise = F.kl_div(torch.log(p_student.clamp_min(1e-12)), p_teacher, reduction="none")
    rows = pointwise.sum(-1) * mask[:, None, :].to(pointwise.dtype)
    return (rows.sum((1, 2)) / (p_teacher.shape[1] * mask.sum(-1))).mean()


def value_relation(v: torch.Tensor, heads: int, mask: torch.Tensor) -> torch.Tensor:
    b, s, h = v.shape
    vh = v.view(b, s, heads, h // heads).transpose(1, 2)
    logits = vh @ vh.transpose(-1, -2) / math.sqrt(h // heads)
    logits = logits.masked_fill(~mask[:, None, None, :].bool(), torch.finfo(logits.dtype).min)
    return logits.softmax(-1)


class NaivePath(Path_):
    """Whole models, eager attention, output_attentions, losses on materialised probabilities."""

    name = "naive"

    def __init__(self, b: Bench, teacher_dir: Path, student: nn.Module, device: torch.device):
        from transformers import AutoModel

        self.b = b
        self.device = device
        self.matmul_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        from mlminilm.embedding_grad import plain_embedding

        self.teacher = AutoModel.from_pretrained(str(teacher_dir), attn_implementation="eager").to(device).eval()
        self.teacher.requires_grad_(False)
        self.student = copy.deepcopy(student).to(device)
        plain_embedding(self.student)  # a plain Hugging Face model: torch's own embedding gradient
        self.student.set_attn_implementation("eager")
        self.student.train()
        self.optimizer = torch.optim.AdamW(self.student.parameters(), lr=5e-4, betas=(0.9, 0.99), eps=1e-6,
                                           weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: min(1.0, (step + 1) / 600))
        self.values: dict[str, torch.Tensor] = {}
        for tag, model in (("teacher", self.teacher), ("student", self.student)):
            value = model.encoder.layer[-1].attention.self.value
            value.register_forward_hook(lambda mod, args, out, tag=tag: self.values.__setitem__(tag, out))

    def autocast(self):
        if self.device.type == "cuda":
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, input_ids, mask) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            with torch.no_grad():
                t_out = self.teacher(input_ids=input_ids, attention_mask=mask, output_attentions=True)
            s_out = self.student(input_ids=input_ids, attention_mask=mask, output_attentions=True)
            heads = self.b.teacher.heads
            t_att, s_att = t_out.attentions[-1].float(), s_out.attentions[-1].float()
            t_vr = value_relation(self.values["teacher"].float(), heads, mask)
            s_vr = value_relation(self.values["student"].float(), heads, mask)
            loss = naive_kl(t_att, s_att, mask) + naive_kl(t_vr, s_vr, mask)
        loss.backward()
        value = loss.item()
        self.optimizer.step()
        self.scheduler.step()
        return value

    def resident_bytes(self) -> int:
        return tensor_bytes(self.teacher, self.student, self.optimizer)

    def free(self) -> None:
        del self.teacher, self.student, self.optimizer, self.scheduler
        self.values.clear()


def build_paths(b: Bench, workdir: Path, device: torch.device, precision: str, which=("project", "naive")):
    """Save a random teacher (fixed seed) to `workdir`, build the student once, and both paths from them."""
    from transformers import AutoModel

    from mlminilm.config import StudentShape
    from mlminilm.models import build_student, student_config

    t = b.teacher  # one saved teacher per shape, shared by the configurations that use it
    teacher_dir = workdir / f"teacher-{t.layers}x{t.hidden}-{t.heads}h-{t.ffn}-v{b.vocab}-p{max(514, b.seq + 2)}"
    if not (teacher_dir / "config.json").exists():
        torch.manual_seed(0)
        with torch.device(device):  # initialise on the device: a 250k x 1024 embedding is slow to fill on CPU
            teacher = AutoModel.from_config(teacher_config(b), attn_implementation="sdpa")
        teacher.save_pretrained(teacher_dir)
        del teacher
    tconf = teacher_config(b)
    shape = StudentShape(b.student.layers, b.student.hidden, b.student.heads, b.student.ffn)
    with torch.device(device):
        student = build_student(student_config(tconf, shape), seed=0)
    paths = {}
    if "naive" in which:
        paths["naive"] = NaivePath(b, teacher_dir, student, device)  # copies the student before it trains
    if "project" in which:
        paths["project"] = ProjectPath(b, teacher_dir, student, device, precision)
    gc.collect()
    return paths


# -------------------------------------------------------------------------------------------- measuring


def _status_kb(field: str) -> int | None:
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
    hwm = _status_kb("VmHWM")
    if hwm is not None:
        return hwm * 1024, "VmHWM"
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "ru_maxrss"


def time_paths(b: Bench, paths: dict, batches, device: torch.device) -> dict:
    """Alternate the paths step by step (warm-up first); per-path lists of step times and losses."""
    times = {name: [] for name in paths}
    losses = {name: [] for name in paths}
    peak_extra = {name: 0 for name in paths}
    order = list(paths)
    for i in range(b.warmup + b.steps):
        ids, mask = batches[i % len(batches)]
        # Alternate which path goes first, so neither always runs on a cache the other warmed.
        for name in order if i % 2 == 0 else order[::-1]:
            path = paths[name]
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                before = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.perf_counter()
            loss = path.step(ids, mask)
            sync(device)
            dt = time.perf_counter() - t0
            if device.type == "cuda":
                peak_extra[name] = max(peak_extra[name], torch.cuda.max_memory_allocated(device) - before)
            if i >= b.warmup:
                times[name].append(dt)
            losses[name].append(loss)
    return {"times": times, "losses": losses, "peak_extra": peak_extra}


def summarise(b: Bench, name: str, times: list[float], peak_bytes: int | None, peak_kind: str, flops: dict,
              peak_flops: dict, matmul_dtype: torch.dtype) -> dict:
    med = statistics.median(times)
    tokens = b.batch * b.seq
    tps = tokens / med
    dtype = "bf16" if matmul_dtype == torch.bfloat16 else "fp32"
    achieved = flops["total_mflop"] * 1e6 * tps
    row = {
        "path": name, "ms_per_step": med * 1e3, "ms_min": min(times) * 1e3, "ms_max": max(times) * 1e3,
        "steps_timed": len(times), "tokens_per_s": tps, "matmul_dtype": dtype,
        "achieved_tflops": achieved / 1e12,
        "mfu": achieved / peak_flops["hardware"] if peak_flops.get("hardware") else None,
        "of_measured_gemm": achieved / peak_flops["gemm"][dtype] if peak_flops["gemm"].get(dtype) else None,
        "peak_memory_bytes": peak_bytes, "peak_memory_kind": peak_kind,
    }
    return row


def memory_child(b: Bench, path_name: str, precision: str, workdir: Path) -> dict:
    """CPU: run one path alone in a child process and read its resident-set high-water mark."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_memory-child", path_name, "--config", b.name,
           "--precision", precision, "--workdir", str(workdir), "--threads", str(torch.get_num_threads())]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_memory_child(b: Bench, path_name: str, precision: str, workdir: Path) -> None:
    device = torch.device("cpu")
    paths = build_paths(b, workdir, device, precision, which=(path_name,))
    path = paths[path_name]
    batches = make_batches(b, 2, device)
    gc.collect()
    rss_setup = (_status_kb("VmRSS") or 0) * 1024
    reset = reset_rss_peak()
    for ids, mask in batches + batches[:1]:
        path.step(ids, mask)
    peak, kind = peak_rss_bytes()
    print(json.dumps({"peak_rss_bytes": peak, "kind": kind if reset else f"{kind} (not reset after set-up)",
                      "rss_after_setup_bytes": rss_setup, "resident_tensor_bytes": path.resident_bytes()}))


def largest_batch(b: Bench, workdir: Path, device: torch.device, precision: str, start: int) -> dict:
    """CUDA, project path: double the batch until out of memory, then bisect; memory per token from the slope."""
    paths = build_paths(b, workdir, device, precision, which=("project",))
    path = paths["project"]
    # Eager: with static shapes every batch size tried would compile its own graph (a minute each); the
    # compiled step's memory is at most the eager one's.
    from mlminilm.distill import distill_terms

    path.terms = distill_terms
    results: dict[int, int | None] = {}

    def fits(batch: int) -> bool:
        if batch in results:
            return results[batch] is not None
        trial = replace(b, batch=batch)
        ids, mask = make_batches(trial, 1, device, seed=batch)[0]
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        try:
            path.step(ids, mask)
            torch.cuda.synchronize(device)
            results[batch] = torch.cuda.max_memory_allocated(device)
        except torch.OutOfMemoryError:
            results[batch] = None
        finally:
            del ids, mask
            path.optimizer.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()
        return results[batch] is not None

    ok, bad = 0, None
    batch = start
    while bad is None and batch <= 1 << 20:
        if fits(batch):
            ok, batch = batch, batch * 2
        else:
            bad = batch
    if ok == 0:
        return {"largest_batch": 0, "note": f"batch {start} does not fit"}
    step = max(8, ok // 16)  # bisect to within ~6 %
    while bad is not None and bad - ok > step:
        mid = (ok + bad) // 2 // 8 * 8 or ok + 1
        if mid <= ok:
            break
        if fits(mid):
            ok = mid
        else:
            bad = mid
    sizes = sorted(k for k, v in results.items() if v is not None)
    per_token = None
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        per_token = (results[hi] - results[lo]) / ((hi - lo) * b.seq)
    path.free()
    del paths, path
    gc.collect()
    torch.cuda.empty_cache()
    return {
        "largest_batch": ok, "largest_tokens": ok * b.seq, "first_oom_batch": bad,
        "peak_bytes_at_largest": results.get(ok), "memory_per_token_bytes": per_token,
        "trials": {str(k): v for k, v in sorted(results.items())},
    }


def bench_one(b: Bench, workdir: Path, precision: str, peak_flops: dict, search: bool) -> dict:
    device = torch.device(b.device)
    flops = flops_per_token(b)
    print(f"[{b.name}] building models ...", file=sys.stderr, flush=True)
    batch = b.batch
    while True:
        trial = replace(b, batch=batch)
        paths, batches, out_of_memory = {}, None, False
        try:
            paths.update(build_paths(trial, workdir, device, precision))
            batches = make_batches(trial, 3, device)
            print(f"[{b.name}] timing {trial.warmup} warm-up + {trial.steps} steps per path, batch {batch} x {b.seq}",
                  file=sys.stderr, flush=True)
            timed = time_paths(trial, paths, batches, device)
        except torch.OutOfMemoryError:
            if device.type != "cuda" or batch <= 1:
                raise
            out_of_memory = True
        if not out_of_memory:
            break
        # Outside the except block, so the traceback no longer holds the failed step's tensors.
        print(f"[{b.name}] out of memory at batch {batch}; halving it for both paths", file=sys.stderr)
        for p in paths.values():
            p.free()
        paths = batches = None
        gc.collect()
        torch.cuda.empty_cache()
        batch //= 2
    b = trial
    rows = {}
    if device.type == "cuda":
        for name, p in paths.items():
            peak = p.resident_bytes() + timed["peak_extra"][name]
            rows[name] = summarise(b, name, timed["times"][name], peak, "resident tensors + step peak "
                                   "(torch.cuda.max_memory_allocated)", flops, peak_flops, p.matmul_dtype)
    dtypes = {name: p.matmul_dtype for name, p in paths.items()}
    project_precision = "bf16" if paths["project"].matmul_dtype == torch.bfloat16 else "fp32"
    for p in paths.values():
        p.free()
    del paths
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    else:
        for name in ("project", "naive"):
            mem = memory_child(b, name, precision, workdir)
            rows[name] = summarise(b, name, timed["times"][name], mem.get("peak_rss_bytes"),
                                   mem.get("kind", mem.get("error", "")), flops, peak_flops, dtypes[name])
            rows[name]["memory_detail"] = mem
    result = {
        "config": asdict(b), "project_precision": project_precision, "flops_per_token": flops,
        "project": rows["project"], "naive": rows["naive"],
        "speedup": rows["naive"]["ms_per_step"] / rows["project"]["ms_per_step"],
        "losses": timed["losses"],
        "memory_ratio": (rows["naive"]["peak_memory_bytes"] / rows["project"]["peak_memory_bytes"]
                         if rows["naive"]["peak_memory_bytes"] and rows["project"]["peak_memory_bytes"] else None),
    }
    if search and device.type == "cuda":
        print(f"[{b.name}] searching the largest batch (project path) ...", file=sys.stderr, flush=True)
        result["largest_batch"] = largest_batch(b, workdir, device, precision, start=b.batch)
    return result


# ------------------------------------------------------------------------------- relation loss memory

# The loss of MiniLM v1 alone at a long sequence: an XLM-R-base teacher's Q/K/V (hidden 768) against a 384-wide
# student's, 12 heads, both relations (attention and value), forward + backward.
RELATION_HEADS, RELATION_TEACHER_HIDDEN, RELATION_STUDENT_HIDDEN = 12, 768, 384
RELATION_MODES = {
    "materialised": "relation_kl(relation_logits(...)) per relation: whole [batch, heads, seq, seq] logits",
    "chunked": "losses.minilm_v1_loss -> relations.relation_loss: chunks of heads, recomputed in the backward",
}


def relation_inputs(batch: int, seq: int, dtype: torch.dtype, seed: int = 0):
    """Random teacher (q, k, v), student (q, k, v) leaves that need gradients, and an all-real mask."""
    g = torch.Generator().manual_seed(seed)
    teacher = tuple(torch.randn(batch, seq, RELATION_TEACHER_HIDDEN, generator=g).to(dtype) for _ in range(3))
    student = tuple(torch.randn(batch, seq, RELATION_STUDENT_HIDDEN, generator=g).to(dtype).requires_grad_(True)
                    for _ in range(3))
    return teacher, student, torch.ones(batch, seq, dtype=torch.long)


def relation_step(mode: str, teacher, student, mask, precision: str, chunk: int | None) -> float:
    """One forward + backward of both v1 relations as `mode` computes them; the loss as a float."""
    from mlminilm.losses import minilm_v1_loss
    from mlminilm.relations import relation_kl, relation_logits

    for x in student:
        x.grad = None
    bf16 = torch.autocast("cpu", torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    with bf16:
        if mode == "materialised":  # how losses.minilm_v1_terms composed the relations before chunking
            (tq, tk, tv), (sq, sk, sv), h = teacher, student, RELATION_HEADS
            loss = (relation_kl(relation_logits(tq, tk, h), relation_logits(sq, sk, h), mask)
                    + relation_kl(relation_logits(tv, tv, h), relation_logits(sv, sv, h), mask))
        else:
            loss = minilm_v1_loss(teacher, student, mask, RELATION_HEADS, chunk)
    loss.backward()
    return loss.item()


def run_relation_child(mode: str, batch: int, seq: int, precision: str, chunk: int | None) -> None:
    """Peak resident memory of one loss step over what was resident before it (inputs included in the latter)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    small = relation_inputs(2, 32, dtype, seed=1)
    relation_step(mode, *small, precision, chunk)  # library set-up (thread pools, kernels) is not the loss's
    inputs = relation_inputs(batch, seq, dtype)
    gc.collect()
    rss_before = (_status_kb("VmRSS") or 0) * 1024
    reset = reset_rss_peak()
    loss = relation_step(mode, *inputs, precision, chunk)
    peak, kind = peak_rss_bytes()
    print(json.dumps({"mode": mode, "loss": loss, "peak_over_before_bytes": peak - rss_before,
                      "rss_before_bytes": rss_before, "peak_kind": kind if reset else f"{kind} (not reset)"}))


def relation_child(mode: str, batch: int, seq: int, precision: str, chunk: int | None) -> dict:
    """One mode's memory in a child process of its own. malloc returns freed blocks >= 64 KiB to the system
    at once there (MALLOC_MMAP_THRESHOLD_), so the resident-set high-water mark follows the live tensors."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_relation-child", mode, "--relation-batch", str(batch),
           "--relation-seq", str(seq), "--precision", precision, "--threads", str(torch.get_num_threads())]
    if chunk is not None:
        cmd += ["--relation-chunk", str(chunk)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def relation_times(batch: int, seq: int, precision: str, chunk: int | None, repeats: int) -> dict:
    """Seconds per loss step of each mode, in this process (normal malloc), alternating, after one warm-up."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    inputs = relation_inputs(batch, seq, dtype)
    times = {mode: [] for mode in RELATION_MODES}
    for i in range(repeats + 1):
        for mode in RELATION_MODES if i % 2 == 0 else list(RELATION_MODES)[::-1]:
            t0 = time.perf_counter()
            relation_step(mode, *inputs, precision, chunk)
            if i:
                times[mode].append(time.perf_counter() - t0)
    return times


def relation_memory(batch: int, seq: int, precision: str, chunk: int | None, repeats: int) -> dict:
    """Both modes: peak memory (child processes) and time (this process), with their ratios."""
    from mlminilm.relations import auto_chunk

    rows = {mode: relation_child(mode, batch, seq, precision, chunk) for mode in RELATION_MODES}
    for mode, times in relation_times(batch, seq, precision, chunk, repeats).items():
        rows[mode].update(ms_median=statistics.median(times) * 1e3, ms_all=[t * 1e3 for t in times])
    before, after = rows["materialised"], rows["chunked"]
    auto = f"auto ({auto_chunk(batch, seq, RELATION_HEADS, 'cpu')} heads)"
    return {
        "shape": {"batch": batch, "seq": seq, "heads": RELATION_HEADS, "teacher_hidden": RELATION_TEACHER_HIDDEN,
                  "student_hidden": RELATION_STUDENT_HIDDEN, "precision": precision,
                  "chunk": chunk if chunk is not None else auto},
        "modes": rows,
        "memory_ratio": before["peak_over_before_bytes"] / after["peak_over_before_bytes"],
        "time_ratio": after["ms_median"] / before["ms_median"],
        "loss_difference": abs(before["loss"] - after["loss"]),
    }


def print_relation_memory(result: dict) -> None:
    shape = result["shape"]
    print(f"# MiniLM v1 loss (attention + value relation), forward + backward: batch {shape['batch']} x seq "
          f"{shape['seq']}, {shape['heads']} heads, teacher hidden {shape['teacher_hidden']}, student hidden "
          f"{shape['student_hidden']}, {shape['precision']}, chunk {shape['chunk']}")
    for mode, row in result["modes"].items():
        print(f"{mode:<13} peak {row['peak_over_before_bytes'] / 2**20:8.1f} MiB over the inputs   "
              f"{row['ms_median']:8.1f} ms (median of {len(row['ms_all'])})   {RELATION_MODES[mode]}")
    print(f"memory ratio (materialised / chunked): {result['memory_ratio']:.2f}x; time ratio (chunked / "
          f"materialised): {result['time_ratio']:.2f}; loss difference {result['loss_difference']:.2e}")


# -------------------------------------------------------------------------------------------- reporting


def fmt_bytes(n) -> str:
    if not n:
        return "-"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def print_table(results: list[dict]) -> None:
    head = (f"{'config':<24} {'path':<8} {'dtype':<5} {'ms/step':>9} {'tokens/s':>10} {'MFLOP/tok':>9} "
            f"{'TFLOP/s':>8} {'MFU':>6} {'GEMM%':>6} {'peak mem':>10}")
    print(head)
    print("-" * len(head))
    for r in results:
        for name in ("project", "naive"):
            row = r[name]
            mfu = f"{row['mfu'] * 100:.1f}%" if row["mfu"] is not None else "-"
            gemm = f"{row['of_measured_gemm'] * 100:.0f}%" if row["of_measured_gemm"] is not None else "-"
            print(f"{r['config']['name']:<24} {name:<8} {row['matmul_dtype']:<5} {row['ms_per_step']:>9.1f} "
                  f"{row['tokens_per_s']:>10,.0f} {r['flops_per_token']['total_mflop']:>9.1f} "
                  f"{row['achieved_tflops']:>8.3f} {mfu:>6} {gemm:>6} {fmt_bytes(row['peak_memory_bytes']):>10}")
        extra = ""
        if "largest_batch" in r:
            lb = r["largest_batch"]
            per = lb.get("memory_per_token_bytes")
            extra = f"; largest batch {lb.get('largest_batch')} x {r['config']['seq']}" + (
                f", {per / 1024:.1f} KiB/token" if per else "")
        print(f"{'':<24} speedup {r['speedup']:.2f}x{extra}")


def environment(device: torch.device, peaks: dict) -> dict:
    import transformers

    info = cpu_info()
    env = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "python": platform.python_version(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "cpu": info["model"], "cpu_threads": info["threads"], "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "avx512_bf16": "avx512_bf16" in info["flags"], "peaks": peaks,
        "emulated_avx2": emulating_avx2(), "compile": COMPILE,
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    try:
        env["load_average"] = os.getloadavg()
    except OSError:
        pass
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", choices=sorted(CONFIGS), help="configuration(s) to run (default: cpu)")
    ap.add_argument("--gpu", action="store_true", help="run every GPU configuration and the largest-batch search")
    ap.add_argument("--no-search", action="store_true", help="GPU: skip the largest-batch search")
    ap.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                    help="the project path's precision, as `distill --precision` (default auto)")
    ap.add_argument("--steps", type=int, help="timed steps per path (overrides the configuration)")
    ap.add_argument("--warmup", type=int, help="warm-up steps per path (overrides the configuration)")
    ap.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's, one per core)")
    ap.add_argument("--compile", default="auto", choices=("auto", "on", "off"),
                    help="torch.compile the project path, as `distill --compile` (auto: on for CUDA, off on CPU)")
    ap.add_argument("--emulate-avx2", action="store_true",
                    help="run again in a fresh process with the kernels of an AVX2-only CPU (AVX2_ENV); pair it "
                    "with --precision fp32, what `auto` picks on such a CPU")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--workdir", type=Path, help="where the random teachers are saved (default: a temporary dir)")
    ap.add_argument("--relation-memory", action="store_true",
                    help="instead: peak memory and time of the relation loss alone, materialised against chunked")
    ap.add_argument("--relation-batch", type=int, default=8, help="--relation-memory: batch (default 8)")
    ap.add_argument("--relation-seq", type=int, default=512, help="--relation-memory: sequence length (default 512)")
    ap.add_argument("--relation-chunk", type=int, help="--relation-memory: heads per chunk (default: automatic)")
    ap.add_argument("--_memory-child", dest="memory_child", help=argparse.SUPPRESS)
    ap.add_argument("--_relation-child", dest="relation_child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    global COMPILE
    COMPILE = args.compile

    if args.emulate_avx2:  # does not return unless the environment is already set
        reexec_emulating_avx2(str(Path(__file__).resolve()), list(sys.argv[1:] if argv is None else argv))
    if emulating_avx2() and args.precision == "auto":
        # train.cpu_has_native_bf16 reads the CPU's flags, which the emulation cannot hide: it would pick bf16,
        # emulated at AVX2 and very slow. An AVX2-only CPU's `auto` is fp32.
        print("note: emulating an AVX2-only CPU: --precision auto resolves to fp32 there", file=sys.stderr)
        args.precision = "fp32"
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if args.memory_child:
        run_memory_child(CONFIGS[args.config[0]], args.memory_child, args.precision, args.workdir)
        return 0
    if args.relation_child:
        run_relation_child(args.relation_child, args.relation_batch, args.relation_seq,
                           "bf16" if args.precision == "bf16" else "fp32", args.relation_chunk)
        return 0
    if args.relation_memory:
        precision = "bf16" if args.precision == "bf16" else "fp32"
        result = relation_memory(args.relation_batch, args.relation_seq, precision, args.relation_chunk,
                                 args.steps or 3)
        result["environment"] = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "cpu": cpu_info()["model"],
                                 "cpu_threads": torch.get_num_threads(), "torch": torch.__version__}
        if args.out:
            args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print_relation_memory(result)
        return 0

    names = args.config or (GPU_CONFIGS if args.gpu else ["cpu"])
    benches = [CONFIGS[n] for n in names]
    if args.steps or args.warmup is not None:
        benches = [replace(b, steps=args.steps or b.steps, warmup=b.warmup if args.warmup is None else args.warmup)
                   for b in benches]
    device = torch.device("cuda" if any(b.device == "cuda" for b in benches) else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("Error: the GPU configurations need a CUDA device; run without --gpu for the CPU one", file=sys.stderr)
        return 1

    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        spec = next((v for k, v in GPU_PEAKS.items() if k in gpu), None)
        peaks = {"spec": {"bf16": spec}, "gemm": {"bf16": measured_gemm(device, torch.bfloat16, 8192, 20)},
                 "assumption": f"{gpu}: data-sheet dense bf16 peak"}
        peaks["hardware"] = spec or peaks["gemm"]["bf16"]
    else:
        est = cpu_peaks(cpu_info())
        emulated = emulating_avx2()  # bf16 is then emulated (~0.4 GFLOP/s here): a 2048^3 GEMM would take minutes
        peaks = {"spec": {"fp32": est["fp32"], "bf16": None if emulated else est["bf16"]},
                 "gemm": {"fp32": measured_gemm(device, torch.float32, 2048, 4),
                          "bf16": None if emulated else measured_gemm(device, torch.bfloat16, 2048, 4)},
                 "assumption": est["assumption"] + (" (AVX2 emulated: fp32 only)" if emulated else "")}
        # The clock /proc/cpuinfo reports is the nominal one, not the boost clock, so a measured GEMM can beat
        # the estimate: the hardware peak is the larger of the two, in the fastest dtype the CPU multiplies.
        best = "bf16" if est["native_bf16"] and not emulated else "fp32"
        peaks["hardware"] = max(peaks["spec"][best], peaks["gemm"][best])
    env = environment(device, peaks)
    load, cores = env.get("load_average", (0.0,))[0], len(os.sched_getaffinity(0))
    if device.type == "cpu" and load > cores - 0.5:
        print(f"warning: load average {load:.1f} on {cores} cores: other processes compete for the CPU, and "
              f"{torch.get_num_threads()} torch threads waiting on each other make the timings unreliable; rerun "
              "when the machine is quiet, or with --threads 1", file=sys.stderr)
    tflops = {k: {d: (f"{v / 1e12:.2f}" if v else None) for d, v in peaks[k].items()} for k in ("spec", "gemm")}
    print(f"# {env.get('gpu', env['cpu'])}, {env['cpu_threads']} threads, torch {env['torch']}, "
          f"transformers {env['transformers']}; peak TFLOP/s: estimate {tflops['spec']} ({peaks['assumption']}), "
          f"measured GEMM {tflops['gemm']}; MFU is against {peaks['hardware'] / 1e12:.2f}", file=sys.stderr)

    results = []
    with tempfile.TemporaryDirectory(prefix="mlminilm-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        for b in benches:
            search = device.type == "cuda" and not args.no_search
            results.append(bench_one(b, workdir, args.precision, peaks, search=search))
            if args.out:  # write as we go: a long GPU run that dies still leaves what it measured
                args.out.write_text(json.dumps({"environment": env, "results": results}, indent=2, default=str) + "\n")
    try:
        env["load_average_end"] = os.getloadavg()
    except OSError:
        pass
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "results": results}, indent=2, default=str) + "\n")
    print_table(results)
    # The last line: the speedup of the first configuration (the CPU one when run without arguments).
    print(f"speedup: {results[0]['speedup']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
