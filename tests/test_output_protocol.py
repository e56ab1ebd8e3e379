"""The output protocol (the reliability guide, mlminilm/io/outputs.py), the same cases for every command that writes a
directory (issue 27): two runs on one --out, a file the user writes into --out during a run, --overwrite over
foreign files, a symlinked lock file and a symlinked --out, look-alike .tmp-/.old- directories, --out ., and a run
killed with SIGKILL then run again.

Each command runs in this process (`run_main`) on tiny models. "During the run" is a hook: the function that
writes the output's files into the staging directory is wrapped, and the case acts (starts a second run, writes a
file, kills the process) when it is called. Which case failed on the code before the protocol, and for which
commands, is said at each test."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from conftest import sample_lines
from taskdata import save_head_model, write_mlqa_dir, write_xnli_dir

from helpers import assert_error, run_main, tiny_encoder_fixture

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OWN_FILES = ".mlminilm-output.json"
encoder = tiny_encoder_fixture("tiny_wordpiece_dir", "protocol-enc", layers=2, hidden=16, heads=2, intermediate=32)

# command -> the function that writes its output's files into the staging directory (the hook's place).
HOOKS = {
    "prepare": "mlminilm.corpus.prepare.write_manifest",
    "trim": "mlminilm.vocab.trim._write_card",
    "export": "mlminilm.export.pipeline._write_directory",
    "eval-xnli": "mlminilm.report.write_reports",
    "eval-mlqa": "mlminilm.report.write_reports",
    "eval-tatoeba": "mlminilm.report.write_reports",
    "compare": "mlminilm.report.write_comparison",
    "retention": "mlminilm.retention.report.write_text_reports",
}
COMMANDS = list(HOOKS)
# An export traces a graph (~10 s here): its full runs are slow tests, but the cases where it differed from the other
# commands (--overwrite over foreign files, the lock) run by default.
QUICK = [c if c != "export" else pytest.param(c, marks=pytest.mark.slow) for c in COMMANDS]


@pytest.fixture(scope="module")
def inputs(encoder, tiny_wordpiece_dir, tiny_corpus_dir, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("protocol-inputs")
    tatoeba = root / "tatoeba"
    tatoeba.mkdir()
    for iso, lang in (("deu", "de"), ("ara", "ar")):
        (tatoeba / f"tatoeba.{iso}-eng.{iso}").write_text("\n".join(sample_lines(lang, 6, seed=4)) + "\n")
        (tatoeba / f"tatoeba.{iso}-eng.eng").write_text("\n".join(sample_lines("en", 6, seed=4)) + "\n")
    reports = []
    for name, score in (("teacher", 80.0), ("student", 60.0)):
        folder = root / name
        folder.mkdir()
        doc = {
            "task": "tatoeba",
            "model": name,
            "metrics": ["mean"],
            "average": {"mean": score},
            "data": {"source": str(tatoeba)},
            "languages": {"de": {"mean": score, "examples": 6}},
        }
        (folder / "metrics.json").write_text(json.dumps(doc))
        reports.append(str(folder))
    return {
        "encoder": str(encoder),
        "corpus": str(tiny_corpus_dir),
        "tatoeba": str(tatoeba),
        "data": str(root),  # a ../shared/data layout: tatoeba/ in it
        "reports": reports,
        "xnli": str(write_xnli_dir(root / "xnli", ("en",), count=3)),
        "xnli_model": str(save_head_model(tiny_wordpiece_dir, root / "xnli-model", "xnli")),
        "mlqa": str(write_mlqa_dir(root / "mlqa", ("en",), count=2)),
        "qa_model": str(save_head_model(tiny_wordpiece_dir, root / "qa-model", "qa")),
    }


def args(command: str, inputs: dict, out) -> list[str]:
    i = inputs
    return [
        command,
        *{
            "prepare": ["--teacher", i["encoder"], "--input", i["corpus"], "--seq-len", "32", "--workers", "1"],
            "trim": ["--model", i["encoder"], "--corpus", i["corpus"], "--workers", "1"],
            "export": ["--model", i["encoder"], "--format", "onnx"],
            "eval-xnli": ["--model", i["xnli_model"], "--data", i["xnli"]],
            "eval-mlqa": ["--model", i["qa_model"], "--data", i["mlqa"], "--langs", "en"],
            "eval-tatoeba": ["--model", i["encoder"], "--data", i["tatoeba"]],
            "compare": i["reports"],
            "retention": ["--teacher", i["encoder"], "--tasks", "tatoeba", "--data", i["data"], "--cut-layers", "1"],
        }[command],
        "--out",
        str(out),
    ]


def run(monkeypatch, capsys, command, inputs, out, *extra) -> tuple[int, str, str]:
    return run_main(monkeypatch, capsys, *args(command, inputs, out), *extra)


def hook(monkeypatch, command: str, action) -> list:
    """Call `action()` once, when `command` writes its output's files (inside its staging directory)."""
    module, name = HOOKS[command].rsplit(".", 1)
    import importlib

    owner = importlib.import_module(module)
    real = getattr(owner, name)
    done = []

    def wrapped(*a, **k):
        if not done:  # once: a second run started by `action` passes through here too
            done.append(None)
            done[0] = action()
        return real(*a, **k)

    monkeypatch.setattr(owner, name, wrapped)
    return done


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def recorded(out: Path) -> set[str]:
    """The files the output's own-files record names: every file mlminilm wrote there."""
    return set(json.loads((out / OWN_FILES).read_text())["files"])


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def dead_pid() -> int:
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# ------------------------------------------------------------------------------------------------ the cases


