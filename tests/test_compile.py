"""`distill --compile on`: the student's forward, the teacher's capture and the loss compiled by torch.compile
(inductor, which runs on CPU too) train exactly like eager execution, step by step."""

from __future__ import annotations

import json
import time

import pytest

from helpers import prepare_data, save_tiny_teacher


@pytest.mark.slow
def test_compiled_and_eager_distillation_agree_over_five_steps(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    from mlminilm import distill
    from mlminilm.config import DistillConfig

    teacher = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "teacher", dropout=0.0)
    data = prepare_data(teacher, tiny_corpus_dir, tmp_path / "data")
    runs = {}
    for mode in ("off", "on"):
        cfg = DistillConfig(
            out=tmp_path / mode,
            teacher=str(teacher),
            data=data,
            layers=2,
            hidden=32,
            heads=4,
            intermediate=64,
            max_steps=5,
            batch_size=8,
            log_every=1,
            save_every=5,
            lr=1e-3,
            warmup=0.0,
            precision="fp32",
            device="cpu",
            quiet=True,
            compile=mode,
        )
        t0 = time.perf_counter()
        distill.run(cfg)
        runs[mode] = time.perf_counter() - t0
    records = {
        mode: [json.loads(l) for l in (tmp_path / mode / "metrics.jsonl").read_text().splitlines()] for mode in runs
    }
    assert json.loads((tmp_path / "on" / "run.json").read_text())["compile"] is True
    assert json.loads((tmp_path / "off" / "run.json").read_text())["compile"] is False
    eager = [r["loss"] for r in records["off"]]
    compiled = [r["loss"] for r in records["on"]]
    assert len(eager) == len(compiled) == 5 and eager[-1] != eager[0]
    for a, b in zip(eager, compiled):
        assert b == pytest.approx(a, rel=1e-5, abs=1e-8)
    print(f"eager {runs['off']:.1f} s, compiled (incl. compilation) {runs['on']:.1f} s")
