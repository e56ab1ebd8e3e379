"""--batch-size auto and --global-batch: how the global batch is cut into micro-batches, and that the cut does not
change what is learned (the sampler draws the same global batch however it is cut)."""

from __future__ import annotations

import json

import pytest

from helpers import assert_one_line_error, distill_args, prepare_data, run_cli, save_tiny_teacher
from mlminilm.errors import ConfigError
from mlminilm.training.batch_size import largest_fitting, plan_batch


def test_plans_by_hand():
    assert plan_batch(8, 2, None, 2).to_dict() == {
        "micro_batch": 8,
        "grad_accum": 2,
        "global_batch": 32,
        "how": "given",
    }
    assert plan_batch(4, 1, 64, 2).to_dict() == {"micro_batch": 4, "grad_accum": 8, "global_batch": 64, "how": "global"}
    # auto: 96 per process; powers of two dividing it: 1, 2, 4, 8, 16, 32. Up to 16 fits, 32 does not.
    tried = []
    plan = plan_batch("auto", 1, 192, 2, fits=lambda b: tried.append(b) or b <= 16)
    assert (plan.micro_batch, plan.grad_accum, plan.how) == (16, 6, "auto")
    assert tried == [1, 2, 4, 8, 16, 32]
    # The CPU cap: everything fits, the largest power of two <= 32 dividing 256 is 32.
    assert plan_batch("auto", 1, 256, 1, cap=32).micro_batch == 32
    assert largest_fitting(12, lambda b: True) == 4  # 8 does not divide 12


@pytest.mark.parametrize(
    "args, needle",
    [
        (("auto", 1, None, 1), "--global-batch"),
        ((4, 1, 30, 4), "multiple of the 4 processes"),
        ((4, 1, 20, 2), "not a multiple of --batch-size 4"),  # 10 per process
    ],
)
def test_impossible_plans_say_why(args, needle):
    with pytest.raises(ConfigError, match=needle):
        plan_batch(*args)


def test_nothing_fits():
    with pytest.raises(ConfigError, match="not even one sequence"):
        plan_batch("auto", 1, 8, 1, fits=lambda b: False)


@pytest.fixture(scope="module")
def setup(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("batch")
    teacher = save_tiny_teacher(tiny_wordpiece_dir, root / "teacher", dropout=0.0)
    return teacher, prepare_data(teacher, tiny_corpus_dir, root / "data")


# A 3-step run, every step logged, checkpointed at its end, in fp32 on the CPU (each test adds its batch options).
RUN = (
    "--log-every", "1", "--save-every", "3", "--lr", "1e-3", "--warmup", "0",
    "--precision", "fp32", "--device", "cpu", "--quiet",
)  # fmt: skip


def losses(out):
    return [json.loads(l)["loss"] for l in (out / "metrics.jsonl").read_text().splitlines()]


def test_the_cut_of_the_global_batch_does_not_change_training(setup, tmp_path):
    teacher, data = setup
    runs = {
        "16x1": ("--batch-size", "16"),
        "4x4": ("--batch-size", "4", "--global-batch", "16"),
        "auto": ("--batch-size", "auto", "--global-batch", "16"),
    }
    for name, extra in runs.items():
        proc = run_cli(*distill_args(teacher, data, tmp_path / name, *RUN, *extra, steps=3))
        assert proc.returncode == 0, proc.stderr[-2000:]
    batch = {name: json.loads((tmp_path / name / "run.json").read_text())["batch"] for name in runs}
    tokens = {"tokens_per_process_step": 16 * 32}  # 16 sequences of prepare_data's 32 tokens
    assert batch["16x1"] == {"micro_batch": 16, "grad_accum": 1, "global_batch": 16, "how": "given", **tokens}
    assert batch["4x4"] == {"micro_batch": 4, "grad_accum": 4, "global_batch": 16, "how": "global", **tokens}
    assert batch["auto"] == {"micro_batch": 16, "grad_accum": 1, "global_batch": 16, "how": "auto", **tokens}
    assert json.loads((tmp_path / "auto" / "run.json").read_text())["config"]["batch_size"] == "auto"
    assert losses(tmp_path / "auto") == losses(tmp_path / "16x1")
    # Four micro-batches of 4 hold the same 16 sequences: the same losses up to summation order.
    assert losses(tmp_path / "4x4") == pytest.approx(losses(tmp_path / "16x1"), rel=1e-5)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (("--batch-size", "auto"), "--global-batch"),
        (("--batch-size", "4", "--global-batch", "10"), "not a multiple of --batch-size 4"),
        (("--global-batch", "16", "--grad-accum", "2"), "leave out --grad-accum"),
    ],
)
def test_bad_batch_options_fail_in_one_line(setup, tmp_path, extra, needle):
    teacher, data = setup
    out = tmp_path / "run"
    assert_one_line_error(run_cli(*distill_args(teacher, data, out, *RUN, *extra, steps=3)), needle)
    assert not out.exists()


def test_batch_size_must_be_a_number_or_auto(setup, tmp_path):
    teacher, data = setup
    proc = run_cli(*distill_args(teacher, data, tmp_path / "run", *RUN, "--batch-size", "lots", steps=3))
    assert proc.returncode == 2 and "neither a number of sequences nor auto" in proc.stderr
