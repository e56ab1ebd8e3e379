"""compare: hand-made reports with figures whose ratios are checked by hand (table, JSON, CSV, Markdown, chart),
the baseline's choice, one refusal per mismatch of data or protocol, missing and damaged reports, and two real
eval-tatoeba reports of tiny models."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import sample_lines

from helpers import assert_error, run_main, tiny_encoder_fixture

CHANCE = 100 / 3
LABELS = ["entailment", "neutral", "contradiction"]


def xnli_doc(
    scores: dict[str, float],
    model: str,
    data: str = "/data/xnli",
    examples: int = 120,
    per_s: float = 100.0,
    parameters: int | None = None,
) -> dict:
    """An eval-xnli metrics document as eval-xnli writes it, with the given accuracies."""
    files = {lang: f"{data}/test-{lang}.tsv" for lang in scores}
    doc = {
        "task": "xnli",
        "split": "test",
        "protocol": "zero-shot cross-lingual transfer (XTREME)",
        "model": model,
        "selection": {"rule": "best English dev accuracy"},
        "data": {"source": data, "files": files},
        "metrics": ["accuracy"],
        "labels": list(LABELS),
        "languages": {
            lang: {
                "accuracy": v,
                "examples": examples,
                "skipped": 0,
                "confusion": [[0] * 3] * 3,
                "examples_per_s": per_s,
                "file": files[lang],
            }
            for lang, v in scores.items()
        },
        "average": {"accuracy": sum(scores.values()) / len(scores), "examples": examples * len(scores), "skipped": 0},
        "settings": {"max_seq_len": 128, "batch_size": 32, "sorted_by_length": True},
        "throughput": {
            "examples_per_s": per_s,
            "elapsed_s": 1.0,
            "device": "cpu (x86_64, 2 threads)",
            "precision": "float32",
            "batch_size": 32,
        },
        "mlminilm": "0.1.0",
    }
    if parameters is not None:
        doc["parameters"] = parameters
    return doc


def tatoeba_doc(scores: dict[str, tuple[float, float]], model: str, data: str = "/data/tatoeba") -> dict:
    """An eval-tatoeba metrics document: per language (xx->en, en->xx)."""
    iso = {"de": "deu", "fr": "fra", "zh": "cmn"}
    languages = {
        lang: {
            "xx_to_en": a,
            "en_to_xx": b,
            "mean": (a + b) / 2,
            "examples": 100,
            "iso639_3": iso[lang],
            "files": {
                "xx": f"{data}/tatoeba.{iso[lang]}-eng.{iso[lang]}",
                "eng": f"{data}/tatoeba.{iso[lang]}-eng.eng",
            },
        }
        for lang, (a, b) in scores.items()
    }
    return {
        "task": "tatoeba",
        "protocol": "Tatoeba sentence retrieval",
        "summary": f"embedding: layer of {model}",
        "model": model,
        "embedding": {"layer": 2},
        "data": {"source": data, "files": {k: v["files"] for k, v in languages.items()}, "unregistered": []},
        "metrics": ["xx_to_en", "en_to_xx", "mean"],
        "languages": languages,
        "average": {
            m: sum(s[m] for s in languages.values()) / len(languages) for m in ("xx_to_en", "en_to_xx", "mean")
        },
        "settings": {
            "max_length": 160,
            "batch_size": 32,
            "sorted_by_length": True,
            "similarity": "cosine, float32, ties to the lowest index",
        },
        "throughput": {
            "examples_per_s": 50.0,
            "sentences_per_s": 100.0,
            "elapsed_s": 1.0,
            "device": "cpu",
            "precision": "float32",
            "batch_size": 32,
        },
    }


def mlqa_doc(scores: dict[str, float], model: str, scorer: str = "mlqa") -> dict:
    title = {"mlqa": "MLQA", "squad": "SQuAD v1.1"}[scorer]
    return {
        "task": "mlqa",
        "split": "dev",
        "protocol": "QA",
        "model": model,
        "scorer": {"name": scorer, "title": title, "description": title, "chosen": "auto (MLQA files)"},
        "data": {"source": "/data/mlqa", "files": {k: f"/data/mlqa/dev-context-{k}-question-{k}.json" for k in scores}},
        "metrics": ["exact_match", "f1"],
        "languages": {k: {"exact_match": v - 10, "f1": v, "examples": 50, "missing": 0} for k, v in scores.items()},
        "average": {"exact_match": 0.0, "f1": 0.0, "examples": 50 * len(scores), "missing": 0},
    }


def write(folder: Path, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


@pytest.fixture
def pair(tmp_path):
    """teacher en 80 / de 70, student en 60 / de 56: ratios 0.75 and 0.8, chance-corrected 4/7 and 34/55; the
    averages 75 and 58: 58/75 and (58 - 100/3) / (75 - 100/3) = 0.592. Speeds 100 and 250 examples/s."""
    teacher = write(tmp_path / "teacher", xnli_doc({"en": 80.0, "de": 70.0}, "runs/t/teacher-model", parameters=1000))
    student = write(
        tmp_path / "student", xnli_doc({"en": 60.0, "de": 56.0}, "runs/s/student-model", per_s=250.0, parameters=400)
    )
    return teacher, student


def compare(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    return run_main(monkeypatch, capsys, "compare", *map(str, args))


def compare_json(monkeypatch, capsys, *args) -> dict:
    code, out, err = compare(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


# ------------------------------------------------------------------------------------------- figures


def test_ratios_by_hand_in_json(pair, monkeypatch, capsys):
    teacher, student = pair
    doc = compare_json(monkeypatch, capsys, teacher, student)
    assert doc["kind"] == "comparison" and doc["task"] == "xnli" and doc["split"] == "test"
    assert doc["baseline"] == "teacher" and doc["metric"] == "accuracy"
    assert list(doc["reports"]) == ["teacher", "student"]
    assert doc["chance"] == pytest.approx(CHANCE)
    assert list(doc["languages"]) == ["en", "de"]  # the baseline's order
    en, de, avg = doc["languages"]["en"], doc["languages"]["de"], doc["average"]
    assert en["scores"] == {"teacher": {"accuracy": 80.0}, "student": {"accuracy": 60.0}} and en["examples"] == 120
    assert en["ratio"]["student"]["accuracy"] == pytest.approx(0.75)
    assert en["ratio"]["teacher"]["accuracy"] == pytest.approx(1.0)
    assert en["chance_corrected"]["student"]["accuracy"] == pytest.approx(4 / 7)  # (60 - 33.3) / (80 - 33.3)
    assert round(en["chance_corrected"]["student"]["accuracy"], 4) == 0.5714
    assert de["ratio"]["student"]["accuracy"] == pytest.approx(0.8)
    assert de["chance_corrected"]["student"]["accuracy"] == pytest.approx(34 / 55)  # 22.67 / 36.67
    assert avg["scores"]["teacher"]["accuracy"] == pytest.approx(75.0) and avg["examples"] == 240
    assert avg["ratio"]["student"]["accuracy"] == pytest.approx(58 / 75)
    assert avg["chance_corrected"]["student"]["accuracy"] == pytest.approx(0.592)
    student_info = doc["reports"]["student"]
    assert student_info["examples_per_s"] == 250.0 and student_info["speed_ratio"] == pytest.approx(2.5)
    assert student_info["parameters"] == 400 and student_info["parameters_ratio"] == pytest.approx(0.4)
    assert student_info["model"] == "runs/s/student-model"
    assert student_info["source"].endswith("student/metrics.json")
    assert doc["dropped_languages"] == {} and doc["warnings"] == []


def test_table_on_stdout(pair, monkeypatch, capsys):
    teacher, student = pair
    code, out, err = compare(monkeypatch, capsys, teacher, student)
    assert code == 0, err
    assert "XNLI test" in out and "against teacher" in out
    rows = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[1:-1]]
        for line in out.splitlines()
        if line.count("│") > 4
    }
    assert rows["en"] == ["en", "English", "120", "80.00", "60.00", "0.750", "0.571"]
    assert rows["de"] == ["de", "German", "120", "70.00", "56.00", "0.800", "0.618"]
    assert rows["average"] == ["average", "mean of 2", "240", "75.00", "58.00", "0.773", "0.592"]
    assert "chance = 100 / 3 classes" in out and "250.0 examples/s (2.50x)" in out and "400 parameters (0.40x)" in out


def test_files_csv_markdown_chart(pair, tmp_path, monkeypatch, capsys):
    teacher, student = pair
    out = tmp_path / "cmp"
    code, stdout, err = compare(monkeypatch, capsys, teacher, student, "--out", out)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        ".mlminilm-output.json",
        "chart.png",
        "metrics.csv",
        "metrics.json",
        "metrics.md",
    ]
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "metrics.json").read_text())["languages"]["en"]["scores"]["student"]["accuracy"] == 60.0
    assert (out / "metrics.csv").read_text().splitlines() == [
        "language,name,examples,teacher,student,student/teacher,student/teacher (cc)",
        "en,English,120,80.0,60.0,0.75,0.5714",
        "de,German,120,70.0,56.0,0.8,0.6182",
        "average,mean of 2,240,75.0,58.0,0.7733,0.592",
    ]
    md = (out / "metrics.md").read_text()
    assert "| language | name | examples | teacher | student | student/teacher | student/teacher (cc) |" in md
    assert "| de | German | 120 | 70.00 | 56.00 | 0.800 | 0.618 |" in md
    assert "| **average** | **mean of 2** | **240** | **75.00** | **58.00** | **0.773** | **0.592** |" in md
    assert "- baseline: teacher" in md and "runs/s/student-model" in md
    # A second run into the same --out needs --overwrite, and with it replaces the comparison.
    code, _, err = compare(monkeypatch, capsys, teacher, student, "--out", out)
    assert code == 1 and "add --overwrite" in err
    code, _, err = compare(monkeypatch, capsys, student, teacher, "--out", out, "--overwrite")
    assert code == 0, err
    assert (out / "metrics.csv").read_text().splitlines()[0].endswith("teacher/student,teacher/student (cc)")
    # A comparison is not an input of compare.
    assert_error(compare(monkeypatch, capsys, out, teacher), "is a comparison written by `mlminilm compare`")


def test_metrics_json_files_as_arguments_and_clashing_directory_names(tmp_path, monkeypatch, capsys):
    a = write(tmp_path / "a" / "report", xnli_doc({"en": 80.0}, "m1"))
    b = write(tmp_path / "b" / "report", xnli_doc({"en": 40.0}, "m2"))
    doc = compare_json(monkeypatch, capsys, a / "metrics.json", b / "metrics.json")
    assert list(doc["reports"]) == ["a/report", "b/report"]
    assert doc["languages"]["en"]["ratio"]["b/report"]["accuracy"] == pytest.approx(0.5)
    # (40 - 100/3) / (80 - 100/3) = (20/3) / (140/3) = 1/7
    assert doc["languages"]["en"]["chance_corrected"]["b/report"]["accuracy"] == pytest.approx(1 / 7)


# ------------------------------------------------------------------------------------------ baseline


def test_baseline_by_directory_name_and_by_model(pair, monkeypatch, capsys):
    teacher, student = pair
    doc = compare_json(monkeypatch, capsys, teacher, student, "--baseline", "student")
    assert doc["baseline"] == "student" and list(doc["reports"]) == ["teacher", "student"]  # order kept
    assert doc["languages"]["en"]["ratio"]["teacher"]["accuracy"] == pytest.approx(80 / 60)
    assert doc["languages"]["en"]["chance_corrected"]["teacher"]["accuracy"] == pytest.approx(7 / 4)
    assert doc["reports"]["teacher"]["speed_ratio"] == pytest.approx(0.4)
    for name in ("student-model", "runs/s/student-model", str(student)):
        assert compare_json(monkeypatch, capsys, teacher, student, "--baseline", name)["baseline"] == "student"


def test_unknown_and_ambiguous_baseline(pair, tmp_path, monkeypatch, capsys):
    teacher, student = pair
    out = tmp_path / "cmp"
    assert_error(
        compare(monkeypatch, capsys, teacher, student, "--baseline", "nobody", "--out", out),
        "--baseline nobody",
        "teacher (model runs/t/teacher-model)",
        "student (model runs/s/student-model)",
    )
    assert not out.exists()
    twin = write(tmp_path / "twin", xnli_doc({"en": 70.0, "de": 60.0}, "elsewhere/student-model"))
    assert_error(
        compare(monkeypatch, capsys, teacher, student, twin, "--baseline", "student-model"),
        "names several reports (student, twin)",
    )
    # A report's own name wins over another's model name.
    assert compare_json(monkeypatch, capsys, student, twin, "--baseline", "twin")["baseline"] == "twin"


# ------------------------------------------------------------------------------------------- refusals


MISMATCHES = {
    "task": (
        lambda d: tatoeba_doc({"de": (90.0, 80.0)}, d["model"]),
        "different task (teacher: xnli; student: tatoeba)",
    ),
    "split": (lambda d: {**d, "split": "dev"}, "different split (teacher: test; student: dev)"),
    "labels": (lambda d: {**d, "labels": ["entailment", "not_entailment"]}, "different labels"),
    "examples": (lambda d: _per_language(d, "de", examples=100), "de: different examples (teacher: 120; student: 100)"),
    "skipped rows": (
        lambda d: _per_language(d, "en", skipped=3),
        "en: different rows skipped (teacher: 0; student: 3)",
    ),
    "data files": (
        lambda d: _files(d, "de", "/data/xnli/mine-de.tsv"),
        "de: different data files (teacher: test-de.tsv; student: mine-de.tsv)",
    ),
    "no common language": (
        lambda d: xnli_doc({"fr": 50.0}, d["model"]),
        "no language in common (teacher: en, de; student: fr)",
    ),
}


def _per_language(doc, lang, **fields):
    doc = copy.deepcopy(doc)
    doc["languages"][lang].update(fields)
    return doc


def _files(doc, lang, path):
    doc = copy.deepcopy(doc)
    doc["languages"][lang]["file"] = doc["data"]["files"][lang] = path
    return doc


@pytest.mark.parametrize("kind", list(MISMATCHES))
def test_refuses_reports_of_other_data_or_protocol(kind, pair, tmp_path, monkeypatch, capsys):
    teacher, student = pair
    change, needle = MISMATCHES[kind]
    doc = json.loads((student / "metrics.json").read_text())
    other = write(tmp_path / "other" / "student", change(doc))
    out = tmp_path / "cmp"
    assert_error(compare(monkeypatch, capsys, teacher, other, "--out", out), needle)
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))


def test_refuses_other_qa_scorer_and_tatoeba_directions(tmp_path, monkeypatch, capsys):
    a = write(tmp_path / "a", mlqa_doc({"de": 60.0, "zh": 50.0}, "m1"))
    b = write(tmp_path / "b", mlqa_doc({"de": 30.0, "zh": 25.0}, "m2", scorer="squad"))
    assert_error(compare(monkeypatch, capsys, a, b), "different scorer (a: MLQA; b: SQuAD v1.1)")
    gxlt = mlqa_doc({"de": 30.0, "zh": 25.0}, "m2")
    gxlt["gxlt"] = {"contexts": ["de"], "questions": ["de"], "f1": [[30.0]]}
    assert_error(
        compare(monkeypatch, capsys, a, write(tmp_path / "g", gxlt)),
        "different language pairs (a: monolingual; g: G-XLT)",
    )
    # The same scorer: F1 by default (ratio 0.5 on both languages), --metric exact_match on request.
    doc = compare_json(monkeypatch, capsys, a, write(tmp_path / "c", mlqa_doc({"de": 30.0, "zh": 25.0}, "m3")))
    assert doc["metric"] == "f1" and doc["chance"] is None and "chance_corrected" not in doc["average"]
    assert doc["average"]["ratio"]["c"]["f1"] == pytest.approx(55 / 110)
    assert doc["languages"]["de"]["ratio"]["c"]["exact_match"] == pytest.approx(20 / 50)
    doc = compare_json(monkeypatch, capsys, a, tmp_path / "c", "--metric", "exact_match")
    assert doc["metric"] == "exact_match"
    assert_error(
        compare(monkeypatch, capsys, a, tmp_path / "c", "--metric", "accuracy"), "--metric accuracy", "exact_match, f1"
    )

    t1 = write(tmp_path / "t1", tatoeba_doc({"de": (90.0, 80.0), "zh": (60.0, 70.0)}, "teacher"))
    one_way = tatoeba_doc({"de": (45.0, 0.0), "zh": (30.0, 0.0)}, "student")
    one_way["metrics"] = ["xx_to_en"]
    assert_error(
        compare(monkeypatch, capsys, t1, write(tmp_path / "t2", one_way)),
        "different metrics (t1: xx_to_en, en_to_xx, mean; t2: xx_to_en)",
    )
    other_rule = tatoeba_doc({"de": (45.0, 40.0), "zh": (30.0, 35.0)}, "student")
    other_rule["settings"]["similarity"] = "dot product"
    assert_error(compare(monkeypatch, capsys, t1, write(tmp_path / "t3", other_rule)), "different retrieval rule")


def test_languages_in_only_some_reports_are_left_out_with_a_warning(tmp_path, monkeypatch, capsys):
    t = write(tmp_path / "teacher", tatoeba_doc({"de": (90.0, 80.0), "fr": (80.0, 70.0), "zh": (60.0, 70.0)}, "t"))
    s = write(tmp_path / "student", tatoeba_doc({"zh": (30.0, 35.0), "de": (45.0, 40.0)}, "s"))
    code, out, err = compare(monkeypatch, capsys, t, s, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert "fr (only in teacher)" in err and "left out" in err
    assert list(doc["languages"]) == ["de", "zh"] and doc["dropped_languages"] == {"fr": ["teacher"]}
    assert doc["metric"] == "xx_to_en" and doc["chance"] is None
    # The average is over de and zh only: teacher 75, student 37.5 (not the teacher report's 76.67).
    assert doc["average"]["scores"]["teacher"]["xx_to_en"] == pytest.approx(75.0)
    assert doc["average"]["ratio"]["student"]["xx_to_en"] == pytest.approx(0.5)
    assert doc["average"]["ratio"]["student"]["en_to_xx"] == pytest.approx(37.5 / 75)
    assert doc["reports"]["student"]["summary"] == "embedding: layer of s"


def test_warnings_for_other_data_directory_and_speed_setup(pair, tmp_path, monkeypatch, capsys):
    teacher, _ = pair
    moved = xnli_doc({"en": 60.0, "de": 56.0}, "s", data="/copy/xnli")
    moved["throughput"]["device"] = "NVIDIA H100"
    code, out, err = compare(monkeypatch, capsys, teacher, write(tmp_path / "moved", moved), "--json")
    assert code == 0, err
    warnings = json.loads(out)["warnings"]
    assert any("different places" in w and "/copy/xnli" in w for w in warnings)
    assert any("throughput measured on different set-ups" in w for w in warnings)
    assert "not like for like" in err


def with_load(doc: dict, load: float, cpu_per_wall: float, host: str = "box", cores: int = 2) -> dict:
    """`doc` with the throughput fields an evaluation records beside its speed (mlminilm.evaluation.machine)."""
    doc["throughput"].update(
        device="cpu (x86_64, 2 threads)",
        threads=2,
        cpu_s=cpu_per_wall,
        cpu_per_wall_s=cpu_per_wall,
        load_average_1min={"start": load, "end": load},
        machine={"host": host, "cpu": "AMD EPYC", "cores": cores},
    )
    return doc


def test_warnings_when_machines_or_loads_differ(tmp_path, monkeypatch, capsys):
    """The issue's case: a student timed while the machine was busy (load 7, 0.1 CPU s per s of its 2 threads)
    against a teacher timed idle: warned, as is another machine; two idle runs on one machine are not."""

    def warnings(teacher: dict, student: dict) -> list[str]:
        t, s = write(tmp_path / "t", teacher), write(tmp_path / "s", student)
        doc = compare_json(monkeypatch, capsys, t, s)
        return [w for w in doc["warnings"] if "throughput" in w]

    def doc(scores, model):
        return xnli_doc(scores, model)

    idle = warnings(with_load(doc({"en": 80.0}, "t"), 2.0, 1.9), with_load(doc({"en": 60.0}, "s"), 2.3, 1.8))
    assert idle == []
    busy = warnings(with_load(doc({"en": 80.0}, "t"), 2.0, 1.9), with_load(doc({"en": 60.0}, "s"), 7.0, 0.1))
    assert len(busy) == 1 and "different loads" in busy[0] and "s: load 7, the run got 5% of its 2 threads" in busy[0]
    other = warnings(
        with_load(doc({"en": 80.0}, "t"), 2.0, 1.9), with_load(doc({"en": 60.0}, "s"), 2.0, 1.9, host="laptop")
    )
    assert len(other) == 1 and "different machines" in other[0] and "laptop" in other[0]


def test_sizes_side_by_side(tmp_path, monkeypatch, capsys):
    """Parameters, their word-embedding share and bytes on disk, as the evaluations record them, with ratios."""
    teacher, student = xnli_doc({"en": 80.0}, "t"), xnli_doc({"en": 60.0}, "s")
    teacher["size"] = {"parameters": 1000, "embedding_parameters": 800, "disk_bytes": 4_000_000}
    student["size"] = {"parameters": 900, "embedding_parameters": 800, "disk_bytes": 3_600_000}
    t, s = write(tmp_path / "t", teacher), write(tmp_path / "s", student)
    record = compare_json(monkeypatch, capsys, t, s)["reports"]["s"]
    assert record["parameters"] == 900 and record["parameters_ratio"] == pytest.approx(0.9)
    assert record["disk_bytes"] == 3_600_000 and record["disk_ratio"] == pytest.approx(0.9)
    code, out, err = compare(monkeypatch, capsys, t, s)
    assert code == 0, err
    assert "900 parameters (0.90x), 89% of them word embeddings; 3.6 MB on disk (0.90x)" in out


# ---------------------------------------------------------------------------------- missing and damaged


def test_missing_and_damaged_reports(pair, tmp_path, monkeypatch, capsys):
    teacher, student = pair
    out = tmp_path / "cmp"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_error(compare(monkeypatch, capsys, teacher, empty, "--out", out), f"{empty} has no metrics.json")
    assert_error(
        compare(monkeypatch, capsys, teacher, tmp_path / "nowhere", "--out", out), "no such report directory or file"
    )
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "metrics.json").write_text((student / "metrics.json").read_text()[:200], encoding="utf-8")
    assert_error(compare(monkeypatch, capsys, teacher, cut, "--out", out), "metrics.json is damaged: not valid JSON")
    broken = json.loads((student / "metrics.json").read_text())
    broken["languages"]["de"]["accuracy"] = "high"
    del broken["task"]
    line = assert_error(
        compare(monkeypatch, capsys, teacher, write(tmp_path / "broken", broken), "--out", out),
        "is damaged",
        "no `task`",
        "languages.de.accuracy is not a number",
    )
    # Both problems at once, with the missing report: one line.
    line = assert_error(compare(monkeypatch, capsys, empty, tmp_path / "broken", "--out", out))
    assert "has no metrics.json" in line and "no `task`" in line
    assert_error(compare(monkeypatch, capsys, teacher, write(tmp_path / "list", []), "--out", out), "not an object")
    huge = json.loads((student / "metrics.json").read_text())
    huge["languages"]["de"]["accuracy"] = 1e308  # a number, but no score: refused, not compared
    assert_error(
        compare(monkeypatch, capsys, teacher, write(tmp_path / "huge", huge), "--out", out),
        "languages.de.accuracy is 1e+308, not a score in [0, 100]",
    )
    assert_error(compare(monkeypatch, capsys, teacher, teacher / "metrics.json"), "are the same report")
    line = assert_error(compare(monkeypatch, capsys, cut, cut))  # one damaged report given twice: said once
    assert line.count("is damaged") == 1
    assert_error(compare(monkeypatch, capsys, teacher), "at least two reports")
    assert not out.exists()


def test_out_must_not_be_an_input(pair, monkeypatch, capsys):
    teacher, student = pair
    assert_error(compare(monkeypatch, capsys, teacher, student, "--out", student), "--out", "is the REPORT_DIR input")
    assert sorted(p.name for p in student.iterdir()) == ["metrics.json"]


# ----------------------------------------------------------------------------------- real reports


small = tiny_encoder_fixture("tiny_wordpiece_dir", "cmp-small", layers=2, hidden=16, heads=2, intermediate=32)
large = tiny_encoder_fixture("tiny_wordpiece_dir", "cmp-large", layers=3, hidden=32, heads=4, intermediate=64)


@pytest.mark.usefixtures("one_torch_thread")
def test_two_real_tatoeba_reports(small, large, tmp_path, monkeypatch, capsys):
    """What eval-tatoeba writes is what compare reads: de retrieves at least 5 of 6 with any model (identical
    lines, the last a repeat of the first), fr (unrelated English side) whatever each model retrieves."""
    from mlminilm.config import EvalTatoebaConfig
    from mlminilm.evaluation import tatoeba

    data = tmp_path / "tatoeba"
    data.mkdir()
    de = list(dict.fromkeys(sample_lines("de", 20, seed=3)))[:5]
    for iso, source, english in (
        ("deu", de + de[:1], de + de[:1]),
        ("fra", sample_lines("fr", 6, seed=4), sample_lines("en", 6, seed=5)),
    ):
        (data / f"tatoeba.{iso}-eng.{iso}").write_text("\n".join(source) + "\n", encoding="utf-8")
        (data / f"tatoeba.{iso}-eng.eng").write_text("\n".join(english) + "\n", encoding="utf-8")
    reports = {}
    for name, model in (("large", large), ("small", small)):
        tatoeba.run(
            EvalTatoebaConfig(
                model=str(model), data=str(data), out=tmp_path / name, batch_size=4, precision="fp32", device="cpu"
            )
        )
        reports[name] = json.loads((tmp_path / name / "metrics.json").read_text())
    out = tmp_path / "cmp"
    code, stdout, err = compare(monkeypatch, capsys, tmp_path / "large", tmp_path / "small", "--out", out, "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["task"] == "tatoeba" and doc["baseline"] == "large" and doc["metric"] == "xx_to_en"
    # this machine is shared: two runs' loads may differ, and that warning would be true
    assert list(doc["languages"]) == ["de", "fr"] and [w for w in doc["warnings"] if "loads" not in w] == []
    for lang in ("de", "fr"):
        for name in ("large", "small"):
            assert doc["languages"][lang]["scores"][name] == {
                m: reports[name]["languages"][lang][m] for m in ("xx_to_en", "en_to_xx", "mean")
            }
        base, other = (reports[n]["languages"][lang]["xx_to_en"] for n in ("large", "small"))
        ratio = doc["languages"][lang]["ratio"]["small"]["xx_to_en"]
        assert ratio == (pytest.approx(other / base) if base else None)
    # de's duplicate line ties with its first copy, which the lower index wins, unless padding in another batch
    # moves its vector by a rounding error: so 5 or 6 of 6, whichever each model got, never fewer.
    assert all(reports[n]["languages"]["de"]["xx_to_en"] >= 500 / 6 - 1e-9 for n in ("large", "small"))
    # Each report records its model's size (parameters from the weights, bytes on disk) and what the speed was
    # measured under (process CPU time, load, machine).
    import platform

    from safetensors.torch import load_file

    for name, model in (("large", large), ("small", small)):
        size, tp = reports[name]["size"], reports[name]["throughput"]
        tensors = load_file(model / "model.safetensors")
        assert size["parameters"] == sum(t.numel() for n, t in tensors.items())
        words = [t.numel() for n, t in tensors.items() if n.endswith("embeddings.word_embeddings.weight")]
        assert [size["embedding_parameters"]] == words
        assert size["disk_bytes"] == (model / "model.safetensors").stat().st_size and size["files"] == [
            "model.safetensors"
        ]
        assert tp["threads"] == 1 and tp["cpu_s"] > 0 and tp["cpu_per_wall_s"] > 0
        assert set(tp["load_average_1min"]) == {"start", "end"} and tp["machine"]["host"] == platform.node()
        assert doc["reports"][name]["disk_bytes"] == size["disk_bytes"]
    speeds = [reports[n]["throughput"]["examples_per_s"] for n in ("large", "small")]
    assert doc["reports"]["small"]["speed_ratio"] == pytest.approx(speeds[1] / speeds[0])
    assert "layer 2 of 3" in doc["reports"]["large"]["summary"] and "layer 2 of 2" in doc["reports"]["small"]["summary"]
    assert (out / "metrics.csv").read_text().splitlines()[0] == "language,name,examples,large,small,small/large"
