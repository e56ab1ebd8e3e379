"""Experiment tracking (--report-to): TensorBoard event files that hold what metrics.jsonl holds, once per step
also across --resume, written by rank 0 only; none and jsonl write no event files; a missing tensorboard package is
one error line before any work."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import torch
from taskdata import write_nli_tsv

from helpers import (
    assert_error,
    assert_usage_error,
    distill_config,
    run_killed_after_checkpoint,
    run_main,
    tiny_encoder_fixture,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

wp_encoder = tiny_encoder_fixture("tiny_wordpiece_dir", "wp-enc", layers=2, hidden=32, heads=4, intermediate=64)


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


def accumulator(tb: Path):
    """Every event under `tb` as TensorBoard reads it (nothing sampled away)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalar_steps(acc, tag: str) -> dict[int, float]:
    """step -> value of `tag`; a step that appears twice fails."""
    events = acc.Scalars(tag)
    steps = [e.step for e in events]
    assert len(steps) == len(set(steps)), (tag, steps)
    return {e.step: e.value for e in events}


def texts(acc, tag: str) -> list[tuple[int, str]]:
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(f"{tag}/text_summary")]


def approx(value):
    return pytest.approx(value, rel=1e-6, abs=1e-9)  # event files store scalars as float32


def tatoeba_dir(folder: Path, make_lines) -> Path:
    folder.mkdir()
    for iso, lang in (("deu", "de"), ("ara", "ar")):
        (folder / f"tatoeba.{iso}-eng.{iso}").write_text(
            "\n".join(make_lines(lang, 10, seed=4)) + "\n", encoding="utf-8"
        )
        (folder / f"tatoeba.{iso}-eng.eng").write_text("\n".join(make_lines("en", 10, seed=4)) + "\n", encoding="utf-8")
    return folder


# ------------------------------------------------------------------------------------------------- units


def test_scalars_are_the_numbers_of_a_record_by_key():
    from mlminilm.training.tracking import scalars

    record = {
        "step": 4,
        "loss": 1.5,
        "attention": 0.25,
        "lr": 1e-3,
        "loss_scale": 1024,
        "note": "x",
        "flag": True,
        "language_mix": {"de": 0.5, "zh": 0.5},
        "probe_tatoeba": {"de": {"xx_to_en": 40.0, "pairs": 10}},
    }
    assert dict(scalars(record)) == {
        "loss": 1.5,
        "attention": 0.25,
        "lr": 1e-3,
        "loss_scale": 1024.0,
        "language_mix/de": 0.5,
        "language_mix/zh": 0.5,
        "probe_tatoeba/de/xx_to_en": 40.0,
        "probe_tatoeba/de/pairs": 10.0,
    }


def test_report_to_choices(monkeypatch, capsys, tmp_path):
    from mlminilm.config import REPORT_TO, DistillConfig, FinetuneConfig
    from mlminilm.errors import ConfigError

    assert REPORT_TO == ("jsonl", "tensorboard", "none")
    assert DistillConfig(teacher="t", data=tmp_path, out=tmp_path / "o").report_to == "jsonl"
    with pytest.raises(ConfigError, match="'--report-to': 'wandb' is not one of 'jsonl', 'tensorboard', 'none'"):
        DistillConfig(teacher="t", data=tmp_path, out=tmp_path / "o", report_to="wandb")
    with pytest.raises(ConfigError, match="--report-to"):
        FinetuneConfig(model="m", train="t.tsv", out=tmp_path / "o", report_to="wandb")
    for command in ("distill", "assist", "finetune"):
        assert_usage_error(run_main(monkeypatch, capsys, command, "--report-to", "wandb"), "--report-to")
    code, out, _ = run_main(monkeypatch, capsys, "finetune", "--help")
    assert code == 0 and "jsonl|tensorboard|none" in out


def test_only_the_main_process_writes(tmp_path):
    from mlminilm.config import DistillConfig
    from mlminilm.training import Runtime, open_tracker

    cfg = DistillConfig(teacher="t", data=tmp_path, out=tmp_path, report_to="tensorboard")
    for rank, out in ((1, tmp_path / "rank1"), (0, tmp_path / "rank0")):
        out.mkdir()
        rt = Runtime(torch.device("cpu"), torch.float32, rank=rank, world=2)
        with open_tracker(cfg, out, rt) as tracker:
            tracker.write({"step": 1, "loss": 2.0})
        assert (out / "tb").exists() == (rank == 0) and (out / "metrics.jsonl").exists() == (rank == 0)
    assert scalar_steps(accumulator(tmp_path / "rank0" / "tb"), "loss") == {1: 2.0}


