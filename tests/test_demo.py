"""The demo's parts: its bundled data is consistent and installed, its retrieval files are what eval-tatoeba
reads, its closing table computes what it says, and the whole run works end to end on a tiny teacher."""

from __future__ import annotations

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

import pytest

from helpers import REPO, save_tiny_teacher

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DEMO = REPO / "mlminilm" / "demo"
LANGS = ("ar", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "tr", "vi", "zh")


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_bundled_nli_is_the_same_pairs_in_every_language():
    labels = {lang: [row.split("\t")[2] for row in _lines(DEMO / "nli" / f"test-{lang}.tsv")] for lang in LANGS}
    assert all(len(v) == 120 for v in labels.values())
    assert all(v == labels["en"] for v in labels.values())  # translations keep the order and the labels
    assert {l: labels["en"].count(l) for l in set(labels["en"])} == {
        "entailment": 40,
        "neutral": 40,
        "contradiction": 40,
    }
    train = [row.split("\t") for row in _lines(DEMO / "nli" / "train-en.tsv")]
    assert len(train) == 600 and all(len(r) == 3 and all(r) for r in train)
    test_premises = {row.split("\t")[0] for row in _lines(DEMO / "nli" / "test-en.tsv")}
    assert not test_premises & {r[0] for r in train}  # no test premise is trained on


def test_bundled_parallel_sentences_are_aligned_and_distinct():
    for lang in LANGS:
        lines = _lines(DEMO / "parallel" / f"{lang}.txt")
        assert len(lines) == 100 and all(l.strip() for l in lines), lang
        assert len(set(lines)) == 100, lang  # a duplicate could not retrieve both copies
    corpus = set(_lines(DEMO / "corpus" / "en.txt"))
    assert not corpus & set(_lines(DEMO / "parallel" / "en.txt"))  # held out from the distillation corpus


def test_bundled_corpus_is_line_parallel_and_becomes_pairs(tmp_path):
    """The demo distils with --parallel on the corpus's translations: every file lines up with en.txt."""
    from mlminilm.corpus.parallel import read_parallel
    from mlminilm.demo.run import CORPUS, write_pairs

    english = _lines(DEMO / "corpus" / "en.txt")
    assert write_pairs(CORPUS, tmp_path) == 11 * len(english)
    found = read_parallel(tmp_path)
    assert found.lang_counts() == {l: len(english) for l in LANGS if l != "en"}
    de = [t for t, lang in zip(found.targets, found.langs) if lang == "de"]
    assert de == _lines(DEMO / "corpus" / "de.txt")
    assert found.sources[: len(english)] == tuple(english)


def test_bundled_data_is_package_data():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["mlminilm.demo"]
    for folder, pattern in (("corpus", "*.txt"), ("nli", "*.tsv"), ("parallel", "*.txt")):
        assert f"{folder}/{pattern}" in data and list((DEMO / folder).glob(pattern))


def test_parallel_sentences_become_tatoeba_files(tmp_path):
    from mlminilm.demo.run import PARALLEL, write_tatoeba_layout
    from mlminilm.tasks.tatoeba import load_tatoeba

    sets, skipped = load_tatoeba(write_tatoeba_layout(PARALLEL, tmp_path))
    assert sorted(sets) == sorted(l for l in LANGS if l != "en") and not skipped
    assert sets["zh"].english == _lines(DEMO / "parallel" / "en.txt")
    assert sets["zh"].source == _lines(DEMO / "parallel" / "zh.txt")


def _report(values: dict, key: str, n: int, extra: dict | None = None) -> dict:
    langs = {lang: {key: v, "examples": n} for lang, v in values.items()}
    avg = sum(values.values()) / len(values)
    return {"languages": langs, "average": {key: avg}, **(extra or {})}