@pytest.mark.parametrize("command", QUICK)
def test_a_second_run_on_the_same_out_refuses_naming_the_holder(command, inputs, tmp_path, monkeypatch, capsys):
    """Old code: the evaluations and compare locked only around the final rename, so a second run started while the
    first was working ran to the end, and the first then replaced its report (both exit 0): fails for eval-*,
    compare."""
    out = tmp_path / "out"
    second = []

    def start_second():
        second.append(run(monkeypatch, capsys, command, inputs, out))

    hook(monkeypatch, command, start_second)
    code, stdout, err = run(monkeypatch, capsys, command, inputs, out)
    assert code == 0, err
    assert_error(second[0], "being written by another mlminilm process", f"pid {os.getpid()}")
    assert (out / OWN_FILES).is_file() and set(tree(out)) == recorded(out) | {OWN_FILES}
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("command", QUICK)
def test_a_file_the_user_writes_into_out_during_the_run_is_kept(command, inputs, tmp_path, monkeypatch, capsys):
    """Old code: the swap replaced the whole directory, deleting the user's file: fails for every command."""
    out = tmp_path / "out"

    def write_note():
        out.mkdir(exist_ok=True)
        (out / "notes.txt").write_text("mine")

    hook(monkeypatch, command, write_note)
    code, stdout, err = run(monkeypatch, capsys, command, inputs, out)
    assert code == 0, err
    assert (out / "notes.txt").read_text() == "mine"
    assert set(tree(out)) == recorded(out) | {OWN_FILES, "notes.txt"} and "notes.txt" not in recorded(out)


@pytest.mark.parametrize("command", COMMANDS)
def test_overwrite_refuses_an_output_holding_foreign_files(command, inputs, tmp_path, monkeypatch, capsys):
    """Old code: trim and export checked only that trim.json / onnx/export.json existed and deleted everything else;
    the others looked at top-level names only, so a file of the user's inside their own folders (predictions/,
    shards/, onnx/) went with them: fails for trim, export, and (nested) prepare, eval-*."""
    out = tmp_path / "out"
    assert run(monkeypatch, capsys, command, inputs, out)[0] == 0
    (out / "notes.txt").write_text("mine")
    before = tree(out)
    line = assert_error(
        run(monkeypatch, capsys, command, inputs, out, "--overwrite"),
        "notes.txt",
        "--overwrite replaces only what mlminilm wrote",
    )
    assert tree(out) == before, line
    (out / "notes.txt").unlink()
    folders = sorted(p for p in out.iterdir() if p.is_dir())
    if folders:
        (folders[0] / "mine.txt").write_text("mine")
        before = tree(out)
        assert_error(run(monkeypatch, capsys, command, inputs, out, "--overwrite"), f"{folders[0].name}/mine.txt")
        assert tree(out) == before
        (folders[0] / "mine.txt").unlink()
    assert run(monkeypatch, capsys, command, inputs, out, "--overwrite")[0] == 0  # only its own files: replaced
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_symlinked_lock_file_is_never_followed(command, inputs, tmp_path, monkeypatch, capsys):
    """Old code: the lock file was opened following links, truncating the link's target and writing a pid into it:
    fails for every command."""
    out = tmp_path / "out"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / ".out.lock").symlink_to(victim)
    assert_error(run(monkeypatch, capsys, command, inputs, out), "is a symbolic link", "remove the link")
    assert victim.read_text() == "precious" and not out.exists()


