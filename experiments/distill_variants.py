#!/usr/bin/env python
"""docs/benchmarks/gpu.md section 11 ("The fp32 CPU step", its variants): an answered experiment.

Variants of the project's distill step against each other and the naive baseline, in one process.

    python experiments/distill_variants.py --precision fp32 --threads 1                      # every variant, `cpu`
    python experiments/distill_variants.py --precision fp32 --threads 1 --emulate-avx2       # as an AVX2-only CPU
    python experiments/distill_variants.py --variants naive,project,compile --steps 10

An A/B harness around distill_step.py's paths: every variant starts from the same teacher and student weights,
sees the same batches, and gets the same dropout noise (the default generator is reseeded with the same seed
before each variant's step), so a variant that computes the same thing shows the same loss to fp32 rounding;
the table gives the largest loss difference from `project` over all steps. Steps alternate between variants
(the order reversed every other step); figures are medians after the warm-up.

Every variant holds its own models, so `--config cpu-probe` with several variants holds several 250,002-row
models at once (~3.5 GB each): the memory pressure makes the naive path's fresh 384 MB optimizer temporaries
dearer than in distill_step.py (its probe step measured 5.2-6.0 s here against 3.8-4.9 s there). Compare project
variants with each other at that shape and take the ratio to naive from distill_step.py.

The teachers here are random: an int8 teacher's targets move little on them (the loss column) and a lot on a
trained teacher, whose activations have outliers: experiments/teacher_quantisation.py measures that.

Variants (`exact`: the same MiniLM loss to fp32 rounding; `opt-in`: changes what is learned or the targets):

    naive            step_paths.NaivePath (the baseline)
    project          step_paths.ProjectPath: what `distill` runs (eager)
    plainemb         exact: the student's word embedding as a plain nn.Embedding, whose gradient is a fresh
                     [vocab, hidden] tensor each step (project before mlminilm.models.embedding_grad, which
                     models.build_student now applies: the gradient written into the previous step's tensor)
    onesmask         exact: the all-ones attention mask passed through (what this benchmark passed before distill's
                     loader gave None for unpadded batches); the layers then get a materialised mask
    ftz              exact unless denormals occur: torch.set_flush_denormal(True) during the step
    compile          same math, fused (distill --compile on): torch.compile(distill.distill_terms, dynamic=False);
                     the warm-up pays the compilation; dropout draws from inductor's generator, so its noise
                     (not its distribution) differs from eager's
    dropout0         opt-in (distill --dropout 0): the student without dropout
    int8             opt-in (not a distill option): the teacher's linears below the distilled layer as int8
                     dynamically quantised (per-channel weights), torch.ao.quantization.quantize_dynamic
    int8attn         opt-in (not a distill option): as int8, the attention projections only (Q, K, V, output)
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the step_* modules

import torch  # noqa: E402
from step_configs import CONFIGS, Bench  # noqa: E402  (also puts the repository on sys.path)
from step_hardware import reexec_emulating_avx2  # noqa: E402
from step_paths import NaivePath, ProjectPath, build_paths, make_batches, teacher_config  # noqa: E402
from step_timing import environment  # noqa: E402
from torch import nn  # noqa: E402


def companion_parser(doc: str) -> argparse.ArgumentParser:
    """A parser described by the first paragraph of `doc`, with the configuration, precision and thread options."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--config", default="cpu", choices=[n for n in CONFIGS if not n.startswith("gpu")])
    ap.add_argument("--precision", default="fp32", choices=("auto", "fp32", "bf16"))
    ap.add_argument("--threads", type=int, default=1)
    return ap


def start_run(args: argparse.Namespace, script: str, argv: list[str] | None) -> Bench:
    """Re-run `script` as an AVX2-only CPU if --emulate-avx2 asks for it, take --threads, quieten transformers;
    the chosen configuration with the run's --steps and --warmup."""
    if args.emulate_avx2:  # does not return unless the environment is already set
        reexec_emulating_avx2(str(Path(script).resolve()), list(sys.argv[1:] if argv is None else argv))
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    return replace(CONFIGS[args.config], steps=args.steps, warmup=args.warmup)


VARIANTS = ("naive", "project", "plainemb", "onesmask", "ftz", "compile", "dropout0", "int8", "int8attn")
EXACT = {"project", "plainemb", "onesmask", "ftz"}
# Not a variant: the teacher under torch.inference_mode. Its Q/K/V are then inference tensors, which the relation
# loss's autograd function cannot save for its backward (a RuntimeError); cloning them would undo the saving.


