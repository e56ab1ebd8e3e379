"""Faults during and between runs on a tiny BERT teacher: divergence and NaN weights, resume with a lower
learning rate, a finished run resumed, damaged checkpoints and records, failed runs retried without flags and
stale temporaries cleaned."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers import (
    assert_error,
    distill_config,
    file_tree,
    prepare_data,
    run_killed_after_checkpoint,
    run_main,
    two_step_distill_args,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def metrics(out: Path) -> list[dict]:
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------ divergence, NaN weights, lower --lr


def test_nan_weights_are_never_checkpointed_and_resume_takes_a_lower_lr(wp_teacher, wp_data, tmp_path, monkeypatch):
    from mlminilm import distill
    from mlminilm.errors import TrainingDiverged

    real_terms = distill.distill_terms
    calls = {"n": 0}

    def nan_gradient(teacher_model, layer, student_forward, *args, **kwargs):
        calls["n"] += 1
        terms = real_terms(teacher_model, layer, student_forward, *args, **kwargs)
        if calls["n"] == 4:
            # sqrt at 0: the value stays 0 (a finite loss) but the gradient is NaN, and so is the update.
            weight = next(p for p in student_forward.parameters() if p.requires_grad)
            terms["attention"] = terms["attention"] + torch.sqrt((weight * 0).sum())
        return terms

    monkeypatch.setattr(distill, "distill_terms", nan_gradient)
    out = tmp_path / "run"
    cfg = distill_config(wp_teacher, wp_data, out)
    with pytest.raises(TrainingDiverged) as info:
        distill.run(cfg)
    message = str(info.value)
    assert "weights became NaN or infinite at step 4" in message and "step-2" in message
    assert "--resume" in message and "--lr" in message
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-2"]  # step 4 was never saved
    monkeypatch.setattr(distill, "distill_terms", real_terms)

    # The advice can be followed: --resume with a lower --lr and a warmup, recorded in run.json.
    resumed = distill.run(replace(cfg, resume=True, lr=2e-4, warmup=2.0))
    assert resumed.last_loss is not None and torch.isfinite(torch.tensor(resumed.last_loss))
    record = json.loads((out / "run.json").read_text())
    assert record["config"]["lr"] == 2e-4 and record["config"]["warmup"] == 2.0
    assert record["resumes"][-1]["changed"] == {"lr": [1e-3, 2e-4], "warmup": [0.0, 2.0]}
    # Step 3 runs at the new schedule: warmup 2 steps then linear decay over 6, peak 2e-4.
    lr = {r["step"]: r["lr"] for r in metrics(out)}
    assert lr[3] == pytest.approx(2e-4 * (6 - 3) / (6 - 2))
    assert lr[1] == pytest.approx(1e-3 * 5 / 6)  # the first steps keep the rates they ran with


def test_resume_of_a_finished_run_prints_its_summary(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "done"
    code, stdout, stderr = run_main(monkeypatch, capsys, *two_step_distill_args(wp_teacher, wp_data, out))
    assert code == 0, stderr
    code, stdout, stderr = run_main(monkeypatch, capsys, *two_step_distill_args(wp_teacher, wp_data, out), "--resume")
    assert code == 0 and "Traceback" not in stderr, stderr
    assert "no step trained" in stdout
    code, stdout, stderr = run_main(
        monkeypatch, capsys, *two_step_distill_args(wp_teacher, wp_data, out), "--resume", "--json"
    )
    assert code == 0, stderr
    result = json.loads(stdout)
    assert result["first_loss"] is None and result["steps"] == 2


# ---------------------------------------------------------------------------- damaged checkpoints and records


def _cut_run(teacher, data, out, monkeypatch, **kw):
    """A run killed right after its step-2 checkpoint (max 4 steps; `kw`: other fields)."""
    from mlminilm import distill

    cfg = distill_config(teacher, data, out, max_steps=4, **kw)
    run_killed_after_checkpoint(monkeypatch, 2, distill.run, cfg)
    return cfg


def test_checkpoint_with_missing_tensors_is_refused(wp_teacher, wp_data, tmp_path, monkeypatch):
    from safetensors.torch import load_file, save_file

    from mlminilm import distill
    from mlminilm.errors import CheckpointError

    out = tmp_path / "run"
    cfg = _cut_run(wp_teacher, wp_data, out, monkeypatch)
    weights = out / "checkpoints" / "step-2" / "model.safetensors"
    tensors = load_file(weights)
    dropped = sorted(tensors)[0]
    tensors.pop(dropped)
    save_file(tensors, weights)
    with pytest.raises(
        CheckpointError,
        match=rf"does not match this model: 1 tensor\(s\) of the model missing "
        rf"\(e\.g\. {dropped}\).*remove .*step-2",
    ):
        distill.run(replace(cfg, resume=True))


def test_checkpoint_error_does_not_repeat_torchs_unsafe_advice(wp_teacher, wp_data, tmp_path, monkeypatch):
    import datetime

    from mlminilm import distill
    from mlminilm.errors import CheckpointError

    out = tmp_path / "run"
    cfg = _cut_run(wp_teacher, wp_data, out, monkeypatch)
    torch.save({"saved": datetime.datetime(2020, 1, 1)}, out / "checkpoints" / "step-2" / "optimizer.pt")
    with pytest.raises(CheckpointError) as info:
        distill.run(replace(cfg, resume=True))
    assert "not written by mlminilm" in str(info.value) and "weights_only" not in str(info.value)


def test_torn_metrics_line_and_damaged_record(wp_teacher, wp_data, tmp_path, monkeypatch):
    from mlminilm import distill
    from mlminilm.errors import CheckpointError

    out = tmp_path / "run"
    cfg = _cut_run(wp_teacher, wp_data, out, monkeypatch)
    # The process died while appending a record: the half-written last line is dropped.
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "loss": 1.2')
    distill.run(replace(cfg, resume=True))
    assert [r["step"] for r in metrics(out)] == [1, 2, 3, 4]

    out2 = tmp_path / "run2"
    cfg2 = _cut_run(wp_teacher, wp_data, out2, monkeypatch)
    lines = (out2 / "metrics.jsonl").read_text().splitlines()
    (out2 / "metrics.jsonl").write_text("\n".join(["{oops", *lines]) + "\n")
    with pytest.raises(CheckpointError, match=r"metrics\.jsonl:1: not a metrics record"):
        distill.run(replace(cfg2, resume=True))
    (out2 / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    record = out2 / "run.json"
    record.write_text(record.read_text()[:40])  # a truncated run record
    with pytest.raises(CheckpointError, match=r"run record .*run\.json is damaged.*delete it to resume"):
        distill.run(replace(cfg2, resume=True))


def test_failed_run_can_be_retried_without_flags(wp_teacher, wp_data, tmp_path, monkeypatch):
    from mlminilm import distill
    from mlminilm.errors import ConfigError

    out = tmp_path / "run"

    def broken(*a, **k):
        raise ConfigError("teacher weights cannot be loaded")

    # A failure while loading the inputs writes nothing.
    monkeypatch.setattr(distill, "load_teacher", broken)
    with pytest.raises(ConfigError):
        distill.run(distill_config(wp_teacher, wp_data, out))
    assert not out.exists()
    monkeypatch.undo()

    # A failure after the record but before any checkpoint: the retry starts over, no --overwrite needed.
    real_terms = distill.distill_terms

    def crash(*a, **k):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(distill, "distill_terms", crash)
    with pytest.raises(RuntimeError):
        distill.run(distill_config(wp_teacher, wp_data, out))
    assert (out / "run.json").exists()
    monkeypatch.setattr(distill, "distill_terms", real_terms)
    result = distill.run(distill_config(wp_teacher, wp_data, out, max_steps=2))
    assert result.steps == 2 and (out / "student").is_dir()


def test_stale_temporaries_are_cleaned_and_live_ones_kept(wp_teacher, wp_data, tiny_corpus_dir, tmp_path, monkeypatch):
    import os

    from mlminilm import distill

    # prepare: the marked temporary of a dead process beside --out is removed; an unmarked look-alike is the user's.
    from mlminilm.io.outputs import MARKER

    out = tmp_path / "prepared"
    pid = dead_pid()
    dead = tmp_path / f".tmp-prepared-{pid}"
    (dead / "shards").mkdir(parents=True)
    (dead / MARKER).write_text(json.dumps({"pid": pid, "command": "prepare", "out": str(out.resolve())}))
    look_alike = tmp_path / f".tmp-prepared-{dead_pid()}"
    look_alike.mkdir()
    prepare_data(wp_teacher, tiny_corpus_dir, out)
    assert not dead.exists() and look_alike.is_dir() and (out / "manifest.json").exists()
    look_alike.rmdir()

    # distill --resume: dead temporaries go, a live process's stays.
    run = tmp_path / "run"
    cfg = _cut_run(wp_teacher, wp_data, run, monkeypatch)
    pid = dead_pid()
    stale = [run / "checkpoints" / f".tmp-step-4-{pid}", run / f".tmp-student-{pid}"]
    for path in stale:
        path.mkdir()
    (run / f".run.json.tmp-{pid}").write_text("{")
    live = run / f".tmp-student-{os.getppid()}"  # a live process (not this one, whose export uses the name)
    live.mkdir()
    distill.run(replace(cfg, resume=True))
    assert not any(p.exists() for p in stale) and not (run / f".run.json.tmp-{pid}").exists()
    assert live.exists()


# ----------------------------------------------------------------- the teacher and --data the run started on

RESUME_ARGS = (
    "--layers", "2", "--hidden", "32", "--heads", "4", "--intermediate", "64", "--max-steps", "4",
    "--batch-size", "4", "--save-every", "2", "--log-every", "1", "--lr", "1e-3", "--warmup", "0",
)  # fmt: skip


def _resume(monkeypatch, capsys, teacher, data, out, *extra):
    """`distill --resume` of a `_cut_run` run on the command line (its options, `extra` added)."""
    args = ["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(out), *RESUME_ARGS]
    return run_main(monkeypatch, capsys, *args, "--resume", *extra)


def _same_shape_other_weights(teacher: Path, into: Path) -> None:
    """Write into `into`'s model.safetensors the weights of `teacher` shifted: another teacher of the same shape."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(teacher / "model.safetensors")
    torch.manual_seed(7)
    save_file({k: v + 0.05 * torch.randn_like(v) for k, v in tensors.items()}, into / "model.safetensors")


