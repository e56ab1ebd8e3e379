"""benchmarks/retention_retrieval.py: the retrieval report's averages and shares of the teacher against
hand-worked figures, the runtime each row is read by, and its argument errors."""

from __future__ import annotations

import json
import sys

import pytest

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
rr = pytest.importorskip("retention_retrieval")


def _report(scores: dict[tuple[str, str], float]) -> dict:
    """An eval-retrieval metrics document with these nDCG@10 per (context, question) language pair."""
    return {
        "languages": {
            (c if c == q else f"{c}-{q}"): {"ndcg_at_10": s, "context_lang": c, "question_lang": q}
            for (c, q), s in scores.items()
        },
        "size": {"parameters": 1000, "disk_bytes": 3 * 2**20},
    }


TEACHER = {("de", "de"): 80.0, ("en", "en"): 60.0, ("de", "en"): 50.0, ("en", "de"): 70.0}
STUDENT = {("de", "de"): 40.0, ("en", "en"): 45.0, ("de", "en"): 30.0, ("en", "de"): 35.0}
CUT = {("de", "de"): 50.0, ("en", "en"): 10.0, ("de", "en"): 5.0, ("en", "de"): 5.0}


def test_scores_split_monolingual_from_crosslingual_pairs():
    s = rr.retrieval_scores(_report(STUDENT))
    assert s["mono"] == {"de": 40.0, "en": 45.0}
    assert s["mono_avg"] == pytest.approx(42.5)
    assert s["cross_avg"] == pytest.approx(32.5)  # (30 + 35) / 2
    assert s["cross_pairs"] == 2
    only_mono = rr.retrieval_scores(_report({("de", "de"): 10.0}))
    assert only_mono["cross_avg"] is None and only_mono["cross_pairs"] == 0


def _doc(tmp_path) -> dict:
    def tatoeba(x: float) -> dict:
        return {"average": {"xx_to_en": x}}

    return {
        "models": {"teacher": "t", "first-6 untrained": "c", "student": "s"},
        "results": {
            "teacher": {"backend": "torch", "retrieval": _report(TEACHER), "tatoeba": tatoeba(90.0)},
            "first-6 untrained": {"backend": "torch", "retrieval": _report(CUT), "tatoeba": tatoeba(45.0)},
            "student": {"backend": "openvino", "retrieval": _report(STUDENT), "tatoeba": tatoeba(81.0)},
        },
        "git": "abc1234",
        "stage_seconds": {"retrieval all pairs teacher": 12.0},
        "command": "python benchmarks/retention_retrieval.py ...",
        "note": None,
    }


def _row(text: str, name: str) -> list[str]:
    return [c.strip() for c in next(line for line in text.splitlines() if line.startswith(f"| {name} |")).split("|")]


def test_report_tables_hold_hand_worked_shares(tmp_path):
    out = tmp_path / "r.md"
    rr.write(_doc(tmp_path), out)
    text = out.read_text(encoding="utf-8")
    scores, kept = text.split("Kept of the teacher")
    kept, skills = kept.split("## The other skills")
    # student: de 40 (teacher 80: 50 %), en 45 (60: 75 %), mono avg 42.5 of 70 = 61 %, cross 32.5 of 60 = 54 %;
    # above the cut teacher in en (45 > 10), not de (40 < 50)
    assert _row(scores, "student")[2:7] == ["40.0", "45.0", "**42.5**", "32.5", "1/2"]
    assert _row(kept, "student")[2:6] == ["50 %", "75 %", "**61 %**", "54 %"]
    assert _row(scores, "teacher")[2:7] == ["80.0", "60.0", "**70.0**", "60.0", "-"]
    assert "| teacher |" not in kept  # the teacher is the 100 % every share is of
    # Tatoeba 81 of 90 = 90 %; tatoeba-more not measured
    assert _row(skills, "student")[2:7] == ["openvino", "81.0 (90 %)", "- (-)", "1,000", "3 MiB"]


def test_an_exports_size_without_a_parameter_count(tmp_path):
    doc = _doc(tmp_path)
    doc["results"]["student"]["retrieval"]["size"] = {"parameters": None, "disk_bytes": 109105510}
    rr.write(doc, tmp_path / "r.md")
    skills = (tmp_path / "r.md").read_text(encoding="utf-8").split("## The other skills")[1]
    assert _row(skills, "student")[5:7] == ["-", "104 MiB"]  # 109,105,510 / 2**20 = 104.05


