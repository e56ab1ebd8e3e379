"""What `export` reads and where it writes (issues 37 and 39): calibration and --check file names checked as
language codes, an --out inside those folders refused, lines of megabytes cut as they are read, an --overwrite of
its own export of a sentence-transformers model with an empty 2_Normalize/, an export record whose graph lacks an
input or names an unknown format, and options without the option they apply with as usage errors (exit 2).
OpenVINO's cases of the same: tests/openvino_cases.py."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from conftest import ST_MODULES, sample_lines
from test_onnx_eval import tatoeba_dir

from helpers import refused, run_main, save_tiny_teacher

pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bert(tiny_wordpiece_dir, tmp_path_factory) -> Path:
    return save_tiny_teacher(
        tiny_wordpiece_dir, tmp_path_factory.mktemp("bertin"), layers=2, hidden=32, heads=4, intermediate=64
    )


@pytest.fixture(scope="module")
def st_normalize(tiny_sentencepiece_dir, tmp_path_factory) -> Path:
    """A sentence-transformers model whose Normalize module is an empty folder, as sentence-transformers saves it."""
    model = save_tiny_teacher(
        tiny_sentencepiece_dir, tmp_path_factory.mktemp("stn"), kind="xlmr", layers=1, hidden=32, heads=4
    )
    (model / "modules.json").write_text(json.dumps(ST_MODULES))
    (model / "1_Pooling").mkdir()
    (model / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, "pooling_mode": "mean"})
    )
    (model / "2_Normalize").mkdir()
    return model


@pytest.fixture(scope="module")
def exported(bert, tmp_path_factory) -> Path:
    from mlminilm.config import ExportConfig
    from mlminilm.export import pipeline

    out = tmp_path_factory.mktemp("exported") / "bert"
    pipeline.run(ExportConfig(model=str(bert), out=out))
    return out


def text_folder(folder: Path, names: dict[str, str]) -> Path:
    """`<file name>` -> language of its sample lines."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, (name, lang) in enumerate(names.items()):
        (folder / name).write_text("\n".join(sample_lines(lang, 12, seed=i)) + "\n", encoding="utf-8")
    return folder


def export(monkeypatch, capsys, model: Path, out: Path, *args: str):
    return run_main(monkeypatch, capsys, "export", "--model", str(model), "--out", str(out), *args)


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ---------------------------------------------------------------------- file names are language codes


