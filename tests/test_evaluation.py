"""eval-xnli and eval-mlqa end to end on tiny models and files: reports, metrics.json schema, --predictions
scoring, missing ids, layouts, bad input; and (realdata) every language of the real XNLI test and MLQA dev."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from taskdata import LABELS, save_head_model, squad_doc, write_json, write_mlqa_dir, write_nli_tsv, write_xnli_dir

from helpers import assert_one_line_error, run_cli, tiny_encoder_fixture

pytestmark = pytest.mark.usefixtures("one_torch_thread")


PNG = b"\x89PNG\r\n\x1a\n"
REPORT_FILES = ("metrics.json", "metrics.csv", "metrics.md", "chart.png")


encoder = tiny_encoder_fixture("tiny_wordpiece_dir", "enc", layers=1, hidden=16, heads=2, intermediate=32)


@pytest.fixture(scope="module")
def xnli_model(encoder, tmp_path_factory):
    """A `finetune --task xnli` output (2 steps): a classifier with run.json and selection.json."""
    from mlminilm import finetune
    from mlminilm.config import FinetuneConfig

    folder = tmp_path_factory.mktemp("ftx")
    train = write_nli_tsv(folder / "train.tsv", "en", 16)
    dev = write_nli_tsv(folder / "dev.tsv", "en", 6, seed=3)
    out = folder / "model"
    finetune.run(
        FinetuneConfig(
            task="xnli",
            model=str(encoder),
            train=str(train),
            dev=str(dev),
            out=out,
            max_steps=2,
            save_every=1,
            batch_size=8,
            max_seq_len=48,
        )
    )
    return out


@pytest.fixture(scope="module")
def qa_model(encoder, tmp_path_factory):
    """A `finetune --task qa` output with short windows (eval-mlqa reads them from its run.json)."""
    from mlminilm import finetune
    from mlminilm.config import FinetuneConfig

    folder = tmp_path_factory.mktemp("ftq")
    train = write_json(folder / "train.json", squad_doc("en", count=4, seed=1))
    out = folder / "model"
    finetune.run(
        FinetuneConfig(
            task="qa",
            model=str(encoder),
            train=str(train),
            out=out,
            max_steps=2,
            batch_size=4,
            max_seq_len=64,
            doc_stride=16,
            max_query_length=12,
        )
    )
    return out


def check_report(out: Path) -> dict:
    for name in REPORT_FILES:
        assert (out / name).is_file(), name
    assert (out / "chart.png").read_bytes()[:8] == PNG
    assert not list(out.parent.glob(f".tmp-{out.name}-*"))
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


def test_eval_xnli_report(xnli_model, tmp_path):
    data = write_xnli_dir(tmp_path / "xnli", ("en", "de", "zh"), count=9)
    out = tmp_path / "report"
    proc = run_cli(
        "eval-xnli",
        "--model",
        str(xnli_model),
        "--data",
        str(data),
        "--langs",
        "en,de",
        "--langs",
        "zh",
        "--out",
        str(out),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)  # --json: the document and nothing else on stdout
    doc = check_report(out)
    assert printed["languages"] == doc["languages"]
    assert list(doc["languages"]) == ["en", "de", "zh"]
    for lang, scores in doc["languages"].items():
        assert scores["examples"] == 9
        assert sum(map(sum, scores["confusion"])) == 9
        assert [sum(row) for row in scores["confusion"]] == [3, 3, 3]  # rows: gold class
        assert scores["accuracy"] == pytest.approx(100 * scores["correct"] / 9)
        assert scores["file"].endswith(f"test-{lang}.tsv")
        predictions = (out / "predictions" / f"test-{lang}.tsv").read_text().split()
        assert len(predictions) == 9 and set(predictions) <= set(LABELS)
    assert doc["average"]["accuracy"] == pytest.approx(sum(s["accuracy"] for s in doc["languages"].values()) / 3)
    assert doc["average"]["examples"] == 27
    assert doc["labels"] == list(LABELS) and doc["task"] == "xnli" and doc["split"] == "test"
    assert "zero-shot" in doc["protocol"] and doc["model"] == str(xnli_model)
    assert "best English-dev accuracy" in doc["selection"]["rule"]
    assert set(doc["data"]["files"]) == {"en", "de", "zh"}
    assert doc["throughput"]["examples_per_s"] > 0
    csv_lines = (out / "metrics.csv").read_text().splitlines()
    assert csv_lines[0] == "language,name,examples,accuracy" and csv_lines[-1].startswith("average,")
    assert "| de | German | 9 |" in (out / "metrics.md").read_text()


def test_eval_xnli_every_split_file(xnli_model, tmp_path, monkeypatch, capsys):
    """Without --langs: every test-XX.tsv of the folder, XNLI's 15 or not (ja, ast: registered; qu: not), scored
    alike; one warning names the language langs/ does not have."""
    from helpers import run_main

    data = write_xnli_dir(tmp_path / "xnli", ("en",), count=6)
    for i, lang in enumerate(("ja", "qu", "ast")):
        write_nli_tsv(data / f"test-{lang}.tsv", ("fr", "ru", "de")[i], 3 * (i + 2), seed=i)
    write_nli_tsv(data / "dev-de.tsv", "de", 3)  # another split: not evaluated
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "eval-xnli", "--model", str(xnli_model), "--data", str(data), "--json"
    )
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert {lang: s["examples"] for lang, s in doc["languages"].items()} == {"ast": 12, "en": 6, "ja": 6, "qu": 9}
    for lang, scores in doc["languages"].items():
        assert scores["file"].endswith(f"test-{lang}.tsv") and sum(map(sum, scores["confusion"])) == scores["examples"]
    assert doc["average"]["accuracy"] == pytest.approx(sum(s["accuracy"] for s in doc["languages"].values()) / 4)
    warnings = [line for line in stderr.splitlines() if "not in the language registry" in line]
    assert len(warnings) == 1 and "language qu not in" in warnings[0], stderr


def test_eval_xnli_table_and_xnli10_layout(xnli_model, tmp_path):
    from mlminilm.config import EvalXnliConfig
    from mlminilm.evaluation import xnli

    # XNLI-1.0: one file, a language column, "contradictory".
    folder = tmp_path / "XNLI-1.0"
    folder.mkdir()
    header = "language\tgold_label\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1\tsentence2"
    rows = [
        f"{lang}\t{label}\tx\ty\tThe cat sat.\tA dog runs."
        for lang in ("en", "de", "fr")
        for label in ("entailment", "neutral", "contradictory") * 2
    ]
    rows.append("fr\t-\tx\ty\tThe cat sat.\tA dog runs.")  # no gold label: skipped, counted for fr only
    (folder / "xnli.dev.tsv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    doc = xnli.run(EvalXnliConfig(model=str(xnli_model), data=str(folder), split="dev", langs=("de", "fr")))
    assert {k: v["examples"] for k, v in doc["languages"].items()} == {"de": 6, "fr": 6}
    assert {k: v["skipped"] for k, v in doc["languages"].items()} == {"de": 0, "fr": 1}
    assert [sum(r) for r in doc["languages"]["fr"]["confusion"]] == [2, 2, 2]
    assert "report_dir" not in doc  # no --out: nothing written
    from rich.console import Console

    from mlminilm.report import rich_table

    console = Console(record=True, width=100)
    console.print(rich_table(doc))
    text = console.export_text()
    assert "French" in text and "average" in text


def _generic_label_copy(model_dir: Path, out: Path, perm: list[int]) -> Path:
    """`model_dir` with its head's outputs permuted (new output i = old output perm[i]) and its label names
    replaced by LABEL_0..2: the same classifier, saved in another order without saying which."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    with torch.no_grad():
        model.classifier.weight.copy_(model.classifier.weight[perm].clone())
        model.classifier.bias.copy_(model.classifier.bias[perm].clone())
    model.config.id2label = {i: f"LABEL_{i}" for i in range(3)}
    model.config.label2id = {f"LABEL_{i}": i for i in range(3)}
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    return out


