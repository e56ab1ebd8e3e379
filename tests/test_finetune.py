"""finetune end to end on tiny models for both tasks (WordPiece and SentencePiece), exact resume, bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from taskdata import squad_doc, write_json, write_nli_tsv

from helpers import assert_one_line_error, run_cli, run_killed_after_checkpoint, tiny_encoder_fixture

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# BERT and XLM-R encoders without any head, like distilled students.
wp_encoder = tiny_encoder_fixture("tiny_wordpiece_dir", "wp-enc", layers=2, hidden=32, heads=4, intermediate=64)
sp_encoder = tiny_encoder_fixture(
    "tiny_sentencepiece_dir", "sp-enc", kind="xlm-roberta", layers=2, hidden=32, heads=4, intermediate=64
)


@pytest.fixture(scope="module")
def nli_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nli")
    return write_nli_tsv(folder / "train-en.tsv", "en", 40), write_nli_tsv(folder / "dev-en.tsv", "en", 12, seed=5)


@pytest.fixture(scope="module")
def qa_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qa")
    return (
        write_json(folder / "train.json", squad_doc("en", count=8, seed=1)),
        write_json(folder / "dev.json", squad_doc("en", count=4, seed=2)),
    )


def xnli_config(model, data, out, **kw):
    from mlminilm.config import FinetuneConfig

    base = dict(
        task="xnli",
        model=str(model),
        train=str(data[0]),
        dev=str(data[1]),
        out=out,
        max_steps=6,
        save_every=3,
        batch_size=8,
        log_every=1,
        lr=1e-3,
        max_seq_len=48,
    )
    return FinetuneConfig(**{**base, **kw})


def qa_config(model, data, out, **kw):
    from mlminilm.config import FinetuneConfig

    base = dict(
        task="qa",
        model=str(model),
        train=str(data[0]),
        dev=str(data[1]),
        out=out,
        max_steps=4,
        save_every=2,
        batch_size=4,
        log_every=1,
        lr=1e-3,
        max_seq_len=48,
        doc_stride=16,
        max_query_length=12,
        eval_batch_size=8,
    )
    return FinetuneConfig(**{**base, **kw})


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


def test_finetune_xnli_writes_a_loadable_classifier(wp_encoder, nli_data, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from mlminilm import finetune

    out = tmp_path / "ft"
    result = finetune.run(xnli_config(wp_encoder, nli_data, out))
    model = AutoModelForSequenceClassification.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.id2label == {0: "entailment", 1: "neutral", 2: "contradiction"}
    assert model.config.architectures == ["BertForSequenceClassification"]
    logits = model(**tok(["A dog runs"], ["The cat sat"], return_tensors="pt")).logits
    assert logits.shape == (1, 3)
    for name in (
        "run.json",
        "metrics.jsonl",
        "selection.json",
        "README.md",
        "model.safetensors",
        "tokenizer_config.json",
    ):
        assert (out / name).exists(), name
    assert not (out / "checkpoints" / "best").exists()
    run = json.loads((out / "run.json").read_text())
    assert run["command"] == "finetune" and run["config"]["lr"] == 1e-3 and run["train_examples"] == 40
    selection = json.loads((out / "selection.json").read_text())
    assert "best English-dev accuracy" in selection["rule"] and "strict zero-shot" in selection["rule"]
    assert set(selection["scores"]) == {"3", "6"} and selection["selected_step"] == result.selected_step
    assert selection["selected_score"] == max(selection["scores"].values())
    dev = [r for r in read_metrics(out) if "dev_accuracy" in r]
    assert [r["step"] for r in dev] == [3, 6] and all(r["dev_examples"] == 12 for r in dev)
    assert json.loads((out / "mlminilm.json").read_text())["selected_step"] == result.selected_step
    assert "Fine-tuned with mlminilm" in (out / "README.md").read_text()


def test_finetune_qa_windows_and_sentencepiece(sp_encoder, qa_data, tmp_path):
    from transformers import AutoModelForQuestionAnswering

    from mlminilm import finetune

    out = tmp_path / "qa"
    result = finetune.run(qa_config(sp_encoder, qa_data, out, group_by_length=True))
    assert result.train_features > result.train_examples == 8  # long contexts: several windows each
    model = AutoModelForQuestionAnswering.from_pretrained(out)
    assert model.config.architectures == ["XLMRobertaForQuestionAnswering"]
    dev = [r for r in read_metrics(out) if "dev_f1" in r]
    assert [r["step"] for r in dev] == [2, 4] and all("dev_exact_match" in r for r in dev)
    assert "F1" in json.loads((out / "selection.json").read_text())["rule"]


def test_finetune_without_dev_keeps_the_last_checkpoint(wp_encoder, nli_data, tmp_path):
    from mlminilm import finetune

    out = tmp_path / "nodev"
    result = finetune.run(xnli_config(wp_encoder, nli_data, out, dev=None, max_steps=2, save_every=1))
    selection = json.loads((out / "selection.json").read_text())
    assert result.selected_step == selection["selected_step"] == 2
    assert selection["rule"].startswith("last checkpoint") and selection["metric"] is None
    # Steps from epochs: 40 examples at batch 8 = 5 steps per epoch.
    run = finetune.run(
        xnli_config(wp_encoder, nli_data, tmp_path / "epochs", dev=None, max_steps=None, epochs=0.4, save_every=None)
    )
    assert run.steps == 2
    assert json.loads((tmp_path / "epochs" / "run.json").read_text())["config"]["save_every"] == 5


def test_resume_is_bit_exact(wp_encoder, nli_data, tmp_path, monkeypatch):
    """Killed right after checkpoint 3 (before its dev evaluation), then resumed: same model, same logs."""
    from safetensors.torch import load_file

    from mlminilm import finetune

    full_cfg = xnli_config(wp_encoder, nli_data, tmp_path / "full", max_steps=6, save_every=2)
    finetune.run(full_cfg)
    cut = replace(full_cfg, out=tmp_path / "cut")
    run_killed_after_checkpoint(monkeypatch, 4, finetune.run, cut)
    assert not (tmp_path / "cut" / "model.safetensors").exists()
    finetune.run(replace(cut, resume=True))

    a = load_file(tmp_path / "full" / "model.safetensors")
    b = load_file(tmp_path / "cut" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key

    def strip(records):
        return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed_s")} for r in records]

    assert strip(read_metrics(tmp_path / "full")) == strip(read_metrics(tmp_path / "cut"))
    sel = [json.loads((tmp_path / d / "selection.json").read_text()) for d in ("full", "cut")]
    assert sel[0]["scores"] == sel[1]["scores"] and sel[0]["selected_step"] == sel[1]["selected_step"]
    # Resuming a finished run changes nothing.
    finetune.run(replace(cut, resume=True))
    assert json.loads((tmp_path / "cut" / "selection.json").read_text()) == sel[1]
    c = load_file(tmp_path / "cut" / "model.safetensors")
    assert all(torch.equal(b[key], c[key]) for key in b)
    # Resuming with a different defining option is refused.
    from mlminilm.errors import CheckpointError

    with pytest.raises(CheckpointError, match="seed: 0 -> 7"):
        finetune.run(replace(cut, resume=True, seed=7))


def test_finetune_names_the_labels_of_a_generic_head_and_clips_by_default(tiny_wordpiece_dir, nli_data, tmp_path):
    """A 3-way head saved with generic labels (LABEL_0..2) comes out with the NLI names, so eval-xnli never has to
    guess its order; fine-tuning clips gradients at 1.0 unless told otherwise, and records it."""
    from taskdata import save_head_model
    from transformers import AutoConfig

    from mlminilm import finetune

    start = save_head_model(tiny_wordpiece_dir, tmp_path / "generic", "xnli", max_positions=64)
    config = AutoConfig.from_pretrained(start)
    config.id2label, config.label2id = {i: f"LABEL_{i}" for i in range(3)}, {f"LABEL_{i}": i for i in range(3)}
    config.save_pretrained(start)
    out = tmp_path / "ft"
    finetune.run(xnli_config(start, nli_data, out, dev=None, max_steps=1, save_every=1))
    assert AutoConfig.from_pretrained(out).id2label == {0: "entailment", 1: "neutral", 2: "contradiction"}
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["max_grad_norm"] == 1.0
    assert json.loads((out / "mlminilm.json").read_text())["max_grad_norm"] == 1.0


def test_stream_order_is_a_permutation_per_epoch_and_groups_lengths():
    import numpy as np

    from mlminilm.finetune import StreamOrder

    lengths = np.random.default_rng(0).integers(5, 100, 37)
    for lens in (None, lengths):
        order = StreamOrder(37, seed=3, batch=4, lengths=lens)
        first, second = order.indices(0, 37), order.indices(37, 37)
        assert sorted(first) == sorted(second) == list(range(37)) and list(first) != list(second)
        # Any position, in any order of asking: the same example (what makes resume exact).
        assert list(StreamOrder(37, 3, 4, lens).indices(30, 20)) == list(order.indices(30, 20))

    def spread(order):
        batches = lengths[order.indices(0, 36).reshape(9, 4)]
        return (batches.max(1) - batches.min(1)).mean()

    assert spread(StreamOrder(37, 3, 4, lengths)) < spread(StreamOrder(37, 3, 4)) / 3


def test_option_defaults_match_the_config_fields():
    """Typer option defaults are read from the configs; a drift between them fails here."""
    import inspect

    from mlminilm.commands import eval_mlqa, eval_xnli, finetune
    from mlminilm.config import EvalMlqaConfig, EvalXnliConfig, FinetuneConfig, default

    for module, cls in ((finetune, FinetuneConfig), (eval_xnli, EvalXnliConfig), (eval_mlqa, EvalMlqaConfig)):
        for name, param in inspect.signature(module.command).parameters.items():
            if (
                name in ("json_out", "verbose", "config")
                or param.default is inspect.Parameter.empty
                or param.default is ...
            ):
                continue
            expected = default(cls, name)
            got = tuple(param.default) if isinstance(expected, tuple) else param.default
            assert got == expected, (cls.__name__, name)


# ------------------------------------------------------------------------------------------- bad input


def ft(*args):
    return run_cli("finetune", *args)


def test_bad_training_data(wp_encoder, tmp_path):
    out = tmp_path / "out"
    bad_row = tmp_path / "rows.tsv"
    bad_row.write_text("a b\tc d\tentailment\nno label here\tjust two\nx\ty\tneutral\n", encoding="utf-8")
    assert_one_line_error(
        ft("--model", str(wp_encoder), "--train", str(bad_row), "--out", str(out)),
        "rows.tsv:2",
        "3 tab-separated fields",
    )
    bad_label = tmp_path / "labels.tsv"
    bad_label.write_text("a\tb\tentailment\nc\td\tmaybe\n", encoding="utf-8")
    assert_one_line_error(
        ft("--model", str(wp_encoder), "--train", str(bad_label), "--out", str(out)),
        "labels.tsv:2",
        "'maybe'",
        "entailment, neutral, contradiction",
    )
    not_squad = write_json(tmp_path / "not-squad.json", {"questions": []})
    # Every problem at once: the data and the length (384 by default for qa, the tiny model has 160 positions).
    assert_one_line_error(
        ft("--task", "qa", "--model", str(wp_encoder), "--train", str(not_squad), "--out", str(out)),
        "not SQuAD",
        "--max-seq-len 384",
    )
    doc = squad_doc("en", count=2)
    doc["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] += 3
    shifted = write_json(tmp_path / "shifted.json", doc)
    assert_one_line_error(
        ft(
            "--task",
            "qa",
            "--model",
            str(wp_encoder),
            "--train",
            str(shifted),
            "--out",
            str(out),
            "--max-seq-len",
            "64",
        ),
        "answer_start",
        "does not match",
    )
    assert not out.exists()  # no error above left anything behind


def test_bad_options_and_models(wp_encoder, nli_data, tmp_path):
    from mlminilm import finetune
    from mlminilm.errors import CheckpointError, ConfigError, DataError

    out = tmp_path / "out"
    # Bad option values are usage errors (exit 2) naming the option; tests/test_bad_input_options.py has more.
    proc = ft("--task", "ner", "--model", str(wp_encoder), "--train", str(nli_data[0]), "--out", str(out))
    assert proc.returncode == 2 and "'--task'" in proc.stderr and "xnli" in proc.stderr
    with pytest.raises(
        ConfigError, match="'--lr': -1.0 is not a positive finite number.*'--task': 'ner' is not one of 'xnli', 'qa'"
    ):
        replace(xnli_config(wp_encoder, nli_data, out), task="ner", lr=-1.0)
    # The rest in-process (the CLI turns these errors into one line like the ones above).
    with pytest.raises(DataError, match="hf:multi_nli.*file instead"):  # offline: the Hub is not reachable
        finetune.load_examples("xnli", "hf:multi_nli", "train")
    blank = squad_doc("en", count=2)
    for paragraph in blank["data"][0]["paragraphs"]:
        paragraph["qas"][0]["answers"] = [{"text": "", "answer_start": 0}]
    with pytest.raises(DataError, match="every gold answer is empty"):
        finetune.load_examples("qa", str(write_json(tmp_path / "blank.json", blank)), "dev")
    with pytest.raises(ConfigError, match=r"--max-seq-len 400 .* \(160 positions\)"):
        finetune.run(xnli_config(wp_encoder, nli_data, out, max_seq_len=400))
    assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not empty.*--resume.*--overwrite"):
        finetune.run(xnli_config(wp_encoder, nli_data, out))
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
