"""What each retention task reads from --data (a folder laid out like ../shared/data), and one line per task that
misses something."""

from __future__ import annotations

from pathlib import Path

from mlminilm.errors import DataError

# task -> [(folder under --data, what it is, required)]; tatoeba-more is read when present
NEEDS: dict[str, list[tuple[str, str, bool]]] = {
    "tatoeba": [("tatoeba", "Tatoeba files tatoeba.XXX-eng.XXX / .eng", True), ("tatoeba-more", "", False)],
    "retrieval": [("mlqa/dev", "MLQA dev files dev-context-C-question-Q.json", True)],
    "probe": [("xnli", "XNLI files test-en.tsv and dev-LANG.tsv", True)],
    "xnli": [("xnli", "XNLI files test-en.tsv and dev-LANG.tsv", True)],
    "mlqa": [
        ("tydiqa", "TyDiQA-GoldP's English train, tydiqa.goldp.en.train.json", True),
        ("mlqa/dev", "MLQA dev files dev-context-C-question-Q.json", True),
    ],
}


def _present(folder: Path, task: str) -> bool:
    if not folder.is_dir():
        return False
    if task == "tatoeba":
        return any(folder.glob("tatoeba.*-eng.eng"))
    if folder.name == "tydiqa":
        return (folder / "tydiqa.goldp.en.train.json").is_file()
    if task in ("retrieval", "mlqa"):
        return any(folder.glob("dev-context-*-question-*.json"))
    if task in ("probe", "xnli"):
        return (folder / "test-en.tsv").is_file() and any(folder.glob("dev-*.tsv"))
    return True


def task_folders(data: str | Path, tasks: tuple[str, ...], langs: tuple[str, ...] = ()) -> dict[str, dict[str, Path]]:
    """{task: {part: folder}} of every task, or one DataError with one line per task that misses its data (or a
    language of `langs`)."""
    root = Path(data)
    if not root.is_dir():
        raise DataError(
            f"--data {root} is not a folder (give one laid out like ../shared/data: tatoeba/, mlqa/dev/ ...)"
        )
    found: dict[str, dict[str, Path]] = {}
    missing: list[str] = []
    for task in tasks:
        parts: dict[str, Path] = {}
        for sub, what, required in NEEDS[task]:
            folder = root / sub
            if _present(folder, task):
                parts[sub] = folder
            elif required:
                missing.append(f"--tasks {task} needs {folder}/ ({what}): not found")
        if langs and all(sub in parts for sub, _, required in NEEDS[task] if required):
            missing += _lang_problems(task, parts, langs)
        found[task] = parts
    if missing:
        raise DataError("; ".join(missing))
    return found


def _lang_problems(task: str, parts: dict[str, Path], langs: tuple[str, ...]) -> list[str]:
    """--langs that the task's data lacks (read as its evaluation command reads it), one line."""
    from mlminilm.errors import MlminilmError

    try:
        if task == "tatoeba":
            from mlminilm.tasks.tatoeba import find_tatoeba_files

            find_tatoeba_files(parts["tatoeba"], list(langs))
        elif task == "retrieval":
            from mlminilm.evaluation.retrieval_files import find_retrieval_sets

            find_retrieval_sets(parts["mlqa/dev"], "dev", list(langs), None, True)
    except MlminilmError as exc:
        return [f"--tasks {task} --langs {','.join(langs)}: {exc}"]
    return []