def test_check_file_names_are_language_codes(bert, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    int8 = ("--quantize", "int8", "--check-sentences", "4")
    bad = text_folder(tmp_path / "xx", {"de.txt": "de", "xx.txt": "fr"})
    error = refused(export(monkeypatch, capsys, bert, out, *int8, "--check", str(bad)), out, "--check", "'xx'")
    assert "its <lang> file names are language codes" in error and "known: " in error and "de, " in error
    second = text_folder(tmp_path / "deu", {"deu.txt": "de"})
    refused(export(monkeypatch, capsys, bert, out, *int8, "--check", str(second)), out, "'deu'", "use de")
    # A code the registry does not have but that can be one: taken, with one warning, and recorded as itself.
    plausible = text_folder(tmp_path / "qya", {"de.txt": "de", "qya.txt": "fr"})
    code, stdout, stderr = export(monkeypatch, capsys, bert, out, *int8, "--check", str(plausible), "--json")
    assert code == 0, stderr
    assert sum("qya" in line and "not in the language registry" in line for line in stderr.splitlines()) == 1
    assert sorted(json.loads(stdout)["fidelity"]["languages"]) == ["de", "qya"]


def test_calibration_file_names_are_language_codes(bert, tmp_path):
    from transformers import AutoTokenizer

    from mlminilm.errors import DataError
    from mlminilm.export.calibration import read_calibration

    tokenizer = AutoTokenizer.from_pretrained(bert)
    for name, needles in (("xx.txt", ("'xx'", "known: ")), ("deu.txt.gz", ("'deu'", "use de"))):
        folder = text_folder(tmp_path / name, {"de.txt": "de"})
        if name.endswith(".gz"):
            (folder / name).write_bytes(gzip.compress("Ein Satz.\n".encode()))
        else:
            (folder / name).write_text("Une phrase.\n")
        with pytest.raises(DataError) as info:
            read_calibration(folder, tokenizer)
        assert str(info.value).startswith(f"--calibration {folder}: its <lang> file names are language codes")
        assert all(needle in str(info.value) for needle in needles), str(info.value)


# ---------------------------------------------------------------------- --out inside what export reads


def test_out_inside_calibration_or_check_is_refused(bert, tmp_path, monkeypatch, capsys):
    folder = text_folder(tmp_path / "text", {"de.txt": "de", "fr.txt": "fr"})
    before = listing(folder)
    for flags in (
        ("--quantize", "int8", "--check"),
        ("--format", "openvino", "--quantize", "int8", "--calibration"),
    ):
        flag = flags[-1]
        for out, how in ((folder / "export", "lies inside"), (folder, "is")):
            error = refused(export(monkeypatch, capsys, bert, out, *flags, str(folder)), None, how, f"the {flag} input")
            assert error.startswith(f"Error: --out {out} {how} the {flag} input")
            assert listing(folder) == before  # nothing written into the input, not even a lock left behind
        for extra in ("--overwrite",):  # --overwrite can never reach the text either
            refused(export(monkeypatch, capsys, bert, folder, *flags, str(folder), extra), None, f"the {flag} input")
            assert listing(folder) == before


# ---------------------------------------------------------------------- lines of megabytes


def test_calibration_lines_are_cut_as_they_are_read(bert, tmp_path, caplog):
    """A line of 6 MB among short ones: the reader never holds (nor returns) more than MAX_SENTENCE_CHARS of it,
    and one warning says how many lines were cut; a JSON line that long is skipped."""
    import tracemalloc

    from transformers import AutoTokenizer

    from mlminilm.corpus.parallel_files import MAX_SENTENCE_CHARS
    from mlminilm.export.calibration import read_calibration

    tokenizer = AutoTokenizer.from_pretrained(bert)
    folder = text_folder(tmp_path / "cal", {"fr.txt": "fr"})
    huge = "Der Hund läuft. " * 400_000  # 6.4 million characters, no line break
    lines = [*sample_lines("de", 5, seed=1), huge, *sample_lines("de", 5, seed=2)]
    (folder / "de.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "ru.jsonl.gz").write_bytes(
        gzip.compress(
            "\n".join(json.dumps({"text": t}) for t in ["Кошка спит.", "Кошка " * 300_000, "Мы идём."]).encode()
        )
    )
    tracemalloc.start()
    try:
        text = read_calibration(folder, tokenizer, per_language=50)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 40 * MAX_SENTENCE_CHARS, peak  # the 6 MB line (about 13 MB as a str) was never read whole
    assert max(len(s) for lines in text.sentences.values() for s in lines) <= MAX_SENTENCE_CHARS
    assert len(text.sentences["de"]) == 11 and huge[:MAX_SENTENCE_CHARS].strip() in text.sentences["de"]
    assert text.sentences["ru"] == ["Кошка спит.", "Мы идём."]  # the JSON line of 1.8 million characters: skipped
    warnings = [r.getMessage() for r in caplog.records if "cut to that length" in r.getMessage()]
    assert len(warnings) == 1 and "2 line(s) longer than 10000 characters" in warnings[0], warnings


def test_bounded_lines_cut_exactly(tmp_path):
    from mlminilm.io.lines import bounded_lines, open_lines

    path = tmp_path / "t.txt"
    path.write_text("abcd\r\nabcde\nabc\r\nabcdefghij\nab\rcd\nxyz", encoding="utf-8", newline="")
    with open_lines(path) as handle:
        got = list(bounded_lines(handle, 4))
    assert got == [("abcd", False), ("abcd", True), ("abc", False), ("abcd", True), ("ab\rc", True), ("xyz", False)]


def test_check_tatoeba_lines_are_cut_as_they_are_read(bert, tmp_path, monkeypatch, capsys):
    """--check with a Tatoeba folder whose one line is 3 MB: cut (one warning naming the file), and the export
    written; the line never reaches the tokenizer whole."""
    from mlminilm.corpus.parallel_files import MAX_SENTENCE_CHARS
    from mlminilm.export.fidelity import read_check

    folder = tatoeba_dir(tmp_path / "t")
    path = folder / "tatoeba.deu-eng.deu"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[2] = "Das Haus ist groß. " * 160_000
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    check = read_check(folder, None, per_language=100)
    assert max(len(s) for pair in check.pairs.values() for side in pair for s in side) <= MAX_SENTENCE_CHARS
    out = tmp_path / "o"
    code, _, stderr = export(monkeypatch, capsys, bert, out, "--quantize", "int8", "--check", str(folder))
    assert code == 0, stderr
    cut = [line for line in stderr.splitlines() if "cut to that length" in line]
    assert len(cut) == 1 and "tatoeba.deu-eng.deu: 1 line(s) longer than 10000 characters" in cut[0], cut


# ---------------------------------------------------------------------- --overwrite of its own export


def test_overwrite_own_export_with_an_empty_normalize_folder(st_normalize, tmp_path, monkeypatch, capsys):
    out = tmp_path / "st"
    code, _, stderr = export(monkeypatch, capsys, st_normalize, out)
    assert code == 0, stderr
    assert (out / "2_Normalize").is_dir() and not any((out / "2_Normalize").iterdir())
    record = json.loads((out / ".mlminilm-output.json").read_text())
    assert "2_Normalize" in record["dirs"]
    code, _, stderr = export(monkeypatch, capsys, st_normalize, out, "--overwrite")
    assert code == 0, stderr
    assert (out / "2_Normalize").is_dir() and (out / "onnx" / "model.onnx").is_file()
    # Something of the user's inside that folder is still theirs: refused, kept.
    (out / "2_Normalize" / "mine.txt").write_text("mine")
    refused(export(monkeypatch, capsys, st_normalize, out, "--overwrite"), None, "2_Normalize/mine.txt")
    assert (out / "2_Normalize" / "mine.txt").read_text() == "mine"


# ---------------------------------------------------------------------- export records at run time


def test_graph_without_a_recorded_input_is_one_line(exported, tmp_path, monkeypatch, capsys):
    """An ONNX graph whose input_ids was renamed (it loads) while export.json names input_ids."""
    import shutil

    import onnx

    copy = shutil.copytree(exported, tmp_path / "renamed")
    graph = onnx.load(str(copy / "onnx" / "model.onnx"))
    for value in graph.graph.input:
        if value.name == "input_ids":
            value.name = "ids"
    for node in graph.graph.node:
        node.input[:] = ["ids" if name == "input_ids" else name for name in node.input]
    onnx.save(graph, str(copy / "onnx" / "model.onnx"))
    data, out = tatoeba_dir(tmp_path / "t"), tmp_path / "report"
    args = ("--data", str(data), "--out", str(out), "--backend", "onnx", "--layer", "-1")
    result = run_main(monkeypatch, capsys, "eval-tatoeba", "--model", str(copy), *args)
    refused(result, out, "the graph lacks input_ids", "has inputs the record does not name (ids)", "export the model")


def test_unknown_format_names_no_backend(exported, tmp_path, monkeypatch, capsys):
    import shutil

    copy = shutil.copytree(exported, tmp_path / "tflite")
    record = json.loads((copy / "onnx" / "export.json").read_text())
    (copy / "onnx" / "export.json").write_text(json.dumps({**record, "format": "tflite"}))
    data, out = tatoeba_dir(tmp_path / "t"), tmp_path / "report"
    args = ("--data", str(data), "--out", str(out), "--backend", "onnx", "--layer", "-1")
    error = refused(run_main(monkeypatch, capsys, "eval-tatoeba", "--model", str(copy), *args), out)
    assert "format is 'tflite', not onnx or openvino" in error and "--backend tflite" not in error, error


# ---------------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    "args, needles",
    [
        (("--calibration", "{text}"), ("--calibration", "only applies with --quantize int8")),
        (("--check", "{text}"), ("--check", "only applies with --quantize int8")),
        (("--quantize", "int8", "--strict"), ("--strict needs --check",)),
        (("--strict",), ("--strict", "only applies with --quantize int8")),
        (("--quantize", "int8", "--calibration", "{text}"), ("--calibration is for --format openvino",)),
        (("--format", "openvino", "--quantize", "int8", "--int8-keep", "qkv"), ("--int8-keep", "NNCF")),
    ],
)
def test_options_without_theirs_are_usage_errors(bert, args, needles, tmp_path, monkeypatch, capsys):
    text = text_folder(tmp_path / "text", {"de.txt": "de"})
    out = tmp_path / "o"
    given = [a.format(text=text) for a in args]
    code, stdout, stderr = export(monkeypatch, capsys, bert, out, *given)
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert code == 2 and len(errors) == 1 and not stdout and "Traceback" not in stderr, (code, stderr)
    assert "Usage: mlminilm export" in stderr and all(n in errors[0] for n in needles), errors
    assert not out.exists()


def test_python_callers_still_get_a_config_error():
    from mlminilm.config import ExportConfig
    from mlminilm.errors import ConfigError

    with pytest.raises(ConfigError, match="--strict needs --check"):
        ExportConfig(model="m", out=Path("o"), quantize="int8", strict=True)


@pytest.mark.parametrize("fmt, name", [("onnx", "an ONNX"), ("openvino", "an OpenVINO")])
def test_an_export_given_to_the_torch_backend_names_the_backend_that_reads_it(
    monkeypatch, capsys, tmp_path, bert, fmt, name
):
    """An export directory without PyTorch weights, evaluated without --backend: the one line names the backend of
    its own format (an OpenVINO export was told to use --backend onnx, which then refused it in turn)."""
    export = tmp_path / "student-export"
    shutil.copytree(bert, export, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    (export / fmt).mkdir()
    (export / fmt / "export.json").write_text(json.dumps({"task": "feature-extraction"}), encoding="utf-8")
    data = tatoeba_dir(tmp_path / "tatoeba")
    out = tmp_path / "report"
    result = run_main(
        monkeypatch, capsys, "eval-tatoeba", "--model", str(export), "--data", str(data), "--out", str(out)
    )
    refused(result, out, f"is {name} export", f"--backend {fmt},")
