"""`distill --parallel`: the parallel-text reader, the stateless draw of pairs, the cross-lingual embedding term
against a float64 loop, and the term inside real distill runs (what it trains, what it records, resume, refusals)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import sample_lines

from helpers import assert_error, assert_usage_error, pair_terms, run_main
from helpers import objective_config as config

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# What the pairs rows of the loss-term table read of a config: the MSE term alone.
PARALLEL_ONLY = SimpleNamespace(
    parallel=Path("pairs.tsv"), parallel_loss_weight=1.0, parallel_contrastive_weight=0.0, parallel_temperature=0.05
)


def _pairs_file(path: Path, n: int = 40, lang: str = "de") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [f"{a}\t{b}" for a, b in zip(sample_lines("en", n), sample_lines(lang, n, seed=1))]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------ reading


def test_reader_by_hand(tmp_path):
    from mlminilm.corpus.parallel import read_parallel

    folder = tmp_path / "par"
    folder.mkdir()
    (folder / "en-de.tsv").write_text(
        "Hello.\tHallo.\n\nCat.\tKatze.\tMieze.\nNo translation.\n\tOhne Quelle.\nDog.\t\tHund.\r\n", encoding="utf-8"
    )
    with gzip.open(folder / "fr.tsv.gz", "wt", encoding="utf-8") as handle:
        handle.write("Yes.\tOui.\n")
    (folder / "notes.md").write_text("not parallel text\n")
    found = read_parallel(folder)
    assert list(zip(found.sources, found.targets, found.langs)) == [
        ("Hello.", "Hallo.", "de"),
        ("Cat.", "Katze.", "de"),
        ("Cat.", "Mieze.", "de"),
        ("Dog.", "Hund.", "de"),
        ("Yes.", "Oui.", "fr"),
    ]
    assert found.skipped == 2 and found.lang_counts() == {"de": 4, "fr": 1}
    assert read_parallel(folder / "fr.tsv.gz").sources == ("Yes.",)


@pytest.mark.parametrize(
    "name, lang",
    [
        ("en-de.tsv", "de"),
        ("de.tsv.gz", "de"),
        ("eng_zh.txt", "zh"),
        ("en-zh-Hant.tsv", "zh-Hant"),
        ("TED2020-en-de.tsv", "?"),
        ("pairs.tsv", "?"),
    ],
)
def test_file_language(name, lang):
    from mlminilm.corpus.parallel import file_lang

    assert file_lang(Path(name)) == lang


def test_reader_refusals(tmp_path):
    from mlminilm.corpus.parallel import read_parallel
    from mlminilm.errors import DataError

    with pytest.raises(DataError, match="does not exist"):
        read_parallel(tmp_path / "missing.tsv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no parallel-text files"):
        read_parallel(tmp_path / "empty")
    (tmp_path / "one-column.tsv").write_text("a\nb\n")
    with pytest.raises(DataError, match="no sentence pairs.*2 line"):
        read_parallel(tmp_path / "one-column.tsv")
    (tmp_path / "latin1.tsv").write_bytes("caf\xe9\tx\n".encode("latin-1"))
    with pytest.raises(DataError, match="UTF-8"):
        read_parallel(tmp_path / "latin1.tsv")


# ------------------------------------------------------------------------------------------ the draw


def test_draw_is_stateless_and_sliced_like_the_running_text(tiny_sentencepiece_dir, tmp_path):
    from transformers import AutoTokenizer

    from mlminilm.corpus.parallel import ParallelSampler, read_parallel

    tok = AutoTokenizer.from_pretrained(tiny_sentencepiece_dir)
    pairs = read_parallel(_pairs_file(tmp_path / "en-de.tsv"))
    sampler = ParallelSampler(pairs, tok, prefix="query: ", max_length=8, seed=3)
    one = sampler.indices(5, 1, 4, 2, 0, 1)  # micro 1 of step 5, one process, batch 4, accumulation 2
    assert np.array_equal(one, ParallelSampler(pairs, tok, prefix="", max_length=8, seed=3).indices(5, 1, 4, 2, 0, 1))
    # Two processes with batch 2 take the same global batch in rank order.
    two = np.concatenate([sampler.indices(5, 1, 2, 2, rank, 2) for rank in (0, 1)])
    assert np.array_equal(one, two)
    assert not np.array_equal(one, sampler.indices(6, 1, 4, 2, 0, 1))
    batch = sampler.batch(5, 1, 4, 2, 0, 1)
    assert batch.both_ids.shape[0] == 8 and batch.source_ids.shape[0] == 4
    assert batch.both_ids.shape[1] <= 8 and batch.langs == {"de": 4}
    # Sources then translations in the student's batch, each prefixed and cut to max_length.
    for row, text in ((0, pairs.sources[one[0]]), (4, pairs.targets[one[0]]), (3, pairs.sources[one[3]])):
        expected = tok("query: " + text, truncation=True, max_length=8)["input_ids"]
        assert batch.both_ids[row][batch.both_mask[row].bool()].tolist() == expected
    assert (
        batch.source_ids[0][batch.source_mask[0].bool()].tolist()
        == tok("query: " + pairs.sources[one[0]], truncation=True, max_length=8)["input_ids"]
    )


# ------------------------------------------------------------------------------------------ the term


def test_parallel_term_against_a_float64_loop():
    from mlminilm.distillation.losses import sentence_embedding
    from mlminilm.distillation.objective import EmbeddingHead

    g = torch.Generator().manual_seed(0)
    b, s, t, h = 3, 5, 7, 6
    teacher = torch.randn(b, s, h, generator=g)
    student = torch.randn(2 * b, t, h, generator=g, requires_grad=True)
    source_mask = torch.ones(b, s, dtype=torch.long)
    source_mask[1, 3:] = 0
    both_mask = torch.ones(2 * b, t, dtype=torch.long)
    both_mask[0, 4:] = 0
    both_mask[5, 2:] = 0
    for normalize in (True, False):
        head = EmbeddingHead(("mean",), normalize)
        target = sentence_embedding(teacher, source_mask, head.modes, head.normalize)
        value = pair_terms(target, student, both_mask, head, PARALLEL_ONLY)["parallel"]

        def mean(x, m):
            rows = [x[i].double().tolist() for i in range(len(m)) if m[i]]
            v = [sum(r[j] for r in rows) / len(rows) for j in range(len(rows[0]))]
            if normalize:
                norm = sum(a * a for a in v) ** 0.5
                v = [a / norm for a in v]
            return v

        total = 0.0
        for i in range(2 * b):
            target = mean(teacher[i % b], source_mask[i % b])
            mine = mean(student[i].detach(), both_mask[i])
            total += sum((x - y) ** 2 for x, y in zip(mine, target))
        assert value.item() == pytest.approx(total / (2 * b), rel=1e-5)
    value.backward()
    assert student.grad[0, 4:].abs().max().item() == 0.0  # padding gets no gradient


# ------------------------------------------------------------------------------------------ in distill


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _term_on_all(teacher: Path, student: Path, pairs: Path) -> float:
    """Mean squared distance of the student's normalised mean-pooled "query: " embeddings of every source and
    translation to the teacher's of the source, in float64 (transformers' own models, not mlminilm's code)."""
    from transformers import AutoModel, AutoTokenizer

    rows = [line.split("\t") for line in pairs.read_text(encoding="utf-8").splitlines()]
    tok = AutoTokenizer.from_pretrained(teacher)

    def embed(model_dir, texts):
        model = AutoModel.from_pretrained(model_dir).double().eval()
        enc = tok(["query: " + t for t in texts], padding=True, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).double()
        return torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)

    target = embed(teacher, [r[0] for r in rows])
    mine = embed(student, [r[0] for r in rows] + [r[1] for r in rows])
    return float(((mine - torch.cat([target, target])) ** 2).sum(-1).mean())


