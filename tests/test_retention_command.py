"""`mlminilm retention` on a tiny teacher and tiny Tatoeba- and MLQA-layout folders written here: the teacher's and
the cut teacher's scores are eval-tatoeba's and eval-retrieval's own (the cut teacher made independently here), the
stages in --work are read back and refused when their inputs change, and every refusal is one Error line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import sample_lines, write_e5_sentence_files
from taskdata import write_mlqa_dir

from helpers import assert_error, run_main, save_tiny_teacher

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tiny_xlmr(tiny_sentencepiece_dir: Path, folder: Path, layers: int) -> Path:
    """An XLM-R of `layers` layers (hidden 32, no dropout) with e5-like sentence-transformers files."""
    model = save_tiny_teacher(
        tiny_sentencepiece_dir, folder, kind="xlmr", layers=layers, hidden=32, heads=4, intermediate=64, dropout=0.0
    )
    return write_e5_sentence_files(model, 32)


@pytest.fixture(scope="module")
def teacher(tiny_sentencepiece_dir, tmp_path_factory) -> Path:
    """A 3-layer XLM-R with e5-like sentence-transformers files, trained not at all but no dropout."""
    return _tiny_xlmr(tiny_sentencepiece_dir, tmp_path_factory.mktemp("ret-teacher"), layers=3)


@pytest.fixture(scope="module")
def student(tiny_sentencepiece_dir, tmp_path_factory) -> Path:
    """A 2-layer XLM-R of the teacher's tokenizer (another random start: a stand-in for a distilled student)."""
    return _tiny_xlmr(tiny_sentencepiece_dir, tmp_path_factory.mktemp("ret-student"), layers=2)