class Variant(ProjectPath):
    """ProjectPath with one change; `terms` replaces distill.distill_terms."""

    def __init__(self, kind: str, *args):
        super().__init__(*args)
        self.kind = kind
        self.name = kind
        from mlminilm.distillation.objective import distill_terms

        self.terms = distill_terms
        if kind == "compile":
            self.terms = torch.compile(distill_terms, dynamic=False)
        elif kind == "dropout0":
            for m in self.student.modules():
                if isinstance(m, nn.Dropout):
                    m.p = 0.0
            for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
                setattr(self.student.config, name, 0.0)
            for m in self.student.modules():  # transformers' attention modules keep their own float
                if hasattr(m, "dropout_prob"):
                    m.dropout_prob = 0.0
        elif kind == "plainemb":
            from mlminilm.models.embedding_grad import plain_embedding

            plain_embedding(self.student)
        elif kind in ("int8", "int8attn"):
            quantise_teacher(self.teacher, self.layer, attention_only=kind == "int8attn")

    def loader_mask(self, mask):
        return mask if self.kind == "onesmask" else None

    def step(self, input_ids, mask) -> float:
        if self.kind != "ftz":
            return super().step(input_ids, mask)
        torch.set_flush_denormal(True)
        try:
            return super().step(input_ids, mask)
        finally:
            torch.set_flush_denormal(False)


def quantise_teacher(teacher: nn.Module, layer: int, attention_only: bool) -> None:
    """Int8 dynamic quantisation (per-channel weights) of the teacher's linears in the layers below `layer`; the
    distilled layer's Q/K/V stay as they are (capture fuses their fp32 weights)."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    from mlminilm.models.layers import encoder_layers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layers = encoder_layers(teacher)
        for i in range(layer):
            if not attention_only:
                layers[i] = quantize_dynamic(layers[i], {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
                continue
            attn = layers[i].attention
            for parent, name in (
                (attn.self, "query"),
                (attn.self, "key"),
                (attn.self, "value"),
                (attn.output, "dense"),
            ):
                wrapped = quantize_dynamic(
                    nn.Sequential(getattr(parent, name)), {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
                )
                setattr(parent, name, wrapped[0])


def build(b: Bench, workdir: Path, precision: str, kinds: list[str]) -> dict:
    """The teacher saved once, the student built once; each variant gets copies of both."""
    from mlminilm.config import StudentShape
    from mlminilm.models.student import build_student, student_config

    device = torch.device("cpu")
    build_paths(b, workdir, device, precision, which=())  # saves the teacher
    teacher_dir = next(workdir.glob(f"teacher-{b.teacher.layers}x{b.teacher.hidden}-*"))
    shape = StudentShape(b.student.layers, b.student.hidden, b.student.heads, b.student.ffn)
    student = build_student(student_config(teacher_config(b), shape), seed=0)
    paths = {}
    for kind in kinds:
        if kind == "naive":
            paths[kind] = NaivePath(b, teacher_dir, student, device)
        else:
            paths[kind] = Variant(kind, b, teacher_dir, copy.deepcopy(student), device, precision)
    return paths


def main(argv=None) -> int:
    ap = companion_parser(__doc__)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per variant (default 10)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--emulate-avx2", action="store_true", help="re-run as an AVX2-only CPU (step_hardware.AVX2_ENV)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    b = start_run(args, __file__, argv)
    kinds = [k.strip() for k in args.variants.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(VARIANTS))
    if unknown:
        ap.error(f"unknown variant(s): {', '.join(unknown)}")
    with tempfile.TemporaryDirectory(prefix="mlminilm-variants-") as tmp:
        paths = build(b, Path(tmp), args.precision, kinds)
        batches = make_batches(b, 3, torch.device("cpu"))
        times = {k: [] for k in paths}
        losses = {k: [] for k in paths}
        for i in range(b.warmup + b.steps):
            ids, mask = batches[i % len(batches)]
            for k in kinds if i % 2 == 0 else kinds[::-1]:
                torch.manual_seed(1000 + i)  # the same dropout noise for every eager variant
                t0 = time.perf_counter()
                losses[k].append(paths[k].step(ids, mask))
                if i >= b.warmup:
                    times[k].append(time.perf_counter() - t0)
    env = environment(torch.device("cpu"), {})
    rows = {}
    ref = losses.get("project")
    naive = statistics.median(times["naive"]) if "naive" in times else None
    for k in kinds:
        med = statistics.median(times[k])
        rows[k] = {
            "ms_median": med * 1e3,
            "ms_all": [t * 1e3 for t in times[k]],
            "vs_naive": naive / med if naive else None,
            "max_loss_diff_vs_project": (
                max(abs(a - c) for a, c in zip(losses[k], ref)) if ref is not None and k != "naive" else None
            ),
            "losses": losses[k],
            "exact": k in EXACT,
        }
    print(
        f"# {b.name}, precision {args.precision}, {torch.get_num_threads()} thread(s), capability "
        f"{env['cpu_capability']}, load {env.get('load_average')}, {b.steps} timed steps after {b.warmup}"
    )
    print(f"{'variant':<12} {'ms/step':>9} {'vs naive':>9} {'max |loss - project|':>22}")
    for k, r in rows.items():
        diff = r["max_loss_diff_vs_project"]
        vs = f"{r['vs_naive']:.2f}x" if r["vs_naive"] else "-"
        print(f"{k:<12} {r['ms_median']:>9.1f} {vs:>9} {('-' if diff is None else f'{diff:.2e}'):>22}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {"environment": env, "config": b.name, "precision": args.precision, "variants": rows},
                indent=2,
                default=str,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
