#!/usr/bin/env python
"""An experiment for issue 15, outside the CLI: cross-lingual embedding distillation (Reimers & Gurevych 2020,
sentence-transformers' "make a model multilingual") on XNLI test's row-parallel sentences.

    python benchmarks/parallel_distill.py STEPS BATCH LR [START_STUDENT] [OUT]
    python benchmarks/parallel_distill.py 150 32 1e-4 /tmp/ret/first-last-untrained/student /tmp/x/student

Loss per batch of XNLI test rows (one random language each): MSE(student(xx), teacher(en)) + MSE(student(en),
teacher(en)) on the normalised mean-pooled "query: " embeddings of multilingual-e5-small; AdamW, warmup 10 % then
linear decay, word embeddings frozen, max 128 tokens. START_STUDENT: an init-only student (`distill --max-steps 0
--init-layers first-last` of benchmarks/retention.py). Greek is left out: test-el.tsv has 10 more fields than the
other languages, so its rows do not line up. XNLI test is the English fine-tuning text of docs/RETENTION.md and is
never evaluated (dev is); Tatoeba is another corpus. Evaluate the result with `mlminilm eval-tatoeba`. Figures:
docs/BENCHMARKS.md section 14. Not yet a `distill` objective: that needs prepare to keep parallel rows.
"""
import random
import sys
import time
from pathlib import Path
import torch
from mlminilm.models.loading import load_encoder, load_tokenizer, resolve_model

steps, batch, lr = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
start = sys.argv[4] if len(sys.argv) > 4 else "/tmp/ret/first-last-untrained/student"
torch.manual_seed(0); random.seed(0)
X = Path(__file__).resolve().parents[2] / "shared" / "data" / "xnli"  # ../shared/data/xnli
langs = ["ar","bg","de","es","fr","hi","ru","sw","th","tr","ur","vi","zh"]
def sents(l):
    out = []
    for line in (X / f"test-{l}.tsv").read_text().splitlines():
        parts = line.split("\t")
        out += parts[:2] if len(parts) == 3 else ["", ""]  # keep rows aligned
    return out
en = sents("en")
par = {l: sents(l) for l in langs}
n = len(en)
assert all(len(v) == n for v in par.values()), {l: len(v) for l, v in par.items()}
ok = [i for i in range(n) if en[i] and all(par[l][i] for l in langs)]
tdir = resolve_model("multilingual-e5-small")
tok = load_tokenizer(tdir)
teacher = load_encoder(tdir, dtype=torch.float32).eval()
student = load_encoder(start, dtype=torch.float32).train()
student.get_input_embeddings().weight.requires_grad_(False)
params = [p for p in student.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, steps // 10)) * max(0.0, (steps - s) / steps))
def emb(model, texts):
    b = tok(["query: " + t for t in texts], padding=True, truncation=True, max_length=128, return_tensors="pt")
    h = model(**b).last_hidden_state
    m = b["attention_mask"].unsqueeze(-1).float()
    v = (h * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(v, dim=-1)
t0 = time.time()
for step in range(steps):
    idx = random.sample(ok, batch)
    ls = [random.choice(langs) for _ in idx]
    with torch.no_grad():
        target = emb(teacher, [en[i] for i in idx])
    s_xx = emb(student, [par[l][i] for l, i in zip(ls, idx)])
    s_en = emb(student, [en[i] for i in idx])
    loss = ((s_xx - target) ** 2).sum(-1).mean() + ((s_en - target) ** 2).sum(-1).mean()
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    if step % 20 == 0 or step == steps - 1:
        print(f"step {step} loss {loss.item():.4f} {time.time()-t0:.0f}s", flush=True)
out = Path(sys.argv[5] if len(sys.argv) > 5 else "/tmp/x15/xl/student")
import shutil
shutil.rmtree(out, ignore_errors=True)
shutil.copytree(start, out)
student.save_pretrained(out, safe_serialization=True)
print("saved", out, f"{time.time()-t0:.0f}s")
