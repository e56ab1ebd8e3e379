"""Filesystem errors at the CLI boundary: an OSError while writing is one `Error:` line with advice, so is a real
full disk (a small tmpfs), which keeps the data that was there; and log lines without a terminal stay whole."""

from __future__ import annotations

import errno

import pytest

from helpers import assert_error, file_tree, fill_disk, run_main, small_tmpfs, two_step_distill_args

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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
    assert_error(
        run_main(monkeypatch, capsys, *two_step_distill_args(wp_teacher, wp_data, out)), str(out / "run.json"), advice
    )


def test_log_lines_without_a_terminal_are_whole(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / ("a-directory-name-long-enough-to-be-wrapped-at-eighty-columns-" * 2) / "run"
    code, stdout, stderr = run_main(
        monkeypatch, capsys, *two_step_distill_args(wp_teacher, wp_data, out), "--log-every", "1"
    )
    assert code == 0, stderr
    lines = stderr.splitlines()
    steps = [l for l in lines if "distill student: step" in l]
    assert len(steps) == 2 and "step 2/2" in steps[1] and "tok/s" in steps[1] and "eta" in steps[1]
    assert any(f"student exported to {out / 'student'}" in l for l in lines), stderr  # one line, not wrapped


def test_trim_on_a_real_full_disk_is_one_line(wp_teacher, tiny_corpus_dir, tmp_path):
    """Issue 27: safetensors reports a full disk as its own SafetensorError (a traceback before); now one `Error:`
    line, and nothing left on the disk. A 1 MiB tmpfs, full but for a few kB: the small files fit, the weights do
    not (skipped where this process may not mount one)."""
    import os

    from helpers import assert_one_line_error, run_cli

    with small_tmpfs(tmp_path) as disk:
        fill_disk(disk)
        os.truncate(disk / "filler", (disk / "filler").stat().st_size - 16384)
        proc = run_cli(
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
    from helpers import assert_one_line_error, run_cli

    with small_tmpfs(tmp_path) as disk:
        out = disk / "data"
        proc = run_cli("prepare", "--teacher", str(wp_teacher), "--input", str(tiny_corpus_dir), "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        before = file_tree(disk)
        fill_disk(disk)  # to its last block: the new data cannot be written beside the old
        proc = run_cli(
            "prepare", "--teacher", str(wp_teacher), "--input", str(tiny_corpus_dir), "--out", str(out), "--overwrite"
        )
        assert_one_line_error(proc, "disk space")
        (disk / "filler").unlink()
        assert file_tree(disk) == before
