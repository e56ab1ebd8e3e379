"""Bad option values to every command, in-process: a usage error (exit 2) naming the option, never a traceback,
nothing on stdout, no output; and the same bounds in the config dataclasses for Python API users. The other bad
input, one `Error:` line (exit 1) each: tests/test_bad_input_*.py by command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import assert_usage_error, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------- option values: usage, exit 2

# (command line after the command's required options, the option the usage error must name)
OPTION_CASES = {
    "prepare": [
        (["--seq-len", "2"], "--seq-len"),
        (["--workers", "-1"], "--workers"),
        (["--shard-sequences", "0"], "--shard-sequences"),
        (["--max-docs", "0"], "--max-docs"),
    ],
    "distill": [
        (["--precision", "fp8"], "--precision"),
        (["--objective", "kd"], "--objective"),
        (["--init", "copy"], "--init"),
        (["--lr", "-1"], "--lr"),
        (["--lr", "inf"], "--lr"),
        (["--lr", "nan"], "--lr"),
        (["--max-steps", "-1"], "--max-steps"),
        (["--warmup", "nan"], "--warmup"),
        (["--hidden-loss-weight", "-1"], "--hidden-loss-weight"),
        (["--probe-every", "0"], "--probe-every"),
        (["--embedding-loss-weight", "nan"], "--embedding-loss-weight"),
        (["--hidden-distance", "l1"], "--hidden-distance"),
        (["--warmup", "inf"], "--warmup"),
        (["--weight-decay", "-1"], "--weight-decay"),
        (["--alpha", "2"], "--alpha"),
        (["--dropout", "1"], "--dropout"),
        (["--device", "tpu"], "--device"),
        (["--max-grad-norm", "inf"], "--max-grad-norm"),
        (["--layers", "0"], "--layers"),
        (["--batch-size", "0"], "--batch-size"),
        (["--save-every", "0"], "--save-every"),
    ],
    "assist": [
        (["--warmup", "-1"], "--warmup"),
        (["--assistant-steps", "0"], "--assistant-steps"),
        (["--objective", "kd"], "--objective"),
    ],
    "finetune": [
        (["--task", "ner"], "--task"),
        (["--lr", "-1"], "--lr"),
        (["--epochs", "0"], "--epochs"),
        (["--warmup", "inf"], "--warmup"),
        (["--max-seq-len", "4"], "--max-seq-len"),
    ],
    "eval-xnli": [
        (["--split", "train"], "--split"),
        (["--precision", "fp8"], "--precision"),
        (["--batch-size", "0"], "--batch-size"),
    ],
    "eval-mlqa": [
        (["--split", "train"], "--split"),
        (["--scorer", "exact"], "--scorer"),
        (["--n-best", "0"], "--n-best"),
    ],
    "eval-tatoeba": [(["--pooling", "sum"], "--pooling"), (["--max-length", "1"], "--max-length")],
}


def required(command: str, tmp: Path) -> list[str]:
    """Valid required options of each command (never reached: the bad value stops the parse)."""
    out = ["--out", str(tmp / "out")]
    return {
        "prepare": ["--teacher", "t", "--input", str(tmp), *out],
        "distill": ["--teacher", "t", *out],
        "assist": ["--teacher", "t", *out],
        "finetune": ["--model", "m", "--train", "t.tsv", *out],
        "eval-xnli": ["--model", "m", "--data", str(tmp)],
        "eval-mlqa": ["--model", "m", "--data", str(tmp)],
        "eval-tatoeba": ["--model", "m", "--data", str(tmp)],
    }[command]


@pytest.mark.parametrize(
    "command, extra, option",
    [(command, extra, option) for command, cases in OPTION_CASES.items() for extra, option in cases],
    ids=lambda x: " ".join(x) if isinstance(x, list) else str(x),
)
def test_bad_option_value_is_a_usage_error(command, extra, option, tmp_path, monkeypatch, capsys):
    assert_usage_error(run_main(monkeypatch, capsys, command, *required(command, tmp_path), *extra), option)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "command, option",
    [
        ("prepare", "--teacher"),
        ("distill", "--teacher"),
        ("assist", "--out"),
        ("finetune", "--train"),
        ("eval-xnli", "--model"),
        ("eval-mlqa", "--data"),
        ("eval-tatoeba", "--data"),
    ],
)
def test_missing_required_option_is_a_usage_error(command, option, tmp_path, monkeypatch, capsys):
    args = required(command, tmp_path)
    i = args.index(option)
    assert_usage_error(run_main(monkeypatch, capsys, command, *args[:i], *args[i + 2 :]), option)


def test_configs_refuse_non_finite_numbers_for_python_api_users():
    """The CLI refuses these at parse time; the config dataclasses refuse them too, for code that builds them."""
    from mlminilm.config import DistillConfig, FinetuneConfig
    from mlminilm.errors import ConfigError

    for field, bad, message in [
        ("lr", float("inf"), "Invalid value for '--lr': inf is not a positive finite number"),
        ("warmup", float("nan"), "Invalid value for '--warmup': nan is not a non-negative finite number"),
        ("warmup", float("inf"), "Invalid value for '--warmup': inf is not a non-negative finite number"),
        ("weight_decay", -1.0, "Invalid value for '--weight-decay': -1.0 is not a non-negative finite number"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            DistillConfig(teacher="t", out="o", **{field: bad})
        with pytest.raises(ConfigError, match=re.escape(message)):
            FinetuneConfig(model="m", train="t", out="o", **{field: bad})


# Integer options beyond what any run needs: numpy, torch or the operating system used to end them in a traceback
# (or a process killed for memory, `prepare --seq-len 2000000000`).
INTEGER_CASES = [
    ("distill", ["--seed", "-1"], "--seed"),
    ("distill", ["--seed", str(2**70)], "--seed"),
    ("distill", ["--max-steps", str(2 * 10**19)], "--max-steps"),
    ("prepare", ["--seq-len", "2000000000"], "--seq-len"),
    ("assist", ["--seed", "-1"], "--seed"),
    ("finetune", ["--seed", str(2**70)], "--seed"),
    ("distill", ["--grad-accum", str(2**63)], "--grad-accum"),
    ("distill", ["--data-workers", str(10**6)], "--data-workers"),
    ("distill", ["--batch-size", str(10**12)], "--batch-size"),
    ("distill", ["--teacher-layer", str(-(2**64))], "--teacher-layer"),
    ("prepare", ["--workers", str(2**40)], "--workers"),
    ("prepare", ["--max-docs", str(2**64)], "--max-docs"),
    ("finetune", ["--max-seq-len", str(2**40)], "--max-seq-len"),
    ("eval-xnli", ["--batch-size", str(2**64)], "--batch-size"),
    ("eval-mlqa", ["--doc-stride", str(2**64)], "--doc-stride"),
    ("eval-tatoeba", ["--layer", str(-(2**64))], "--layer"),
]


@pytest.mark.parametrize(
    "command, extra, option", INTEGER_CASES, ids=lambda x: " ".join(x) if isinstance(x, list) else str(x)
)
def test_huge_or_negative_integers_are_usage_errors(command, extra, option, tmp_path, monkeypatch, capsys):
    assert_usage_error(run_main(monkeypatch, capsys, command, *required(command, tmp_path), *extra), option)
    assert not (tmp_path / "out").exists()


def test_configs_bound_integers_for_python_api_users():
    from mlminilm.config import DistillConfig, EvalXnliConfig, FinetuneConfig, PrepareConfig
    from mlminilm.errors import ConfigError

    with pytest.raises(ConfigError, match=r"'--seed': -1 is not in 0\.\.4294967295"):
        DistillConfig(teacher="t", out="o", seed=-1)
    with pytest.raises(ConfigError, match=r"'--seed': \d+ is not in 0\.\.4294967295"):
        FinetuneConfig(model="m", train="t", out="o", seed=2**70)
    with pytest.raises(ConfigError, match=r"'--max-steps': \d+ is not in 0\.\.2147483647"):
        DistillConfig(teacher="t", out="o", max_steps=2 * 10**19)
    with pytest.raises(ConfigError, match=r"'--seq-len': 2000000000 is not in 3\.\.65536"):
        PrepareConfig(teacher="t", inputs=("x",), out="o", seq_len=2_000_000_000)
    with pytest.raises(ConfigError, match=r"'--batch-size': \d+ is not in 1\.\.65536"):
        EvalXnliConfig(model="m", data="d", batch_size=2**64)
    # A float option that becomes a step count: finetune --epochs 1e30 trained towards 10^30 steps.
    with pytest.raises(ConfigError, match="give fewer --epochs"):
        FinetuneConfig(model="m", train="t", out="o", epochs=1e30).resolved(steps_per_epoch=1)
