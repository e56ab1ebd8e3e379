"""Builders shared by the training tests: tiny teachers saved as HF directories, prepared data, CLI runs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def save_tiny_teacher(
    tokenizer_dir: Path,
    out: Path,
    kind: str = "bert",
    layers: int = 4,
    hidden: int = 64,
    heads: int = 4,
    intermediate: int = 128,
    dropout: float = 0.1,
) -> Path:
    """A randomly initialised tiny encoder with the given tokenizer, saved like a hub model directory."""
    import torch
    from transformers import AutoModel, AutoTokenizer, BertConfig, XLMRobertaConfig

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    common = dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=160,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        pad_token_id=tok.pad_token_id,
    )
    if kind == "bert":
        config = BertConfig(**common)
    else:
        config = XLMRobertaConfig(
            **common, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, type_vocab_size=1
        )
    torch.manual_seed(1234)
    model = AutoModel.from_config(config)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def tiny_encoder_fixture(tokenizer: str, folder: str, **sizes):
    """A module-scoped fixture: `save_tiny_teacher(**sizes)` with the session's tiny tokenizer fixture named
    `tokenizer` (tiny_wordpiece_dir, tiny_sentencepiece_dir), saved once per test module in a temporary `folder`.
    Assign it to the fixture's name in the module: `encoder = tiny_encoder_fixture("tiny_wordpiece_dir", ...)`."""
    import pytest

    @pytest.fixture(scope="module")
    def encoder(request, tmp_path_factory):
        # By name: only the tokenizer this encoder uses is built.
        return save_tiny_teacher(request.getfixturevalue(tokenizer), tmp_path_factory.mktemp(folder), **sizes)

    return encoder


def prepare_data(teacher_dir: Path, corpus_dir: Path, out: Path, seq_len: int = 32) -> Path:
    from mlminilm.config import PrepareConfig
    from mlminilm.corpus.prepare import run

    run(PrepareConfig(teacher=str(teacher_dir), inputs=(str(corpus_dir),), out=out, seq_len=seq_len, workers=1))
    return out


def distill_config(teacher, data, out, **kw):
    """A DistillConfig that trains a 2-layer, 32-wide student of the tiny teacher for 6 short steps on CPU,
    checkpointing every 2 and logging every step; `kw` overrides any field."""
    from mlminilm.config import DistillConfig

    base = dict(
        teacher=str(teacher),
        data=data,
        out=out,
        layers=2,
        hidden=32,
        heads=4,
        intermediate=64,
        max_steps=6,
        batch_size=4,
        save_every=2,
        log_every=1,
        lr=1e-3,
        warmup=0.0,
    )
    return DistillConfig(**{**base, **kw})


def objective_config(teacher, data, out, **kw):
    """A DistillConfig of the objective tests (an e5-like teacher, `st_teacher`): `distill_config`'s 2x32 student
    started from the teacher's layers, 4 steps, one checkpoint at the end; `kw` overrides any field."""
    return distill_config(teacher, data, out, **{"max_steps": 4, "save_every": 4, "init": "teacher", **kw})


