"""Faults during and between runs on a tiny BERT teacher: divergence and NaN weights, resume with a lower
learning rate, finished and damaged runs, filesystem errors at the CLI boundary, failed and stale leftovers,
log lines without a terminal."""

from __future__ import annotations

import contextlib
import errno
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers import assert_error, distill_config, prepare_data, run_killed_after_checkpoint, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def cli_args(teacher, data, out, *extra: str) -> list[str]:
    return [
        "distill",
        "--teacher",
        str(teacher),
        "--data",
        str(data),
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
        "--save-every",
        "2",
        *extra,
    ]


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
    code, stdout, stderr = run_main(monkeypatch, capsys, *cli_args(wp_teacher, wp_data, out))
    assert code == 0, stderr
    code, stdout, stderr = run_main(monkeypatch, capsys, *cli_args(wp_teacher, wp_data, out), "--resume")
    assert code == 0 and "Traceback" not in stderr, stderr
    assert "no step trained" in stdout
    code, stdout, stderr = run_main(monkeypatch, capsys, *cli_args(wp_teacher, wp_data, out), "--resume", "--json")
    assert code == 0, stderr
    result = json.loads(stdout)
    assert result["first_loss"] is None and result["steps"] == 2


# ---------------------------------------------------------------------------- damaged checkpoints and records


def _cut_run(teacher, data, out, monkeypatch):
    """A run killed right after its step-2 checkpoint (max 4 steps)."""
    from mlminilm import distill

    cfg = distill_config(teacher, data, out, max_steps=4)
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


# ------------------------------------------------------------------------------ failed and stale leftovers


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


# ---------------------------------------------------------------------------- assist replaces only at the end


