"""What the CPU companions of distill_step.py (distill_profile.py, distill_variants.py) share of their command
line: the configuration, precision and thread options, and starting the run those ask for."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch
from step_configs import CONFIGS, Bench
from step_hardware import reexec_emulating_avx2


def companion_parser(doc: str) -> argparse.ArgumentParser:
    """A parser described by the first paragraph of `doc`, with the options every companion takes first; each adds
    its own, --steps, --warmup and --emulate-avx2 among them."""
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