@pytest.mark.parametrize("command", QUICK)
def test_a_symlinked_out_is_written_through_to_its_target(command, inputs, tmp_path, monkeypatch, capsys):
    """Old code: the link was renamed aside and replaced by a real directory (and left aside for good): fails for
    every command that swapped (prepare, trim, export, eval-*, compare)."""
    target = tmp_path / "elsewhere" / "target"
    target.mkdir(parents=True)
    link = tmp_path / "out"
    link.symlink_to(target)
    assert run(monkeypatch, capsys, command, inputs, link)[0] == 0
    assert run(monkeypatch, capsys, command, inputs, link, "--overwrite")[0] == 0
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert (target / OWN_FILES).is_file() and set(tree(target)) == recorded(target) | {OWN_FILES}
    assert leftovers(tmp_path) == [] and leftovers(target.parent) == []


@pytest.mark.parametrize("command", QUICK)
def test_look_alike_temporaries_of_the_user_are_left_alone(command, inputs, tmp_path, monkeypatch, capsys):
    """Old code: `.old-<out>-N` of no live process was moved into place as --out, `.tmp-<out>-N` deleted: fails for
    every command."""
    pid = dead_pid()
    mine = {f".tmp-out-{pid}": "a", f".old-out-{pid}": "b", ".tmp-out-40000": "c", ".old-out-40000": "d"}
    if any(os.path.exists(f"/proc/{n}") for n in (40000,)):
        del mine[".tmp-out-40000"], mine[".old-out-40000"]
    for name, text in mine.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "mine.txt").write_text(text)
    out = tmp_path / "out"
    code, stdout, err = run(monkeypatch, capsys, command, inputs, out)
    assert code == 0, err
    for name, text in mine.items():
        assert (tmp_path / name / "mine.txt").read_text() == text and len(list((tmp_path / name).iterdir())) == 1
    assert "mine.txt" not in tree(out) and set(tree(out)) == recorded(out) | {OWN_FILES}