def test_render_rewrites_the_report_from_its_json(tmp_path):
    doc = _doc(tmp_path)
    (tmp_path / "r.json").write_text(json.dumps(doc), encoding="utf-8")
    assert rr.main(["--render", str(tmp_path / "r.json"), "--out", str(tmp_path / "a.md"), "--note", "hi"]) == 0
    assert "- note: hi" in (tmp_path / "a.md").read_text(encoding="utf-8")


def test_an_export_directory_is_read_by_its_own_runtime(tmp_path):
    for fmt in ("onnx", "openvino"):  # `mlminilm export` keeps its record beside the graph: onnx/ or openvino/
        (tmp_path / fmt / fmt).mkdir(parents=True)
        (tmp_path / fmt / fmt / "export.json").write_text(json.dumps({"task": "x"}), encoding="utf-8")
        assert rr.backend_of(str(tmp_path / fmt)) == fmt
    assert rr.backend_of(str(tmp_path)) == "torch"
    assert rr.backend_of("intfloat/multilingual-e5-small") == "torch"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--work", "W"], "give --model NAME=DIR"),
        (["--work", "W", "--model", "student=s"], "the first --model must be named 'teacher'"),
        (["--work", "W", "--model", "teacher"], "give NAME=DIR"),
        (["--model", "teacher=t"], "give --work"),
        (["--work", "W", "--model", "teacher=t", "--tasks", "mlqa"], "--tasks 'mlqa'"),
        (["--render", "nope.json"], "no such file"),
        (["--render", "bad.json"], "not a --json of an earlier run"),
        (["--work", "W", "--model", "teacher=t", "--model", "s=/nowhere/student"], "s=/nowhere/student: no such"),
    ],
)
def test_bad_arguments_are_one_line_and_write_nothing(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    assert rr.main([*argv, "--out", "r.md"]) in (1, 2)
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r.md").exists() and not (tmp_path / "W").exists()


def test_a_name_keeps_its_model_across_reruns(tmp_path):
    rr.remember_models(tmp_path, {"teacher": "t", "student": "a"})
    rr.remember_models(tmp_path, {"teacher": "t", "other": "b"})  # a new row: fine
    with pytest.raises(SystemExit, match="measured 'student' as a"):
        rr.remember_models(tmp_path, {"teacher": "t", "student": "z"})


def test_the_retention_report_shows_the_same_tables(tmp_path):
    """benchmarks/retention.py's report (docs/RETENTION.md) renders its rows' retrieval with these tables."""
    import retention_report

    res = _doc(tmp_path)["results"]
    res["recipe"] = res.pop("student")
    res["no retrieval row"] = {"backend": "torch"}
    lines = retention_report.retrieval_section(res, ["teacher", "first-6 untrained", "recipe", "no retrieval row"])
    text = "\n".join(lines)
    assert _row(text, "recipe")[2:7] == ["40.0", "45.0", "**42.5**", "32.5", "1/2"]
    assert "> first-6 untrained" in text and "leaves MLQA out" in text
    assert retention_report.retrieval_section({"recipe": res["recipe"]}, ["recipe"]) == []


def test_the_fine_tuned_tables_name_the_papers_figures():
    """The MiniLM paper's multilingual 6x384 figures (68.0 of 74.5 XNLI, 53.7 of 64.9 MLQA F1) stand beside the
    fine-tuned tables, with the share worked by hand (68.0 / 74.5 = 91 %, 53.7 / 64.9 = 83 %)."""
    import retention_report

    assert "68.0 against 74.5, 91 %" in retention_report.PAPER_XNLI
    assert "53.7 against 64.9, 83 %" in retention_report.PAPER_MLQA


def test_stages_of_tasks_not_asked_for_are_read_back_never_run(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(rr, "retrieval_report", lambda *a, **k: calls.append(("retrieval", a[1])) or {"r": a[1]})
    monkeypatch.setattr(rr, "tatoeba_report", lambda *a, **k: calls.append(("tatoeba", a[1])) or {"t": a[1]})
    teacher, student = tmp_path / "t", tmp_path / "s"
    teacher.mkdir(), student.mkdir()
    models = {"teacher": str(teacher), "student": str(student)}
    work = tmp_path / "work"
    rr.run(models, work, ("retrieval", "tatoeba-more"))
    assert calls == [
        ("retrieval", "teacher"),
        ("tatoeba", "teacher tatoeba-more"),
        ("retrieval", "student"),
        ("tatoeba", "student tatoeba-more"),
    ]
    calls.clear()
    doc = rr.run({**models, "new": str(student)}, work, ("retrieval",))
    assert calls == [("retrieval", "new")]  # only the new row's asked-for stage runs
    assert doc["results"]["student"]["tatoeba-more"]["t"] == "student tatoeba-more"  # read back
    assert "tatoeba" not in doc["results"]["student"] and "tatoeba-more" not in doc["results"]["new"]


def test_without_a_cut_teacher_row_there_is_no_column_for_it(tmp_path):
    doc = _doc(tmp_path)
    del doc["results"]["first-6 untrained"], doc["models"]["first-6 untrained"]
    rr.write(doc, tmp_path / "r.md")
    text = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "> None" not in text and "| > " not in text
    assert _row(text, "student")[2:7] == ["40.0", "45.0", "**42.5**", "32.5", ""]


def test_the_fine_tuned_report_reads_back_stages_of_tasks_not_asked_for(tmp_path, monkeypatch):
    """benchmarks/retention_finetuned.py the same way: --tasks mlqa on a --work that has a row's XNLI stage keeps
    that row's XNLI figures in the report without fine-tuning anything for XNLI."""
    from types import SimpleNamespace

    import numpy as np
    import retention_finetuned as rf

    calls = []
    data = SimpleNamespace(dev_groups=np.array([0]), dev={"en": [1]}, train=[1], selection=[1])
    monkeypatch.setattr(rf, "xnli_data", lambda *a: data)
    monkeypatch.setattr(rf, "qa_data", lambda *a: {})
    monkeypatch.setattr(rf, "finetuned_xnli", lambda work, name, *a: calls.append(("xnli", name)) or {"x": name})
    monkeypatch.setattr(rf, "finetuned_mlqa", lambda work, name, *a: calls.append(("mlqa", name)) or {"m": name})
    (tmp_path / "t").mkdir()
    models, work = {"teacher": str(tmp_path / "t")}, tmp_path / "work"
    rf.run(models, work, smoke=True, tasks=("xnli",))
    assert calls == [("xnli", "teacher")]
    calls.clear()
    doc = rf.run({**models, "new": str(tmp_path / "t")}, work, smoke=True, tasks=("mlqa",))
    assert calls == [("mlqa", "teacher"), ("mlqa", "new")]
    assert doc["results"]["teacher"]["finetuned"]["x"] == "teacher" and "finetuned" not in doc["results"]["new"]


def test_a_problem_found_by_a_stage_is_one_line_and_no_report(tmp_path, capsys, monkeypatch):
    from mlminilm.errors import ConfigError

    def broken(*args):
        raise ConfigError("could not load model config 'x'")

    monkeypatch.setattr(rr, "run", broken)
    (tmp_path / "t").mkdir()
    argv = ["--work", str(tmp_path / "W"), "--model", f"teacher={tmp_path / 't'}", "--out", str(tmp_path / "r.md")]
    assert rr.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err == "Error: could not load model config 'x'" and not (tmp_path / "r.md").exists()


def test_the_probe_runs_on_pytorch_rows_only_and_is_read_back(tmp_path, monkeypatch):
    """--tasks probe: the XNLI frozen probe of each PyTorch row (an export has none: the probe embeds with
    PyTorch), the split made once, its premise groups kept for the bootstrap; a rerun reads the stages back."""
    from types import SimpleNamespace

    import numpy as np

    calls, splits = [], []
    data = SimpleNamespace(dev_groups=np.array([0, 1]))
    monkeypatch.setattr(rr, "xnli_data", lambda *a: splits.append(a) or data)
    monkeypatch.setattr(rr, "frozen_probe", lambda model, d, precision: calls.append((model, precision)) or {"p": 1})
    (tmp_path / "t").mkdir()
    (tmp_path / "x" / "openvino").mkdir(parents=True)
    (tmp_path / "x" / "openvino" / "export.json").write_text("{}", encoding="utf-8")
    models = {"teacher": str(tmp_path / "t"), "int8": str(tmp_path / "x")}
    doc = rr.run(models, tmp_path / "work", ("probe",))
    assert calls == [(str(tmp_path / "t"), "fp32")] and len(splits) == 1
    assert doc["dev_groups"] == [0, 1] and "probe" not in doc["results"]["int8"]
    calls.clear()
    again = rr.run(models, tmp_path / "work", ("probe",))
    assert calls == [] and again["results"]["teacher"]["probe"]["p"] == 1


def test_the_probe_table_holds_hand_worked_retention(tmp_path):
    """Teacher 3 of 4 right (75 %), student 2 of 4 (50 %): 67 % of the teacher's accuracy, chance-corrected
    (50 - 33.3) / (75 - 33.3) = 40 %."""
    doc = _doc(tmp_path)
    doc["dev_groups"] = [0, 1, 2, 3]
    doc["results"]["teacher"]["probe"] = {"correct": {"en": [1, 1, 1, 0]}, "l2": 0.1, "selection_accuracy": 70.0}
    doc["results"]["first-6 untrained"]["probe"] = {
        "correct": {"en": [1, 1, 0, 0]},
        "l2": 1.0,
        "selection_accuracy": 50.0,
    }
    rr.write(doc, tmp_path / "r.md")
    probe = (tmp_path / "r.md").read_text(encoding="utf-8").split("frozen-encoder probe: accuracy")[1]
    row = _row(probe, "first-6 untrained")
    assert row[2] == "50.0" and row[3].startswith("**50.0**") and row[4] == "67 %" and row[5].startswith("40 %")
    assert "| student |" not in probe.split("## Time")[0]  # the export row has no probe
    assert "An export row has none" in probe


def test_a_longer_qa_protocol_is_its_own_work(tmp_path, capsys, monkeypatch):
    """retention_finetuned.py --qa-epochs / --qa-lr: a --work keeps one protocol (stages of another are refused),
    and a value that is not above 0 is one line, nothing written."""
    from types import SimpleNamespace

    import numpy as np
    import retention_finetuned as rf

    data = SimpleNamespace(dev_groups=np.array([0]), dev={"en": [1]}, train=[1], selection=[1])
    monkeypatch.setattr(rf, "xnli_data", lambda *a: data)
    monkeypatch.setattr(rf, "qa_data", lambda *a: {})
    seen = []
    monkeypatch.setattr(rf, "finetuned_mlqa", lambda work, name, model, p: seen.append(p) or {})
    (tmp_path / "t").mkdir()
    models, work = {"teacher": str(tmp_path / "t")}, tmp_path / "work"
    doc = rf.run(models, work, smoke=True, tasks=("mlqa",), qa={"epochs": 3.0})
    assert seen[0].epochs == 3.0 and doc["budget"]["qa_ft"]["epochs"] == 3.0
    with pytest.raises(SystemExit, match="holds stages of other settings"):
        rf.run(models, work, smoke=True, tasks=("mlqa",))
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()  # the stage logs above
    assert rf.main(["--work", "W", "--model", "teacher=t", "--qa-lr", "0", "--out", "r.md"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "Error: --qa-lr must be above 0" and not (tmp_path / "r.md").exists()
    assert not (tmp_path / "W").exists()


def test_a_report_without_xnli_rows_names_no_xnli_protocol(tmp_path, monkeypatch):
    import retention_finetuned as rf
    import retention_report

    doc = {
        "models": {"teacher": "t"},
        "results": {"teacher": {"model": "t"}},
        "budget": {"xnli_ft": {"epochs": 3, "lr": 1e-4, "batch": 32, "freeze_embeddings": True, "precision": "auto"}},
        "train_pairs": 4500,
        "selection_pairs": 510,
        "dev_pairs": 498,
        "dev_groups": [0],
        "git": "abc",
        "stage_seconds": {},
    }
    rf.write(doc, tmp_path / "r.md", "python benchmarks/retention_finetuned.py --tasks mlqa")
    assert "- XNLI: `finetune --task xnli`" not in (tmp_path / "r.md").read_text(encoding="utf-8")
    doc["results"]["teacher"]["finetuned"] = {"correct": {"en": [1, 0]}}
    monkeypatch.setattr(retention_report, "xnli_section", lambda *a: [])  # its table: tested on its own
    rf.write(doc, tmp_path / "r.md", "python benchmarks/retention_finetuned.py")
    assert "- XNLI: `finetune --task xnli` on XNLI test-en's 4,500" in (tmp_path / "r.md").read_text(encoding="utf-8")
