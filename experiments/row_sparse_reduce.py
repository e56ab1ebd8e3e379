#!/usr/bin/env python
"""docs/benchmarks/gpu.md section 6 ("The row-sparse all-reduce", CUDA only): an answered experiment.

Time the all-reduce of a word embedding's gradient: whole (DDP's own hook) against row-sparse
(mlminilm/training/row_sparse_reduce.py), over N local processes.

    python experiments/row_sparse_reduce.py                         # 2 gloo processes on the CPU
    python experiments/row_sparse_reduce.py --backend nccl --procs 8 --out rows.json   # 8 GPUs of one machine

Each process holds a [--vocab, --hidden] fp32 gradient that is zero but in the rows of --tokens ids drawn
uniformly (more distinct rows than text, whose ids follow Zipf's law, would touch: a conservative case). Both
forms are checked equal to each other (bit for bit), then timed --repeats times each, alternating; medians.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def worker(rank: int, args, port: int, results) -> None:
    import torch
    import torch.distributed as dist

    from mlminilm.training.row_sparse_reduce import reduce_rows

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank) if args.backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    dist.init_process_group(args.backend, rank=rank, world_size=args.procs)
    generator = torch.Generator().manual_seed(rank)
    ids = torch.randint(0, args.vocab, (args.tokens,), generator=generator).to(device)
    grad = torch.zeros(args.vocab, args.hidden, device=device)
    grad.index_add_(0, ids, torch.randn(args.tokens, args.hidden, generator=generator).to(device))
    dense, rows = grad.clone(), grad.clone()
    dist.all_reduce(dense)
    sent = reduce_rows(rows)
    assert torch.equal(dense, rows), "row-sparse and whole all-reduce differ"

    def whole(t):
        dist.all_reduce(t)

    times: dict[str, list[float]] = {"whole": [], "rows": []}
    for _ in range(args.repeats):
        for name, fn in (("whole", whole), ("rows", reduce_rows)):
            t = grad.clone()
            dist.barrier()
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn(t)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    if rank == 0:
        results.put(
            {
                "backend": args.backend,
                "procs": args.procs,
                "vocab": args.vocab,
                "hidden": args.hidden,
                "tokens_per_process": args.tokens,
                "rows_sent": sent,
                **{f"{k}_ms": round(sorted(v)[len(v) // 2] * 1e3, 2) for k, v in times.items()},
            }
        )
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=250_002)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--tokens", type=int, default=32 * 128, help="ids looked up per process (default 32 x 128)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(args, port, results), nprocs=args.procs)
    report = results.get()
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