def test_parallel_term_trains_the_student_and_is_recorded(st_teacher, st_data, tmp_path):
    from safetensors.torch import load_file

    from mlminilm import distill

    pairs = _pairs_file(tmp_path / "par" / "en-de.tsv")
    kw = dict(
        hidden_loss_weight=0.0, embedding_loss_weight=0.0, parallel=pairs.parent, lr=3e-3, max_steps=12, save_every=12
    )
    start = distill.run(config(st_teacher, st_data, tmp_path / "init", **{**kw, "max_steps": 0})).student
    result = distill.run(config(st_teacher, st_data, tmp_path / "both", **kw))
    a, b = load_file(start / "model.safetensors"), load_file(result.student / "model.safetensors")
    moved = {k for k in a if not torch.equal(a[k], b[k])}
    # The term reaches the whole top layer (its FFN too), unlike the pure relation losses.
    assert any("layer.1.output.dense" in k for k in moved) and any("layer.1.intermediate" in k for k in moved)
    records = [r for r in _records(tmp_path / "both") if "loss" in r]
    assert all({"attention", "value", "parallel"} <= set(r) for r in records)
    r = records[-1]
    assert r["loss"] == pytest.approx(r["attention"] + r["value"] + r["parallel"], rel=1e-4)
    run = json.loads((tmp_path / "both" / "run.json").read_text())
    recorded = run["parallel_pairs"]
    assert {k: recorded[k] for k in ("pairs", "skipped_lines", "languages")} == {
        "pairs": 40,
        "skipped_lines": 0,
        "languages": {"de": 40},
    }
    assert len(recorded["digest"]) == 32  # of every pair: --resume tells changed pairs by it
    # The prefix defaults to the teacher's sentence-transformers "query" prompt (e5's files: "query: ").
    assert "parallel embedding MSE" in run["objective"] and "prefix 'query: '" in run["objective"]
    card = json.loads((result.student / "mlminilm.json").read_text())
    assert card["parallel"] == str(pairs.parent) and "parallel embedding MSE" in card["loss"]

    # Only the parallel term: the running text is not read, the relation terms are not in the records, and the
    # term falls (12 steps at a high learning rate on 40 pairs).
    only = distill.run(config(st_teacher, st_data, tmp_path / "only", relation_loss_weight=0.0, **kw))
    records = [r for r in _records(tmp_path / "only") if "loss" in r]
    assert all(set(r) & {"attention", "value"} == set() for r in records)
    # The term over all 40 pairs, computed here with transformers alone, falls from the start to the end.
    assert _term_on_all(st_teacher, only.student, pairs) < _term_on_all(st_teacher, start, pairs)
    assert records[-1]["loss"] == pytest.approx(records[-1]["parallel"], rel=1e-6)
    assert only.language_mix == {}
    assert "relations" not in json.loads((tmp_path / "only" / "run.json").read_text())["objective"]