def test_resume_refuses_another_teacher_at_the_same_path(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    from mlminilm.distillation.targets import module_digest
    from mlminilm.models.loading import load_teacher

    teacher, out = tmp_path / "teacher", tmp_path / "run"
    shutil.copytree(wp_teacher, teacher)
    _cut_run(teacher, wp_data, out, monkeypatch, precision="fp32")
    recorded = json.loads((out / "run.json").read_text())["teacher_weights"]
    loaded, _ = load_teacher(str(teacher), 3, torch.float32, torch.device("cpu"))  # the distilled (last) layer
    assert recorded == {"digest": module_digest(loaded), "dtype": "float32"}
    original = (teacher / "model.safetensors").read_bytes()
    _same_shape_other_weights(wp_teacher, teacher)
    before = file_tree(out)
    # Refused in one line, whatever the precision it resumes in, with a changed --lr too: nothing written.
    for extra in (("--precision", "fp32"), ("--precision", "bf16", "--lr", "5e-4")):
        line = assert_error(
            _resume(monkeypatch, capsys, teacher, wp_data, out, *extra),
            f"teacher {teacher} is not the one the run in {out} started with",
            f"in float32 was {recorded['digest'][:12]}",
            "--overwrite",
        )
        assert file_tree(out) == before, line
    # The teacher put back: the run resumes, in another precision too (compared in the recorded dtype).
    (teacher / "model.safetensors").write_bytes(original)
    code, _, err = _resume(monkeypatch, capsys, teacher, wp_data, out, "--precision", "bf16")
    assert code == 0, err
    assert [r["step"] for r in metrics(out)] == [1, 2, 3, 4]


def test_resume_refuses_data_prepared_again_at_the_same_path(
    wp_teacher, wp_data, tiny_corpus_dir, tmp_path, monkeypatch, capsys
):
    data, out = tmp_path / "data", tmp_path / "run"
    shutil.copytree(wp_data, data)
    _cut_run(wp_teacher, data, out, monkeypatch)
    recorded = json.loads((out / "run.json").read_text())["prepared_data"]
    manifest = json.loads((data / "manifest.json").read_text())
    shards = [s for lang in manifest["languages"].values() for s in lang["shards"]]
    assert recorded["shards"] == len(shards) and recorded["sequences"] == sum(s["sequences"] for s in shards)
    # `prepare` again into the same folder, on a corpus one line shorter in each language.
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for text in tiny_corpus_dir.glob("*.txt"):
        (corpus / text.name).write_text("".join(text.read_text().splitlines(True)[1:]))
    shutil.rmtree(data)
    prepare_data(wp_teacher, corpus, data)
    before = file_tree(out)
    assert_error(
        _resume(monkeypatch, capsys, wp_teacher, data, out),
        f"--data {data} changed since the run in {out} started",
        "resume with the data as it was",
    )
    assert file_tree(out) == before


def test_resume_of_a_record_without_digests_says_so_and_records_them(
    wp_teacher, wp_data, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    _cut_run(wp_teacher, wp_data, out, monkeypatch)
    record = json.loads((out / "run.json").read_text())
    digests = {k: record.pop(k) for k in ("teacher_weights", "prepared_data")}
    (out / "run.json").write_text(json.dumps(record))  # as an older mlminilm wrote it
    code, _, err = _resume(monkeypatch, capsys, wp_teacher, wp_data, out)
    assert code == 0, err
    assert "records no digest of the teacher and --data (written by an older mlminilm)" in err
    after = json.loads((out / "run.json").read_text())
    assert {k: after[k] for k in digests} == digests and after["config"] == record["config"]
