#!/usr/bin/env python
"""docs/benchmarks/gpu.md section 11 ("Data loading", hence 0 loader workers on CPU): an answered experiment.

Time distill's data per micro-batch: the in-step read against `corpus.loader` with 0 and 2 workers.

    python experiments/data_loader.py                      # ../shared/data wikiann, XLM-R tokenizer (~2 min)
    python experiments/data_loader.py --out data.json --mb 8 --micro-batches 40
    python experiments/data_loader.py --corpus DIR --tokenizer DIR   # any directory of <lang>.txt files

A prepared corpus is built first in a temporary directory (never in the repository): the first `--mb` MB of
text of `--corpus` (default ../shared/data/corpus/wikiann, 15 languages, an equal share each), tokenized with
`--tokenizer` (default the XLM-R tokenizer in ../shared/data/tokenizers), seq 128, small shards so a batch
reads from several memory maps.

Per micro-batch, with a simulated step between batches (fixed work, so that a slower step shows):

  in-step   what distill's `compute` did before the loader: sampler.micro_batch + data.batch + long tensor +
            mask (input_ids != pad) + int(mask.sum()), in the training process. data = that time.
  loader-0  make_loader(workers=0): the same work at next(); data = the time next() takes.
  loader-2  make_loader(workers=2, prefetch 2): data = the time the loop waits in next().

Simulated steps: `matmul` (fp32 matmuls on torch's threads, calibrated to ~`--step-ms` alone: a CPU training
step, competing with the workers for the cores) and `sleep` (the host idle, as while a GPU step runs).
`step` = the simulated step's own time (it grows when workers take its cores), `total` = data + step: what a
training step costs. Medians over `--micro-batches` per configuration (the first one, which starts the workers,
reported apart as `first_ms`); configurations run in alternating order over `--rounds` rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MLMINILM_NO_PROGRESS", "1")

import torch  # noqa: E402

from mlminilm.config import PrepareConfig  # noqa: E402
from mlminilm.corpus import prepare  # noqa: E402
from mlminilm.corpus.dataset import PreparedData  # noqa: E402
from mlminilm.corpus.loader import make_loader  # noqa: E402
from mlminilm.corpus.sampling import BatchSampler  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
MODES = ("in-step", "loader-0", "loader-2")


def prepared_corpus(corpus: Path, tokenizer: Path, mb: float, seq_len: int, work: Path) -> PreparedData:
    """The first `mb` MB of `corpus` (an equal share per language, whole lines), prepared into `work`."""
    files = sorted(corpus.glob("*.txt"))
    if not files:
        raise SystemExit(f"Error: no <lang>.txt files in {corpus}; pass --corpus DIR")
    share = int(mb * 1e6 / len(files))
    text_dir = work / "text"
    text_dir.mkdir()
    for file in files:
        with file.open("rb") as src:
            head = src.read(share)
        (text_dir / file.name).write_bytes(head[: head.rfind(b"\n") + 1] if len(head) == share else head)
    out = work / "data"
    prepare.run(
        PrepareConfig(
            teacher=str(tokenizer), inputs=(str(text_dir),), out=out, seq_len=seq_len, shard_sequences=512, quiet=True
        )
    )
    return PreparedData.open(out)


def matmul_step(target_ms: float):
    """fp32 matmuls on torch's threads taking ~target_ms on an idle machine: fixed work, not fixed time."""
    a = torch.randn(512, 512)

    def once():
        return a @ a

    once()
    t0 = time.perf_counter()
    for _ in range(20):
        once()
    per = (time.perf_counter() - t0) / 20
    reps = max(1, round(target_ms / 1e3 / per))

    def step():
        for _ in range(reps):
            once()

    return step


def in_step_reads(data, sampler, batch, pad_id, start):
    """The pre-loader `compute`'s data half, on CPU, as a generator timed around next()."""
    step = start
    while True:
        lang_idx, seq_idx = sampler.micro_batch(step, 0, batch, 1, 0, 1)
        ids = data.batch([(sampler.langs[l], int(i)) for l, i in zip(lang_idx, seq_idx)])
        input_ids = torch.from_numpy(ids).to(torch.long)
        mask = (input_ids != pad_id).to(torch.long)
        tokens = int(mask.sum())
        langs = Counter(sampler.langs[l] for l in lang_idx)
        yield input_ids, mask, tokens, langs
        step += 1