def test_assist_overwrite_validates_before_removing_anything(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "ta"
    for name in ("assistant", "student"):
        (out / name).mkdir(parents=True)
        (out / name / "model.safetensors").write_text("previous run")
    args = [
        "assist",
        "--teacher",
        str(wp_teacher),
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
        "--assistant-steps",
        "1",
        "--student-steps",
        "1",
        "--overwrite",
    ]
    assert_error(run_main(monkeypatch, capsys, *args, "--data", str(tmp_path / "missing")), "prepare")
    assert_error(
        run_main(
            monkeypatch, capsys, *args, "--data", str(wp_data), "--objective", "minilm-v2", "--relation-heads", "64"
        ),
        "--relation-heads",
    )
    for name in ("assistant", "student"):
        assert (out / name / "model.safetensors").read_text() == "previous run"


# ----------------------------------------------------------------------------- filesystem errors, log lines


@pytest.mark.parametrize(
    "code, advice", [(errno.ENOSPC, "free some disk space"), (errno.EROFS, "read-only"), (errno.EACCES, "permissions")]
)
def test_filesystem_errors_are_one_line(code, advice, wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    import os

    from mlminilm import training

    out = tmp_path / "run"

    def failing_write(path, obj):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(training, "write_json_atomic", failing_write)
    assert_error(run_main(monkeypatch, capsys, *cli_args(wp_teacher, wp_data, out)), str(out / "run.json"), advice)


def test_log_lines_without_a_terminal_are_whole(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / ("a-directory-name-long-enough-to-be-wrapped-at-eighty-columns-" * 2) / "run"
    code, stdout, stderr = run_main(monkeypatch, capsys, *cli_args(wp_teacher, wp_data, out), "--log-every", "1")
    assert code == 0, stderr
    lines = stderr.splitlines()
    steps = [l for l in lines if "distill student: step" in l]
    assert len(steps) == 2 and "step 2/2" in steps[1] and "tok/s" in steps[1] and "eta" in steps[1]
    assert any(f"student exported to {out / 'student'}" in l for l in lines), stderr  # one line, not wrapped


# ------------------------------------------------------------- outputs: confined, never an input, nothing lost


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path below `root` (relative) with its bytes (None for a directory): the file tree to compare."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
        if not p.is_symlink()
    }


def sentence_teacher(teacher: Path, dest: Path, pooling_path: str) -> Path:
    """A copy of the tiny teacher with sentence-transformers files whose Pooling module lives at `pooling_path`."""
    import shutil

    shutil.copytree(teacher, dest)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": pooling_path, "type": "sentence_transformers.models.Pooling"},
    ]
    (dest / "modules.json").write_text(json.dumps(modules))
    return dest


@pytest.mark.parametrize("escape", ["dotdot", "absolute", "symlink"])
def test_a_model_directory_cannot_make_distill_write_outside_out(
    escape, wp_teacher, wp_data, tmp_path, monkeypatch, capsys
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    teacher = sentence_teacher(wp_teacher, tmp_path / "teacher", "1_Pooling")
    if escape == "dotdot":
        path = "../elsewhere"
    elif escape == "absolute":
        path = str(elsewhere)
    else:
        (teacher / "1_Pooling").symlink_to(elsewhere, target_is_directory=True)
        path = "1_Pooling"
    (elsewhere / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": True})
    )
    modules = json.loads((teacher / "modules.json").read_text())
    modules[1]["path"] = path
    (teacher / "modules.json").write_text(json.dumps(modules))
    before = tree(tmp_path)
    out = tmp_path / "run"
    error = assert_error(run_main(monkeypatch, capsys, *cli_args(teacher, wp_data, out)), "modules.json")
    assert "outside" in error or "absolute" in error
    assert tree(tmp_path) == before and not out.exists()  # nothing written anywhere


def test_damaged_sentence_transformers_files_stop_distill_before_training(
    wp_teacher, wp_data, tmp_path, monkeypatch, capsys
):
    teacher = sentence_teacher(wp_teacher, tmp_path / "teacher", "1_Pooling")
    (teacher / "1_Pooling").mkdir()
    (teacher / "1_Pooling" / "config.json").write_text("{not json")
    out = tmp_path / "run"
    assert_error(run_main(monkeypatch, capsys, *cli_args(teacher, wp_data, out)), "1_Pooling", "not readable JSON")
    assert not out.exists()
    (teacher / "modules.json").write_text(json.dumps(["0_Transformer", "1_Pooling"]))  # a list of strings
    assert_error(run_main(monkeypatch, capsys, *cli_args(teacher, wp_data, out)), "modules.json", "module objects")
    assert not out.exists()


def test_an_output_that_is_or_holds_an_input_is_refused_whatever_the_flags(
    wp_teacher, wp_data, tmp_path, monkeypatch, capsys
):
    import shutil

    teacher = tmp_path / "teacher"
    shutil.copytree(wp_teacher, teacher)
    data = tmp_path / "data"
    shutil.copytree(wp_data, data)
    before = tree(tmp_path)
    cases = [
        (teacher, "is the --teacher input"),
        (data, "is the --data input"),
        (data / "x", "lies inside the --data"),
        (tmp_path, "contains the --teacher input"),
    ]
    for out, needle in cases:
        for flags in ((), ("--overwrite",), ("--resume",)):
            assert_error(run_main(monkeypatch, capsys, *cli_args(teacher, data, out, *flags)), needle)
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            str(teacher),
            "--input",
            str(data),
            "--out",
            str(data),
            "--overwrite",
        ),
        "is the --input input",
    )
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-tatoeba",
            "--model",
            str(teacher),
            "--data",
            str(data),
            "--out",
            str(teacher / "report"),
            "--overwrite",
        ),
        "lies inside",
    )
    assert tree(tmp_path) == before  # the teacher's config.json and the data untouched


def test_overwrite_removes_only_what_mlminilm_wrote(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "run.json").write_text("{}")
    before = tree(tmp_path)
    error = assert_error(
        run_main(monkeypatch, capsys, *cli_args(wp_teacher, wp_data, out, "--overwrite")),
        "notes.txt",
        "not a run of this command",
    )
    assert "move them away" in error and tree(tmp_path) == before
    data = tmp_path / "data2"
    data.mkdir()
    (data / "keep.bin").write_text("mine")
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            str(wp_teacher),
            "--input",
            str(wp_data.parent),
            "--out",
            str(data),
            "--overwrite",
        ),
        "keep.bin",
        "prepared data",
    )
    assert (data / "keep.bin").read_text() == "mine"