def test_parallel_runs_resume_to_the_same_losses(st_teacher, st_data, tmp_path, monkeypatch):
    from helpers import run_killed_after_checkpoint
    from mlminilm import distill

    pairs = _pairs_file(tmp_path / "en-de.tsv")
    kw = dict(parallel=pairs, max_steps=6, save_every=3, hidden_loss_weight=0.0, embedding_loss_weight=0.0)
    distill.run(config(st_teacher, st_data, tmp_path / "straight", **kw))
    run_killed_after_checkpoint(monkeypatch, 3, distill.run, config(st_teacher, st_data, tmp_path / "resumed", **kw))
    distill.run(config(st_teacher, st_data, tmp_path / "resumed", resume=True, **kw))
    straight = [r["loss"] for r in _records(tmp_path / "straight") if "loss" in r]
    resumed = [r["loss"] for r in _records(tmp_path / "resumed") if "loss" in r]
    assert len(straight) == 6 and resumed == pytest.approx(straight, rel=1e-5)


def test_resume_refuses_pairs_that_changed_since_the_run_started(st_teacher, st_data, tmp_path, monkeypatch, capsys):
    """Issue 39: pairs appended to the --parallel file after a run started were trained on by --resume without a
    word, while run.json still recorded the old count. Exact resume is promised for unchanged inputs only."""
    from helpers import run_killed_after_checkpoint
    from mlminilm import distill

    pairs = _pairs_file(tmp_path / "en-de.tsv", n=30)
    out = tmp_path / "run"
    kw = dict(parallel=pairs, max_steps=4, save_every=2, hidden_loss_weight=0.0, embedding_loss_weight=0.0)
    run_killed_after_checkpoint(monkeypatch, 2, distill.run, config(st_teacher, st_data, out, **kw))
    record = (out / "run.json").read_text()
    cli = ["distill", "--config", str(out / "run.json"), "--out", str(out), "--resume"]
    original = pairs.read_text(encoding="utf-8")
    # Pairs appended (30 -> 45), then the same number of pairs with one translation changed.
    pairs.write_text(original + "".join(f"Extra {i}.\tMehr {i}.\n" for i in range(15)), encoding="utf-8")
    assert_error(run_main(monkeypatch, capsys, *cli), "--resume", str(pairs), "30 pairs when the run started, 45 now")
    pairs.write_text(original.replace("\t", "\tX ", 1), encoding="utf-8")
    assert_error(run_main(monkeypatch, capsys, *cli), "the same 30 pairs in number, but other text")
    assert (out / "run.json").read_text() == record and "step" in (out / "metrics.jsonl").read_text()
    # The pairs as they were: the run resumes and finishes.
    pairs.write_text(original, encoding="utf-8")
    code, _, err = run_main(monkeypatch, capsys, *cli)
    assert code == 0, err
    assert (out / "student" / "model.safetensors").exists()


