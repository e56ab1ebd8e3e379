"""Outputs under faults: kept inside --out whatever a model directory says, never an input, replaced whole or not
at all (assist, distill, prepare and trim with --overwrite, a failed export, a staged output), one writer per --out."""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

from helpers import assert_error, file_tree, prepare_data, run_main, two_step_distill_args

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


# ------------------------------------------------------------- outputs: confined, never an input, nothing lost


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
    before = file_tree(tmp_path)
    out = tmp_path / "run"
    error = assert_error(run_main(monkeypatch, capsys, *two_step_distill_args(teacher, wp_data, out)), "modules.json")
    assert "outside" in error or "absolute" in error
    assert file_tree(tmp_path) == before and not out.exists()  # nothing written anywhere


def test_damaged_sentence_transformers_files_stop_distill_before_training(
    wp_teacher, wp_data, tmp_path, monkeypatch, capsys
):
    teacher = sentence_teacher(wp_teacher, tmp_path / "teacher", "1_Pooling")
    (teacher / "1_Pooling").mkdir()
    (teacher / "1_Pooling" / "config.json").write_text("{not json")
    out = tmp_path / "run"
    assert_error(
        run_main(monkeypatch, capsys, *two_step_distill_args(teacher, wp_data, out)), "1_Pooling", "not readable JSON"
    )
    assert not out.exists()
    (teacher / "modules.json").write_text(json.dumps(["0_Transformer", "1_Pooling"]))  # a list of strings
    assert_error(
        run_main(monkeypatch, capsys, *two_step_distill_args(teacher, wp_data, out)), "modules.json", "module objects"
    )
    assert not out.exists()


def test_an_output_that_is_or_holds_an_input_is_refused_whatever_the_flags(
    wp_teacher, wp_data, tmp_path, monkeypatch, capsys
):
    import shutil

    teacher = tmp_path / "teacher"
    shutil.copytree(wp_teacher, teacher)
    data = tmp_path / "data"
    shutil.copytree(wp_data, data)
    before = file_tree(tmp_path)
    cases = [
        (teacher, "is the --teacher input"),
        (data, "is the --data input"),
        (data / "x", "lies inside the --data"),
        (tmp_path, "contains the --teacher input"),
    ]
    for out, needle in cases:
        for flags in ((), ("--overwrite",), ("--resume",)):
            assert_error(run_main(monkeypatch, capsys, *two_step_distill_args(teacher, data, out, *flags)), needle)
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
    assert file_tree(tmp_path) == before  # the teacher's config.json and the data untouched


def test_overwrite_removes_only_what_mlminilm_wrote(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "run.json").write_text("{}")
    before = file_tree(tmp_path)
    error = assert_error(
        run_main(monkeypatch, capsys, *two_step_distill_args(wp_teacher, wp_data, out, "--overwrite")),
        "notes.txt",
        "not a run of this command",
    )
    assert "move them away" in error and file_tree(tmp_path) == before
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
    before = file_tree(tmp_path)
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
    assert file_tree(tmp_path) == before  # the old data whole, no temporary left beside it
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


def test_a_second_command_on_the_same_out_stops_and_a_dead_holder_does_not_block(wp_teacher, tiny_corpus_dir, tmp_path):
    """Two real processes: one holds --out's lock (as a running prepare does), the other is stopped with one line;
    once the holder is killed, its lock goes with it."""
    import signal
    import sys

    from helpers import REPO, assert_one_line_error, run_cli

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
        proc = run_cli("prepare", "--teacher", str(wp_teacher), "--input", str(tiny_corpus_dir), "--out", str(out))
        assert_one_line_error(proc, "being written by another mlminilm process", f"pid {holder.pid}")
        assert not out.exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    proc = run_cli("prepare", "--teacher", str(wp_teacher), "--input", str(tiny_corpus_dir), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "manifest.json").is_file() and not (tmp_path / ".data.lock").exists()


def test_a_failed_distill_overwrite_restores_the_previous_run(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    from mlminilm import distill

    out = tmp_path / "run"
    assert run_main(monkeypatch, capsys, *two_step_distill_args(wp_teacher, wp_data, out))[0] == 0
    before = file_tree(out)

    def broken(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(distill, "distill_terms", broken)
    assert_error(
        run_main(monkeypatch, capsys, *two_step_distill_args(wp_teacher, wp_data, out, "--overwrite")), "disk space"
    )
    assert file_tree(out) == before  # the finished run, as it was
    monkeypatch.undo()
    assert (
        run_main(monkeypatch, capsys, *two_step_distill_args(wp_teacher, wp_data, out, "--overwrite", "--seed", "3"))[0]
        == 0
    )
    assert json.loads((out / "run.json").read_text())["config"]["seed"] == 3
    assert not (out / ".previous-run").exists()


def test_a_failed_export_leaves_no_temporary(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    from mlminilm.models import export

    def broken_card(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "model_card", broken_card)
    out = tmp_path / "run"
    assert_error(run_main(monkeypatch, capsys, *two_step_distill_args(wp_teacher, wp_data, out)), "disk space")
    assert not list(out.glob(".tmp-*")) and not (out / "student").exists()
    assert (out / "run.json").is_file()  # the record to rerun it as it was (docs/guides/reliability.md)


def test_trim_never_writes_into_its_model_and_overwrites_only_a_trimmed_model(
    wp_teacher, tiny_corpus_dir, tmp_path, monkeypatch, capsys
):
    import shutil

    teacher = tmp_path / "teacher"
    shutil.copytree(wp_teacher, teacher)
    args = ("trim", "--model", str(teacher), "--corpus", str(tiny_corpus_dir), "--workers", "1")
    before = file_tree(tmp_path)
    assert_error(
        run_main(monkeypatch, capsys, *args, "--out", str(teacher / "trimmed"), "--overwrite"),
        "lies inside the --model input",
    )
    assert_error(run_main(monkeypatch, capsys, *args, "--out", str(teacher), "--overwrite"), "is the --model input")
    assert file_tree(tmp_path) == before
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
