"""The teacher-target cache (`distill --target-cache`) under the output rules: a part proves its fingerprint, the
folder's facts are read back, the cache never lands in an input, two writers take turns, a full or read-only disk
is one `Error:` line naming the cache, and what dead writers left is cleaned."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import sample_lines

from helpers import assert_error, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = ["one", "two", "three"]


def _embed(chunk, width=3, shift=0.0):
    return np.array([[len(t) + shift] + [1.0] * (width - 1) for t in chunk], dtype=np.float32)


def _facts(teacher="a" * 32, width=3):
    from mlminilm.distillation.targets import fingerprint

    return fingerprint(teacher, ("mean",), True, "query: ", 128, width=width)


def _store(root: Path, facts: dict):
    from mlminilm.distillation.targets import TargetStore

    return TargetStore(root, facts)


def _parts(folder: Path) -> list[Path]:
    return sorted(folder.glob("part-*.safetensors"))


def test_a_part_copied_from_another_teachers_folder_is_never_used(tmp_path, caplog):
    from mlminilm.distillation.targets import fill

    mine, theirs = _facts("a" * 32), _facts("b" * 32)
    assert fill(_store(tmp_path, theirs), TEXTS, lambda c: _embed(c, shift=100.0)) == 3
    assert fill(_store(tmp_path, mine), TEXTS, _embed) == 3
    # Same shape, other teacher: their part replaces mine, under my part's name.
    (part,) = _parts(tmp_path / mine["id"])
    part.write_bytes(_parts(tmp_path / theirs["id"])[0].read_bytes())
    store = _store(tmp_path, mine)
    with caplog.at_level("WARNING"):
        assert store.load() == 0
    assert f"belongs to fingerprint {theirs['id']}" in caplog.text and not part.exists()
    assert fill(store, TEXTS, _embed) == 3  # recomputed, never the other teacher's vectors
    np.testing.assert_array_equal(store.table()(TEXTS).numpy(), _embed(TEXTS))


def test_fingerprint_json_is_read_back_and_rewritten_when_it_disagrees(tmp_path, caplog):
    from mlminilm.distillation.targets import fill

    facts = _facts()
    fill(_store(tmp_path, facts), TEXTS, _embed)
    recorded = tmp_path / facts["id"] / "fingerprint.json"
    assert json.loads(recorded.read_text()) == facts
    recorded.write_text(json.dumps({**facts, "teacher": "c" * 32}))
    with caplog.at_level("WARNING"):
        assert _store(tmp_path, facts).load() == 3  # the parts prove themselves
    assert "does not describe its folder" in caplog.text and "c" * 32 in caplog.text
    assert json.loads(recorded.read_text()) == facts


def test_a_part_of_another_width_is_dropped_and_the_good_one_kept(tmp_path, caplog):
    from mlminilm.distillation.target_store import KEY_BYTES, part_bytes, text_key
    from mlminilm.distillation.targets import fill

    facts = _facts(width=3)
    fill(_store(tmp_path, facts), TEXTS, _embed)
    folder = tmp_path / facts["id"]
    (good,) = _parts(folder)
    good.rename(folder / "part-00001.safetensors")
    # A well-formed part naming this fingerprint, 5 wide, sorted first: it must not decide the width.
    keys = np.frombuffer(b"".join(text_key(t) for t in ["four"]), dtype=np.uint8).reshape(1, KEY_BYTES)
    (folder / "part-00000.safetensors").write_bytes(part_bytes(facts["id"], keys, np.ones((1, 5), np.float32)))
    store = _store(tmp_path, facts)
    with caplog.at_level("WARNING"):
        assert store.load() == 3
    assert "5 wide, the teacher's are 3" in caplog.text
    assert [p.name for p in _parts(folder)] == ["part-00001.safetensors"]
    assert store.missing(TEXTS + ["four"]) == ["four"]


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def test_a_dead_writers_temporaries_are_cleaned_a_live_ones_kept(tmp_path):
    from mlminilm.distillation.targets import fill

    facts = _facts()
    fill(_store(tmp_path, facts), TEXTS, _embed)
    folder = tmp_path / facts["id"]
    dead = folder / f".part-00001.safetensors.tmp-{_dead_pid()}"
    live = folder / f".part-00002.safetensors.tmp-{Path('/proc/self').resolve().name}"
    mine = folder / ".part-notes"  # not a temporary of ours
    for path in (dead, live, mine):
        path.write_bytes(b"half a part")
    store = _store(tmp_path, facts)
    with store.locked():
        assert store.load() == 3
    assert not dead.exists() and live.exists() and mine.exists()


def test_a_second_writer_waits_for_the_first(tmp_path):
    from mlminilm.distillation.targets import fill
    from mlminilm.io.output_lock import OutputLock

    facts = _facts()
    waited, done = threading.Event(), threading.Event()

    def second():
        store = _store(tmp_path, facts)
        with store.locked(wait=lambda holder: waited.set()):
            store.load()
            fill(store, TEXTS, _embed)
        done.set()

    with OutputLock(tmp_path / facts["id"], flag="--target-cache"):  # the first writer holds the folder
        worker = threading.Thread(target=second)
        worker.start()
        assert waited.wait(10)
        assert not done.wait(0.5) and not _parts(tmp_path / facts["id"])
    worker.join(10)
    assert done.is_set() and len(_parts(tmp_path / facts["id"])) == 1


# ------------------------------------------------------------------------------------------ through the CLI


def _pairs(tmp_path: Path) -> Path:
    path = tmp_path / "en-de.tsv"
    rows = [f"{a}\t{b}" for a, b in zip(sample_lines("en", 20), sample_lines("de", 20, seed=1))]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _distill(monkeypatch, capsys, teacher, data, tmp_path, *extra, out="run"):
    args = ["distill", "--teacher", str(teacher), "--data", str(data), "--parallel", str(_pairs(tmp_path))]
    args += ["--out", str(tmp_path / out), "--layers", "2", "--hidden", "32", "--heads", "4"]
    args += ["--intermediate", "64", "--max-steps", "2", "--save-every", "2", "--batch-size", "4"]
    args += ["--relation-loss-weight", "0", "--hidden-loss-weight", "0", "--embedding-loss-weight", "0"]
    return run_main(monkeypatch, capsys, *args, *extra)


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_the_cache_never_lands_in_an_input_or_nowhere(st_teacher, st_data, tmp_path, monkeypatch, capsys):
    before = {"teacher": _listing(st_teacher), "data": _listing(st_data)}
    for cache, needle in (
        (st_teacher, "is the --teacher input"),
        (st_data, "is the --data input"),
        (st_data / "shards", "lies inside the --data input"),
        (tmp_path / "run", "is the --out directory"),
        ("", "--target-cache '' names no directory"),
        (st_data / "manifest.json", "is a file, not a directory"),
    ):
        result = _distill(monkeypatch, capsys, st_teacher, st_data, tmp_path, "--target-cache", str(cache))
        assert_error(result, needle)
    assert {"teacher": _listing(st_teacher), "data": _listing(st_data)} == before
    assert not (tmp_path / "run").exists()


def test_a_cache_inside_out_is_the_runs_own_and_overwrite_keeps_it(st_teacher, st_data, tmp_path, monkeypatch, capsys):
    from helpers import file_tree
    from mlminilm.distillation import targets

    digests = []
    real = targets.module_digest
    monkeypatch.setattr(targets, "module_digest", lambda module: digests.append(real(module)) or digests[-1])
    run = tmp_path / "run"
    cache = run / "cache"
    code, _, err = _distill(monkeypatch, capsys, st_teacher, st_data, tmp_path, "--target-cache", str(cache))
    assert code == 0 and " 0 from the cache" in err, err
    filled = file_tree(cache)
    assert any(name.endswith(".safetensors") for name in filled)
    # The teacher is hashed once: the digest run.json records is the one the cache is keyed by.
    (facts,) = [json.loads(data) for name, data in filled.items() if name.endswith("fingerprint.json")]
    assert digests == [facts["teacher"]] == [json.loads((run / "run.json").read_text())["teacher_weights"]["digest"]]
    # The same command with --overwrite: the run starts over, its cache kept and read, nothing computed again.
    code, _, err = _distill(
        monkeypatch, capsys, st_teacher, st_data, tmp_path, "--target-cache", str(cache), "--overwrite"
    )
    assert code == 0 and " 0 computed" in err, err
    assert file_tree(cache) == filled
    assert sorted(p.name for p in run.iterdir()) == ["cache", "checkpoints", "metrics.jsonl", "run.json", "student"]
    # Inside what the run itself writes (or sets aside), a cache is refused before anything is written.
    before = file_tree(run)
    for place, needle in (
        (run / "checkpoints" / "c", "lies inside checkpoints"),
        (run / "student", "is student"),
        (run / ".previous-run" / "c", "lies inside .previous-run"),
    ):
        line = assert_error(
            _distill(monkeypatch, capsys, st_teacher, st_data, tmp_path, "--target-cache", str(place), "--overwrite"),
            needle,
            f"which the run writes in --out {run}",
        )
        assert file_tree(run) == before, line


def test_a_full_disk_while_writing_a_part_is_one_line_and_leaves_nothing(
    st_teacher,
    st_data,
    tmp_path,
    monkeypatch,
    capsys,
):
    import builtins

    from mlminilm.distillation import target_store

    def full(path, mode="r", *args, **kwargs):
        handle = builtins.open(path, mode, *args, **kwargs)
        if "b" in mode and "x" in mode:  # a part: half of it fits, then the disk is full
            handle.write(b"\0" * 64)
            handle.close()
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return handle

    monkeypatch.setattr(target_store, "open", full, raising=False)
    cache = tmp_path / "cache"
    line = assert_error(
        _distill(monkeypatch, capsys, st_teacher, st_data, tmp_path, "--target-cache", str(cache)),
        "No space left on device",
        "--target-cache",
    )
    assert "free some disk space" in line
    assert not cache.exists()  # no fingerprint folder, no temporary, no lock


def test_a_read_only_cache_is_read_and_its_advice_names_the_cache(
    st_teacher,
    st_data,
    tmp_path,
    monkeypatch,
    capsys,
):
    from mlminilm.io.output_lock import OutputLock

    real = OutputLock.__enter__

    def read_only(self):  # the cache's disk only: --out stays writable
        if self.flag == "--target-cache":
            raise OSError(errno.EROFS, "Read-only file system", str(self.path))
        return real(self)

    full, empty = tmp_path / "full", tmp_path / "empty"
    code, _, err = _distill(monkeypatch, capsys, st_teacher, st_data, tmp_path, "--target-cache", str(full), out="a")
    assert code == 0, err
    monkeypatch.setattr(OutputLock, "__enter__", read_only)
    # Everything the run draws is there: read as it is, nothing computed.
    code, _, err = _distill(monkeypatch, capsys, st_teacher, st_data, tmp_path, "--target-cache", str(full), out="b")
    assert code == 0 and " 0 computed" in err, err
    line = assert_error(
        _distill(monkeypatch, capsys, st_teacher, st_data, tmp_path, "--target-cache", str(empty), out="c"),
        "cannot be written",
        "--target-cache",
    )
    assert "--out" not in line, line


def test_a_link_or_folder_under_a_parts_name_is_neither_read_nor_removed(tmp_path, caplog):
    from mlminilm.distillation.targets import fill

    facts = _facts()
    folder = tmp_path / facts["id"]
    folder.mkdir()
    elsewhere = tmp_path / "yours.bin"
    elsewhere.write_bytes(b"not a part")
    (folder / "part-00000.safetensors").symlink_to(elsewhere)
    (folder / "part-00001.safetensors").mkdir()
    store = _store(tmp_path, facts)
    with caplog.at_level("WARNING"):
        assert store.load() == 0
    assert caplog.text.count("is not a plain file") == 2
    assert fill(store, TEXTS, _embed) == 3 and store.missing(TEXTS) == []
    assert elsewhere.read_bytes() == b"not a part" and (folder / "part-00001.safetensors").is_dir()


def test_a_real_full_disk_under_the_cache_is_one_line_and_leaves_only_what_was_there(
    st_teacher,
    st_data,
    tmp_path,
):
    """Issue 37: safetensors reported a full disk while writing a part as its own SafetensorError (a traceback), its
    folder left behind. A 1 MiB tmpfs, full but for a page (skipped where this process may not mount one)."""
    import os

    from helpers import assert_one_line_error, fill_disk, run_cli, small_tmpfs

    with small_tmpfs(tmp_path) as disk:
        fill_disk(disk)
        os.truncate(disk / "filler", (disk / "filler").stat().st_size - 4096)
        args = ["distill", "--teacher", str(st_teacher), "--data", str(st_data), "--parallel", str(_pairs(tmp_path))]
        args += ["--out", str(tmp_path / "run"), "--target-cache", str(disk / "cache"), "--layers", "2"]
        args += ["--hidden", "32", "--heads", "4", "--intermediate", "64", "--max-steps", "1", "--batch-size", "4"]
        proc = run_cli(
            *args, "--relation-loss-weight", "0", "--hidden-loss-weight", "0", "--embedding-loss-weight", "0"
        )
        assert_one_line_error(proc, "No space left on device", "--target-cache")
        assert "SafetensorError" not in proc.stderr
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