def test_a_failed_run_with_event_files_starts_over(tmp_path):
    """What a run that died before its first checkpoint leaves, tb/ included, is removed by the next run."""
    from mlminilm import distill
    from mlminilm.config import DistillConfig
    from mlminilm.training import failed_run_leftovers, prepare_output_dir

    out = tmp_path / "run"
    (out / "tb").mkdir(parents=True)
    (out / "tb" / "events.out.tfevents.1.host").write_bytes(b"")
    (out / "run.json").write_text(json.dumps({"command": "distill", "config": {}}))
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    assert failed_run_leftovers(out)
    prepare_output_dir(out, DistillConfig(teacher="t", data=tmp_path, out=out), distill.ARTIFACTS)
    assert not out.exists() or list(out.iterdir()) == []


def test_assist_stages_report_where_assist_does(tmp_path):
    from mlminilm.assist import stage_configs
    from mlminilm.config import AssistConfig
    from mlminilm.models.loading import TeacherShape

    cfg = AssistConfig(
        teacher="t",
        data=tmp_path,
        out=tmp_path / "o",
        layers=2,
        hidden=32,
        heads=4,
        intermediate=64,
        report_to="tensorboard",
    )
    stages = stage_configs(cfg, TeacherShape(12, 128, 4, 512, "bert"))
    assert [s.report_to for s in stages] == ["tensorboard", "tensorboard"]
    assert [s.out for s in stages] == [tmp_path / "o" / "assistant-run", tmp_path / "o" / "student-run"]


# ----------------------------------------------------------------------------------------------- distill


def test_tensorboard_holds_what_metrics_jsonl_holds(wp_teacher, wp_data, tmp_path, make_lines):
    from mlminilm import distill

    out = tmp_path / "run"
    distill.run(
        distill_config(
            wp_teacher,
            wp_data,
            out,
            report_to="tensorboard",
            probe_tatoeba=tatoeba_dir(tmp_path / "tatoeba", make_lines),
            probe_every=3,
        )
    )
    records = read_metrics(out)
    assert (out / "tb").is_dir() and all(p.name.startswith("events.out.tfevents.") for p in (out / "tb").iterdir())
    acc = accumulator(out / "tb")
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == list(range(1, 7))
    parts = set(train[0]) - {"step", "loss", "lr", "tokens_per_s", "elapsed_s", "language_mix"}
    assert {"attention", "value"} <= parts
    for tag in ("loss", *parts, "lr", "tokens_per_s", "elapsed_s"):
        assert scalar_steps(acc, tag) == {r["step"]: approx(r[tag]) for r in train}, tag
    for lang in train[0]["language_mix"]:
        assert scalar_steps(acc, f"language_mix/{lang}") == {
            r["step"]: approx(r["language_mix"].get(lang, 0.0)) for r in train if lang in r["language_mix"]
        }
    probes = [r for r in records if "probe_tatoeba_xx_to_en" in r]
    assert [r["step"] for r in probes] == [0, 3, 6]
    for tag in ("probe_tatoeba_xx_to_en", "probe_tatoeba_en_to_xx", "train_s"):
        assert scalar_steps(acc, tag) == {r["step"]: approx(r[tag]) for r in probes}, tag
    for lang in ("de", "ar"):
        assert scalar_steps(acc, f"probe_tatoeba/{lang}/xx_to_en") == {
            r["step"]: approx(r["probe_tatoeba"][lang]["xx_to_en"]) for r in probes
        }
    # The run record as text, once, at the start: exactly run.json.
    ((step, text),) = texts(acc, "run_record")
    assert step == 0
    assert json.loads("\n".join(line[4:] for line in text.splitlines())) == json.loads((out / "run.json").read_text())
    assert json.loads((out / "run.json").read_text())["config"]["report_to"] == "tensorboard"


def test_resumed_run_shows_each_step_once(wp_teacher, wp_data, tmp_path, monkeypatch):
    from dataclasses import replace

    from mlminilm import distill

    cut = distill_config(wp_teacher, wp_data, tmp_path / "cut", report_to="tensorboard")  # checkpoints at 2, 4, 6
    run_killed_after_checkpoint(monkeypatch, 3, distill.run, cut)  # dies after logging step 3
    killed = accumulator(tmp_path / "cut" / "tb")
    assert sorted(scalar_steps(killed, "loss")) == [1, 2, 3]
    # Event files are read in the order of their names, which start with the second they were made in.
    time.sleep(max(0.0, 1.05 - (time.time() % 1)))
    distill.run(replace(cut, resume=True))
    records = [r for r in read_metrics(tmp_path / "cut") if "loss" in r]
    assert [r["step"] for r in records] == list(range(1, 7))
    acc = accumulator(tmp_path / "cut" / "tb")
    for tag in ("loss", "attention", "value", "lr"):
        assert scalar_steps(acc, tag) == {r["step"]: approx(r[tag]) for r in records}, tag
    # Step 3 was written by both processes; TensorBoard shows the resumed one's (purged from the checkpoint on).
    assert len(list((tmp_path / "cut" / "tb").iterdir())) == 2
    assert [step for step, _ in texts(acc, "run_record")] == [0, 2]


