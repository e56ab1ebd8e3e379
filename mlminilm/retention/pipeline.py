"""`retention`: the checks (options, models, data: all before any work), the stages (the cut teacher, then every
row on every task, each by its evaluation command), the tables and the report swapped into --out."""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import shutil
import tempfile
import time
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.config.retention import RetentionConfig
from mlminilm.io import outputs
from mlminilm.retention import finetuned, measures, probe
from mlminilm.retention.datasets import task_folders
from mlminilm.retention.measures import TASKS
from mlminilm.retention.rows import Row, build_cut_teacher, cut_row, parse_students, plan_rows
from mlminilm.retention.stages import Stages, data_fingerprint, file_hash, model_fingerprint
from mlminilm.retention.table import task_table
from mlminilm.version import __version__

log = mlog.get(__name__)
PROBE_KEYS = ("l2", "selection_accuracy", "train_pairs", "selection_pairs")
FILES = ("retention.md", "retention.json", "retention.html", "chart.png")


@outputs.claims_report("retention", "a retention report", None)
def run(cfg: RetentionConfig) -> dict:
    """Measure the teacher, the cut teacher and each student on every task of `cfg.tasks`; returns the report's
    document (and writes retention.md, .json, .html and chart.png into `cfg.out` when given)."""
    from mlminilm.evaluation.common import ReportDir

    inputs = [("--teacher", cfg.teacher), ("--data", cfg.data)]
    inputs += [(f"--student {name}", path) for name, path in parse_students(cfg.students)]
    report_dir = ReportDir.open(cfg.out, cfg.overwrite, protect=[*inputs, ("--work", cfg.work)])
    if cfg.work is not None:
        _refuse_work_overlap(cfg.work, inputs)
    folders = task_folders(cfg.data, cfg.tasks, cfg.langs)
    xnli_folder = next((folders[t]["xnli"] for t in ("probe", "xnli") if t in folders), None)
    xnli = probe.xnli_data(xnli_folder, cfg.langs) if xnli_folder is not None else None
    rows, depth = plan_rows(cfg)
    t0 = time.perf_counter()
    with _work_folder(cfg.work) as work:
        stages = Stages(work)
        english = _english_files(cfg, folders, work, xnli)
        if depth is not None:
            rows.insert(1, _cut_teacher(stages, cfg.teacher, depth))
        tables = {}
        for part, folder in _parts(cfg, folders):
            results = {row.name: _measure(stages, cfg, part, row, folder, xnli, english) for row in rows}
            tables[part] = task_table(TASKS[part], rows, results, cfg.resamples, cfg.seed)
            tables[part]["summary"] = results[rows[0].name]["summary"]
            tables[part]["reports"] = {name: r["report"] for name, r in results.items() if r.get("report")}
            if part == "probe":
                tables[part]["probe"] = {n: {k: r[k] for k in PROBE_KEYS} for n, r in results.items()}
            if part in ("xnli", "mlqa"):
                tables[part]["finetune"] = {n: r["finetune"] for n, r in results.items()}
        doc = _document(cfg, rows, tables, stages, time.perf_counter() - t0)

    def fill(tmp: Path) -> None:
        from mlminilm.retention.report import write_text_reports

        write_text_reports(doc, tmp)

    if report_dir.write(fill) is not None:
        doc["report_dir"] = str(report_dir.final)
    return doc


def _refuse_work_overlap(work: Path, inputs: list[tuple[str, object]]) -> None:
    """--work is written into: it may not be, hold or lie inside an input (the rule --out follows)."""
    from mlminilm.errors import ConfigError
    from mlminilm.io.outputs import refuse_overlap

    try:
        refuse_overlap(work, inputs)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace(f"--out {work}", f"--work {work}").replace("the output", "the stages"))