def run_mode(mode, data, sampler, batch, pad_id, n, start, simulated) -> dict:
    if mode == "in-step":
        source, closer = in_step_reads(data, sampler, batch, pad_id, start), None
    else:
        closer = make_loader(
            data,
            sampler,
            batch_size=batch,
            accum=1,
            rank=0,
            world=1,
            pad_id=pad_id,
            start_step=start,
            max_steps=start + n,
            workers=int(mode[-1]),
            pin_memory=False,
        )
        source = iter(closer)
    waits, steps = [], []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            next(source)
            t1 = time.perf_counter()
            simulated()
            waits.append(t1 - t0)
            steps.append(time.perf_counter() - t1)
    finally:
        if closer is not None:
            closer.close()
    return {"first_ms": waits[0] * 1e3, "data": waits[1:], "step": steps[1:]}


def measure(data, batch, n, rounds, simulated, seed) -> dict:
    sampler = BatchSampler({lang: data.num_sequences(lang) for lang in data.languages}, alpha=0.3, seed=seed)
    pad_id = data.tokenizer["pad_token_id"]
    pooled = {m: {"data": [], "step": [], "first_ms": []} for m in MODES}
    for r in range(rounds):
        order = MODES if r % 2 == 0 else MODES[::-1]
        for i, mode in enumerate(order):
            res = run_mode(
                mode, data, sampler, batch, pad_id, n, start=1000 * (r * len(MODES) + i), simulated=simulated
            )
            for k in ("data", "step"):
                pooled[mode][k] += res[k]
            pooled[mode]["first_ms"].append(res["first_ms"])
    out = {}
    for mode, p in pooled.items():
        totals = [d + s for d, s in zip(p["data"], p["step"])]
        out[mode] = {
            "data_ms": statistics.median(p["data"]) * 1e3,
            "step_ms": statistics.median(p["step"]) * 1e3,
            "total_ms": statistics.median(totals) * 1e3,
            "first_ms": statistics.median(p["first_ms"]),
            "micro_batches": len(p["data"]),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", type=Path, default=SHARED / "corpus" / "wikiann", help="directory of <lang>.txt files")
    ap.add_argument(
        "--tokenizer",
        type=Path,
        default=SHARED / "tokenizers" / "xlm-roberta",
        help="a tokenizer (or model) directory for prepare",
    )
    ap.add_argument(
        "--mb", type=float, default=6.0, help="MB of text to prepare, split equally over languages (default 6)"
    )
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, action="append", help="micro-batch size(s) (default: 32 and 256)")
    ap.add_argument("--micro-batches", type=int, default=30, help="timed micro-batches per configuration and round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, alternating the order of the modes (default 2)")
    ap.add_argument("--step-ms", type=float, default=50.0, help="the simulated step's duration on an idle machine")
    ap.add_argument(
        "--simulate", action="append", choices=("matmul", "sleep"), help="simulated step(s) (default: both)"
    )
    ap.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's, one per core)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args(argv)
    for path, flag in ((args.corpus, "--corpus"), (args.tokenizer, "--tokenizer")):
        if not path.is_dir():
            print(f"Error: {path} not found; pass {flag} DIR", file=sys.stderr)
            return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    simulations = {"matmul": matmul_step(args.step_ms), "sleep": lambda: time.sleep(args.step_ms / 1e3)}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mlminilm-data-bench-") as tmp:
        t0 = time.perf_counter()
        data = prepared_corpus(args.corpus, args.tokenizer, args.mb, args.seq_len, Path(tmp))
        corpus = {
            "languages": len(data.languages),
            "sequences": sum(data.num_sequences(l) for l in data.languages),
            "shards": sum(len(i["shards"]) for i in data.manifest["languages"].values()),
            "prepare_s": round(time.perf_counter() - t0, 1),
            "source": str(args.corpus),
            "mb": args.mb,
        }
        results = []
        for simulate in args.simulate or ("matmul", "sleep"):
            for batch in args.batch or (32, 256):
                res = measure(data, batch, args.micro_batches, args.rounds, simulations[simulate], args.seed)
                for mode, r in res.items():
                    results.append(
                        {
                            "simulate": simulate,
                            "batch": batch,
                            "seq_len": args.seq_len,
                            "mode": mode,
                            **{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()},
                        }
                    )
                    print(
                        f"{simulate:6s} {batch:4d}x{args.seq_len}  {mode:9s} data {r['data_ms']:8.3f} ms  "
                        f"step {r['step_ms']:7.2f} ms  total {r['total_ms']:7.2f} ms  first {r['first_ms']:7.1f} ms",
                        flush=True,
                    )
    report = {
        "environment": {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "cpu": platform.processor() or platform.machine(),
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "load_before": load_before,
            "load_after": os.getloadavg(),
        },
        "config": {
            "step_ms": args.step_ms,
            "micro_batches": args.micro_batches,
            "rounds": args.rounds,
            "seed": args.seed,
        },
        "corpus": corpus,
        "results": results,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"load average before {load_before[0]:.2f}, after {report['environment']['load_after'][0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
