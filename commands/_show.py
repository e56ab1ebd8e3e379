"""How a command shows its result: the training commands' `emit` (a summary, or the result as JSON) and the
evaluations' `render` (a table, or the metrics document as JSON)."""

from __future__ import annotations


def emit(result, as_json: bool, summary) -> None:
    """The result of a run: `result.to_dict()` as one JSON document on stdout with --json, else `summary(result)`, a
    few lines, on stdout. Only the main process prints: under torchrun every rank returns a result."""
    import json

    from mlminilm import logging as mlog

    if not mlog.is_main_process():
        return
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        print(summary(result))


def loss_summary(result) -> str:
    """ "first -> last" loss of a run, or what happened when this call trained no step (a finished run resumed)."""
    if result.steps == 0:
        return "none (--max-steps 0: the initialised student, exported untrained)"
    if result.first_loss is None or result.last_loss is None:
        return "no step trained (the run had already finished)"
    return f"{result.first_loss:.4f} -> {result.last_loss:.4f}"


def render(doc: dict, as_json: bool) -> None:
    """The metrics document: as JSON alone on stdout, or as a table on stdout (and where the files went on stderr)."""
    import json

    if as_json:
        print(json.dumps(doc, indent=2, ensure_ascii=False, default=str))
        return
    from rich.console import Console

    from mlminilm import logging as mlog
    from mlminilm.report import notes, rich_table

    console = Console()
    console.print(rich_table(doc))
    console.print(notes(doc), highlight=False, markup=False)
    if doc.get("report_dir"):
        mlog.get("report").info("report written to %s", doc["report_dir"])
