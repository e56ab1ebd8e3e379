#!/usr/bin/env python
"""Data-side throughput: `prepare` against the bare tokenizer, prepare's peak memory, and `eval-xnli` examples/s.

    python benchmarks/eval_throughput.py                       # prepare at 1x and 10x the UD corpus, then eval-xnli
    python benchmarks/eval_throughput.py --skip-eval --sizes 1,10 --workers 2 --out prepare.json

prepare. The corpus is ../shared/data/corpus/ud (15 languages, 22 MB), repeated k times per language into a
temporary directory for each size k (so two sizes 10x apart hold the same text mix). The tokenizer is the real
XLM-R one (../shared/data/tokenizers/xlm-roberta). For each size:

- bare: the tokenizer's own batch encode with the same number of worker processes, nothing else. The documents
  are read into the parent first (not timed); the workers are forked with them and the tokenizer, each encodes
  its share in batches of 1,000 documents (prepare's batch size) with `add_special_tokens=False`, and returns
  only its token count. This is the floor: reading, moving text and ids between processes, packing and writing
  all come on top of it.
- prepare: `python -m mlminilm prepare --teacher TOKENIZER --input DIR --out OUT --workers N --json` in a child
  process. Its work time is the command's own `elapsed_s` (reading, tokenizing, packing, writing shards);
  the wall time of the whole command (interpreter start, imports, tokenizer load, manifest) is reported too.
  Peak memory: the child's resident-set high-water mark (VmHWM) and the largest of its worker processes'
  (`getrusage(RUSAGE_CHILDREN).ru_maxrss`; forked workers share the parent's pages, which count in both).

The ratio prepare / bare (work time) is the overhead of everything prepare does besides tokenizing; the goal
is 1.25x or less, and peak memory flat across sizes.

eval-xnli. `python -m mlminilm eval-xnli --model M --data ../shared/data/xnli --split test --json` over all 15
test sets (75,150 pairs), M a randomly initialised XLM-R-shaped 6x384 sequence classifier (the real tokenizer,
vocabulary 250,002): accuracy is meaningless, examples/s is what is measured (the command's own throughput
figure: tokenizing, length-sorted batches, forward passes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
DEFAULT_CORPUS = SHARED / "corpus" / "ud"
DEFAULT_TOKENIZER = SHARED / "tokenizers" / "xlm-roberta"
DEFAULT_XNLI = SHARED / "xnli"
BATCH_DOCUMENTS = 1000  # as mlminilm.corpus.prepare.BATCH_DOCUMENTS

# Runs the CLI in this process, then reports this process's and its reaped children's peak RSS on stderr.
MEASURED_CLI = r"""
import json, resource, sys
sys.argv = ["mlminilm", *sys.argv[1:]]
from mlminilm.commands.app import main
try:
    main()
finally:
    hwm = None
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    self_max = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("MLMINILM_MEMORY " + json.dumps({"main_vmhwm": hwm or self_max, "workers_maxrss": children}),
          file=sys.stderr)
"""


# ------------------------------------------------------------------------------------------------ corpus


def build_corpus(source: Path, out: Path, times: int) -> dict:
    """Each <lang>.txt of `source` repeated `times` times into `out` (streamed, never held whole)."""
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for path in sorted(source.glob("*.txt")):
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            data += b"\n"
        with open(out / path.name, "wb") as f:
            for _ in range(times):
                f.write(data)
        total += len(data) * times
    return {"dir": str(out), "bytes": total, "languages": len(list(source.glob("*.txt")))}


def read_documents(corpus: Path) -> list[str]:
    """Every document (non-blank line) of every language, in prepare's order (languages sorted)."""
    docs = []
    for path in sorted(corpus.glob("*.txt")):
        with open(path, encoding="utf-8") as f:
            docs.extend(line.rstrip("\r\n") for line in f if line.strip())
    return docs


# -------------------------------------------------------------------------------------------------- bare

_DOCS: list[str] = []
_TOKENIZER = None


def _bare_worker(index: int, workers: int) -> int:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    tokens = 0
    batches = range(0, len(_DOCS), BATCH_DOCUMENTS)
    for start in batches[index::workers]:
        ids = _TOKENIZER(
            _DOCS[start : start + BATCH_DOCUMENTS],
            add_special_tokens=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )["input_ids"]
        tokens += sum(len(x) for x in ids)
    return tokens


