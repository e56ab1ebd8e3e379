#!/usr/bin/env python
"""docs/benchmarks/retrieval.md section 18f (two students blended): an answered experiment, kept to rerun.

Blend students trained from one start into one (issue 34's weight-averaging experiment, docs/benchmarks/
retrieval.md section 18f):

    python experiments/blend_students.py OUT A B [C ...] [--weights 0.5,0.5] [--base START --scale 1.0]

- without `--base`: a weighted average of the students' weights (a "model soup"); `--weights` defaults to equal
  shares and must sum to 1;
- with `--base START` (the untrained start they share, e.g. `distill ... --max-steps 0`): task arithmetic,
  START + scale x sum(student - START).

Every student must hold the same tensors with the same shapes and the same tokenizer (its tokenizer.json, less the
truncation and padding a run left in it). OUT is a copy of the first student with the blended model.safetensors
(its card still describes the first student) and `blend.json`, which says what went in. Sums are taken in float64.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

WEIGHTS = "model.safetensors"


class BlendError(Exception):
    """Bad input: one line for the user."""


def _load(folder: Path) -> dict:
    from safetensors.torch import load_file

    path = folder / WEIGHTS
    if not path.is_file():
        raise BlendError(f"{folder}: no {WEIGHTS} (a student's folder, e.g. OUT/student, is needed)")
    return load_file(str(path))


def _check_alike(first: Path, tensors: dict, other: Path, theirs: dict) -> None:
    if tensors.keys() != theirs.keys():
        odd = sorted(tensors.keys() ^ theirs.keys())
        raise BlendError(f"{other}: holds other tensors than {first} ({odd[0]}, {len(odd)} in all)")
    for name, t in tensors.items():
        if t.shape != theirs[name].shape or t.dtype != theirs[name].dtype:
            raise BlendError(f"{other}: {name} is {tuple(theirs[name].shape)}, {first} has {tuple(t.shape)}")
    if _vocabulary(first) != _vocabulary(other):
        raise BlendError(f"{other}: its tokenizer.json differs from {first}'s")


def _vocabulary(folder: Path) -> dict:
    """tokenizer.json less its truncation and padding: those record the last length a run tokenised at."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise BlendError(f"{folder}: no tokenizer.json (a student's folder, e.g. OUT/student, is needed)")
    found = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in found.items() if k not in ("truncation", "padding")}


def blend(students: list[Path], weights: list[float], base: Path | None = None, scale: float = 1.0) -> dict:
    """The blended tensors: sum(w_i x student_i), or base + scale x sum(student_i - base)."""
    loaded = [_load(s) for s in students]
    start = _load(base) if base is not None else None
    for folder, tensors in zip(students[1:], loaded[1:]):
        _check_alike(students[0], loaded[0], folder, tensors)
    if start is not None:
        _check_alike(students[0], loaded[0], base, start)
    out = {}
    for name, first in loaded[0].items():
        if not first.is_floating_point():  # position ids and the like: the students' own, unchanged
            out[name] = first
            continue
        parts = [t[name].double() for t in loaded]
        if start is None:
            mixed = sum(w * p for w, p in zip(weights, parts))
        else:
            origin = start[name].double()
            mixed = origin + scale * sum(p - origin for p in parts)
        out[name] = mixed.to(first.dtype)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the blended student's folder (must not exist)")
    parser.add_argument("students", type=Path, nargs="+", help="two or more students' folders, one start")
    parser.add_argument("--weights", help="comma-separated shares summing to 1 (default: equal)")
    parser.add_argument("--base", type=Path, help="their untrained start: task arithmetic instead of an average")
    parser.add_argument("--scale", type=float, default=1.0, help="with --base: the task vectors' factor (1.0)")
    args = parser.parse_args(argv)
    try:
        if len(args.students) < 2:
            raise BlendError("two or more students are needed")
        if args.out.exists():
            raise BlendError(f"{args.out} exists: name a new folder")
        if args.weights and args.base:
            raise BlendError("--weights is for an average, --scale for --base: give one")
        n = len(args.students)
        try:
            weights = [float(w) for w in args.weights.split(",")] if args.weights else [1.0 / n] * n
        except ValueError:
            raise BlendError(f"--weights {args.weights!r}: numbers separated by commas") from None
        if len(weights) != n or abs(sum(weights) - 1.0) > 1e-6:
            raise BlendError(f"--weights: {n} shares summing to 1 are needed, got {weights}")
        tensors = blend(args.students, weights, args.base, args.scale)
    except BlendError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    from safetensors.torch import save_file

    from mlminilm.io.staging import disk_errors, staged

    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with staged(args.out) as tmp:  # built aside and put in place whole: an interrupted blend leaves nothing
            shutil.copytree(args.students[0], tmp)
            with disk_errors(tmp):
                save_file(tensors, str(tmp / WEIGHTS), metadata={"format": "pt"})
            record = {"students": [str(s) for s in args.students]}
            record.update({"base": str(args.base), "scale": args.scale} if args.base else {"weights": weights})
            (tmp / "blend.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        print(f"Error: writing {args.out} failed: {exc}", file=sys.stderr)
        return 1
    how = f"{args.base} + {args.scale} x task vectors" if args.base else f"weights {weights}"
    print(f"{args.out}: {len(tensors)} tensors blended from {n} students ({how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