def test_parallel_refusals(monkeypatch, capsys, st_teacher, st_data, tmp_path):
    pairs = _pairs_file(tmp_path / "en-de.tsv")
    base = (
        "distill",
        "--teacher",
        str(st_teacher),
        "--data",
        str(st_data),
        "--layers",
        "2",
        "--hidden",
        "32",
        "--heads",
        "4",
        "--intermediate",
        "64",
        "--init",
        "teacher",
    )
    assert_error(
        run_main(monkeypatch, capsys, *base, "--out", str(tmp_path / "a"), "--parallel", str(tmp_path / "missing.tsv")),
        "--parallel",
        "does not exist",
    )
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "distill",
            "--teacher",
            str(st_teacher),
            "--data",
            str(st_data),
            "--layers",
            "2",
            "--hidden",
            "16",
            "--heads",
            "4",
            "--intermediate",
            "64",
            "--hidden-loss-weight",
            "0",
            "--embedding-loss-weight",
            "0",
            "--parallel",
            str(pairs),
            "--out",
            str(tmp_path / "b"),
        ),
        "need equal hidden sizes",
        "student 16, teacher 32",
    )
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            *base,
            "--out",
            str(tmp_path / "c"),
            "--relation-loss-weight",
            "0",
            "--hidden-loss-weight",
            "0",
            "--embedding-loss-weight",
            "0",
        ),
        "nothing to train",
    )
    assert_usage_error(
        run_main(
            monkeypatch,
            capsys,
            *base,
            "--out",
            str(tmp_path / "d"),
            "--parallel",
            str(pairs),
            "--parallel-loss-weight",
            "-1",
        ),
        "--parallel-loss-weight",
    )
    assert_usage_error(
        run_main(
            monkeypatch,
            capsys,
            *base,
            "--out",
            str(tmp_path / "e"),
            "--parallel",
            str(pairs),
            "--parallel-max-length",
            "1",
        ),
        "--parallel-max-length",
    )
    # The tiny teacher has 160 positions (e5's files aside, its config's max_position_embeddings).
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            *base,
            "--out",
            str(tmp_path / "f"),
            "--parallel",
            str(pairs),
            "--parallel-max-length",
            "4000",
        ),
        "--parallel-max-length 4000",
        "positions",
    )
    for name in "abcdef":
        assert not (tmp_path / name).exists()


def test_assist_gives_the_parallel_term_to_the_stages_whose_widths_agree(tmp_path):
    from mlminilm.assist import stage_configs
    from mlminilm.config import AssistConfig
    from mlminilm.models.loading import TeacherShape

    pairs = tmp_path / "en-de.tsv"
    narrow = AssistConfig(
        teacher="t",
        data=tmp_path,
        out=tmp_path / "o",
        layers=2,
        hidden=32,
        heads=4,
        intermediate=64,
        parallel=pairs,
        parallel_loss_weight=2.0,
    )
    assistant, student = stage_configs(narrow, TeacherShape(12, 128, 4, 512, "bert"))
    assert assistant.parallel is None and student.parallel == pairs and student.parallel_loss_weight == 2.0
    same = AssistConfig(
        teacher="t", data=tmp_path, out=tmp_path / "o", layers=2, hidden=128, heads=4, intermediate=64, parallel=pairs
    )
    assert [s.parallel for s in stage_configs(same, TeacherShape(12, 128, 4, 512, "bert"))] == [pairs, pairs]


def test_pair_files_by_hand(tmp_path):
    from mlminilm.corpus.parallel import read_parallel, write_pair_files

    counts = write_pair_files(
        ["Hi.", "Cat.", "Hi.", "", "Dog."], {"de": ["Hallo.", "Katze.", "Hallo.", "Leer.", ""]}, tmp_path
    )
    assert counts == {"de": 2}  # the repeated pair once, pairs with an empty side left out
    assert (tmp_path / "en-de.tsv").read_text(encoding="utf-8") == "Hi.\tHallo.\nCat.\tKatze.\n"
    assert read_parallel(tmp_path).lang_counts() == {"de": 2}
    with pytest.raises(ValueError, match="do not line up"):
        write_pair_files(["a", "b"], {"fr": ["x"]}, tmp_path)


