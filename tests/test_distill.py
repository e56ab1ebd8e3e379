"""distill and assist end to end on tiny models: export, exact resume, the assistant, bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import torch

from helpers import (
    assert_one_line_error,
    distill_args,
    distill_config,
    prepare_data,
    run_cli,
    run_killed_after_checkpoint,
    save_tiny_teacher,
)

# helpers.distill_config, checkpointing every 3 steps of the 6.
config = partial(distill_config, save_every=3)


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


def test_distill_exports_a_loadable_student(wp_teacher, wp_data, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    from mlminilm import distill

    out = tmp_path / "run"
    result = distill.run(config(wp_teacher, wp_data, out, max_steps=30, save_every=10, lr=2e-3))
    student = AutoModel.from_pretrained(result.student)
    tok = AutoTokenizer.from_pretrained(result.student)
    assert student.config.num_hidden_layers == 2 and student.config.hidden_size == 32
    assert student.config.model_type == "bert"
    assert len(tok) == student.config.vocab_size
    student(**tok(["Der Hund läuft"], return_tensors="pt"))
    card = json.loads((result.student / "mlminilm.json").read_text())
    assert card["teacher"] == str(wp_teacher) and card["objective"] == "minilm" and card["steps"] == 30
    assert (result.student / "README.md").exists() and (result.student / "model.safetensors").exists()
    records = read_metrics(out)
    assert [r["step"] for r in records] == list(range(1, 31))
    for key in ("loss", "attention", "value", "lr", "tokens_per_s", "language_mix"):
        assert key in records[0]
    assert set(records[0]["language_mix"]) <= {"en", "de", "ar", "zh"}
    first = sum(r["loss"] for r in records[:5]) / 5
    last = sum(r["loss"] for r in records[-5:]) / 5
    assert last < first  # the student learns the teacher's relations
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-10", "step-20", "step-30"]
    assert json.loads((out / "run.json").read_text())["config"]["teacher"] == str(wp_teacher)
    assert not (out / "config.json").exists()  # from_pretrained(OUT) must not take the run record for a model


def test_resume_is_bit_exact(wp_teacher, wp_data, tmp_path, monkeypatch):
    from mlminilm import distill

    full = distill.run(config(wp_teacher, wp_data, tmp_path / "full"))

    cut = config(wp_teacher, wp_data, tmp_path / "cut")
    run_killed_after_checkpoint(monkeypatch, 3, distill.run, cut)
    assert not (tmp_path / "cut" / "student").exists()
    resumed = distill.run(replace(cut, resume=True))

    from safetensors.torch import load_file

    a = load_file(full.student / "model.safetensors")
    b = load_file(resumed.student / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    losses_full = [r["loss"] for r in read_metrics(tmp_path / "full")]
    losses_cut = [r["loss"] for r in read_metrics(tmp_path / "cut")]
    assert losses_full == losses_cut


def test_minilm_v2_and_teacher_init(wp_teacher, wp_data, tmp_path):
    from mlminilm import distill

    v2 = distill.run(
        config(
            wp_teacher,
            wp_data,
            tmp_path / "v2",
            objective="minilm-v2",
            relation_heads=8,
            heads=2,
            max_steps=2,
            save_every=2,
        )
    )
    assert v2.steps == 2
    rec = read_metrics(tmp_path / "v2")[0]
    assert {"qq", "kk", "vv"} <= rec.keys()
    assert abs(rec["loss"] - (rec["qq"] + rec["kk"] + rec["vv"])) < 1e-5
    init = distill.run(
        config(
            wp_teacher,
            wp_data,
            tmp_path / "init",
            init="teacher",
            init_layers="every",
            hidden=64,
            intermediate=128,
            max_steps=1,
            save_every=1,
            lr=1e-12,
        )
    )
    from safetensors.torch import load_file

    s = load_file(init.student / "model.safetensors")
    t = load_file(Path(wp_teacher) / "model.safetensors")
    # 4 teacher layers -> 2 student layers: teacher layers 1 and 3 (every 2nd); the student's unused top
    # layer parts are frozen, so they are still exactly the teacher's.
    assert torch.equal(s["encoder.layer.1.output.dense.weight"], t["encoder.layer.3.output.dense.weight"])
    torch.testing.assert_close(
        s["encoder.layer.0.attention.self.query.weight"],
        t["encoder.layer.1.attention.self.query.weight"],
        atol=1e-6,
        rtol=0,
    )


def test_assist_runs_both_stages(wp_teacher, wp_data, tmp_path):
    from transformers import AutoConfig

    from mlminilm import assist
    from mlminilm.config import AssistConfig

    base = config(wp_teacher, wp_data, tmp_path / "ta").__dict__
    cfg = AssistConfig(**{**base, "assistant_steps": 2, "student_steps": 3, "save_every": 2})
    result = assist.run(cfg)
    a = AutoConfig.from_pretrained(result.assistant)
    s = AutoConfig.from_pretrained(result.student)
    assert (a.num_hidden_layers, a.hidden_size) == (4, 32)  # teacher's depth, student's width
    assert (s.num_hidden_layers, s.hidden_size) == (2, 32)
    card = json.loads((result.student / "mlminilm.json").read_text())
    assert card["teacher"] == str(tmp_path / "ta" / "assistant")
    # Resume after completion skips finished stages.
    again = assist.run(replace(cfg, resume=True))
    assert again.stages["assistant"]["skipped"] and again.stages["student"]["skipped"]


def test_assist_overwrite_keeps_a_target_cache_inside_out(wp_teacher, wp_data, tmp_path):
    from conftest import sample_lines

    from helpers import file_tree
    from mlminilm import assist
    from mlminilm.config import AssistConfig

    pairs, out = tmp_path / "en-de.tsv", tmp_path / "ta"
    pairs.write_text("".join(f"{a}\t{b}\n" for a, b in zip(sample_lines("en", 8), sample_lines("de", 8))))
    base = config(wp_teacher, wp_data, out, parallel=pairs, target_cache=out / "cache").__dict__
    cfg = AssistConfig(**{**base, "assistant_steps": 1, "student_steps": 1, "save_every": 1, "batch_size": 2})
    assist.run(cfg)
    filled = file_tree(out / "cache")  # the student stage's targets (the assistant's width is the student's)
    assert any(name.endswith(".safetensors") for name in filled)
    again = assist.run(replace(cfg, overwrite=True))
    assert again.stages["student"]["steps"] == 1 and file_tree(out / "cache") == filled
    assert sorted(p.name for p in out.iterdir()) == ["assistant", "assistant-run", "cache", "student", "student-run"]


def test_assist_refuses_when_the_rule_does_not_apply(wp_teacher, wp_data, tmp_path):
    proc = run_cli(
        "assist",
        "--teacher",
        str(wp_teacher),
        "--data",
        str(wp_data),
        "--out",
        str(tmp_path / "x"),
        "--layers",
        "3",
        "--hidden",
        "32",
        "--heads",
        "4",
    )
    assert_one_line_error(proc, "more than half", "--force")
    assert not (tmp_path / "x").exists()


def test_cli_distill_json(wp_teacher, wp_data, tmp_path):
    out = tmp_path / "cli"
    proc = run_cli(
        "distill",
        "--teacher",
        str(wp_teacher),
        "--data",
        str(wp_data),
        "--out",
        str(out),
        "--layers",
        "2",
        "--hidden",
        "32",
        "--heads",
        "4",
        "--intermediate",
        "64",
        "--max-steps",
        "2",
        "--batch-size",
        "2",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert Path(result["student"]).is_dir() and result["steps"] == 2


# ------------------------------------------------------------------------------------------- bad input


def test_bad_inputs(wp_teacher, wp_data, tmp_path, tiny_sentencepiece_dir, tiny_corpus_dir):
    out = tmp_path / "out"
    assert_one_line_error(run_cli(*distill_args(wp_teacher, tmp_path / "missing", out)), "prepare")
    assert_one_line_error(run_cli(*distill_args(wp_teacher, wp_data, out, "--hidden", "30")), "--heads", "divide")
    assert_one_line_error(run_cli(*distill_args(wp_teacher, wp_data, out, "--heads", "8")), "head count", "4")
    assert_one_line_error(
        run_cli(
            *distill_args(
                wp_teacher,
                wp_data,
                out,
                "--objective",
                "minilm-v2",
                "--relation-heads",
                "3",
                "--hidden",
                "48",
                "--heads",
                "3",
            )
        ),
        "--relation-heads",
    )
    assert_one_line_error(
        run_cli(
            *distill_args(
                wp_teacher, wp_data, out, "--objective", "minilm-v2", "--relation-heads", "48", "--hidden", "48"
            )
        ),
        "--relation-heads (48)",
        "teacher's hidden size (64)",
    )
    # Data prepared with another tokenizer than the teacher's.
    sp_teacher = save_tiny_teacher(tiny_sentencepiece_dir, tmp_path / "sp-teacher", kind="xlm-roberta")
    sp_data = prepare_data(sp_teacher, tiny_corpus_dir, tmp_path / "sp-data")
    assert_one_line_error(
        run_cli(*distill_args(wp_teacher, sp_data, out)), "prepared with another tokenizer", "prepare --teacher"
    )
    # A decoder-only teacher.
    from transformers import GPT2Config, GPT2Model

    gpt = tmp_path / "gpt2"
    GPT2Model(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100)).save_pretrained(gpt)
    assert_one_line_error(run_cli(*distill_args(gpt, wp_data, out)), "decoder")
    assert not out.exists()  # no error above left anything behind
    # An existing, non-empty output directory.
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert_one_line_error(run_cli(*distill_args(wp_teacher, wp_data, out)), "not empty", "--resume", "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(wp_teacher, wp_data, tmp_path, monkeypatch):
    from mlminilm import distill
    from mlminilm.errors import TrainingDiverged

    real_terms = distill.distill_terms
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        terms = real_terms(*args, **kwargs)
        if calls["n"] >= 4:  # steps 1-3 are fine, step 4 diverges
            terms["attention"] = terms["attention"] * float("nan")
        return terms

    monkeypatch.setattr(distill, "distill_terms", poisoned)
    out = tmp_path / "nan"
    with pytest.raises(TrainingDiverged) as info:
        distill.run(config(wp_teacher, wp_data, out, save_every=2))
    message = str(info.value)
    assert "nan" in message and "step 4" in message and "step-2" in message
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-2"]
    assert not (out / "student").exists()
