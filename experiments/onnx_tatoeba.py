#!/usr/bin/env python
"""docs/benchmarks/int8.md section 13 (int8 that keeps every language): Tatoeba of each export variant, its drops.

    python experiments/onnx_tatoeba.py --student S --int8 dynamic,dynamic:ffn_out,openvino --calibration DATA \
        --teacher-tatoeba onnx-int8-dynamic,openvino-int8 --work runs/q8

An answered experiment, kept to rerun section 13's Tatoeba columns (not installed, not tested): the product
measures what a variant costs with `mlminilm eval-tatoeba --backend onnx|openvino` of its export beside the
PyTorch model and `mlminilm compare`; benchmarks/onnx_speed.py times the same variants (give both the same --work:
the exports are made once).

Per model (teacher, student) and variant (`torch-fp32`, `onnx-fp32`, one per `--int8` entry as onnx_speed.py
names them): `mlminilm eval-tatoeba --backend torch|onnx|openvino --layer -1 --pooling mean --prefix "query: "
--precision fp32` (the Python API) on the `--langs` files of `--data`, accuracy per language and direction; a
variant's report under WORK/reports is reused when present. The goal of section 13: each int8 variant's largest
per-language drop (points, either direction) from its own PyTorch fp32 model at most 1 point.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # onnx_speed.py: the exports

from onnx_speed import DEFAULT_INT8, PREFIX, SHARED, XNLI_LANGS, export_all, int8_keys, log  # noqa: E402

DIRECTIONS = ("xx_to_en", "en_to_xx")


def tatoeba(model_dir: Path, backend: str, data: Path, langs: list[str], batch_size: int, out: Path) -> dict:
    import mlminilm
    from mlminilm.config import EvalTatoebaConfig

    kept = out / "tatoeba.json"
    if kept.is_file():
        log(f"reusing {kept}")
        return json.loads(kept.read_text())
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
        "wall_s": time.perf_counter() - t0,
        "languages": {k: {d: v[d] for d in (*DIRECTIONS, "mean", "examples")} for k, v in doc["languages"].items()},
        "average": {d: doc["average"][d] for d in (*DIRECTIONS, "mean")},
    }
    kept.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="multilingual-e5-small")
    parser.add_argument("--student", required=True)
    parser.add_argument("--data", type=Path, default=SHARED / "tatoeba")
    parser.add_argument("--langs", default=",".join(XNLI_LANGS))
    parser.add_argument("--int8", default=DEFAULT_INT8)
    parser.add_argument("--calibration", default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--teacher-tatoeba", default="all", help="the teacher's variants evaluated (keys, or all)")
    parser.add_argument("--work", type=Path, required=True, help="exports and reports, kept and reused")
    args = parser.parse_args(argv)
    from mlminilm.models.loading import resolve_model

    sources = {"teacher": resolve_model(args.teacher), "student": resolve_model(args.student)}
    dirs, _, _ = export_all(sources, ["onnx-fp32", *int8_keys(args.int8)], args.work, args.calibration)
    langs = [code for code in args.langs.split(",") if code]
    tat: dict = {model: {} for model in sources}
    for model in sources:
        for key, path in dirs[model].items():
            if model == "teacher" and args.teacher_tatoeba != "all" and key != "torch-fp32":
                if key not in args.teacher_tatoeba.split(","):
                    continue
            report = args.work / "reports" / f"{model}-{key}"
            tat[model][key] = tatoeba(path, key.split("-")[0], args.data, langs, args.batch_size, report)
    print("| model variant | average xx->en / en->xx | worst drop (points) | average drop (points) |")
    print("|---|---:|---:|---:|")
    for model, variants in tat.items():
        for key, got in variants.items():
            drop = worst_drop(variants["torch-fp32"], got)
            average = f"{got['average']['xx_to_en']:.1f} / {got['average']['en_to_xx']:.1f}"
            worst = f"{drop['points']:+.1f} ({drop['language']} {drop['direction']})"
            print(f"| {model} {key} | {average} | {worst} | {drop['average_points']:+.2f} |")
    (args.work / "onnx_tatoeba.json").write_text(json.dumps(tat, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
