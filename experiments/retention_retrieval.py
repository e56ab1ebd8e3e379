#!/usr/bin/env python
"""docs/benchmarks/RETENTION_RETRIEVAL.md and the probe rows of docs/benchmarks/retrieval.md 18c-18g.

`mlminilm retention --tasks retrieval,tatoeba,probe` is the product path; this experiment, kept to rerun those
rows, also retrieves across language pairs (MLQA's G-XLT pairs) and reads `mlminilm export` directories by
their own runtime.

The retrieval half of the retention benchmark on models you name: MLQA question -> passage retrieval on every
context x question language pair of MLQA dev, Tatoeba on 14 and 30 languages, and the XNLI frozen-encoder probe
(the sentence vectors kept as they are: does what passages taught still carry a task?), the first model as the
teacher.

    python experiments/retention_retrieval.py --model teacher=multilingual-e5-small \\
        --model "first-6 untrained=CUT_DIR" --model "recipe=STUDENT_DIR" --model "recipe int8=EXPORT_DIR" \\
        --work W --out docs/benchmarks/RETENTION_RETRIEVAL.md

A directory made by `mlminilm export` is evaluated by the runtime its export.json names (onnx or openvino); every
other model by PyTorch in fp32 (the probe, which embeds with PyTorch, skips an export). A rerun with the same --work
skips finished stages; rows may be added later.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the experiments beside it

from retention import CPU, STAGE_SECONDS, TEACHER, stage, stage_path  # noqa: E402
from retention_finetuned import (  # noqa: E402
    add_report_arguments,
    measure_and_publish,
    named_models,
    remember_models,
    render_only,
    shown,
)
from retention_measures import (  # noqa: E402
    MORE,
    SHARED,
    frozen_probe,
    retrieval_report,
    tatoeba_report,
    xnli_data,
)
from retention_tables import (  # noqa: E402, F401
    METRIC,
    figure,
    markdown_table,
    retrieval_scores,
    retrieval_tables,
    share,
)

TASKS = ("retrieval", "tatoeba", "tatoeba-more", "probe")


def backend_of(model: str) -> str:
    """torch, or the runtime of an `mlminilm export` directory (onnx or openvino: where its record is)."""
    from mlminilm.runtimes.onnx_runtime import export_format

    return export_format(model) or "torch"


def run(models: dict[str, str], work: Path, tasks: tuple[str, ...]) -> dict:
    """Each row's stages: those of `tasks` are run (or read back when a run finished them); those of the other
    tasks are read back when an earlier run finished them, and never run (a row may be measured on fewer)."""
    from retention_report import git_revision

    from mlminilm.models.loading import resolve_model

    remember_models(work, models)
    # the XNLI split (the retention benchmark's CPU one: its train / selection pairs, every 5th dev group), made
    # once and only when a probe stage needs it
    xnli = functools.cache(lambda: xnli_data(work, CPU.xnli_every, CPU.train_every))

    results: dict[str, dict] = {}
    for name, source in models.items():
        backend = backend_of(source)
        model = source if backend != "torch" else resolve_model(source)
        row = results[name] = {"model": model, "backend": backend}
        measures = {
            "retrieval": (
                f"retrieval all pairs {name}",
                lambda: retrieval_report(work, name, model, "fp32", monolingual=False, backend=backend),
            ),
            **{
                task: (
                    f"{task} {name}",
                    lambda task=task, folder=folder: tatoeba_report(
                        work, f"{name} {task}", model, "fp32", folder, backend=backend
                    ),
                )
                for task, folder in (("tatoeba", SHARED / "tatoeba"), ("tatoeba-more", SHARED / MORE))
            },
        }
        if backend == "torch":
            measures["probe"] = (f"xnli probe {name}", lambda: frozen_probe(model, xnli(), "fp32"))
        for task, (stage_name, measure) in measures.items():
            if task in tasks or stage_path(work, stage_name).exists():
                row[task] = stage(work, stage_name, measure)
    doc = {"results": results, "git": git_revision(), "stage_seconds": dict(STAGE_SECONDS)}
    if any("probe" in row for row in results.values()):
        doc["dev_groups"] = xnli().dev_groups.tolist()  # the bootstrap's clusters
    return doc


# ----------------------------------------------------------------------------------------------- the report


def other_skills(res: dict, names: list[str]) -> list[str]:
    def avg(n: str, task: str) -> float | None:
        return res[n][task]["average"]["xx_to_en"] if task in res[n] else None

    rows = []
    for n in names:
        size = (res[n].get("retrieval") or res[n].get("tatoeba") or {}).get("size") or {}
        rows.append(
            [n, res[n]["backend"]]
            + [f"{figure(avg(n, t))} ({share(avg(n, t), avg(TEACHER, t))})" for t in ("tatoeba", "tatoeba-more")]
            + [f"{size['parameters']:,}" if size.get("parameters") else "-"]  # an export's graph has no count
            + [f"{size['disk_bytes'] / 2**20:.0f} MiB" if size.get("disk_bytes") else "-"]
        )
    return [
        "",
        "## The other skills, and size",
        "",
        "Tatoeba xx->en accuracy (%) and its share of the teacher's: the 14 XNLI languages (parallel text) and the "
        "30 `tatoeba-more` languages no parallel text had. Parameters and size on disk as `eval-retrieval` reports "
        "them (an int8 export: its graph's files).",
        "",
    ] + markdown_table(["model", "runtime", "Tatoeba 14", "Tatoeba 30", "parameters", "on disk"], rows)


def probe_section(doc: dict) -> list[str]:
    """The XNLI frozen-encoder probe of the rows that have one, as docs/RETENTION.md shows it."""
    from retention_report import PROBE_METHOD, xnli_section

    if not any("probe" in row for row in doc["results"].values()):
        return []
    return xnli_section(doc, "probe", "XNLI zero-shot, frozen-encoder probe") + [
        "",
        f"The probe of experiments/retention.py (docs/RETENTION.md): {PROBE_METHOD}, trained on XNLI test-en's "
        "English pairs, zero-shot on every 5th premise group of XNLI dev in 15 languages; fp32; 95 % "
        "cluster-bootstrap intervals over premise groups; retention chance-corrected, (s - 33.3) / (t - 33.3). "
        "An export row has none (the probe embeds with PyTorch).",
    ]


def write(doc: dict, path: Path) -> None:
    from retention_report import machine

    res, names = doc["results"], list(doc["models"])
    baseline = next((n for n in names if "untrained" in n), None)
    lines = [
        "# Retention of retrieval: what students of multilingual-e5-small keep of passage and translation search",
        "",
        f"- command: `{doc['command']}`; every figure below was measured by this run",
        f"- machine: {machine()}; date {time.strftime('%Y-%m-%d')}; measured at git {doc['git']}",
        f"- models: {', '.join(f'{n} ({shown(m)})' for n, m in doc['models'].items())}; the first is the teacher",
        *([f"- note: {doc['note']}"] if doc.get("note") else []),
        "- precision: fp32 for PyTorch rows; an export runs in its own graph's dtype (int8 weights for a quantised "
        "OpenVINO export)",
    ]
    if any("retrieval" in res[n] for n in names):
        lines += retrieval_tables(res, names, baseline)
    lines += other_skills(res, names)
    lines += probe_section(doc)
    lines += ["", "## Time per stage", ""]
    lines += markdown_table(["stage", "seconds"], [[k, f"{v:.0f}"] for k, v in doc["stage_seconds"].items() if v >= 1])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_report_arguments(parser)
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"any of {', '.join(TASKS)} (comma-separated)")
    args = parser.parse_args(argv)
    rendered = render_only(args, write)
    if rendered is not None:
        return rendered
    tasks = tuple(t.strip() for t in args.tasks.split(","))
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        print(f"Error: --tasks {unknown[0]!r}: choose from {', '.join(TASKS)}", file=sys.stderr)
        return 2
    models = named_models(args)
    if models is None:
        return 2
    command = "python experiments/retention_retrieval.py {rows}"
    return measure_and_publish(args, models, lambda: run(models, args.work, tasks), command, write)


if __name__ == "__main__":
    sys.exit(main())