# ------------------------------------------------------------------------------------------ the input layouts


def test_opus_file_pairs_by_hand(tmp_path):
    from mlminilm.corpus.parallel import read_parallel

    (tmp_path / "TED.de-en.de").write_text("Hallo.\n\nKatze.\n", encoding="utf-8")
    (tmp_path / "TED.de-en.en").write_text("Hello.\nEmpty.\nCat.\n", encoding="utf-8")
    with gzip.open(tmp_path / "x.en-fr.en.gz", "wt", encoding="utf-8") as handle:
        handle.write("Yes.\n")
    with gzip.open(tmp_path / "x.en-fr.fr.gz", "wt", encoding="utf-8") as handle:
        handle.write("Oui.\n")
    (tmp_path / "de-fr.de-fr.fr").write_text("Chat.\n", encoding="utf-8")  # neither side en: the first is the source
    (tmp_path / "de-fr.de-fr.de").write_text("Katze.\n", encoding="utf-8")
    found = read_parallel(tmp_path)
    assert sorted(zip(found.sources, found.targets, found.langs)) == sorted(
        [("Hello.", "Hallo.", "de"), ("Cat.", "Katze.", "de"), ("Yes.", "Oui.", "fr"), ("Katze.", "Chat.", "fr")]
    )
    assert found.skipped == 1 and found.lang_counts() == {"de": 2, "fr": 2}
    # Either file of a pair names the pair.
    assert read_parallel(tmp_path / "TED.de-en.en").sources == ("Hello.", "Cat.")


def test_opus_refusals(tmp_path):
    from mlminilm.corpus.parallel import read_parallel
    from mlminilm.errors import DataError

    (tmp_path / "a.de-en.de").write_text("Eins.\nZwei.\n", encoding="utf-8")
    (tmp_path / "a.de-en.en").write_text("One.\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"do not line up: a.de-en.de has more than 1 lines"):
        read_parallel(tmp_path / "a.de-en.de")
    (tmp_path / "b.de-en.de").write_text("Eins.\n", encoding="utf-8")
    with pytest.raises(DataError, match="no partner file"):
        read_parallel(tmp_path / "b.de-en.de")


def test_sentences_are_cleaned_and_languages_checked(tmp_path, caplog):
    from mlminilm.corpus.parallel import read_parallel
    from mlminilm.corpus.parallel_files import MAX_SENTENCE_CHARS
    from mlminilm.errors import DataError

    path = tmp_path / "en-de.tsv"
    long = "a" * (MAX_SENTENCE_CHARS + 5)
    path.write_bytes(("\ufeffHello.\tHallo.\n\x00\x00\t\x00\nBig.\t" + long + "\nBell\x07.\tGlo\x00cke.\n").encode())
    with caplog.at_level("WARNING"):
        found = read_parallel(path)
    assert found.sources == ("Hello.", "Big.", "Bell.")  # BOM gone; NUL-only line skipped; control characters gone
    assert found.targets[1] == "a" * MAX_SENTENCE_CHARS and found.targets[2] == "Glocke."
    assert found.skipped == 1 and found.cut == 1 and "1 sentence(s) longer than" in caplog.text
    for name, message in (("en-yy.tsv", "cannot be"), ("en-deu.tsv", "use de")):
        bad = tmp_path / name
        bad.write_text("Hello.\tHallo.\n", encoding="utf-8")
        with pytest.raises(DataError, match=message):
            read_parallel(bad)
    unknown = tmp_path / "zzz" / "en-zzz.tsv"
    _pairs_file(unknown, 3)
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert read_parallel(unknown).lang_counts() == {"zzz": 3}
    assert "zzz" in caplog.text and "not in the language registry" in caplog.text


class _FakeDatasets:
    """What mlminilm reads of `datasets`: load_dataset(name, config, split=, streaming=) -> rows."""

    def __init__(self, rows_by_config):
        self.rows_by_config, self.calls = rows_by_config, []

    def load_dataset(self, name, config, split, streaming):
        self.calls.append((name, config, split, streaming))
        return iter(self.rows_by_config[config])


def test_hub_parallel_sentences_layout(monkeypatch):
    from mlminilm.corpus.parallel import read_parallel
    from mlminilm.errors import DataError
    from mlminilm.io import hub

    fake = _FakeDatasets(
        {
            "en-de": [{"english": "Hello.", "non_english": "Hallo."}],
            "en-fr": [{"english": "Yes.", "non_english": "Oui."}, {"english": "", "non_english": "x"}],
            "bad": [{"text": "no columns"}],
        }
    )
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "import_datasets", lambda: fake)
    found = read_parallel("hf:sentence-transformers/parallel-sentences-talks:en-de,en-fr")
    assert list(zip(found.sources, found.targets, found.langs)) == [("Hello.", "Hallo.", "de"), ("Yes.", "Oui.", "fr")]
    assert found.skipped == 1
    name = "sentence-transformers/parallel-sentences-talks"
    assert fake.calls == [(name, c, "train", True) for c in ("en-de", "en-fr")]
    with pytest.raises(DataError, match="no string column english, non_english"):
        read_parallel("hf:some/data:bad")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="HF_HUB_OFFLINE=1 is set and streaming needs the network"):
        read_parallel("hf:some/data:en-de")
    monkeypatch.setattr(hub, "import_datasets", lambda: None)
    with pytest.raises(DataError, match=r"mlminilm\[hub\]"):
        read_parallel("hf:some/data:en-de")