def test_a_failed_prepare_overwrite_keeps_the_data_that_was_there(
    wp_teacher, tiny_corpus_dir, tmp_path, monkeypatch, capsys
):
    from mlminilm.corpus import prepare

    out = prepare_data(wp_teacher, tiny_corpus_dir, tmp_path / "data")
    before = tree(tmp_path)
    real = prepare.np.save

    def disk_full(path, array):  # the shards are written; the token counts hit a full disk
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(prepare.np, "save", disk_full)
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            str(wp_teacher),
            "--input",
            str(tiny_corpus_dir),
            "--out",
            str(out),
            "--overwrite",
            "--seq-len",
            "16",
        ),
        "disk space",
    )
    assert tree(tmp_path) == before  # the old data whole, no temporary left beside it
    monkeypatch.setattr(prepare.np, "save", real)
    assert_one_success = run_main(
        monkeypatch,
        capsys,
        "prepare",
        "--teacher",
        str(wp_teacher),
        "--input",
        str(tiny_corpus_dir),
        "--out",
        str(out),
        "--overwrite",
        "--seq-len",
        "16",
    )
    assert assert_one_success[0] == 0, assert_one_success
    assert json.loads((out / "manifest.json").read_text())["seq_len"] == 16
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@contextlib.contextmanager
def small_tmpfs(tmp_path: Path):
    """A 1 MiB tmpfs at tmp_path/disk for the block (the test is skipped where this process may not mount one)."""
    import os

    disk = tmp_path / "disk"
    disk.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode
        != 0
    ):
        pytest.skip("cannot mount a small tmpfs here")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def fill_disk(disk: Path) -> None:
    """Write disk/filler until the file system is full."""
    try:
        with open(disk / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass


def test_trim_on_a_real_full_disk_is_one_line(wp_teacher, tiny_corpus_dir, tmp_path):
    """Issue 27: safetensors reports a full disk as its own SafetensorError (a traceback before); now one `Error:`
    line, and nothing left on the disk. A 1 MiB tmpfs, full but for a few kB: the small files fit, the weights do
    not (skipped where this process may not mount one)."""
    import os

    from helpers import assert_one_line_error, cli

    with small_tmpfs(tmp_path) as disk:
        fill_disk(disk)
        os.truncate(disk / "filler", (disk / "filler").stat().st_size - 16384)
        proc = cli(
            "trim",
            "--model",
            str(wp_teacher),
            "--corpus",
            str(tiny_corpus_dir),
            "--workers",
            "1",
            "--out",
            str(disk / "trimmed"),
        )
        assert_one_line_error(proc, "No space left on device", "disk space")
        assert "SafetensorError" not in proc.stderr
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_prepare_fills_a_real_full_disk_and_keeps_the_old_data(wp_teacher, tiny_corpus_dir, tmp_path):
    """A real full file system: a 1 MiB tmpfs (skipped where this process may not mount one)."""
    from helpers import assert_one_line_error, cli

    with small_tmpfs(tmp_path) as disk:
        out = disk / "data"
        proc = cli("prepare", "--teacher", str(wp_teacher), "--input", str(tiny_corpus_dir), "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        before = tree(disk)
        fill_disk(disk)  # to its last block: the new data cannot be written beside the old
        proc = cli(
            "prepare", "--teacher", str(wp_teacher), "--input", str(tiny_corpus_dir), "--out", str(out), "--overwrite"
        )
        assert_one_line_error(proc, "disk space")
        (disk / "filler").unlink()
        assert tree(disk) == before


def test_a_second_command_on_the_same_out_stops_and_a_dead_holder_does_not_block(wp_teacher, tiny_corpus_dir, tmp_path):
    """Two real processes: one holds --out's lock (as a running prepare does), the other is stopped with one line;
    once the holder is killed, its lock goes with it."""
    import signal
    import sys

    from helpers import REPO, assert_one_line_error, cli

    out = tmp_path / "data"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom mlminilm.io.outputs import OutputLock\n"
            f"with OutputLock({str(out)!r}):\n    print('held', flush=True)\n    time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = cli("prepare", "--teacher", str(wp_teacher), "--input", str(tiny_corpus_dir), "--out", str(out))
        assert_one_line_error(proc, "being written by another mlminilm process", f"pid {holder.pid}")
        assert not out.exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    proc = cli("prepare", "--teacher", str(wp_teacher), "--input", str(tiny_corpus_dir), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "manifest.json").is_file() and not (tmp_path / ".data.lock").exists()


def test_a_failed_distill_overwrite_restores_the_previous_run(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    from mlminilm import distill

    out = tmp_path / "run"
    assert run_main(monkeypatch, capsys, *cli_args(wp_teacher, wp_data, out))[0] == 0
    before = tree(out)

    def broken(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(distill, "distill_terms", broken)
    assert_error(run_main(monkeypatch, capsys, *cli_args(wp_teacher, wp_data, out, "--overwrite")), "disk space")
    assert tree(out) == before  # the finished run, as it was
    monkeypatch.undo()
    assert run_main(monkeypatch, capsys, *cli_args(wp_teacher, wp_data, out, "--overwrite", "--seed", "3"))[0] == 0
    assert json.loads((out / "run.json").read_text())["config"]["seed"] == 3
    assert not (out / ".previous-run").exists()


def test_a_failed_export_leaves_no_temporary(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    from mlminilm.models import export

    def broken_card(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "model_card", broken_card)
    out = tmp_path / "run"
    assert_error(run_main(monkeypatch, capsys, *cli_args(wp_teacher, wp_data, out)), "disk space")
    assert not list(out.glob(".tmp-*")) and not (out / "student").exists()
    assert (out / "run.json").is_file()  # the record to rerun it as it was (README "Reliability")


def test_trim_never_writes_into_its_model_and_overwrites_only_a_trimmed_model(
    wp_teacher, tiny_corpus_dir, tmp_path, monkeypatch, capsys
):
    import shutil

    teacher = tmp_path / "teacher"
    shutil.copytree(wp_teacher, teacher)
    args = ("trim", "--model", str(teacher), "--corpus", str(tiny_corpus_dir), "--workers", "1")
    before = tree(tmp_path)
    assert_error(
        run_main(monkeypatch, capsys, *args, "--out", str(teacher / "trimmed"), "--overwrite"),
        "lies inside the --model input",
    )
    assert_error(run_main(monkeypatch, capsys, *args, "--out", str(teacher), "--overwrite"), "is the --model input")
    assert tree(tmp_path) == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("{}")
    assert_error(run_main(monkeypatch, capsys, *args, "--out", str(mine), "--overwrite"), "no trim.json")
    assert (mine / "config.json").read_text() == "{}"
    out = tmp_path / "trimmed"
    assert run_main(monkeypatch, capsys, *args, "--out", str(out))[0] == 0
    assert run_main(monkeypatch, capsys, *args, "--out", str(out), "--overwrite", "--min-count", "2")[0] == 0
    assert json.loads((out / "trim.json").read_text())["options"]["min_count"] == 2
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_staged_output_is_swapped_in_whole_or_not_at_all(tmp_path):
    from mlminilm.io.outputs import staged

    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("previous")
    with pytest.raises(RuntimeError):
        with staged(final) as tmp:
            tmp.mkdir()  # the builder makes it (save_pretrained does)
            (tmp / "half.txt").write_text("half")
            raise RuntimeError("the build fails")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary left beside it
    assert [p.name for p in final.iterdir()] == ["old.txt"]  # the previous output, untouched
    with staged(final) as tmp:
        tmp.mkdir()
        (tmp / "new.txt").write_text("whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert [p.name for p in final.iterdir()] == ["new.txt"]