def test_summary_table_by_hand():
    from types import SimpleNamespace

    from mlminilm.demo.run import summary_table

    emb = {
        "embedding": {"pooling": ["mean"], "layer": 12, "prefix": "query: "},
        "throughput": {"sentences_per_s": 100.0, "device": "cpu"},
    }
    emb_s = {
        "embedding": {"pooling": ["mean"], "layer": 6, "prefix": "query: "},
        "throughput": {"sentences_per_s": 250.0, "device": "cpu"},
    }
    nli = {
        "teacher": _report({"en": 60.0, "de": 50.0}, "accuracy", 120),
        "cut": _report({"en": 40.0, "de": 35.0}, "accuracy", 120),
        "student": _report({"en": 45.0, "de": 40.0}, "accuracy", 120),
    }
    retrieval = {
        "teacher": _report({"de": 100.0}, "xx_to_en", 100, emb),
        "cut": _report({"de": 80.0}, "xx_to_en", 100, emb_s),
        "student": _report({"de": 90.0}, "xx_to_en", 100, emb_s),
    }
    lines = summary_table(
        "multilingual-e5-small",
        SimpleNamespace(hidden_size=384),
        6,
        SimpleNamespace(steps=60, first_loss=0.9, last_loss=0.3),
        nli,
        retrieval,
        {"teacher": (117_000_000, 96_000_000), "student": (107_000_000, 96_000_000)},
        "fp32",
    )
    table = "\n".join(lines)
    row = {l.split()[0]: l.split() for l in lines if l.strip() and l.split()[0] in ("en", "de", "avg")}
    assert row["en"][1:5] == ["60.0", "40.0", "45.0", "75%"] and row["en"][5:] == ["-", "-", "-", "-"]
    assert row["de"][1:] == ["50.0", "35.0", "40.0", "80%", "100.0", "80.0", "90.0", "90%"]
    assert row["avg"][1:5] == ["55.0", "37.5", "42.5", "77%"]  # 42.5 / 55 = 77.3 %
    assert "first 6 layers, untrained" in table
    assert "120 pairs per language" in table and "standard error about 4.6 points" in table  # sqrt(.25/120)
    assert "(2.5x)" in table and "student 107.0M (96.0M + 11.0M)" in table


def test_the_demo_names_the_distill_options_it_runs(tmp_path, monkeypatch):
    """The baseline's and the student's log lines name the distill options of their runs as a user would type them:
    both start from the teacher's layers, which takes --init teacher (distill's default start is random, and
    --init-layers alone is refused; issue 40 item 10)."""
    from types import SimpleNamespace

    from mlminilm import distill
    from mlminilm.demo import run as demo

    configs, said = [], []
    monkeypatch.setattr(distill, "run", configs.append)
    stages = demo._Stages(tmp_path, "fp32")
    stages.log = SimpleNamespace(info=lambda message, *args: said.append(message % args))
    t_cfg = SimpleNamespace(hidden_size=32, num_attention_heads=4, intermediate_size=64)
    shape = stages.student_shape("teacher-dir", t_cfg, 2)
    stages.cut_teacher(shape, 2)
    stages.distill(shape, 4, 2, 32)
    assert [c.init_rule for c in configs] == ["first", "first-last"]
    for cfg, line in zip(configs, said, strict=True):
        assert cfg.init == "teacher" and f"--init teacher --init-layers {cfg.init_rule}" in line, line


@pytest.mark.slow
def test_demo_end_to_end_on_a_tiny_teacher(tiny_sentencepiece_dir, tmp_path, capsys):
    """The whole demo with a tiny XLM-R-style teacher (a few steps): it ends with the table for 12 languages."""
    from mlminilm.demo import run as demo

    teacher = save_tiny_teacher(
        tiny_sentencepiece_dir, tmp_path / "teacher", kind="xlmr", layers=2, hidden=32, heads=4, intermediate=64
    )
    assert (
        demo.main(["--teacher", str(teacher), "--out", str(tmp_path / "out"), "--steps", "2", "--precision", "fp32"])
        == 0
    )
    out = capsys.readouterr().out
    assert "what a 1x32 student keeps" in out
    rows = [l.split()[0] for l in out.splitlines() if l.strip() and l.split()[0] in LANGS]
    assert sorted(rows) == sorted(LANGS)
    assert (tmp_path / "out" / "report-nli-student" / "metrics.json").is_file()
    assert (tmp_path / "out" / "report-retrieval-teacher" / "metrics.json").is_file()
    assert (tmp_path / "out" / "report-retrieval-cut" / "metrics.json").is_file()  # the baseline beside them
    # The demo never resumes, so it keeps no checkpoints (each holds the whole embedding matrix).
    assert not list((tmp_path / "out").glob("*/checkpoints"))