def test_xnli_one_liner_gives_the_benchmark_pairs(tmp_path):
    """The distill guide's shell one-liner (cut + paste + awk) turns XNLI's row-parallel files into the pairs
    experiments/running_text.py --parallel writes."""
    import subprocess

    xnli = tmp_path / "xnli"
    xnli.mkdir()
    (xnli / "test-en.tsv").write_text(
        "A cat.\tIt sleeps.\tneutral\nA cat.\tIt runs.\tcontradiction\nA dog.\tIt barks.\tentailment\n",
        encoding="utf-8",
    )
    (xnli / "test-de.tsv").write_text(
        "Eine Katze.\tSie schläft.\tneutral\nEine Katze.\tSie rennt.\tcontradiction\n"
        "Ein Hund.\tEr bellt.\tentailment\n",
        encoding="utf-8",
    )
    readme = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "distill.md").read_text(encoding="utf-8")
    line = next(x for x in readme.splitlines() if x.startswith("for l in ") and "paste" in x)
    line = line.replace("ar bg de el es fr hi ru sw th tr ur vi zh", "de")
    subprocess.run(["bash", "-c", f"cd {tmp_path} && X={xnli} && mkdir -p pairs && {line}"], check=True)
    from mlminilm.corpus.parallel import write_pair_files

    en = [r.split("\t") for r in (xnli / "test-en.tsv").read_text(encoding="utf-8").splitlines()]
    de = [r.split("\t") for r in (xnli / "test-de.tsv").read_text(encoding="utf-8").splitlines()]
    write_pair_files([f for r in en for f in r[:2]], {"de": [f for r in de for f in r[:2]]}, tmp_path / "expected")
    assert (tmp_path / "pairs" / "en-de.tsv").read_text(encoding="utf-8") == (
        tmp_path / "expected" / "en-de.tsv"
    ).read_text(encoding="utf-8")


def test_parallel_only_needs_no_prepared_text(monkeypatch, capsys, st_teacher, tmp_path):
    """The recipe's terms (only the parallel ones) never read running text: without --data the run trains and its
    card says so; with a running-text term on, a missing --data is one line whose fix is the whole `prepare`
    command and says when --data can be left out."""
    from mlminilm import distill

    pairs = _pairs_file(tmp_path / "par" / "en-de.tsv")
    kw = dict(relation_loss_weight=0.0, hidden_loss_weight=0.0, embedding_loss_weight=0.0, parallel=pairs.parent)
    result = distill.run(config(st_teacher, None, tmp_path / "nodata", parallel_contrastive_weight=1.0, **kw))
    records = [r for r in _records(tmp_path / "nodata") if "loss" in r]
    assert len(records) == 4 and all(set(r) & {"attention", "value", "hidden", "embedding"} == set() for r in records)
    card = json.loads((result.student / "mlminilm.json").read_text())
    assert card["data"].startswith("none") and card["languages"] == "de" and card["seq_len"] == 128
    assert "MiniLM" not in (result.student / "README.md").read_text()
    monkeypatch.chdir(tmp_path)  # no data/ here
    assert_error(
        run_main(
            monkeypatch, capsys, "distill", "--teacher", str(st_teacher), "--out", str(tmp_path / "r"), "--layers", "2"
        ),
        "data/manifest.json not found",
        f"mlminilm prepare --teacher {st_teacher} --input TEXT_DIR --out data",
        "leave out --data",
    )
    assert not (tmp_path / "r").exists()