def cli(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run `python -m mlminilm ARGS` as a user would, offline."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLMINILM_NO_PROGRESS": "1", **(env or {})}
    full_env.pop("MLMINILM_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "mlminilm", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=timeout,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    errors = [l for l in proc.stderr.splitlines() if l.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`mlminilm ARGS` in this process, as `cli` returns it (exit code, stdout, stderr) but without an interpreter
    start (3-5 s each): for every test where the process itself is not the point. `env` sets (or with None values
    unsets) environment variables for the call only; the logger and the environment are restored afterwards."""
    import io
    import logging

    from mlminilm.commands.app import main

    changes = {"MLMINILM_DEBUG": None, **(env or {})}
    saved_env = {name: os.environ.get(name) for name in changes}
    saved_argv = sys.argv
    logger = logging.getLogger("mlminilm")  # the command sets up its own handler: restore the test's afterwards
    saved_logger = (logger.handlers[:], logger.level, logger.propagate)
    out, err = io.StringIO(), io.StringIO()
    try:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        sys.argv = ["mlminilm", *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exit_:
                code = 0 if exit_.code is None else exit_.code
    finally:
        sys.argv = saved_argv
        logger.handlers[:], logger.level, logger.propagate = saved_logger
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return subprocess.CompletedProcess(["mlminilm", *args], code, out.getvalue(), err.getvalue())


def run_main(monkeypatch, capsys, *args: str, env: dict | None = None) -> tuple[int, str, str]:
    """`run_cli` as a tuple (exit code, stdout, stderr), for the tests written against it."""
    proc = run_cli(*args, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def assert_error(result: tuple[int, str, str], *needles: str) -> str:
    """A known error: exit 1, exactly one `Error:` line on stderr holding every needle, nothing on stdout, no
    traceback. Returns the error line."""
    code, out, err = result
    assert code == 1, (code, out, err)
    errors = [l for l in err.splitlines() if l.startswith("Error:")]
    assert len(errors) == 1, err
    assert "Traceback" not in err and out == "", (out, err)
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def assert_usage_error(result: tuple[int, str, str], option: str) -> None:
    """A bad option value: exit 2 with click's usage error naming the option, nothing on stdout, no traceback."""
    code, out, err = result
    assert code == 2, (code, out, err)
    assert "Usage:" in err and option in err and "Traceback" not in err and out == "", (out, err)


class Killed(Exception):
    """What `run_killed_after_checkpoint` raises in place of the process dying."""


def run_killed_after_checkpoint(monkeypatch, step: int, run, *args, **kwargs) -> None:
    """Call `run(*args, **kwargs)` (distill.run, finetune.run ...) and make it die right after its checkpoint at
    `step`: the training loop raises as step `step` (0-based: the first after that checkpoint) starts, where
    `training.step_seed` is called. The loop finishes a checkpoint write in flight before the exception leaves it."""
    import pytest

    from mlminilm import training

    real = training.step_seed

    def die(seed, current, rank):
        if current == step:
            raise Killed
        return real(seed, current, rank)

    monkeypatch.setattr("mlminilm.training.loop.step_seed", die)
    try:
        with pytest.raises(Killed):
            run(*args, **kwargs)
    finally:
        monkeypatch.setattr("mlminilm.training.loop.step_seed", real)


# ---------------------------------------------------------------------------- command lines and output trees


TINY_STUDENT = ("--layers", "2", "--hidden", "32", "--heads", "4", "--intermediate", "64")  # 2x32, 4 heads


def distill_args(teacher, data, out, *extra: str, steps: int = 1) -> list[str]:
    """`distill` of a 2x32 student of `teacher` for `steps` steps, then `extra`: every test's distill command line
    (each names only what its run needs beyond the tiny student)."""
    return ["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(out), *TINY_STUDENT] + [
        "--max-steps",
        str(steps),
        *extra,
    ]


def one_step_distill_args(teacher, data, out, *extra: str) -> list[str]:
    """One step: what the bad-input tests refuse (test_bad_input_*.py)."""
    return distill_args(teacher, data, out, *extra)


def two_step_distill_args(teacher, data, out, *extra: str) -> list[str]:
    """Two steps of 2 sequences, one checkpoint at the end: the short run the fault tests break (test_faults_*.py)."""
    return distill_args(teacher, data, out, "--batch-size", "2", "--save-every", "2", *extra, steps=2)


def command_configs() -> dict[str, type]:
    """Each CLI command's config class, from the one list of commands (mlminilm.COMMANDS): the tests that walk every
    command read it here rather than restate the list."""
    import mlminilm
    from mlminilm import config

    return {name: getattr(config, config_name) for name, _, config_name in mlminilm.COMMANDS}


def file_tree(root: Path) -> dict[str, bytes | None]:
    """Every path below `root` (relative) with its bytes (None for a directory): the file tree to compare."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
        if not p.is_symlink()
    }


def refused(result, out: Path | None, *needles: str) -> str:
    """One `Error:` line holding every needle, exit 1, nothing on stdout, and (when given) no `out` and no
    temporary beside it."""
    code, stdout, stderr = result
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert code == 1 and len(errors) == 1 and not stdout and "Traceback" not in stderr, (code, stdout, stderr)
    for needle in needles:
        assert needle in errors[0], errors[0]
    if out is not None:
        assert not out.exists() and not list(out.parent.glob(f".tmp-{out.name}-*"))
    return errors[0]


@contextlib.contextmanager
def small_tmpfs(tmp_path: Path):
    """A 1 MiB tmpfs at tmp_path/disk for the block (the test is skipped where this process may not mount one)."""
    import pytest

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


# ------------------------------------------------------------------ the GPU tests (tests/test_gpu_*.py)

# The device the GPU tests' bodies run on: CUDA, or the CPU to exercise the same bodies without a GPU (tests that
# check what only CUDA has guard it with `CUDA`).
GPU_TEST_DEVICE = os.environ.get("MLMINILM_TEST_GPU_DEVICE", "cuda")
assert GPU_TEST_DEVICE in ("cuda", "cpu"), f"MLMINILM_TEST_GPU_DEVICE must be cuda or cpu, got {GPU_TEST_DEVICE!r}"
GPU_TEST_CUDA = GPU_TEST_DEVICE == "cuda"


def distill_fields() -> set[str]:
    from mlminilm.config import DistillConfig

    return set(DistillConfig.__dataclass_fields__)


def device_distill_config(teacher: Path, data: Path, out: Path, **kw):
    """A tiny 2x32 student run on GPU_TEST_DEVICE. `compile` off unless asked: a compiled graph autotunes
    (synchronizing) on first use and costs compile time in every run; the compile test covers it."""
    from mlminilm.config import DistillConfig

    base = dict(
        teacher=str(teacher),
        data=data,
        out=out,
        layers=2,
        hidden=32,
        heads=4,
        intermediate=64,
        max_steps=6,
        batch_size=4,
        save_every=3,
        log_every=1,
        lr=1e-3,
        warmup=0.0,
        device=GPU_TEST_DEVICE,
        quiet=True,
    )
    if "compile" in distill_fields():
        base["compile"] = "off"
    base.update(kw)
    missing = set(base) - distill_fields()
    assert not missing, f"DistillConfig has no field(s) {sorted(missing)}"
    return DistillConfig(**base)


# ------------------------------------------------------------------------ trim (tests/test_trim_*.py)

TRIM_LANGS = ("en", "de", "ar", "zh")  # the tiny corpus's languages; fr, ru, el, hi stay out of the counts


def trim(model, out, **kw):
    """`trim` of `model` into `out` in this process, one worker; `kw` sets any TrimConfig field."""
    from mlminilm import vocab
    from mlminilm.config import TrimConfig

    return vocab.run(TrimConfig(model=str(model), out=out, workers=1, **kw))


def covered_texts():
    """Lines made of the corpus's words in other orders: every word was counted, so every piece is kept."""
    from conftest import sample_lines

    return [line for lang in TRIM_LANGS for line in sample_lines(lang, 15, seed=7)]


# ---------------------------------------------- model cards' results (tests/test_model_card_*.py)


def card_results(card_path: Path, dataset_type: str | None = None) -> list:
    """The model-index results of the card at `card_path` (of one dataset type, when given)."""
    from huggingface_hub import ModelCard

    found = ModelCard.load(card_path).data.eval_results or []
    return [r for r in found if dataset_type is None or r.dataset_type == dataset_type]


def by_config(found: list, metric: str = "accuracy", metric_config: str | None = None) -> dict[str, float]:
    """{dataset config: value} of the results `found` for `metric` (and `metric_config`); a duplicate fails."""
    values = {}
    for r in found:
        if r.metric_type == metric and r.metric_config == metric_config:
            assert r.dataset_config not in values, f"duplicate entry for {r.dataset_config}"
            values[r.dataset_config] = r.metric_value
    return values


def read_report(out: Path) -> dict:
    """An evaluation's metrics.json in `out`."""
    import json

    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


def pair_terms(target, s_hidden, both_mask, head, cfg, not_negative=None) -> dict:
    """The pairs rows of the loss-term table (mlminilm/distillation/terms.py TERMS) as a distill step computes them,
    from the teacher's embedding of the B sources (`target`, [B, H]) and the student's last hidden states of the
    sources then the translations (`s_hidden`, [2B, T, H]). `cfg` needs `parallel` (a path: the terms are on) and
    the pairs terms' weights and temperature."""
    from types import SimpleNamespace

    from mlminilm.distillation.terms import StepTensors, compute_terms

    pairs = SimpleNamespace(both_mask=both_mask, not_negative=not_negative)
    step = StepTensors(cfg, head, pairs=pairs, t_pairs=target, s_pairs=s_hidden)
    return compute_terms(step, running_text=False, pairs=True)
