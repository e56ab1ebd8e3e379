"""The two ways of doing a distill step that benchmarks/distill_step.py times against each other, from the same
weights and batches: `project` (mlminilm's own functions, as `distill` calls them) and `naive` (whole models,
eager attention, losses on materialised probabilities); distill_step.py's docstring says what each does. Also
the random teacher both load and the token batches both see."""

from __future__ import annotations

import contextlib
import copy
import gc
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from step_configs import Bench
from torch import nn

COMPILE = "auto"  # --compile: the project path's torch.compile, as distill's option (auto: on for CUDA)


def teacher_config(b: Bench):
    from transformers import XLMRobertaConfig

    t = b.teacher
    return XLMRobertaConfig(
        vocab_size=b.vocab,
        hidden_size=t.hidden,
        num_hidden_layers=t.layers,
        num_attention_heads=t.heads,
        intermediate_size=t.ffn,
        max_position_embeddings=max(514, b.seq + 2),
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
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


class ProjectPath:
    """mlminilm's distill step, assembled from the functions `distill` itself calls. Each path has `step(ids,
    mask)` (the loss as a float), `matmul_dtype`, `resident_bytes()` and `free()`."""

    name = "project"

    def __init__(self, b: Bench, teacher_dir: Path, student: nn.Module, device: torch.device, precision: str):
        from mlminilm import training
        from mlminilm.config import DistillConfig
        from mlminilm.distillation.objective import StudentForward
        from mlminilm.models.loading import load_teacher
        from mlminilm.models.student import freeze_unused

        self.rt = training.setup_runtime(device.type, precision)
        self.matmul_dtype = self.rt.dtype
        self.cfg = DistillConfig(
            teacher=str(teacher_dir),
            out=Path("unused"),
            layers=b.student.layers,
            hidden=b.student.hidden,
            heads=b.student.heads,
            intermediate=b.student.ffn,
            objective=b.objective,
            relation_heads=b.relation_heads,
            batch_size=b.batch,
            max_steps=10_000,
            warmup=0.06,
        )
        self.teacher, self.layer = load_teacher(str(teacher_dir), -1, self.rt.dtype, self.rt.device)
        self.student = student.to(self.rt.device)
        freeze_unused(self.student, -1)
        self.forward = StudentForward(self.student)
        self.optimizer = training.make_optimizer(self.student, self.cfg, self.rt.device)
        self.scheduler = training.linear_schedule(self.optimizer, self.cfg.warmup_steps(), self.cfg.max_steps)
        self.student.train()
        # As `distill --compile auto` does: compiled on CUDA, eager on CPU (where compiling does not pay,
        # docs/BENCHMARKS.md section 11). The warm-up steps absorb the compilation.
        from mlminilm.distillation.objective import distill_terms

        self.compiled = COMPILE == "on" or (COMPILE == "auto" and device.type == "cuda")
        self.terms = torch.compile(distill_terms, dynamic=False) if self.compiled else distill_terms

    def step(self, input_ids, mask) -> float:
        # The body of training.run_steps for one micro-batch (grad_accum 1, one process). distill's loader hands
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


class NaivePath:
    """Whole models, eager attention, output_attentions, losses on materialised probabilities."""

    name = "naive"

    def __init__(self, b: Bench, teacher_dir: Path, student: nn.Module, device: torch.device):
        from transformers import AutoModel

        self.b = b
        self.device = device
        self.matmul_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        from mlminilm.models.embedding_grad import plain_embedding

        self.teacher = AutoModel.from_pretrained(str(teacher_dir), attn_implementation="eager").to(device).eval()
        self.teacher.requires_grad_(False)
        self.student = copy.deepcopy(student).to(device)
        plain_embedding(self.student)  # a plain Hugging Face model: torch's own embedding gradient
        self.student.set_attn_implementation("eager")
        self.student.train()
        self.optimizer = torch.optim.AdamW(
            self.student.parameters(), lr=5e-4, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.01
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: min(1.0, (step + 1) / 600))
        self.values: dict[str, torch.Tensor] = {}
        for tag, model in (("teacher", self.teacher), ("student", self.student)):
            value = model.encoder.layer[-1].attention.self.value
            value.register_forward_hook(lambda mod, args, out, tag=tag: self.values.__setitem__(tag, out))

    def autocast(self):
        if self.device.type == "cuda":
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def loss(self, t_out, s_out, mask) -> torch.Tensor:
        """KL of the last layer's returned attention probabilities plus KL of its softmaxed value relations."""
        heads = self.b.teacher.heads
        t_att, s_att = t_out.attentions[-1].float(), s_out.attentions[-1].float()
        t_vr = value_relation(self.values["teacher"].float(), heads, mask)
        s_vr = value_relation(self.values["student"].float(), heads, mask)
        return naive_kl(t_att, s_att, mask) + naive_kl(t_vr, s_vr, mask)

    def step(self, input_ids, mask) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            with torch.no_grad():
                t_out = self.teacher(input_ids=input_ids, attention_mask=mask, output_attentions=True)
            s_out = self.student(input_ids=input_ids, attention_mask=mask, output_attentions=True)
            loss = self.loss(t_out, s_out, mask)
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
    from mlminilm.models.student import build_student, student_config

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