def test_eval_xnli_refuses_unnamed_labels_without_label_order(xnli_model, tmp_path):
    from mlminilm.config import EvalXnliConfig
    from mlminilm.errors import ConfigError
    from mlminilm.evaluation import xnli

    data = write_xnli_dir(tmp_path / "xnli", ("en", "de"), count=12)
    on_data = ("--data", str(data), "--langs", "en,de")

    def run(model, out=None, **kw):
        return xnli.run(EvalXnliConfig(model=str(model), data=str(data), langs=("en", "de"), out=out, **kw))

    def predictions(out):
        return {lang: (out / "predictions" / f"test-{lang}.tsv").read_text().split() for lang in ("en", "de")}

    named = run(xnli_model, tmp_path / "named")
    assert named["label_order"] == {
        "source": "model config (id2label)",
        "model_labels": list(LABELS),
        "outputs": list(LABELS),
    }
    # Output 0 of the copy is the original's contradiction, 1 its entailment, 2 its neutral.
    generic = _generic_label_copy(xnli_model, tmp_path / "generic", [2, 0, 1])
    assert_one_line_error(
        run_cli("eval-xnli", "--model", str(generic), *on_data),
        "does not name its labels",
        "LABEL_0, LABEL_1, LABEL_2",
        "--label-order entailment,neutral,contradiction",
    )
    # The true order: the same predictions, example for example, as the named original.
    out = tmp_path / "ordered"
    proc = run_cli(
        "eval-xnli",
        "--model",
        str(generic),
        *on_data,
        "--label-order",
        "contradiction,entailment,neutral",
        "--out",
        str(out),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["label_order"] == {
        "source": "--label-order",
        "model_labels": ["LABEL_0", "LABEL_1", "LABEL_2"],
        "outputs": ["contradiction", "entailment", "neutral"],
    }
    assert predictions(out) == predictions(tmp_path / "named")
    for lang in ("en", "de"):
        assert doc["languages"][lang]["confusion"] == named["languages"][lang]["confusion"]
    # Assuming NLI order (what eval-xnli did before) reads every output as another class: no prediction agrees.
    run(generic, tmp_path / "wrong", label_order=tuple(LABELS))
    for lang, right in predictions(tmp_path / "named").items():
        wrong = predictions(tmp_path / "wrong")[lang]
        assert len(wrong) == len(right) == 12 and all(w != r for w, r in zip(wrong, right))
    # A named model with an order that contradicts its names; an order that is not the three classes.
    with pytest.raises(ConfigError, match="contradicts the labels"):
        run(xnli_model, label_order=("neutral", "entailment", "contradiction"))
    assert_one_line_error(
        run_cli("eval-xnli", "--model", str(generic), *on_data, "--label-order", "entailment,neutral"),
        "--label-order must name entailment, neutral, contradiction",
    )


def test_eval_xnli_counts_skipped_rows_per_language(xnli_model, tmp_path):
    data = write_xnli_dir(tmp_path / "xnli", ("en", "de"), count=6)
    with (data / "test-de.tsv").open("a", encoding="utf-8") as f:
        f.write("Ein Satz.\tNoch einer.\t-\nDer dritte.\tDer vierte.\t\n")  # gold "-" and an empty gold label
    out = tmp_path / "report"
    proc = run_cli(
        "eval-xnli",
        "--model",
        str(xnli_model),
        "--data",
        str(data),
        "--langs",
        "en,de",
        "--out",
        str(out),
        env={"COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "skipped: 2 rows without a gold label" in proc.stdout
    doc = check_report(out)
    assert {k: (v["examples"], v["skipped"]) for k, v in doc["languages"].items()} == {"en": (6, 0), "de": (6, 2)}
    assert doc["average"]["skipped"] == 2 and "'-'" in doc["skipped_rule"]
    assert (out / "metrics.csv").read_text().splitlines()[0] == "language,name,examples,accuracy,skipped"
    markdown = (out / "metrics.md").read_text()
    assert "| de | German | 6 |" in markdown and "skipped and not scored: 2" in markdown


def test_eval_mlqa_model_gxlt(qa_model, tmp_path):
    data = write_mlqa_dir(tmp_path / "MLQA_V1" / "dev", ("en", "de"), count=3)
    out = tmp_path / "report"
    proc = run_cli(
        "eval-mlqa",
        "--model",
        str(qa_model),
        "--data",
        str(data.parent),
        "--langs",
        "en,de",
        "--gxlt",
        "--out",
        str(out),
        "--batch-size",
        "4",
    )
    assert proc.returncode == 0, proc.stderr
    assert "context" in proc.stdout and "mean" in proc.stdout  # the G-XLT matrix on stdout
    doc = check_report(out)
    assert sorted(doc["languages"]) == ["de-de", "de-en", "en-de", "en-en"]
    assert doc["gxlt"]["contexts"] == ["en", "de"] and len(doc["gxlt"]["f1"]) == 2
    assert doc["settings"]["max_seq_len"] == 64 and doc["settings"]["doc_stride"] == 16  # from run.json
    for key, scores in doc["languages"].items():
        c, q = key.split("-")
        assert (scores["context_lang"], scores["question_lang"], scores["examples"]) == (c, q, 3)
        assert scores["features"] > 3  # long contexts: several windows per question
        assert 0 <= scores["exact_match"] <= 100 and 0 <= scores["f1"] <= 100
        saved = json.loads((out / "predictions" / f"dev-context-{c}-question-{q}.json").read_text())
        assert sorted(saved) == [f"{c}-{q}-7-{i}" for i in range(3)] and all(isinstance(a, str) for a in saved.values())
    assert doc["selection"]["rule"].startswith("last checkpoint")
    assert "G-XLT F1" in (out / "metrics.md").read_text()


def test_predictions_gold_scores_100_and_missing_ids_score_0(tmp_path):
    data = write_mlqa_dir(tmp_path / "mlqa", ("en", "de"), count=4)
    preds = tmp_path / "preds"
    preds.mkdir()
    for lang in ("en", "de"):
        name = f"dev-context-{lang}-question-{lang}.json"
        doc = json.loads((data / name).read_text())
        gold = {qa["id"]: qa["answers"][0]["text"] for p in doc["data"][0]["paragraphs"] for qa in p["qas"]}
        if lang == "de":
            del gold["de-de-7-1"]
        write_json(preds / name, gold)
    proc = run_cli("eval-mlqa", "--data", str(data), "--predictions", str(preds), "--langs", "en,de", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    en, de = doc["languages"]["en"], doc["languages"]["de"]
    assert (en["exact_match"], en["f1"], en["missing"], en["examples"]) == (100.0, 100.0, 0, 4)
    assert (de["exact_match"], de["f1"], de["missing"], de["examples"]) == (75.0, 75.0, 1, 4)
    assert doc["average"]["missing"] == 1 and doc["model"] is None and doc["predictions_from"] == str(preds)
    assert "1 of 4 questions have no prediction" in proc.stderr
    assert doc["scorer"]["name"] == "mlqa" and doc["scorer"]["chosen"] == "auto (MLQA files)"
    assert "official MLQA scorer" in doc["protocol"]


def _xquad_file(context: str, questions: list[tuple[str, str]]) -> dict:
    """One SQuAD-format article: `questions` as (id, gold answer), each answer found in `context`."""
    qas = [
        {"id": qid, "question": "?", "answers": [{"text": gold, "answer_start": context.index(gold)}]}
        for qid, gold in questions
    ]
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}


def test_xquad_files_are_scored_with_squad_v1_and_the_report_names_it(tmp_path):
    """XTREME scores XQuAD with the SQuAD v1.1 script; on these answers MLQA's rules would score much higher."""
    from mlminilm.config import EvalMlqaConfig
    from mlminilm.evaluation import mlqa

    data, preds = tmp_path / "xquad", tmp_path / "preds"
    data.mkdir()
    preds.mkdir()
    write_json(data / "xquad.zh.json", _xquad_file("北京大学位于北京。", [("zh-1", "北京大学"), ("zh-2", "北京")]))
    write_json(preds / "xquad.zh.json", {"zh-1": "北京", "zh-2": "北京。"})
    write_json(
        data / "xquad.es.json",
        _xquad_file("Visitamos el museo del «Prado».", [("es-1", "el museo del «Prado»"), ("es-2", "Prado")]),
    )
    write_json(preds / "xquad.es.json", {"es-1": "museo del Prado", "es-2": "«Prado»"})
    # Hand-worked, SQuAD v1.1 (whitespace tokens, ASCII punctuation and English articles only):
    #   zh-1 ["北京"] vs ["北京大学"]: 0 / 0; zh-2 ["北京。"] vs ["北京"]: 0 / 0 -> zh EM 0, F1 0.
    #   es-1 [museo del prado] vs [el museo del «prado»]: 2 shared, P 2/3, R 1/2 -> F1 4/7, EM 0;
    #   es-2 ["«prado»"] vs ["prado"]: 0 / 0 -> es EM 0, F1 100 * (4/7) / 2.
    out = tmp_path / "report"
    proc = run_cli(
        "eval-mlqa", "--data", str(data), "--predictions", str(preds), "--out", str(out), env={"COLUMNS": "200"}
    )
    assert proc.returncode == 0, proc.stderr
    assert "XQuAD dev (SQuAD v1.1 scorer)" in proc.stdout  # the terminal table's header
    doc = check_report(out)
    assert doc["task"] == "xquad"
    assert doc["scorer"]["name"] == "squad" and doc["scorer"]["chosen"] == "auto (XQuAD files)"
    assert "SQuAD v1.1 scorer" in doc["protocol"] and "MLQA" not in doc["protocol"]
    zh, es = doc["languages"]["zh"], doc["languages"]["es"]
    assert (zh["exact_match"], zh["f1"]) == (0.0, 0.0)
    assert es["exact_match"] == 0.0 and es["f1"] == pytest.approx(100 * (4 / 7) / 2)
    markdown = (out / "metrics.md").read_text(encoding="utf-8")
    assert markdown.startswith("# XQuAD dev (SQuAD v1.1 scorer)")
    assert "- scorer: SQuAD v1.1 (auto (XQuAD files))" in markdown
    # --scorer mlqa overrides. MLQA rules (context language), hand-worked:
    #   zh-1 [北 京] vs [北 京 大 学]: P 1, R 1/2 -> F1 2/3, EM 0; zh-2 "。" is punctuation: EM 1, F1 1.
    #   es-1 "el" is a Spanish article and «» are punctuation: EM 1, F1 1; es-2 likewise: EM 1, F1 1.
    doc = mlqa.run(EvalMlqaConfig(data=str(data), predictions=preds, scorer="mlqa"))
    assert doc["scorer"]["name"] == "mlqa" and doc["scorer"]["chosen"] == "--scorer mlqa"
    zh, es = doc["languages"]["zh"], doc["languages"]["es"]
    assert zh["exact_match"] == 50.0 and zh["f1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert (es["exact_match"], es["f1"]) == (100.0, 100.0)


def test_qa_layouts_and_prediction_files(tmp_path):
    from mlminilm.config import EvalMlqaConfig
    from mlminilm.errors import DataError
    from mlminilm.evaluation import mlqa

    # One SQuAD-format file whose name carries no language: --lang names it.
    single = write_json(tmp_path / "answers.json", squad_doc("de", count=2, seed=4))
    preds = tmp_path / "p"
    preds.mkdir()
    write_json(preds / "answers.json", {"de-de-4-0": "jeden Morgen", "de-de-4-1": "nein"})
    doc = mlqa.run(EvalMlqaConfig(data=str(single), lang="de", predictions=preds))
    assert list(doc["languages"]) == ["de"] and doc["languages"]["de"]["exact_match"] == 50.0
    with pytest.raises(DataError, match="cannot tell the language"):
        mlqa.run(EvalMlqaConfig(data=str(single), predictions=preds))
    # XQuAD layout: languages from the file names.
    xquad = tmp_path / "xquad"
    xquad.mkdir()
    for lang in ("en", "de"):
        write_json(xquad / f"xquad.{lang}.json", squad_doc(lang, count=2, seed=5))
        write_json(preds / f"xquad.{lang}.json", {f"{lang}-{lang}-5-0": "x"})
    doc = mlqa.run(EvalMlqaConfig(data=str(xquad), predictions=preds))
    assert doc["task"] == "xquad" and sorted(doc["languages"]) == ["de", "en"]
    assert doc["languages"]["en"]["missing"] == 1
    # A prediction file that is not {id: answer}; a prediction file that is not there.
    write_json(preds / "xquad.de.json", ["not", "a", "mapping"])
    with pytest.raises(DataError, match="not an official prediction file"):
        mlqa.run(EvalMlqaConfig(data=str(xquad), predictions=preds))
    (preds / "xquad.de.json").unlink()
    with pytest.raises(DataError, match="no prediction file xquad.de.json"):
        mlqa.run(EvalMlqaConfig(data=str(xquad), predictions=preds))
    # A file whose gold answers are all blank (like ../shared/data's TyDiQA-GoldP dev files) cannot be scored.
    blank = squad_doc("en", count=2, seed=6)
    for paragraph in blank["data"][0]["paragraphs"]:
        paragraph["qas"][0]["answers"] = [{"text": "", "answer_start": 0}]
    write_json(tmp_path / "blank.json", blank)
    write_json(preds / "blank.json", {})
    with pytest.raises(DataError, match="every gold answer is empty in blank.json"):
        mlqa.run(EvalMlqaConfig(data=str(tmp_path / "blank.json"), lang="en", predictions=preds))


def test_eval_bad_input(encoder, xnli_model, qa_model, tmp_path):
    from mlminilm.config import EvalXnliConfig
    from mlminilm.errors import CheckpointError, ConfigError, DataError
    from mlminilm.evaluation import xnli

    data = write_xnli_dir(tmp_path / "xnli", ("en", "de"), count=3)
    mlqa_dir = write_mlqa_dir(tmp_path / "mlqa", ("en",), count=1)
    out = tmp_path / "out"
    assert_one_line_error(
        run_cli("eval-xnli", "--model", str(encoder), "--data", str(data), "--langs", "en", "--out", str(out)),
        "has no sequence-classification head",
        "finetune --task xnli",
    )
    assert_one_line_error(
        run_cli("eval-mlqa", "--model", str(xnli_model), "--data", str(mlqa_dir), "--langs", "en", "--out", str(out)),
        "has no span-extraction",
        "finetune --task qa",
    )
    assert_one_line_error(
        run_cli("eval-xnli", "--model", str(xnli_model), "--data", str(data), "--langs", "en,xx"),
        "unknown language 'xx'",
        "not an ISO 639-1 or 639-3 code",
        "known: af, am",
    )
    assert not out.exists()
    # In-process: the same errors the CLI prints as one line.
    (data / "test-de.tsv").write_text("a\tb\tentailment\nc\td\tneutral\te\n", encoding="utf-8")
    with pytest.raises(DataError, match="test-de.tsv:2"):
        xnli.run(EvalXnliConfig(model=str(xnli_model), data=str(data), langs=("de",), out=out))
    (data / "test-de.tsv").write_text("a\tb\tentailment\nc\td\tunsure\n", encoding="utf-8")
    with pytest.raises(DataError, match="'unsure' is not an NLI class"):
        xnli.run(EvalXnliConfig(model=str(xnli_model), data=str(data), langs=("de",), out=out))
    assert not out.exists()
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(CheckpointError, match="--overwrite"):
        xnli.run(EvalXnliConfig(model=str(xnli_model), data=str(data), langs=("en",), out=out))
    with pytest.raises(ConfigError, match="is the --model input"):
        xnli.run(EvalXnliConfig(model=str(xnli_model), data=str(data), langs=("en",), out=xnli_model, overwrite=True))
    # --overwrite replaces a report, never the user's files: a directory holding one is refused, naming it.
    with pytest.raises(CheckpointError, match="mine.txt"):
        xnli.run(EvalXnliConfig(model=str(xnli_model), data=str(data), langs=("en",), out=out, overwrite=True))
    assert (out / "mine.txt").read_text() == "keep"
    (out / "mine.txt").unlink()
    xnli.run(EvalXnliConfig(model=str(xnli_model), data=str(data), langs=("en",), out=out))
    xnli.run(EvalXnliConfig(model=str(xnli_model), data=str(data), langs=("en",), out=out, overwrite=True))
    assert check_report(out)["languages"]["en"]["examples"] == 3


# ------------------------------------------------------------------------------------------- real data


@pytest.mark.slow
@pytest.mark.realdata
def test_real_xnli_test_all_15_languages(shared_data, tiny_wordpiece_dir, tmp_path):
    from mlminilm.config import EvalXnliConfig
    from mlminilm.evaluation import xnli

    model = save_head_model(tiny_wordpiece_dir, tmp_path / "m", "xnli")
    doc = xnli.run(
        EvalXnliConfig(
            model=str(model), data=str(shared_data / "xnli"), split="test", batch_size=256, out=tmp_path / "report"
        )
    )
    assert sorted(doc["languages"]) == sorted("ar bg de el en es fr hi ru sw th tr ur vi zh".split())
    for lang, scores in doc["languages"].items():
        assert scores["examples"] == 5010, lang
        assert [sum(row) for row in scores["confusion"]] == [1670, 1670, 1670], lang
    assert doc["average"]["examples"] == 15 * 5010
    check_report(tmp_path / "report")


@pytest.mark.slow
@pytest.mark.realdata
def test_real_mlqa_dev_7_languages(shared_data, tiny_wordpiece_dir, tmp_path):
    from mlminilm.config import EvalMlqaConfig
    from mlminilm.evaluation import mlqa

    model = save_head_model(tiny_wordpiece_dir, tmp_path / "m", "qa")
    doc = mlqa.run(
        EvalMlqaConfig(
            model=str(model), data=str(shared_data / "mlqa"), split="dev", batch_size=256, out=tmp_path / "report"
        )
    )
    counts = {k: v["examples"] for k, v in doc["languages"].items()}
    assert counts == {"ar": 517, "de": 512, "en": 1148, "es": 500, "hi": 507, "vi": 511, "zh": 504}
    assert all(v["missing"] == 0 for v in doc["languages"].values())
    assert doc["settings"] == {
        "max_seq_len": 384,
        "doc_stride": 128,
        "max_query_length": 64,
        "n_best": 20,
        "max_answer_length": 30,
    }
    saved = json.loads((tmp_path / "report" / "predictions" / "dev-context-zh-question-zh.json").read_text())
    assert len(saved) == 504
    check_report(tmp_path / "report")
