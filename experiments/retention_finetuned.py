#!/usr/bin/env python
"""docs/benchmarks/RETENTION_FINETUNED.md, RETENTION_FINETUNED_QA3.md and retrieval.md 18b-18g's fine-tuned rows.

`mlminilm retention --tasks xnli,mlqa` is the product path; this experiment keeps the protocol those rows were
measured under (every 5th premise group of XNLI dev, MLQA's EM beside its F1, `--qa-lr`).

The fine-tuned half of the retention benchmark on models you name: English fine-tuning, zero-shot XNLI and MLQA
per language (experiments/finetuned.py has the protocols), with the first model as the teacher.

    python experiments/retention_finetuned.py --model teacher=multilingual-e5-small \\
        --model "first-6 untrained=CUT_DIR" --model "recipe=STUDENT_DIR" --work W --out REPORT.md

`experiments/retention.py` runs the same stages on the rows it makes; this runs them on students made elsewhere
(e.g. a recipe run of another length). A rerun with the same --work skips finished stages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the experiments beside it

from finetuned import finetuned_mlqa, finetuned_xnli, qa_data  # noqa: E402
from retention import CPU, SMOKE, STAGE_SECONDS, TEACHER, log, stage, stage_path  # noqa: E402
from retention_measures import xnli_data  # noqa: E402


def run(models: dict[str, str], work: Path, smoke: bool, tasks: tuple[str, ...], qa: dict | None = None) -> dict:
    """Measure the rows; `qa`: QaProtocol fields that replace the budget's (a longer QA protocol)."""
    from retention_report import git_revision

    from mlminilm.models.loading import resolve_model

    b = SMOKE if smoke else CPU
    xnli_ft, qa_ft = b.xnli_ft, replace(b.qa_ft, **(qa or {}))
    work.mkdir(parents=True, exist_ok=True)
    settings = {"xnli_ft": xnli_ft.__dict__, "qa_ft": qa_ft.__dict__, "xnli_every": b.xnli_every}
    recorded = work / "settings.json"
    if recorded.exists() and json.loads(recorded.read_text(encoding="utf-8")) != settings:
        raise SystemExit(f"Error: {work} holds stages of other settings ({recorded}); use a new --work")
    recorded.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    remember_models(work, models)
    xdata = xnli_data(work, b.xnli_every, b.train_every)
    counts = qa_data(work, qa_ft)
    results: dict[str, dict] = {name: {"model": resolve_model(source)} for name, source in models.items()}
    # MLQA first: it is the costlier half, and the one no earlier report has
    # A task not asked for is not run, but a row's stage of it that an earlier run finished is read back.
    for task in ("mlqa", "xnli"):
        for name, row in results.items():
            model_dir, stage_name = row["model"], f"{task} finetuned {name}"
            if task not in tasks and not stage_path(work, stage_name).exists():
                continue
            if task == "xnli":
                row["finetuned"] = stage(
                    work, stage_name, lambda: finetuned_xnli(work, name, model_dir, xdata, xnli_ft)
                )
            else:
                row["mlqa"] = stage(work, stage_name, lambda: finetuned_mlqa(work, name, model_dir, qa_ft))
    return {
        "results": results,
        "budget": {"name": b.name, "xnli_ft": xnli_ft.__dict__, "qa_ft": qa_ft.__dict__, "students": []},
        "dev_groups": xdata.dev_groups.tolist(),
        "dev_pairs": len(next(iter(xdata.dev.values()))),
        "train_pairs": len(xdata.train),
        "selection_pairs": len(xdata.selection),
        "qa_questions": counts,
        "git": git_revision(),
        "stage_seconds": dict(STAGE_SECONDS),
    }


def named_models(args: argparse.Namespace) -> dict[str, str] | None:
    """The rows of `--model NAME=DIR ...` in order; None, after the one error line that says what is wrong with
    them (or that --work is missing), printed to stderr."""
    given, models, error = args.model, {}, None
    if not given:
        error = "give --model NAME=DIR (teacher first) and --work, or --render JSON"
    elif args.work is None:
        error = "give --work (stage outputs), or --render JSON"
    elif bad := [m for m in given if "=" not in m or not all(m.split("=", 1))]:
        error = f"--model {bad[0]!r}: give NAME=DIR (or NAME=HUB_ID)"
    else:
        models = dict(m.split("=", 1) for m in given)
        if next(iter(models)) != TEACHER:
            error = f"the first --model must be named {TEACHER!r}"
        # a path that is not there would be taken for a hub id, and found missing only when its row's turn came
        elif missing := [(n, m) for n, m in models.items() if m.startswith(("/", ".", "~")) and not Path(m).exists()]:
            error = f"--model {missing[0][0]}={missing[0][1]}: no such directory"
    if error:
        print(f"Error: {error}", file=sys.stderr)
        return None
    return models


def remember_models(work: Path, models: dict[str, str]) -> None:
    """Rows may be added to a --work later (their stages run, the others are read back), but a name keeps its
    model: a name measured before as another model stops the run."""
    work.mkdir(parents=True, exist_ok=True)
    known_path = work / "models.json"
    known = json.loads(known_path.read_text(encoding="utf-8")) if known_path.exists() else {}
    changed = [n for n in models if n in known and known[n] != models[n]]
    if changed:
        raise SystemExit(f"Error: {work} measured {changed[0]!r} as {known[changed[0]]}; name the new model otherwise")
    known_path.write_text(json.dumps({**known, **models}, indent=2) + "\n", encoding="utf-8")


def shown(source: str) -> str:
    """A model as the report names it: a hub id or relative path as given; a local absolute directory by its last
    two parts (a committed report names no path of one machine)."""
    path = Path(source)
    return f"{path.parent.name}/{path.name}" if path.is_absolute() else source


