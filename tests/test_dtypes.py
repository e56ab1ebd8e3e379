"""Teachers and models stored in fp32, fp16 or bf16 work in every command; the run's --precision decides
the compute dtype, never the checkpoint, and what mlminilm saves is fp32 and says so in its config."""

from __future__ import annotations

import json

import pytest
import torch
from taskdata import write_nli_tsv, write_xnli_dir

from helpers import prepare_data, save_tiny_teacher

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STORED = ("float32", "float16", "bfloat16")


@pytest.fixture(scope="module")
def teachers(tiny_wordpiece_dir, tmp_path_factory):
    """One tiny BERT teacher per stored dtype (same weights, rounded to that dtype)."""
    from transformers import AutoModel

    root = tmp_path_factory.mktemp("dtype-teachers")
    out = {}
    for name in STORED:
        path = save_tiny_teacher(tiny_wordpiece_dir, root / name, layers=2, hidden=32, heads=4, intermediate=64)
        model = AutoModel.from_pretrained(path, dtype=getattr(torch, name))
        model.save_pretrained(path)
        out[name] = path
    return out


@pytest.fixture(scope="module")
def data(teachers, tiny_corpus_dir, tmp_path_factory):
    return prepare_data(teachers["float16"], tiny_corpus_dir, tmp_path_factory.mktemp("dtype-data") / "data")


def test_the_saved_teachers_really_store_each_dtype(teachers):
    from safetensors import safe_open

    for name, path in teachers.items():
        with safe_open(str(path / "model.safetensors"), "pt") as f:
            dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
        assert dtypes == {{"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[name]}
        assert json.loads((path / "config.json").read_text())["dtype"] == name


@pytest.mark.parametrize("stored", STORED)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_distill_finetune_evaluate_whatever_the_stored_dtype(teachers, data, stored, precision, tmp_path):
    from transformers import AutoModel

    from mlminilm import distill, finetune
    from mlminilm.config import DistillConfig, EvalXnliConfig, FinetuneConfig
    from mlminilm.evaluation import xnli

    result = distill.run(
        DistillConfig(
            teacher=str(teachers[stored]),
            data=data,
            out=tmp_path / "distill",
            layers=1,
            hidden=16,
            heads=4,
            intermediate=32,
            max_steps=2,
            batch_size=2,
            save_every=2,
            precision=precision,
            device="cpu",
        )
    )
    assert result.last_loss is not None and torch.isfinite(torch.tensor(result.last_loss))
    student = AutoModel.from_pretrained(result.student)
    assert {p.dtype for p in student.parameters()} == {torch.float32}
    assert json.loads((result.student / "config.json").read_text())["dtype"] == "float32"

    # Fine-tune and evaluate both the stored teacher itself and the student.
    write_nli_tsv(tmp_path / "train.tsv", "en", 6)
    tests = write_xnli_dir(tmp_path / "xnli", langs=("en", "de"), count=6)
    for label, model in (("teacher", teachers[stored]), ("student", result.student)):
        tuned = finetune.run(
            FinetuneConfig(
                model=str(model),
                task="xnli",
                train=str(tmp_path / "train.tsv"),
                out=tmp_path / f"ft-{label}",
                epochs=1,
                batch_size=4,
                max_seq_len=32,
                precision=precision,
                device="cpu",
            )
        )
        assert json.loads((tuned.out / "config.json").read_text())["dtype"] == "float32"
        report = xnli.run(
            EvalXnliConfig(
                model=str(tuned.out),
                data=str(tests),
                split="test",
                langs=("en", "de"),
                out=tmp_path / f"rep-{label}",
                precision=precision,
                device="cpu",
            )
        )
        assert report["average"]["examples"] == 12


@pytest.mark.gpu
@pytest.mark.parametrize("stored", STORED)
def test_distill_on_cuda_whatever_the_stored_dtype(teachers, data, stored, tmp_path):
    from mlminilm import distill
    from mlminilm.config import DistillConfig

    result = distill.run(
        DistillConfig(
            teacher=str(teachers[stored]),
            data=data,
            out=tmp_path / "distill",
            layers=1,
            hidden=16,
            heads=4,
            intermediate=32,
            max_steps=2,
            batch_size=2,
            save_every=2,
            device="cuda",
        )
    )
    assert result.last_loss is not None and torch.isfinite(torch.tensor(result.last_loss))


def test_teacher_runs_in_pure_bf16_under_autocast(tiny_wordpiece_dir, tmp_path, monkeypatch):
    """Under the run's bf16 autocast the teacher's capture runs with autocast off, in its weights' bf16: every
    LayerNorm gives bf16 (autocast would give fp32), and its Q/K/V stay close to an fp32 teacher's."""
    from mlminilm.config import DistillConfig
    from mlminilm.models.loading import load_config, load_teacher
    from mlminilm.models.student import build_student, freeze_unused, student_config

    path = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "teacher")
    teacher, layer = load_teacher(str(path), -1, torch.bfloat16, torch.device("cpu"))
    reference, _ = load_teacher(str(path), -1, torch.float32, torch.device("cpu"))
    cfg = DistillConfig(out=tmp_path / "x", teacher=str(path), layers=2, hidden=32, heads=4, intermediate=64)
    student = build_student(student_config(load_config(str(path)), cfg.shape, 0.0), 0)
    freeze_unused(student, -1)
    norms = []
    for module in teacher.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.register_forward_hook(lambda m, a, out: norms.append(out.dtype))
    captured = {}
    from mlminilm.distillation import objective

    real = objective.layer_qkv

    def spy(model, ids, mask, index):
        out = real(model, ids, mask, index)
        if model is teacher:
            captured["qkv"] = out
        return out

    ids = torch.randint(5, 500, (2, 16), generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(objective, "layer_qkv", spy)
    with torch.autocast("cpu", torch.bfloat16):
        terms = objective.distill_terms(teacher, layer, objective.StudentForward(student), ids, None, cfg)
    monkeypatch.undo()
    assert norms and set(norms) == {torch.bfloat16}
    assert all(t.dtype == torch.bfloat16 for t in captured["qkv"])
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in terms.values())
    with torch.no_grad():
        exact = objective.layer_qkv(reference, ids, None, layer)
    for got, want in zip(captured["qkv"], exact):
        cos = torch.nn.functional.cosine_similarity(got.float().flatten(), want.flatten(), dim=0)
        assert cos > 0.999