@pytest.mark.parametrize("command", QUICK)
def test_out_dot_is_the_current_directory(command, inputs, tmp_path, monkeypatch, capsys):
    """Old code: `--out .` named a directory without a name: a ValueError traceback after all the work for prepare,
    trim, eval-*; compare and export wrote beside the directory and swapped it away from under the shell."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    code, stdout, err = run(monkeypatch, capsys, command, inputs, ".")
    assert code == 0, err
    assert (here / OWN_FILES).is_file() and set(tree(here)) == recorded(here) | {OWN_FILES}
    assert os.path.samefile(os.getcwd(), here)  # the same directory, not one swapped in its place
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("command", QUICK)
def test_a_run_killed_with_sigkill_leaves_nothing_once_run_again(command, inputs, tmp_path, monkeypatch, capsys):
    """A forked child runs the command and SIGKILLs itself while writing into its staging directory; the next run
    removes what it left (its marked temporary; the lock file is the new run's). Old code: trim and export left
    `.tmp-<out>-<pid>` for good (prepare and the evaluations removed theirs by name alone): fails for trim."""
    out = tmp_path / "out"
    hook(monkeypatch, command, lambda: os.kill(os.getpid(), signal.SIGKILL))
    child = os.fork()
    if child == 0:  # pragma: no cover - the child dies in the hook
        try:
            run(monkeypatch, capsys, command, inputs, out)
        finally:
            os._exit(3)
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    assert [n for n in leftovers(tmp_path) if n.startswith(".tmp-")], leftovers(tmp_path)  # it died mid-work
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    code, stdout, err = run(monkeypatch, capsys, command, inputs, out)
    assert code == 0, err
    assert leftovers(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert set(tree(out)) == recorded(out) | {OWN_FILES}


# ------------------------------------------------------------------------- the training commands' lock


@pytest.fixture(scope="module")
def training(encoder, tiny_corpus_dir, tmp_path_factory) -> dict:
    from taskdata import write_nli_tsv

    from helpers import prepare_data

    root = tmp_path_factory.mktemp("protocol-training")
    return {
        "data": str(prepare_data(encoder, tiny_corpus_dir, root / "data")),
        "train": str(write_nli_tsv(root / "train.tsv", "en", 8)),
    }


def training_args(command: str, encoder, training: dict, out: Path) -> list[str]:
    if command == "distill":
        return [
            "distill",
            "--teacher",
            str(encoder),
            "--data",
            training["data"],
            "--layers",
            "1",
            "--hidden",
            "16",
            "--heads",
            "2",
            "--intermediate",
            "32",
            "--max-steps",
            "1",
            "--batch-size",
            "2",
            "--out",
            str(out),
        ]
    return [
        "finetune",
        "--task",
        "xnli",
        "--model",
        str(encoder),
        "--train",
        training["train"],
        "--max-steps",
        "1",
        "--batch-size",
        "4",
        "--out",
        str(out),
    ]


@pytest.mark.parametrize("command", ["distill", "finetune"])
def test_training_commands_follow_the_same_lock(command, encoder, training, tmp_path, monkeypatch, capsys):
    """A held lock names its holder; a symlinked lock is refused (old code: followed, the target truncated)."""
    from mlminilm.io.outputs import OutputLock

    out = tmp_path / "run"
    with OutputLock(out):
        assert_error(
            run_main(monkeypatch, capsys, *training_args(command, encoder, training, out)),
            "being written by another mlminilm process",
            f"pid {os.getpid()}",
        )
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / ".run.lock").symlink_to(victim)
    assert_error(run_main(monkeypatch, capsys, *training_args(command, encoder, training, out)), "symbolic link")
    assert victim.read_text() == "precious" and not out.exists()


# ------------------------------------------------------------------------------- the protocol by itself


def test_a_swap_cut_short_by_sigkill_is_finished_by_the_next_command(tmp_path):
    """A process killed between moving the previous output aside and moving all of the new one in: the next claim
    finishes the swap from the complete, marked temporary (new files in, old ones gone, the user's file kept)."""
    from mlminilm.io.outputs import Claim

    out = tmp_path / "out"
    with Claim(out, "test", "a test output") as claim:
        claim.check(False, "not empty")
        with claim.staging() as tmp:
            (tmp / "a.txt").write_text("old")
            (tmp / "gone.txt").write_text("old")
    child = os.fork()
    if child == 0:  # pragma: no cover - dies on its second move into --out
        real_rename, moved = os.rename, []

        def rename(src, dst):
            if Path(src).parent.name.startswith(".tmp-"):
                moved.append(src)
                if len(moved) == 2:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real_rename(src, dst)

        os.rename = rename
        try:
            with Claim(out, "test", "a test output") as claim:
                claim.check(True, "not empty")
                with claim.staging() as tmp:
                    (tmp / "a.txt").write_text("new")
                    (tmp / "b.txt").write_text("new")
                    (out / "notes.txt").write_text("mine")  # the user's, written during the run
        finally:
            os._exit(3)
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status), status
    assert not (out / OWN_FILES).exists()  # cut short: the old record is aside, the new one not yet in
    with Claim(out, "test", "a test output"):
        pass  # taking the lock is enough: the dead process's swap is finished first
    assert tree(out) == {
        "a.txt": b"new",
        "b.txt": b"new",
        "notes.txt": b"mine",
        OWN_FILES: (out / OWN_FILES).read_bytes(),
    }
    assert recorded(out) == {"a.txt", "b.txt"}
    assert leftovers(tmp_path) == []