def bare_tokenize(docs: list[str], tokenizer, workers: int) -> dict:
    """Seconds for `workers` forked processes to batch-encode `docs`; the documents are already in memory."""
    global _DOCS, _TOKENIZER
    _DOCS, _TOKENIZER = docs, tokenizer
    try:
        if workers <= 1:
            t0 = time.perf_counter()
            tokens = _bare_worker(0, 1)
            return {"seconds": time.perf_counter() - t0, "tokens": tokens}
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers) as pool:
            pool.map(int, range(workers))  # the workers exist before the clock starts, as prepare's pool does
            t0 = time.perf_counter()
            tokens = sum(pool.starmap(_bare_worker, [(i, workers) for i in range(workers)]))
            seconds = time.perf_counter() - t0
        return {"seconds": seconds, "tokens": tokens}
    finally:
        _DOCS, _TOKENIZER = [], None


# ----------------------------------------------------------------------------------- mlminilm's commands


def run_cli(cmd: list[str], what: str) -> tuple[subprocess.CompletedProcess, float]:
    """Run a command of mlminilm's from the repository, offline and without progress bars: the finished process
    and its wall-clock seconds. Raises with the end of its stderr when `what` fails."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLMINILM_NO_PROGRESS": "1", "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc, wall


# ----------------------------------------------------------------------------------------------- prepare


def run_prepare(tokenizer_dir: Path, corpus: Path, out: Path, workers: int, seq_len: int) -> dict:
    cmd = [
        sys.executable,
        "-c",
        MEASURED_CLI,
        "prepare",
        "--teacher",
        str(tokenizer_dir),
        "--input",
        str(corpus),
        "--out",
        str(out),
        "--workers",
        str(workers),
        "--seq-len",
        str(seq_len),
        "--json",
        "--quiet",
    ]
    proc, wall = run_cli(cmd, "prepare")
    result = json.loads(proc.stdout)
    memory = {}
    for line in proc.stderr.splitlines():
        if line.startswith("MLMINILM_MEMORY "):
            memory = json.loads(line.split(" ", 1)[1])
    return {
        "seconds": result["elapsed_s"],
        "wall_s": wall,
        "tokens": result["tokens"],
        "documents": result["documents"],
        "sequences": result["sequences"],
        "memory": memory,
    }


def prepare_section(args, tmp: Path) -> dict:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(args.tokenizer))
    rows = []
    for size in args.sizes:
        corpus = tmp / f"corpus-x{size}"
        info = build_corpus(args.corpus, corpus, size)
        docs = read_documents(corpus)
        print(
            f"[prepare x{size}] {info['bytes'] / 1e6:.0f} MB, {len(docs):,} documents, {args.workers} workers",
            file=sys.stderr,
            flush=True,
        )
        bare, prep = [], []
        for rep in range(args.repeats):
            # Alternate which goes first, so neither always meets the page cache the other warmed.
            order = ("bare", "prepare") if rep % 2 == 0 else ("prepare", "bare")
            for what in order:
                if what == "bare":
                    bare.append(bare_tokenize(docs, tokenizer, args.workers))
                else:
                    out = tmp / f"prepared-x{size}-{rep}"
                    prep.append(run_prepare(args.tokenizer, corpus, out, args.workers, args.seq_len))
                    # Keep the disk small: the shards are not needed after the run.
                    subprocess.run(["rm", "-rf", str(out)], check=False)
        del docs
        bare_s = statistics.median(r["seconds"] for r in bare)
        prep_s = statistics.median(r["seconds"] for r in prep)
        tokens = prep[0]["tokens"]
        row = {
            "size": size,
            "corpus_bytes": info["bytes"],
            "documents": prep[0]["documents"],
            "tokens": tokens,
            "bare_tokenize_s": bare_s,
            "bare_tokens_per_s": bare[0]["tokens"] / bare_s,
            "prepare_s": prep_s,
            "prepare_tokens_per_s": tokens / prep_s,
            "prepare_wall_s": statistics.median(r["wall_s"] for r in prep),
            "ratio": prep_s / bare_s,
            "main_peak_rss_bytes": max(r["memory"].get("main_vmhwm", 0) for r in prep),
            "worker_peak_rss_bytes": max(r["memory"].get("workers_maxrss", 0) for r in prep),
            "runs": {"bare": bare, "prepare": prep},
        }
        # prepare counts document separators as tokens; bare counts only the documents' tokens.
        row["bare_tokens"] = bare[0]["tokens"]
        rows.append(row)
        print(
            f"[prepare x{size}] bare {bare_s:.2f} s, prepare {prep_s:.2f} s (wall {row['prepare_wall_s']:.2f} s): "
            f"{row['ratio']:.2f}x",
            file=sys.stderr,
            flush=True,
        )
        subprocess.run(["rm", "-rf", str(corpus)], check=False)
    return {
        "workers": args.workers,
        "seq_len": args.seq_len,
        "tokenizer": str(args.tokenizer),
        "corpus": str(args.corpus),
        "rows": rows,
    }


# ----------------------------------------------------------------------------------------------- eval


def make_classifier(tokenizer_dir: Path, out: Path, layers: int, hidden: int, heads: int) -> Path:
    import torch
    from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaForSequenceClassification

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = XLMRobertaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=514,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        num_labels=3,
        id2label={0: "entailment", 1: "neutral", 2: "contradiction"},
        label2id={"entailment": 0, "neutral": 1, "contradiction": 2},
    )
    torch.manual_seed(0)
    XLMRobertaForSequenceClassification(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def eval_section(args, tmp: Path) -> dict:
    model = make_classifier(args.tokenizer, tmp / "xnli-model", *args.eval_shape)
    cmd = [
        sys.executable,
        "-m",
        "mlminilm",
        "eval-xnli",
        "--model",
        str(model),
        "--data",
        str(args.xnli),
        "--split",
        "test",
        "--batch-size",
        str(args.eval_batch),
        "--json",
        "--quiet",
    ]
    print(f"[eval-xnli] {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    proc, wall = run_cli(cmd, "eval-xnli")
    doc = json.loads(proc.stdout)
    tp = doc.get("throughput", {})
    return {
        "model_shape": dict(zip(("layers", "hidden", "heads"), args.eval_shape)),
        "languages": len(doc.get("languages", {})),
        "examples": doc.get("average", {}).get("examples"),
        "examples_per_s": tp.get("examples_per_s"),
        "elapsed_s": tp.get("elapsed_s"),
        "wall_s": wall,
        "batch_size": args.eval_batch,
        "device": tp.get("device"),
        "precision": tp.get("precision"),
        "per_language_examples_per_s": {k: v.get("examples_per_s") for k, v in doc.get("languages", {}).items()},
    }


# ------------------------------------------------------------------------------------------------ main


def fmt_mib(n) -> str:
    return f"{n / 2**20:,.0f} MiB" if n else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="1,10", help="corpus sizes as multiples of the UD corpus (default 1,10)")
    ap.add_argument(
        "--workers", type=int, default=len(os.sched_getaffinity(0)), help="tokenizer processes (default: all cores)"
    )
    ap.add_argument("--repeats", type=int, default=1, help="runs of each (bare, prepare) per size; medians reported")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    ap.add_argument("--xnli", type=Path, default=DEFAULT_XNLI)
    ap.add_argument("--skip-prepare", action="store_true")
    ap.add_argument("--skip-eval", action="store_true")
    ap.add_argument("--eval-shape", default="6,384,12", help="layers,hidden,heads of the random classifier")
    ap.add_argument("--eval-batch", type=int, default=128)
    ap.add_argument("--tmp", type=Path, help="scratch directory (default: a temporary one)")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args(argv)
    args.sizes = [int(x) for x in args.sizes.split(",")]
    args.eval_shape = tuple(int(x) for x in args.eval_shape.split(","))

    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    env = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cores": os.cpu_count(),
    }
    try:
        import tokenizers

        env["tokenizers"] = tokenizers.__version__
        env["load_average"] = os.getloadavg()
    except Exception:
        pass
    results: dict = {"environment": env}
    with tempfile.TemporaryDirectory(prefix="mlminilm-eval-bench-", dir=args.tmp) as tmp:
        tmp = Path(tmp)
        if not args.skip_prepare:
            results["prepare"] = prepare_section(args, tmp)
            if args.out:
                args.out.write_text(json.dumps(results, indent=2) + "\n")
        if not args.skip_eval:
            results["eval_xnli"] = eval_section(args, tmp)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")

    if "prepare" in results:
        p = results["prepare"]
        print(f"prepare vs bare tokenizer ({p['workers']} workers, seq {p['seq_len']}):")
        print(
            f"{'size':>5} {'MB':>6} {'tokens':>12} {'bare s':>8} {'prepare s':>10} {'ratio':>6} "
            f"{'bare tok/s':>11} {'prep tok/s':>11} {'main peak':>10} {'worker peak':>12}"
        )
        for r in p["rows"]:
            print(
                f"{r['size']:>4}x {r['corpus_bytes'] / 1e6:>6.0f} {r['tokens']:>12,} {r['bare_tokenize_s']:>8.2f} "
                f"{r['prepare_s']:>10.2f} {r['ratio']:>5.2f}x {r['bare_tokens_per_s']:>11,.0f} "
                f"{r['prepare_tokens_per_s']:>11,.0f} {fmt_mib(r['main_peak_rss_bytes']):>10} "
                f"{fmt_mib(r['worker_peak_rss_bytes']):>12}"
            )
    if "eval_xnli" in results:
        e = results["eval_xnli"]
        print(
            f"eval-xnli: {e['examples']:,} test pairs in {e['languages']} languages, "
            f"{e['examples_per_s']:,.0f} examples/s ({e['device']}, {e['precision']}, batch {e['batch_size']}, "
            f"model {e['model_shape']['layers']}x{e['model_shape']['hidden']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
