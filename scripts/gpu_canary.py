"""The one-minute canary of scripts/gpu_oneshot.sh: torch.compile of the relation path's fp32 bmm + log_softmax +
KL + backward under `tf32_relations`, on CUDA, against the same in eager mode.

Why first: every compiled bf16/fp16 run lowers that fp32 bmm, and inductor on torch 2.9/2.10 reads the legacy TF32
getters while it does; when the context had set torch's new TF32 API they raised and every such run crashed
(issue 36 item 1). A minute here says whether the rest of a lent GPU's minutes can be spent on measurements.

    python3 scripts/gpu_canary.py [--out FILE]

Prints one JSON object (and writes it to FILE): the getters' answers inside the context, the graphs dynamo
compiled, the compile time, the largest relative differences of the loss and the gradients from eager. Exit 0
when it compiled, ran and matched; 1 otherwise; 2 (one line on stderr) without a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

RTOL = 1e-3  # TF32 reads bf16-valued inputs exactly; the softmax backward's rounding stays far below this


def relation_kl(x, y, target):
    import torch

    logits = torch.matmul(x, y.transpose(-1, -2)) * (x.shape[-1] ** -0.5)
    log_q = torch.log_softmax(logits, dim=-1)
    return (target.exp() * (target - log_q)).sum(-1).mean()


def run() -> dict:
    import torch
    from torch._dynamo.utils import counters

    from mlminilm.distillation.relations import tf32_relations

    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (8, 12, 128, 32)  # batch, heads, seq, head size of the 6x384 student at seq 128
    x, y = (torch.randn(shape, device="cuda", generator=g).bfloat16().float() for _ in range(2))
    target = torch.log_softmax(torch.randn(8, 12, 128, 128, device="cuda", generator=g), -1)
    results = {}
    with tf32_relations("cuda", torch.bfloat16):
        getters = [torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()]
        for name, fn in (("eager", relation_kl), ("compiled", torch.compile(relation_kl))):
            xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
            t0 = time.perf_counter()
            loss = fn(xs, ys, target)
            loss.backward()
            torch.cuda.synchronize()
            results[name] = (loss.detach(), xs.grad, ys.grad, time.perf_counter() - t0)
    (le, gxe, gye, _), (lc, gxc, gyc, seconds) = results["eager"], results["compiled"]

    def rel(a, b):
        return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))

    diffs = {"loss": rel(lc, le), "grad_x": rel(gxc, gxe), "grad_y": rel(gyc, gye)}
    graphs = int(counters["stats"].get("unique_graphs", 0))
    return {
        "ok": graphs > 0 and getters[0] is True and all(d <= RTOL for d in diffs.values()),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "getters_inside": getters,
        "graphs_compiled": graphs,
        "compile_and_run_s": round(seconds, 1),
        "relative_difference": diffs,
        "tolerance": RTOL,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="also write the JSON object here")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"Error: the canary needs a CUDA device (torch {torch.__version__} sees none)", file=sys.stderr)
        return 2
    try:
        doc = run()
    except Exception as exc:  # the failure this canary exists for: say it in the summary, whole
        doc = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
