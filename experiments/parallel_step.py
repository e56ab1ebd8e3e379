#!/usr/bin/env python
"""docs/benchmarks/recipe.md section 16 ("A parallel-term step", the target cache): an answered experiment.

Time one `distill --parallel` step three ways, side by side in one process: the teacher's forward over the
pairs' sentences in every step (before the target cache), targets read from the cache (mlminilm/distillation/
targets.py), and cached targets with the bottom 4 student layers frozen (`--freeze-layers 4`).

    python experiments/parallel_step.py                 # multilingual-e5-small -> 6x384 (first-last), fp32
    python experiments/parallel_step.py --threads 1 --steps 8

Each step is what `distill` runs with the parallel term alone: the student's forward and backward over the
sources and translations of a micro-batch of `--batch` pairs (drawn from XNLI test's translations as
experiments/running_text.py --parallel writes them), AdamW, and one host sync on the loss. The variants
alternate after a warm-up; the figures are medians. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teacher", default="multilingual-e5-small")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per variant")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)

    import torch
    from running_text import write_parallel

    from mlminilm.config import DistillConfig
    from mlminilm.corpus.parallel import ParallelSampler, read_parallel
    from mlminilm.distillation import targets
    from mlminilm.distillation.inputs import StepRange
    from mlminilm.distillation.inputs.pairs import drawn_sources
    from mlminilm.distillation.objective import StudentForward, distill_terms
    from mlminilm.distillation.plan import MEAN_POOLING, embedding_head
    from mlminilm.distillation.terms import weighted_loss
    from mlminilm.models.loading import load_config, load_teacher, load_tokenizer, resolve_model
    from mlminilm.models.sentence_encoder import read_sentence_transformers
    from mlminilm.models.student import (
        build_student,
        freeze_bottom_layers,
        freeze_word_embeddings,
        init_from_teacher,
        student_config,
    )
    from mlminilm.training.optim import make_optimizer

    if args.threads:
        torch.set_num_threads(args.threads)
    teacher_dir = resolve_model(args.teacher)
    t_cfg = load_config(teacher_dir)
    work = Path(tempfile.mkdtemp(prefix="parallel-step-"))
    write_parallel(work / "pairs")
    cfg = DistillConfig(
        teacher=teacher_dir,
        data=work,
        out=work / "out",
        layers=6,
        hidden=t_cfg.hidden_size,
        heads=t_cfg.num_attention_heads,
        intermediate=t_cfg.intermediate_size,
        init="teacher",
        parallel=work / "pairs",
        relation_loss_weight=0.0,
        hidden_loss_weight=0.0,
        embedding_loss_weight=0.0,
        freeze_embeddings=True,
        lr=1e-4,
        warmup=0.0,
        precision="fp32",
    )
    head = embedding_head(cfg, read_sentence_transformers(teacher_dir)) or MEAN_POOLING
    tokenizer = load_tokenizer(teacher_dir)
    teacher, _ = load_teacher(teacher_dir, -1, torch.float32, torch.device("cpu"))
    sampler = ParallelSampler(read_parallel(cfg.parallel), tokenizer, prefix="query: ", max_length=128, seed=0)
    total = 1 + 2 * (args.steps + 1)
    store = targets.TargetStore(
        work / "cache", targets.fingerprint(targets.module_digest(teacher), head.modes, head.normalize, "query: ", 128)
    )
    t0 = time.perf_counter()
    drawn = drawn_sources(sampler.pairs, 0, StepRange(0, 3 * total, args.batch, 1, 1))
    filled = targets.fill(
        store,
        drawn,
        lambda texts: targets.embed_sources(
            teacher,
            tokenizer,
            texts,
            prefix="query: ",
            max_length=128,
            modes=head.modes,
            normalize=head.normalize,
            device="cpu",
        ),
    )
    fill_s = time.perf_counter() - t0
    table = store.table()

    def variant(name: str, cached: bool, frozen: int):
        student = build_student(student_config(t_cfg, cfg.shape), 0)
        init_from_teacher(student, teacher_dir, "first-last")
        freeze_word_embeddings(student)
        freeze_bottom_layers(student, frozen)
        forward = StudentForward(student, outputs=False)
        optimizer = make_optimizer(student, replace(cfg, freeze_layers=frozen), torch.device("cpu"))
        return {"name": name, "cached": cached, "forward": forward, "optimizer": optimizer, "times": []}

    # The same draw, made with the cached targets (as a distill run makes its sampler).
    cached = ParallelSampler(sampler.pairs, tokenizer, prefix="query: ", max_length=128, seed=0, target_table=table)
    variants = [
        variant("teacher forward in every step", False, 0),
        variant("cached targets", True, 0),
        variant("cached targets + --freeze-layers 4", True, 4),
    ]
    step = 0
    for round_ in range(args.steps + 1):  # round 0 warms up
        for v in variants:
            batch = (cached if v["cached"] else sampler).batch(step, 0, args.batch, 1, 0, 1)
            step += 1
            start = time.perf_counter()
            parts = distill_terms(
                teacher, t_cfg.num_hidden_layers - 1, v["forward"], None, None, cfg, head, {"pairs": batch}
            )
            loss = weighted_loss(parts, cfg)
            loss.backward()
            v["optimizer"].step()
            v["optimizer"].zero_grad(set_to_none=True)
            float(loss.detach())
            if round_:
                v["times"].append(time.perf_counter() - start)
    base = statistics.median(variants[0]["times"])
    doc = {
        "teacher": args.teacher,
        "batch_pairs": args.batch,
        "threads": torch.get_num_threads(),
        "timed_steps": args.steps,
        "cache_fill": {"sentences": filled, "seconds": round(fill_s, 1)},
        "variants": [
            {
                "name": v["name"],
                "median_s": round(statistics.median(v["times"]), 3),
                "speedup": round(base / statistics.median(v["times"]), 2),
            }
            for v in variants
        ],
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
