"""benchmarks/blend_students.py: weight averages and task arithmetic of students, against a float64 loop over
the stored numbers, and its bad-input paths (one line, exit 1, no folder left)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import blend_students  # noqa: E402

SHAPES = {"layer.weight": (3, 4), "layer.bias": (4,)}


def _student(folder, seed, tokenizer='{"vocab": [1, 2]}', shapes=SHAPES):
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(seed)
    tensors = {name: torch.randn(shape, generator=g) for name, shape in shapes.items()}
    tensors["position_ids"] = torch.arange(5)  # integers are kept as they are, never averaged
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "tokenizer.json").write_text(tokenizer)
    (folder / "config.json").write_text('{"hidden_size": 4}')
    return folder


def _numbers(folder):
    return {k: v.numpy().astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}


def test_weighted_average_matches_a_float64_loop(tmp_path, capsys):
    a, b = _student(tmp_path / "a", 1), _student(tmp_path / "b", 2)
    out = tmp_path / "soup"
    assert blend_students.main([str(out), str(a), str(b), "--weights", "0.7,0.3"]) == 0
    got, na, nb = _numbers(out), _numbers(a), _numbers(b)
    for name, shape in SHAPES.items():
        want = np.zeros(shape)
        for index in np.ndindex(shape):
            want[index] = 0.7 * na[name][index] + 0.3 * nb[name][index]
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got["position_ids"], np.arange(5))
    assert (out / "config.json").read_text() == '{"hidden_size": 4}'  # the first student's files come along
    assert json.loads((out / "blend.json").read_text()) == {"students": [str(a), str(b)], "weights": [0.7, 0.3]}
    assert "2 students" in capsys.readouterr().out


def test_the_length_a_run_last_tokenised_at_is_not_a_different_tokenizer(tmp_path):
    a = _student(tmp_path / "a", 1, tokenizer='{"truncation": {"max_length": 256}, "vocab": [1, 2]}')
    b = _student(tmp_path / "b", 2, tokenizer='{"truncation": {"max_length": 128}, "vocab": [1, 2]}')
    assert blend_students.main([str(tmp_path / "soup"), str(a), str(b)]) == 0


def test_equal_shares_by_default_and_a_student_blended_with_itself_is_itself(tmp_path):
    a = _student(tmp_path / "a", 1)
    assert blend_students.main([str(tmp_path / "self"), str(a), str(a), str(a)]) == 0
    for name in SHAPES:
        np.testing.assert_allclose(_numbers(tmp_path / "self")[name], _numbers(a)[name], rtol=1e-6)


def test_task_arithmetic_adds_each_student_s_change_from_the_start(tmp_path):
    start, a, b = (_student(tmp_path / n, s) for n, s in (("start", 0), ("a", 1), ("b", 2)))
    out = tmp_path / "sum"
    assert blend_students.main([str(out), str(a), str(b), "--base", str(start), "--scale", "0.75"]) == 0
    got, n0, na, nb = _numbers(out), _numbers(start), _numbers(a), _numbers(b)
    for name in SHAPES:
        want = n0[name] + 0.75 * ((na[name] - n0[name]) + (nb[name] - n0[name]))  # worked by hand: the definition
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-6)
    assert json.loads((out / "blend.json").read_text())["scale"] == 0.75


@pytest.mark.parametrize(
    "case, message",
    [
        ("shape", "layer.weight is (4, 4)"),
        ("tokenizer", "tokenizer.json differs"),
        ("tensors", "holds other tensors"),
        ("weights", "2 shares summing to 1"),
        ("not-numbers", "numbers separated by commas"),
        ("missing", "no model.safetensors"),
        ("one", "two or more students"),
        ("exists", "exists: name a new folder"),
        ("both", "give one"),
    ],
)
def test_bad_input_gives_one_line_exit_1_and_no_folder(tmp_path, capsys, case, message):
    a = _student(tmp_path / "a", 1)
    other = {
        "shape": lambda p: _student(p, 2, shapes={"layer.weight": (4, 4), "layer.bias": (4,)}),
        "tokenizer": lambda p: _student(p, 2, tokenizer='{"vocab": [1, 3]}'),
        "tensors": lambda p: _student(p, 2, shapes={"layer.weight": (3, 4)}),
        "missing": lambda p: p.mkdir(),
    }.get(case, lambda p: _student(p, 2))
    b = tmp_path / "b"
    other(b)
    out = tmp_path / "out"
    args = [str(out), str(a), str(b)]
    if case == "weights":
        args += ["--weights", "0.5,0.6"]
    elif case == "not-numbers":
        args += ["--weights", "half,half"]
    elif case == "one":
        args = [str(out), str(a)]
    elif case == "exists":
        out.mkdir()
    elif case == "both":
        args += ["--weights", "0.5,0.5", "--base", str(a)]
    assert blend_students.main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: ") and message in err[0], err
    assert out.exists() == (case == "exists")
    assert not list(out.iterdir()) if case == "exists" else True
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a", "b", *(["out"] if case == "exists" else [])])