@pytest.fixture(scope="module")
def cut_by_hand(teacher, tmp_path_factory) -> Path:
    """The teacher's first 2 layers, cut here with transformers alone (no mlminilm code): the independent check."""
    from transformers import AutoModel, AutoTokenizer

    out = tmp_path_factory.mktemp("ret-cut")
    model = AutoModel.from_pretrained(teacher)
    model.encoder.layer = model.encoder.layer[:2]
    model.config.num_hidden_layers = 2
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(teacher).save_pretrained(out)
    return write_e5_sentence_files(out, 32)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A ../shared/data layout: tatoeba/ (de, ar: 12 pairs each) and mlqa/dev/ (en, de: 4 questions each)."""
    root = tmp_path_factory.mktemp("ret-data")
    folder = root / "tatoeba"
    folder.mkdir()
    english = sample_lines("en", 12, seed=3)
    # "de": the English words in reverse order (mean pooling finds most of them), "ar": unrelated lines
    sources = {"deu": [" ".join(reversed(line.split())) for line in english], "ara": sample_lines("ar", 12, seed=3)}
    for iso, lines in sources.items():
        (folder / f"tatoeba.{iso}-eng.{iso}").write_text("\n".join(lines) + "\n")
        (folder / f"tatoeba.{iso}-eng.eng").write_text("\n".join(english) + "\n")
    write_mlqa_dir(root / "mlqa" / "dev", langs=("en", "de"), count=4)
    return root


def _retention(monkeypatch, capsys, *args: str):
    code, out, err = result = run_main(monkeypatch, capsys, "retention", *args)
    return result if code else (code, json.loads(out), err)


def _eval(monkeypatch, capsys, *args: str) -> dict:
    code, out, err = run_main(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_tatoeba_rows_are_eval_tatoeba_scores(teacher, cut_by_hand, student, data, tmp_path, monkeypatch, capsys):
    code, doc, err = _retention(
        monkeypatch,
        capsys,
        "--teacher",
        str(teacher),
        "--student",
        f"small={student}",
        "--tasks",
        "tatoeba",
        "--data",
        str(data),
        "--out",
        str(tmp_path / "report"),
        "--json",
    )
    assert code == 0, err
    assert [(r["name"], r["kind"], r["layers"]) for r in doc["rows"]] == [
        ("teacher", "teacher", 3),
        ("cut teacher", "baseline", 2),
        ("small", "student", 2),
    ]
    table = doc["tasks"]["tatoeba"]
    for name, model in (("teacher", teacher), ("cut teacher", cut_by_hand), ("small", student)):
        theirs = _eval(monkeypatch, capsys, "eval-tatoeba", "--model", str(model), "--data", str(data / "tatoeba"))
        ours = table["rows"][name]["languages"]
        assert {lang: e["score"] for lang, e in ours.items()} == {
            lang: s["xx_to_en"] for lang, s in theirs["languages"].items()
        }
    teacher_scores = {lang: e["score"] for lang, e in table["rows"]["teacher"]["languages"].items()}
    for name in ("cut teacher", "small"):
        for lang, entry in table["rows"][name]["languages"].items():
            if teacher_scores[lang]:
                assert entry["share"] == pytest.approx(entry["score"] / teacher_scores[lang])
            else:  # no share of a teacher that found nothing
                assert entry["share"] is None
    cut = {lang: e["score"] for lang, e in table["rows"]["cut teacher"]["languages"].items()}
    small = table["rows"]["small"]
    assert small["above_baseline"] == sum(small["languages"][lang]["score"] > cut[lang] for lang in cut)
    files = sorted(p.name for p in (tmp_path / "report").iterdir() if not p.name.startswith("."))
    assert files == ["chart.png", "retention.html", "retention.json", "retention.md"]
    page = (tmp_path / "report" / "retention.html").read_text()
    assert page.count('<img alt="share of the teacher per language" src="data:image/png;base64,') == 1
    assert "<td>cut teacher</td>" in page and "<th>&gt; cut teacher</th>" in page
    assert (tmp_path / "report" / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "report" / "retention.json").read_text())["tasks"] == doc["tasks"]
    markdown = (tmp_path / "report" / "retention.md").read_text()
    assert "| cut teacher |" in markdown and "> cut teacher" in markdown


def test_cut_depth_six_without_students_and_cut_layers(teacher, data, tmp_path, monkeypatch, capsys):
    result = _retention(monkeypatch, capsys, "--teacher", str(teacher), "--tasks", "tatoeba", "--data", str(data))
    assert_error(result, "6 layers", "--cut-layers 3")
    code, doc, err = _retention(
        monkeypatch,
        capsys,
        "--teacher",
        str(teacher),
        "--tasks",
        "tatoeba",
        "--data",
        str(data),
        "--cut-layers",
        "1",
        "--json",
    )
    assert code == 0, err
    assert [r["layers"] for r in doc["rows"]] == [3, 1]
    code, doc, err = _retention(
        monkeypatch,
        capsys,
        "--teacher",
        str(teacher),
        "--tasks",
        "tatoeba",
        "--data",
        str(data),
        "--no-baseline",
        "--json",
    )
    assert code == 0, err
    assert [r["name"] for r in doc["rows"]] == ["teacher"]
    assert doc["tasks"]["tatoeba"]["rows"]["teacher"]["above_baseline"] is None


def test_retrieval_rows_are_eval_retrieval_scores(teacher, student, data, tmp_path, monkeypatch, capsys):
    code, doc, err = _retention(
        monkeypatch,
        capsys,
        "--teacher",
        str(teacher),
        "--student",
        f"small={student}",
        "--tasks",
        "retrieval",
        "--data",
        str(data),
        "--json",
    )
    assert code == 0, err
    table = doc["tasks"]["retrieval"]
    assert sorted(table["languages"]) == ["de", "en"]
    for name, model in (("teacher", teacher), ("small", student)):
        theirs = _eval(
            monkeypatch,
            capsys,
            "eval-retrieval",
            "--model",
            str(model),
            "--data",
            str(data / "mlqa" / "dev"),
            "--monolingual",
        )
        assert {lang: e["score"] for lang, e in table["rows"][name]["languages"].items()} == pytest.approx(
            {lang: s["ndcg_at_10"] for lang, s in theirs["languages"].items()}, abs=1e-9
        )


def test_work_stages_are_read_back_and_refused_when_inputs_change(
    teacher, student, data, tmp_path, monkeypatch, capsys
):
    from mlminilm.evaluation import tatoeba

    own = tmp_path / "data"
    shutil.copytree(data / "tatoeba", own / "tatoeba")
    args = ["--teacher", str(teacher), "--student", f"small={student}", "--tasks", "tatoeba", "--data", str(own)]
    args += ["--work", str(tmp_path / "work"), "--json"]
    code, first, err = _retention(monkeypatch, capsys, *args)
    assert code == 0, err

    def never(*a, **k):
        raise AssertionError("a finished stage ran again")

    monkeypatch.setattr(tatoeba, "run", never)
    code, again, err = _retention(monkeypatch, capsys, *args)
    assert code == 0, err
    assert again["tasks"] == first["tasks"]

    lines = (own / "tatoeba" / "tatoeba.deu-eng.deu").read_text().splitlines()
    (own / "tatoeba" / "tatoeba.deu-eng.deu").write_text("\n".join(reversed(lines)) + "\n")
    out = tmp_path / "report"
    assert_error(_retention(monkeypatch, capsys, *args, "--out", str(out)), "tatoeba teacher", "data", "other inputs")
    assert not out.exists()


def test_missing_data_is_one_line_per_task(teacher, data, tmp_path, monkeypatch, capsys):
    only_tatoeba = tmp_path / "data"
    shutil.copytree(data / "tatoeba", only_tatoeba / "tatoeba")
    line = assert_error(
        _retention(
            monkeypatch,
            capsys,
            "--teacher",
            str(teacher),
            "--tasks",
            "tatoeba,retrieval,probe",
            "--data",
            str(only_tatoeba),
        ),
        "--tasks retrieval needs",
        "mlqa/dev",
        "--tasks probe needs",
        "xnli",
    )
    assert "--tasks tatoeba" not in line


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--student", "nameless"], ["--student 'nameless'", "NAME=DIR"]),
        (["--student", "teacher=x"], ["'teacher' names a row"]),
        (["--student", "a=x", "--student", "a=y"], ["given twice"]),
        (["--tasks", "tatoeba,qa"], ["--tasks qa", "choose from"]),
        (["--student", "a=/nowhere/student"], ["--student a"]),
    ],
)
def test_bad_options_are_one_error_line(teacher, data, tmp_path, monkeypatch, capsys, extra, needles):
    out = tmp_path / "report"
    args = ["--teacher", str(teacher), "--tasks", "tatoeba", "--data", str(data), "--out", str(out), *extra]
    assert_error(_retention(monkeypatch, capsys, *args), *needles)
    assert not out.exists()


def test_students_of_two_depths_need_cut_layers(teacher, student, data, monkeypatch, capsys):
    args = ["--teacher", str(teacher), "--student", f"a={student}", "--student", f"b={teacher}", "--tasks", "tatoeba"]
    assert_error(_retention(monkeypatch, capsys, *args, "--data", str(data)), "2 and 3 layers", "--cut-layers")


def test_out_inside_work_or_data_is_refused(teacher, data, tmp_path, monkeypatch, capsys):
    args = ["--teacher", str(teacher), "--tasks", "tatoeba", "--data", str(data), "--cut-layers", "1"]
    assert_error(
        _retention(monkeypatch, capsys, *args, "--work", str(tmp_path / "w"), "--out", str(tmp_path / "w" / "r")),
        "--work",
    )
    assert_error(_retention(monkeypatch, capsys, *args, "--out", str(data / "r")), "--data")


def test_probe_rows_share_chance_corrected(teacher, student, data, tmp_path, monkeypatch, capsys):
    from taskdata import write_nli_tsv

    root = tmp_path / "data"
    shutil.copytree(data / "tatoeba", root / "tatoeba")
    (root / "xnli").mkdir()
    write_nli_tsv(root / "xnli" / "test-en.tsv", "en", 60, seed=1)
    for lang in ("en", "de"):
        write_nli_tsv(root / "xnli" / f"dev-{lang}.tsv", lang, 24, seed=2)
    code, doc, err = _retention(
        monkeypatch,
        capsys,
        "--teacher",
        str(teacher),
        "--student",
        f"small={student}",
        "--tasks",
        "probe,tatoeba",
        "--data",
        str(root),
        "--resamples",
        "200",
        "--json",
    )
    assert code == 0, err
    assert list(doc["tasks"]) == ["probe", "tatoeba"]
    table = doc["tasks"]["probe"]
    assert sorted(table["languages"]) == ["de", "en"] and table["chance"] == pytest.approx(100 / 3)
    assert {n: p["train_pairs"] + p["selection_pairs"] for n, p in table["probe"].items()} == dict.fromkeys(
        ["teacher", "cut teacher", "small"], 60
    )
    t = table["rows"]["teacher"]["languages"]
    for name in ("cut teacher", "small"):
        for lang, entry in table["rows"][name]["languages"].items():
            if abs(t[lang]["score"] - 100 / 3) < 1e-9:  # a teacher at chance: no share
                assert entry["share"] is None
                continue
            assert entry["share"] == pytest.approx((entry["score"] - 100 / 3) / (t[lang]["score"] - 100 / 3))
    # dev files of other lengths cannot share the draws: refused before any work
    write_nli_tsv(root / "xnli" / "dev-de.tsv", "de", 12, seed=2)
    out = tmp_path / "report"
    assert_error(
        _retention(
            monkeypatch, capsys, "--teacher", str(teacher), "--tasks", "probe", "--data", str(root), "--out", str(out)
        ),
        "differ in length",
        "row-parallel",
    )
    assert not out.exists()


def test_finetuned_xnli_and_mlqa_name_their_training(teacher, data, tmp_path, monkeypatch, capsys):
    from taskdata import squad_doc, write_json, write_nli_tsv

    root = tmp_path / "data"
    shutil.copytree(data / "mlqa", root / "mlqa")
    (root / "xnli").mkdir()
    write_nli_tsv(root / "xnli" / "test-en.tsv", "en", 40, seed=1)
    for lang in ("en", "de"):
        write_nli_tsv(root / "xnli" / f"dev-{lang}.tsv", lang, 12, seed=2)
    train = squad_doc("en", count=2, seed=1)
    train["data"] = [dict(article, title=f"t{i}") for i in range(10) for article in train["data"]]
    (root / "tydiqa").mkdir()
    write_json(root / "tydiqa" / "tydiqa.goldp.en.train.json", train)
    out = tmp_path / "report"
    code, doc, err = _retention(
        monkeypatch,
        capsys,
        "--teacher",
        str(teacher),
        "--tasks",
        "xnli,mlqa",
        "--data",
        str(root),
        "--cut-layers",
        "1",
        "--xnli-epochs",
        "1",
        "--qa-epochs",
        "1",
        "--resamples",
        "100",
        "--out",
        str(out),
        "--work",
        str(tmp_path / "work"),
        "--json",
    )
    assert code == 0, err
    assert list(doc["tasks"]) == ["xnli", "mlqa"]
    xnli, mlqa = doc["tasks"]["xnli"], doc["tasks"]["mlqa"]
    assert sorted(xnli["languages"]) == ["de", "en"] and sorted(mlqa["languages"]) == ["de", "en"]
    assert xnli["finetune"]["teacher"]["training"]["pairs"] + xnli["finetune"]["teacher"]["training"]["selection"] == 40
    assert mlqa["finetune"]["cut teacher"]["training"]["selection"] == 2  # every 10th of 20 articles, one question each
    assert mlqa["finetune"]["cut teacher"]["protocol"]["epochs"] == 1
    for name in ("teacher", "cut teacher"):
        theirs = json.loads((Path(mlqa["reports"][name]) / "metrics.json").read_text())
        assert {k: e["score"] for k, e in mlqa["rows"][name]["languages"].items()} == {
            k: s["f1"] for k, s in theirs["languages"].items()
        }
    markdown = (out / "retention.md").read_text()
    assert "XNLI test-en, training pairs" in markdown and "tydiqa.goldp.en.train.json" in markdown
    assert markdown.count("1 epoch(s)") == 2


# Slow (about 50 s: the real teacher, converted, cut and evaluated twice): `make test-slow`, which CI runs.
@pytest.mark.slow
@pytest.mark.realdata
def test_real_teacher_and_cut_teacher_are_eval_tatoeba_scores(shared_data, tmp_path, monkeypatch, capsys):
    """The issue's goal on multilingual-e5-small: the teacher's and the cut teacher's Tatoeba rows are eval-tatoeba's
    own, the cut made here by transformers alone (first 100 German pairs, to stay fast)."""
    from transformers import AutoModel

    from mlminilm.models.loading import resolve_model

    folder = tmp_path / "data" / "tatoeba"
    folder.mkdir(parents=True)
    for side in ("deu", "eng"):
        lines = (shared_data / "tatoeba" / f"tatoeba.deu-eng.{side}").read_text(encoding="utf-8").splitlines()
        (folder / f"tatoeba.deu-eng.{side}").write_text("\n".join(lines[:100]) + "\n", encoding="utf-8")
    code, doc, err = _retention(
        monkeypatch, capsys, "--teacher", "multilingual-e5-small", "--tasks", "tatoeba", "--data",
        str(tmp_path / "data"), "--resamples", "50", "--json",
    )  # fmt: skip
    assert code == 0, err
    teacher_dir = Path(resolve_model("multilingual-e5-small"))
    cut = tmp_path / "cut"
    shutil.copytree(teacher_dir, cut, ignore=shutil.ignore_patterns("*.safetensors"))
    model = AutoModel.from_pretrained(teacher_dir)
    model.encoder.layer = model.encoder.layer[:6]
    model.config.num_hidden_layers = 6
    model.save_pretrained(cut)
    rows = doc["tasks"]["tatoeba"]["rows"]
    for name, model_dir in (("teacher", "multilingual-e5-small"), ("cut teacher", str(cut))):
        theirs = _eval(monkeypatch, capsys, "eval-tatoeba", "--model", model_dir, "--data", str(folder))
        assert rows[name]["languages"]["de"]["score"] == theirs["languages"]["de"]["xx_to_en"]
    assert rows["cut teacher"]["languages"]["de"]["score"] < rows["teacher"]["languages"]["de"]["score"]