def test_report_to_none_writes_no_event_files(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    code, _, err = run_main(
        monkeypatch,
        capsys,
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
        "4",
        "--log-every",
        "1",
        "--report-to",
        "none",
    )
    assert code == 0, err
    assert not (out / "tb").exists() and [r["step"] for r in read_metrics(out)] == [1, 2]
    assert json.loads((out / "run.json").read_text())["config"]["report_to"] == "none"


def test_missing_tensorboard_is_one_error_before_any_work(
    wp_teacher, wp_data, wp_encoder, tmp_path, monkeypatch, capsys
):
    # Whether or not tensorboard is installed here: its import fails as it does without the package.
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    out = tmp_path / "run"
    line = assert_error(
        run_main(
            monkeypatch,
            capsys,
            "distill",
            "--teacher",
            str(wp_teacher),
            "--data",
            str(wp_data),
            "--out",
            str(out),
            "--report-to",
            "tensorboard",
        ),
        "--report-to tensorboard",
        "pip install 'mlminilm[tensorboard]'",
    )
    assert "not installed" in line
    assert not out.exists() and list(tmp_path.iterdir()) == []
    train = write_nli_tsv(tmp_path / "train.tsv", "en", 6)
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "finetune",
            "--task",
            "xnli",
            "--model",
            str(wp_encoder),
            "--train",
            str(train),
            "--out",
            str(out),
            "--report-to",
            "tensorboard",
        ),
        "mlminilm[tensorboard]",
    )
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "assist",
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
            "--report-to",
            "tensorboard",
        ),
        "mlminilm[tensorboard]",
    )
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["train.tsv"]
    # The Python API says the same where the sink is made.
    from mlminilm.errors import ConfigError
    from mlminilm.training.tracking import TensorBoardSink

    with pytest.raises(ConfigError, match=r"mlminilm\[tensorboard\]"):
        TensorBoardSink(tmp_path / "tb")


# ---------------------------------------------------------------------------------------------- finetune


def test_finetune_dev_metric_in_tensorboard(wp_encoder, tmp_path):
    from mlminilm import finetune
    from mlminilm.config import FinetuneConfig

    train = write_nli_tsv(tmp_path / "train-en.tsv", "en", 32)
    dev = write_nli_tsv(tmp_path / "dev-en.tsv", "en", 12, seed=5)
    out = tmp_path / "ft"
    finetune.run(
        FinetuneConfig(
            task="xnli",
            model=str(wp_encoder),
            train=str(train),
            dev=str(dev),
            out=out,
            max_steps=4,
            save_every=2,
            batch_size=8,
            log_every=1,
            lr=1e-3,
            max_seq_len=48,
            report_to="tensorboard",
        )
    )
    records = read_metrics(out)
    acc = accumulator(out / "tb")
    scored = [r for r in records if "dev_accuracy" in r]
    assert [r["step"] for r in scored] == [2, 4]
    assert scalar_steps(acc, "dev_accuracy") == {r["step"]: approx(r["dev_accuracy"]) for r in scored}
    assert scalar_steps(acc, "best_step") == {r["step"]: r["best_step"] for r in scored}
    train_records = [r for r in records if "loss" in r]
    for tag in ("loss", "lr", "tokens_per_s"):
        assert scalar_steps(acc, tag) == {r["step"]: approx(r[tag]) for r in train_records}, tag
    ((_, text),) = texts(acc, "run_record")
    assert json.loads("\n".join(l[4:] for l in text.splitlines()))["command"] == "finetune"
    # The model directory at OUT's root is still a plain Hugging Face directory beside tb/.
    assert (out / "model.safetensors").exists() and (out / "selection.json").exists()


def test_tensorboard_is_an_extra_the_tests_install():
    import tomllib

    from helpers import REPO

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("=")[0].split("[")[0].strip() for d in project["dependencies"]]
    assert "tensorboard" not in names  # optional: only --report-to tensorboard needs it
    extras = project["optional-dependencies"]
    assert extras["tensorboard"] == ["tensorboard==2.21.0"]
    assert "mlminilm[tensorboard]" in extras["test"]  # make test installs .[test,...]
