"""Data parallelism: 2 gloo processes with batch B train exactly like 1 process with batch 2B, and only rank 0 writes.

Both runs go through tests/ddp_launch.py's launcher, which records every checkpoint, JSON file and export each
rank writes, then hands over to the real CLI.
"""

from __future__ import annotations

import json

import pytest
import torch
from ddp_launch import losses, recorded, rows, run, write_launcher, writes

from helpers import prepare_data, save_tiny_teacher


@pytest.fixture(scope="module")
def setup(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    # Dropout 0 (the student takes the teacher's): no random numbers differ between the two layouts.
    teacher = save_tiny_teacher(tiny_wordpiece_dir, root / "teacher", dropout=0.0)
    data = prepare_data(teacher, tiny_corpus_dir, root / "data")
    return teacher, data, write_launcher(root)


def test_two_processes_match_one_process_with_the_global_batch(setup, tmp_path):
    teacher, data, launcher = setup
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    proc = run(launcher, ddp, teacher, data, batch=2, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run(launcher, single, teacher, data, batch=4, nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # DDP broadcasts no buffers before each forward (the student's are constants: test_ddp_setup.py).
    assert recorded(ddp, "broadcast_buffers") == {"rank0": ["False"], "rank1": ["False"]}
    # The same loss trajectory, step by step.
    a, b = losses(ddp), losses(single)
    assert [s for s, _ in a] == [s for s, _ in b] == [1, 2, 3, 4]
    for (step, la), (_, lb) in zip(a, b):
        assert la == pytest.approx(lb, rel=1e-4), (step, la, lb)
    assert a[-1][1] != a[0][1]  # it trained

    # The same student at the end.
    from safetensors.torch import load_file

    wa = load_file(ddp / "student" / "model.safetensors")
    wb = load_file(single / "student" / "model.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=1e-4, atol=1e-5, msg=key)

    # Only rank 0 wrote anything: each checkpoint once, the run record once, one export.
    w = writes(ddp)
    assert set(w) == {"rank0"}, {k: v[:5] for k, v in w.items()}
    rank0 = w["rank0"]
    assert [x for x in rank0 if x[0] == "checkpoint"] == [("checkpoint", "2"), ("checkpoint", "4")]
    assert [x for x in rank0 if x[0] == "export"] == [("export", "student")]
    assert rank0.count(("json", "run.json")) == 1
    assert sorted(p.name for p in (ddp / "checkpoints").iterdir()) == ["step-2", "step-4"]
    leftovers = [p for p in ddp.rglob("*") if p.name.startswith(".tmp") or ".tmp-" in p.name]
    assert not leftovers, leftovers
    assert json.loads((ddp / "run.json").read_text())["world_size"] == 2
    assert writes(single)["rank0"] == rank0  # and exactly what the single process writes


@pytest.mark.slow
def test_the_parallel_term_under_two_processes_matches_one_process(setup, tmp_path):
    """The pairs of a step are split over the ranks like the running text, and DDP averages what one process with
    the global batch computes (each rank pads its own pairs: mean pooling leaves padding out)."""
    from conftest import sample_lines

    teacher, data, launcher = setup
    pairs = tmp_path / "en-de.tsv"
    pairs.write_text(
        "".join(f"{a}\t{b}\n" for a, b in zip(sample_lines("en", 30), sample_lines("de", 30, seed=1))), encoding="utf-8"
    )
    extra = ("--hidden", "64", "--intermediate", "128", "--parallel", str(pairs), "--parallel-max-length", "24")
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    proc = run(launcher, ddp, teacher, data, batch=2, nproc=2, extra=extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run(launcher, single, teacher, data, batch=4, nproc=1, extra=extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {
        name: [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
        for name, out in (("ddp", ddp), ("single", single))
    }
    assert all("parallel" in r for r in records["ddp"] if "loss" in r)
    for a, b in zip(records["ddp"], records["single"]):
        assert a["step"] == b["step"]
        for key in ("loss", "parallel", "attention"):
            assert a[key] == pytest.approx(b[key], rel=1e-4), (a["step"], key)


@pytest.mark.slow
def test_two_processes_killed_and_resumed_equal_the_uninterrupted_run(setup, tmp_path):
    """With dropout on, so each rank draws noise: both ranks are SIGKILLed as step 3 starts (after checkpoint 2),
    then `--resume` continues. Dropout draws from generators seeded by (seed, step, rank) each step, so the resumed
    run's noise, losses and weights are bit-identical to the uninterrupted run's, on every rank."""
    from safetensors.torch import load_file

    teacher, data, launcher = setup
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    extra = ("--dropout", "0.1")
    proc = run(launcher, whole, teacher, data, batch=2, nproc=2, extra=extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kill = {"MLMINILM_KILL_AT": f"2:{broken / 'checkpoints' / 'step-2'}"}
    proc = run(launcher, broken, teacher, data, batch=2, nproc=2, extra=extra, env_extra=kill)
    assert proc.returncode != 0
    assert not (broken / "student").exists()
    assert [p.name for p in (broken / "checkpoints").iterdir() if p.name.startswith("step-")] == ["step-2"]
    proc = run(launcher, broken, teacher, data, batch=2, nproc=2, extra=(*extra, "--resume"))
    assert proc.returncode == 0, proc.stderr[-3000:]

    assert losses(broken) == losses(whole)  # every logged loss, to the last bit
    wa = load_file(whole / "student" / "model.safetensors")
    wb = load_file(broken / "student" / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa), [k for k in wa if not torch.equal(wa[k], wb[k])]
    # Dropout really acted: without it the losses differ (the noise is part of what is being compared).
    plain = tmp_path / "plain"
    proc = run(launcher, plain, teacher, data, batch=2, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert losses(plain) != losses(whole)


@pytest.mark.slow
def test_compiled_two_processes_with_accumulation_match_one_eager_process(setup, tmp_path):
    """DDP under torch.compile (dynamo and AOT autograd trace the graphs as on CUDA; the `aot_eager` backend then
    runs them eagerly, without inductor's minute of C++ generation) with --grad-accum 2, so the first micro-batch of
    every step runs under DDP's no_sync: the same losses and student, in fp32, as one eager process with the
    global batch (2 processes x 2 sequences x 2 micro-batches = 1 x 4 x 2)."""
    teacher, data, launcher = setup
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    compiled = {"MLMINILM_TEST_COMPILE_BACKEND": "aot_eager", "MLMINILM_TEST_ROWS": "1"}  # CUDA's reduce too
    proc = run(launcher, ddp, teacher, data, 2, 2, ("--compile", "on", "--grad-accum", "2"), compiled)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run(launcher, single, teacher, data, batch=4, nproc=1, extra=("--compile", "off", "--grad-accum", "2"))
    assert proc.returncode == 0, proc.stderr[-3000:]

    assert json.loads((ddp / "run.json").read_text())["compile"] is True
    frames = recorded(ddp, "compiled_frames")
    assert set(frames) == {"rank0", "rank1"} and all(int(n[0]) > 0 for n in frames.values()), frames
    # Both ranks ran the masked and the packed graph at the same micro-batches (one rank's padded slice makes
    # the micro-batch masked on both), so neither compiled while the other waited in the all-reduce.
    variants = recorded(ddp, "variant")
    assert variants["rank0"] == variants["rank1"] and len(set(variants["rank0"])) == 2, variants
    assert frames["rank0"] == frames["rank1"], frames
    # no_sync held under compile: each rank's gradients were all-reduced once per step, after its second
    # micro-batch, never after the first (which would give the same sums, a bucket's traffic later).
    for rank, found in rows(ddp).items():
        order = "".join("m" if k == "variant" else "r" for k, _ in found if k in ("variant", "allreduce"))
        assert order.replace("mmr", "") == "" and order.count("mmr") == 4, (rank, order)
    a, b = losses(ddp), losses(single)
    assert [s for s, _ in a] == [s for s, _ in b] == [1, 2, 3, 4]
    for (step, la), (_, lb) in zip(a, b):
        assert la == pytest.approx(lb, rel=1e-5), (step, la, lb)
    assert a[-1][1] != a[0][1]
    from safetensors.torch import load_file

    wa = load_file(ddp / "student" / "model.safetensors")
    wb = load_file(single / "student" / "model.safetensors")
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=1e-5, atol=1e-6, msg=key)


def test_batch_size_auto_agrees_on_the_smallest_micro_batch_over_the_ranks(setup, tmp_path):
    """`--batch-size auto` probes on every rank; ranks whose devices fit different micro-batches (here rank 0
    fits 4 sequences, rank 1 only 1) each kept their own: rank 0 trained on 4 x 1, rank 1 on 1 x 4, slicing the
    step's global batch differently (rows 0-3 and rows 1, 3, 5, 7: some twice, some never), silently. Every
    rank now takes the smallest micro-batch any rank fits, and trains as one process on the same 8 sequences."""
    teacher, data, launcher = setup
    out, single = tmp_path / "auto", tmp_path / "single"
    extra = ("--global-batch", "8")
    env = {"MLMINILM_TEST_FITS": "4,1", "MLMINILM_TEST_ROWS": "1"}  # ROWS: each bucket's all-reduce recorded
    proc = run(launcher, out, teacher, data, "auto", 2, extra, env, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert recorded(out, "micro_batch") == {"rank0": ["1"], "rank1": ["1"]}
    proc = run(launcher, single, teacher, data, batch=2, nproc=1, extra=("--grad-accum", "4"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for (step, la), (_, lb) in zip(losses(out), losses(single), strict=True):
        assert la == pytest.approx(lb, rel=1e-5), (step, la, lb)
    batch = json.loads((out / "run.json").read_text())["batch"]
    assert (batch["micro_batch"], batch["grad_accum"], batch["global_batch"], batch["how"]) == (1, 4, 8, "auto")
    for rank, found in rows(out).items():  # one all-reduce per step, after the 4th micro-batch, on each rank
        order = "".join("m" if k == "variant" else "r" for k, _ in found if k in ("variant", "allreduce"))
        assert order == "mmmmr" * 4, (rank, order)


@pytest.mark.slow
def test_embedding_gradients_reduced_by_rows_equal_the_dense_all_reduce(setup, tmp_path):
    """On CUDA, DDP reduces the word embedding's gradient by rows, only those some rank looked up
    (mlminilm/training/row_sparse_reduce.py); turned on here on the CPU: the same losses and student, to 1e-6
    (bit-equal with 2 ranks), as the whole [vocabulary, hidden] all-reduce of DDP's own hook, with accumulation
    (the gradient sums two micro-batches' rows)."""
    from safetensors.torch import load_file

    teacher, data, launcher = setup
    rows_out, dense = tmp_path / "rows", tmp_path / "dense"
    extra = ("--grad-accum", "2")
    proc = run(launcher, rows_out, teacher, data, 2, 2, extra, {"MLMINILM_TEST_ROWS": "1"})  # as on CUDA
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run(launcher, dense, teacher, data, batch=2, nproc=2, extra=extra)  # the CPU's default: DDP's own
    assert proc.returncode == 0, proc.stderr[-3000:]

    sent = recorded(rows_out, "rows")
    assert sent["rank0"] == sent["rank1"] and sent["rank0"], sent  # the ranks agree on the rows to send
    word = [tuple(map(int, s.split("/"))) for s in sent["rank0"]]  # the word embedding's, once a step
    assert len(word) == 4 and all(0 < n < total / 2 for n, total in word), word  # a step's rows only
    # A block of a size the host knows, no host sync: 2 processes x (2 sequences x 32 tokens x 2 micro-batches).
    assert {n for n, _ in word} == {2 * 2 * 32 * 2}, word
    assert not any(recorded(dense, "rows").values())
    a, b = losses(rows_out), losses(dense)
    assert [s for s, _ in a] == [s for s, _ in b] == [1, 2, 3, 4]
    for (step, la), (_, lb) in zip(a, b):
        assert la == pytest.approx(lb, rel=1e-6, abs=1e-9), (step, la, lb)
    wa = load_file(rows_out / "student" / "model.safetensors")
    wb = load_file(dense / "student" / "model.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=0, atol=1e-6, msg=key)