def write(doc: dict, path: Path, command: str) -> None:
    from retention_report import machine, mlqa_section, xnli_section
    from retention_tables import markdown_table

    x = doc["budget"]["xnli_ft"]
    lines = [
        "# Retention after English fine-tuning: XNLI and MLQA, zero-shot per language",
        "",
        f"- command: `{command}`; every figure below was measured by this run",
        f"- machine: {machine()}; date {time.strftime('%Y-%m-%d')}; measured at git {doc['git']}",
        f"- models: {', '.join(f'{n} ({shown(m)})' for n, m in doc['models'].items())}; the first is the teacher",
        *([f"- note: {doc['note']}"] if doc.get("note") else []),
    ]
    if any("finetuned" in row for row in doc["results"].values()):  # an MLQA-only run has no XNLI protocol to name
        embeddings = "frozen" if x["freeze_embeddings"] else "trained"
        lines.append(
            f"- XNLI: `finetune --task xnli` on XNLI test-en's {doc['train_pairs']:,} training pairs (split by premise "
            f"groups; {doc['selection_pairs']} selection pairs choose the checkpoint), {x['epochs']:g} epoch(s), batch "
            f"{x['batch']}, lr {x['lr']}, warmup 10 %, word embeddings {embeddings}"
            f", precision {x['precision']}; zero-shot on XNLI dev ({doc['dev_pairs']} pairs per language, 15 "
            "languages); 95 % cluster-bootstrap intervals over premise groups; retention as the accuracy ratio and "
            "chance-corrected, (s - 33.3) / (t - 33.3)"
        )
    lines += xnli_section(doc, "finetuned", "XNLI zero-shot, fine-tuned on English")
    lines += mlqa_section(doc)
    lines += ["", "## Time per stage", ""]
    lines += markdown_table(["stage", "seconds"], [[k, f"{v:.0f}"] for k, v in doc["stage_seconds"].items() if v >= 1])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of both reports on models made elsewhere (this one and experiments/retention_retrieval.py)."""
    parser.add_argument("--model", action="append", default=[], metavar="NAME=DIR", help="a row (teacher first)")
    parser.add_argument("--work", type=Path, default=None, help="stage outputs (a rerun skips finished stages)")
    parser.add_argument("--out", type=Path, required=True, help="the Markdown report to write")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure as JSON here")
    parser.add_argument("--note", default=None, help="a line the report shows (e.g. how each model was made)")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON", help="only write the report of a --json")


def render_only(args: argparse.Namespace, write_report) -> int | None:
    """With --render, `write_report(doc, out)` of an earlier run's --json (its note replaced by --note when given)
    and the exit status; None without --render."""
    if not args.render:
        return None
    if not args.render.is_file():
        print(f"Error: --render {args.render}: no such file (a --json of an earlier run)", file=sys.stderr)
        return 1
    try:
        doc = json.loads(args.render.read_text(encoding="utf-8"))
    except ValueError as exc:  # not JSON, or not UTF-8
        print(f"Error: --render {args.render}: not a --json of an earlier run ({exc})", file=sys.stderr)
        return 1
    doc["note"] = args.note if args.note is not None else doc.get("note")
    write_report(doc, args.out)
    return 0


def measure_and_publish(args: argparse.Namespace, models: dict[str, str], measure, command: str, write_report) -> int:
    """Quiet logs, offline Hub, `measure()` the rows, then `publish` what it measured; the exit status."""
    from mlminilm import logging as mlog

    mlog.setup(quiet=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mlminilm.errors import MlminilmError

    try:
        doc = measure()
    except MlminilmError as exc:  # a model or data problem found when its stage came: one line, as the CLI gives
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    publish(doc, args, models, command, write_report)
    return 0


def publish(doc: dict, args: argparse.Namespace, models: dict[str, str], command: str, write_report) -> None:
    """Record the rows, the note and the command that reruns the run (`command`: the script, with {rows} where
    the --model options go) in `doc`, write the report and, with --json, every figure."""
    doc["models"] = models
    doc["note"] = args.note
    rows = " ".join(f'--model "{n}={shown(m)}"' for n, m in models.items())
    doc["command"] = command.format(rows=rows)
    write_report(doc, args.out)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    log(f"wrote {args.out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_report_arguments(parser)
    parser.add_argument("--tasks", default="xnli,mlqa", help="xnli, mlqa or both (comma-separated)")
    parser.add_argument("--smoke", action="store_true", help="a sliver of everything: checks the pipeline only")
    parser.add_argument("--qa-epochs", type=float, default=None, help="MLQA protocol: epochs of English QA (1)")
    parser.add_argument("--qa-lr", type=float, default=None, help="MLQA protocol: its learning rate (1e-4)")
    args = parser.parse_args(argv)
    rendered = render_only(args, lambda doc, out: write(doc, out, doc["command"]))
    if rendered is not None:
        return rendered
    models = named_models(args)
    if models is None:
        return 2
    tasks = tuple(t.strip() for t in args.tasks.split(","))
    qa = {k: v for k, v in (("epochs", args.qa_epochs), ("lr", args.qa_lr)) if v is not None}
    if bad := [f"--qa-{k}" for k, v in qa.items() if not v > 0]:
        print(f"Error: {bad[0]} must be above 0", file=sys.stderr)
        return 2
    flags = "".join(f" --qa-{k} {v:g}" for k, v in qa.items())
    command = "python experiments/retention_finetuned.py {rows}" + flags + (" --smoke" if args.smoke else "")
    return measure_and_publish(
        args,
        models,
        lambda: run(models, args.work, args.smoke, tasks, qa),
        command,
        lambda d, out: write(d, out, d["command"]),
    )


if __name__ == "__main__":
    sys.exit(main())
