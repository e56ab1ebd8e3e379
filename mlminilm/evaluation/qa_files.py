"""eval-mlqa's files: which benchmark a --data path holds and its files (`find_qa_files`), and the official-format
prediction file answering each data file (`prediction_name`, `read_predictions`, `read_prediction_files`)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mlminilm.errors import ConfigError, DataError, MlminilmError
from mlminilm.io import user_json
from mlminilm.tasks.squad import QAFile, find_mlqa_files, find_tydiqa_files, find_xquad_files, qa_file_info


def find_qa_files(
    data: str | Path, split: str, gxlt: bool = False, langs: Sequence[str] | None = None, lang: str | None = None
) -> tuple[str, dict[str, QAFile]]:
    """(benchmark, {key: QAFile}) for --data: one SQuAD-format file, an MLQA directory (monolingual pairs keyed by
    language, or with `gxlt` every pair keyed "C-Q"), or a directory of XQuAD / TyDiQA-GoldP files."""
    path = Path(data)
    if path.is_file():
        info = qa_file_info(path, lang)
        benchmark = _benchmark_of(path.name)
        if gxlt and benchmark != "mlqa":
            raise ConfigError(f"--gxlt needs MLQA files (named like dev-context-de-question-en.json); not {path}")
        # G-XLT keys every file "C-Q", "en-en" too, as its matrix reads them: one file is a matrix of one pair.
        pair = gxlt or info.context_lang != info.question_lang
        key = f"{info.context_lang}-{info.question_lang}" if pair else info.context_lang
        return benchmark, {key: info}
    if lang is not None:
        raise ConfigError("--lang names the language of a single --data file; for a directory use --langs")
    if not path.is_dir():
        raise DataError(f"--data {path}: no such file or directory")
    mlqa_pattern = f"{split}-context-*-question-*.json*"
    if any(path.glob(mlqa_pattern)) or any((path / split).glob(mlqa_pattern)):
        return "mlqa", find_mlqa_files(path, split, gxlt, langs)
    if gxlt:
        raise ConfigError(f"--gxlt needs the MLQA layout ({split}-context-C-question-Q.json files); none in {path}")
    for benchmark, pattern, finder in (
        ("xquad", "xquad.*.json*", lambda: find_xquad_files(path, langs)),
        ("tydiqa", f"tydiqa.goldp.*.{split}.json*", lambda: find_tydiqa_files(path, split, langs)),
    ):
        present = sorted(path.glob(pattern))
        if not present:
            continue
        if langs:
            return benchmark, finder()
        infos = [qa_file_info(p) for p in present]
        return benchmark, {info.context_lang: info for info in infos}
    raise DataError(
        f"no QA files for split {split!r} in {path}: expected MLQA ({split}-context-C-question-Q.json, also in "
        f"{path / split}), XQuAD (xquad.XX.json) or TyDiQA-GoldP (tydiqa.goldp.XX.{split}.json) files"
    )


def _benchmark_of(name: str) -> str:
    if name.startswith(("dev-context-", "test-context-")):
        return "mlqa"
    if name.startswith("xquad."):
        return "xquad"
    if name.startswith("tydiqa."):
        return "tydiqa"
    return "squad-format"


def prediction_name(path: Path) -> str:
    """The prediction file answering a data file: the same name (without .gz)."""
    return path.name[:-3] if path.name.endswith(".gz") else path.name


def read_predictions(path: Path) -> dict[str, str]:
    """An official-format prediction file: one JSON object {question_id: answer_text}."""
    if not path.is_file():
        raise DataError(f"{path}: no such prediction file")
    obj = user_json.load(path)
    if not isinstance(obj, dict) or not all(isinstance(v, str) for v in obj.values()):
        raise DataError(
            f"{path}: not an official prediction file: expected one JSON object {{question_id: answer_text}}"
        )
    return obj


def read_prediction_files(directory: str | Path, files: dict[str, QAFile], problems: list[str]) -> dict[str, dict]:
    """--predictions DIR: the prediction file of each data file in `files`, by key; each unreadable file, and the
    files missing (all in one problem), added to `problems`."""
    predictions: dict[str, dict[str, str]] = {}
    missing_files = []
    for key, info in files.items():
        path = Path(directory) / prediction_name(info.path)
        if not path.is_file():
            missing_files.append(path.name)
            continue
        try:
            predictions[key] = read_predictions(path)
        except MlminilmError as exc:
            problems.append(str(exc))
    if missing_files:
        shown = ", ".join(missing_files[:5]) + (f" and {len(missing_files) - 5} more" if len(missing_files) > 5 else "")
        problems.append(f"--predictions {directory}: no prediction file {shown} (named like the data files)")
    return predictions