@contextlib.contextmanager
def _work_folder(work: Path | None):
    """--work as given (kept), or a temporary folder removed at the end."""
    if work is not None:
        if Path(work).exists() and not Path(work).is_dir():
            from mlminilm.errors import ConfigError

            raise ConfigError(f"--work {work} exists and is not a folder; give a folder for the stages")
        Path(work).mkdir(parents=True, exist_ok=True)
        yield Path(work)
        return
    tmp = Path(tempfile.mkdtemp(prefix="mlminilm-retention-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cut_teacher(stages: Stages, teacher: str, depth: int) -> Row:
    name = f"cut teacher {depth} layers"
    folder = stages.folder(name)

    def make() -> dict:
        shutil.rmtree(folder, ignore_errors=True)  # an unfinished build of an earlier run
        return build_cut_teacher(teacher, depth, folder)

    built = stages.run(name, {"teacher": model_fingerprint(teacher), "layers": depth}, make)
    return cut_row(built["model"], depth)


def _parts(cfg: RetentionConfig, folders: dict[str, dict[str, Path]]) -> list[tuple[str, Path]]:
    """(table, data folder) of each task, in --tasks order; tatoeba-more beside tatoeba when present (not with
    --langs, which names the languages of one folder)."""
    parts = []
    for task in cfg.tasks:
        found = folders[task]
        if task == "tatoeba":
            parts.append(("tatoeba", found["tatoeba"]))
            if "tatoeba-more" in found and not cfg.langs:
                parts.append(("tatoeba-more", found["tatoeba-more"]))
        elif task == "retrieval":
            parts.append(("retrieval", found["mlqa/dev"]))
        elif task in ("probe", "xnli"):
            parts.append((task, found["xnli"]))
        elif task == "mlqa":
            parts.append(("mlqa", found["mlqa/dev"]))
    return parts


def _english_files(cfg: RetentionConfig, folders: dict, work: Path, xnli) -> dict:
    """The English training and selection files of the fine-tuned tasks, written into --work."""
    english = {}
    if "xnli" in cfg.tasks:
        english["xnli"] = finetuned.xnli_files(xnli, work)
    if "mlqa" in cfg.tasks:
        english["mlqa"] = finetuned.qa_files(folders["mlqa"]["tydiqa"], work)
    return english


def _protocols(cfg: RetentionConfig) -> dict:
    return {
        "xnli": finetuned.Protocol(epochs=cfg.xnli_epochs),
        "mlqa": finetuned.Protocol(epochs=cfg.qa_epochs, max_seq_len=256),
    }


def _measure(stages: Stages, cfg: RetentionConfig, part: str, row: Row, folder: Path, xnli, english) -> dict:
    name = f"{part} {row.name}"
    inputs = {
        "model": model_fingerprint(row.model),
        "data": data_fingerprint(folder),
        "settings": measures.eval_settings(cfg),
    }
    out = stages.folder(name)
    if part in ("tatoeba", "tatoeba-more"):
        langs = None if part == "tatoeba" else ()
        return stages.run(name, inputs, lambda: measures.tatoeba(row.model, folder, cfg, out, langs))
    if part == "probe":
        return stages.run(name, inputs, lambda: probe.probe(row.model, folder, cfg, xnli))
    if part in ("xnli", "mlqa"):
        protocol = _protocols(cfg)[part]
        inputs["protocol"] = dataclasses.asdict(protocol)
        if part == "mlqa":
            inputs["training data"] = {k: file_hash(english["mlqa"][k]) for k in ("train", "selection")}
            return stages.run(
                name, inputs, lambda: finetuned.mlqa(row.model, folder, cfg, english["mlqa"], protocol, out)
            )
        return stages.run(
            name, inputs, lambda: finetuned.xnli(row.model, folder, cfg, xnli, english["xnli"], protocol, out)
        )
    return stages.run(name, inputs, lambda: measures.retrieval(row.model, folder, cfg, out))


def command_line(cfg: RetentionConfig) -> str:
    """The command that makes this report (paths as given)."""
    words = ["mlminilm", "retention", "--teacher", cfg.teacher]
    for item in cfg.students:
        words += ["--student", item]
    words += ["--tasks", ",".join(cfg.tasks), "--data", str(cfg.data)]
    if not cfg.baseline:
        words.append("--no-baseline")
    if cfg.cut_layers is not None:
        words += ["--cut-layers", str(cfg.cut_layers)]
    if cfg.langs:
        words += ["--langs", ",".join(cfg.langs)]
    if cfg.out is not None:
        words += ["--out", str(cfg.out)]
    return shlex.join(words)


def _document(cfg: RetentionConfig, rows: list[Row], tables: dict, stages: Stages, wall_s: float) -> dict:
    from mlminilm.evaluation.machine import machine
    from mlminilm.training.run_dir import git_revision

    host = machine()
    return {
        "command": command_line(cfg),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "mlminilm": __version__,
        "git": (git_revision() or "unknown")[:12],
        "machine": f"{host['cpu']}, {host['cores']} cores",
        "teacher": cfg.teacher,
        "data": str(cfg.data),
        "work": str(cfg.work) if cfg.work is not None else "a temporary folder, removed",
        "resamples": cfg.resamples,
        "seed": cfg.seed,
        "rows": [r.to_dict() for r in rows],
        "tasks": tables,
        "stage_seconds": dict(stages.seconds),
        "wall_s": round(wall_s, 1),
    }
