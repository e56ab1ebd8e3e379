"""Where a student starts (--init-layers, --max-steps 0), the output terms (last hidden states, sentence
embedding) against float64 references, and the in-training Tatoeba probe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import assert_error, run_main, save_tiny_teacher
from helpers import objective_config as config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------------ init rules


def test_init_layer_rules_by_hand():
    from mlminilm.errors import ConfigError
    from mlminilm.models.student import init_layers

    assert init_layers("every", 12, 6) == [1, 3, 5, 7, 9, 11]
    assert init_layers("every", 12, 4) == [2, 5, 8, 11]
    assert init_layers("every", 12, 5) == [1, 3, 5, 7, 9]  # k = 2: ends at layer 9, as MiniLM's rule always did
    assert init_layers("first", 12, 6) == [0, 1, 2, 3, 4, 5]
    assert init_layers("first-last", 12, 6) == [0, 1, 2, 3, 4, 11]
    assert init_layers("first-last", 12, 1) == [11] and init_layers("first-last", 4, 4) == [0, 1, 2, 3]
    assert init_layers([0, 2, 4, 6, 8, 10], 12, 6) == [0, 2, 4, 6, 8, 10]
    with pytest.raises(ConfigError, match="no deeper"):
        init_layers("first", 4, 6)
    with pytest.raises(ConfigError, match="0..3"):
        init_layers([0, 4], 4, 2)


def test_init_layers_option_problems():
    from mlminilm.config import init_layers_problems, parse_init_layers

    assert parse_init_layers(" first ") == "first" and parse_init_layers("0,1, 5") == [0, 1, 5]
    assert init_layers_problems("every", 6) == [] and init_layers_problems("0,1,2", 3) == []
    assert "exactly 3" in init_layers_problems("0,1", 3)[0]
    assert "increasing" in init_layers_problems("2,1,3", 3)[0]
    assert "increasing" in init_layers_problems("1,1,3", 3)[0]
    assert "comma-separated" in init_layers_problems("last", 3)[0]


@pytest.mark.parametrize(
    "rule, picked", [("first", [0, 1]), ("every", [1, 3]), ("first-last", [0, 3]), ("0,2", [0, 2])]
)
def test_max_steps_zero_exports_the_chosen_teacher_layers(st_teacher, st_data, tmp_path, rule, picked):
    from safetensors.torch import load_file

    from mlminilm import distill

    result = distill.run(config(st_teacher, st_data, tmp_path / "run", max_steps=0, init_layers=rule))
    assert result.steps == 0 and not (tmp_path / "run" / "checkpoints").exists()
    teacher = load_file(st_teacher / "model.safetensors")
    student = load_file(result.student / "model.safetensors")
    strip = lambda k: k.split("encoder.layer.", 1)  # noqa: E731
    for key, value in student.items():
        if "encoder.layer." in key:
            head, rest = strip(key)
            s_layer, tail = rest.split(".", 1)
            t_key = next(k for k in teacher if k.endswith(f"encoder.layer.{picked[int(s_layer)]}.{tail}"))
            assert torch.equal(value, teacher[t_key]), key
        elif "embeddings" in key:
            t_key = next(k for k in teacher if k.endswith(key.split("embeddings", 1)[1]) and "embeddings" in k)
            assert torch.equal(value, teacher[t_key]), key
    card = json.loads((result.student / "mlminilm.json").read_text())
    assert card["init_layers"].endswith(",".join(map(str, picked)))
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["init_layers"] == picked and record["config"]["init_layers"] == rule
    assert (result.student / "modules.json").exists()  # ready for eval-tatoeba as the teacher is used


def test_init_layers_bad_values_are_one_line(monkeypatch, capsys, st_teacher, st_data, tmp_path):
    base = (
        "distill",
        "--teacher",
        str(st_teacher),
        "--data",
        str(st_data),
        "--layers",
        "2",
        "--hidden",
        "32",
        "--heads",
        "4",
        "--intermediate",
        "64",
    )
    assert_error(
        run_main(monkeypatch, capsys, *base, "--out", str(tmp_path / "a"), "--init", "teacher", "--init-layers", "0,9"),
        "--init-layers 0,9",
        "0..3",
    )
    assert_error(
        run_main(monkeypatch, capsys, *base, "--out", str(tmp_path / "b"), "--init-layers", "first"),
        "--init-layers needs --init teacher",
    )
    assert_error(
        run_main(
            monkeypatch, capsys, *base, "--out", str(tmp_path / "c"), "--init", "teacher", "--init-layers", "0,1,2"
        ),
        "exactly 2",
    )
    for name in "abc":
        assert not (tmp_path / name).exists()


# ------------------------------------------------------------------------------------------ loss terms


def _mask():
    return torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])


def test_hidden_terms_against_float64_loops():
    from mlminilm.distillation.losses import hidden_cosine, hidden_mse

    g = torch.Generator().manual_seed(0)
    t = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    s = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    mask = _mask()
    cos_ref = mse_ref = 0.0
    for b in range(2):
        n = int(mask[b].sum())
        cos_seq = mse_seq = 0.0
        for i in range(n):
            dot = sum(float(t[b, i, d] * s[b, i, d]) for d in range(8))
            nt = sum(float(t[b, i, d]) ** 2 for d in range(8)) ** 0.5
            ns = sum(float(s[b, i, d]) ** 2 for d in range(8)) ** 0.5
            cos_seq += 1 - dot / (nt * ns)
            mse_seq += sum(float(s[b, i, d] - t[b, i, d]) ** 2 for d in range(8)) / 8
        cos_ref += cos_seq / n / 2
        mse_ref += mse_seq / n / 2
    assert hidden_cosine(t, s, mask).item() == pytest.approx(cos_ref, rel=1e-5)
    assert hidden_mse(t, s, mask).item() == pytest.approx(mse_ref, rel=1e-5)
    # Padding is masked: what sits in padded positions changes nothing.
    s2 = s.clone()
    s2[1, 3:] = 1e3
    assert hidden_cosine(t, s2, mask).item() == pytest.approx(cos_ref, rel=1e-5)
    assert hidden_mse(t, s2, mask).item() == pytest.approx(mse_ref, rel=1e-5)
    # No mask: every position counts (the same as a mask of ones).
    ones = torch.ones(2, 5, dtype=torch.long)
    assert hidden_mse(t, s, None).item() == pytest.approx(hidden_mse(t, s, ones).item(), rel=1e-6)


def test_hand_worked_values():
    from mlminilm.distillation.losses import embedding_mse, hidden_cosine, sentence_embedding

    # Orthogonal unit vectors: 1 - cos = 1; identical: 0. Mean over the 2 tokens of the one sequence: 0.5.
    t = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    s = torch.tensor([[[0.0, 1.0], [0.0, 2.0]]])
    assert hidden_cosine(t, s, None).item() == pytest.approx(0.5)
    # Sentence embedding, mean pooling over real tokens then normalised: tokens (3, 0), (1, 4) -> mean (2, 2) ->
    # (0.7071, 0.7071); the padded (100, 100) is ignored.
    h = torch.tensor([[[3.0, 0.0], [1.0, 4.0], [100.0, 100.0]]])
    e = sentence_embedding(h, torch.tensor([[1, 1, 0]]), ("mean",), True)
    assert e.tolist()[0] == pytest.approx([2**-0.5, 2**-0.5])
    # Squared distance of unit vectors = 2 - 2 cos: (1, 0) vs (0, 1) -> 2; averaged over the batch with 0 -> 1.
    assert embedding_mse(torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([[0.0, 1.0], [1.0, 0.0]])).item() == 1.0


def test_output_term_gradients_match_float64_references():
    from mlminilm.distillation.losses import embedding_mse, hidden_cosine, hidden_mse, sentence_embedding

    g = torch.Generator().manual_seed(1)
    t = torch.randn(2, 5, 6, generator=g)
    s0 = torch.randn(2, 5, 6, generator=g)
    mask = _mask()

    def reference(kind, t64, s64):
        m = mask.to(torch.float64)
        if kind == "cosine":
            per = 1 - (t64 * s64).sum(-1) / (t64.norm(dim=-1) * s64.norm(dim=-1))
        elif kind == "mse":
            per = ((s64 - t64) ** 2).mean(-1)
        else:  # embedding: mean pooling, normalise, squared distance
            pooled = [(x * m[..., None]).sum(1) / m.sum(1, keepdim=True) for x in (t64, s64)]
            et, es = (p / p.norm(dim=-1, keepdim=True) for p in pooled)
            return ((es - et) ** 2).sum(-1).mean()
        return ((per * m).sum(1) / m.sum(1)).mean()

    ours = {
        "cosine": lambda s: hidden_cosine(t, s, mask),
        "mse": lambda s: hidden_mse(t, s, mask),
        "embedding": lambda s: embedding_mse(
            sentence_embedding(t, mask, ("mean",), True), sentence_embedding(s, mask, ("mean",), True)
        ),
    }
    for kind, fn in ours.items():
        s = s0.clone().requires_grad_(True)
        value = fn(s)
        value.backward()
        s64 = s0.double().requires_grad_(True)
        ref = reference(kind, t.double(), s64)
        ref.backward()
        assert value.item() == pytest.approx(ref.item(), rel=1e-5), kind
        torch.testing.assert_close(s.grad.double(), s64.grad, rtol=1e-4, atol=1e-7, msg=kind)
        assert s.grad[1, 3:].abs().max().item() == 0.0  # padded positions get no gradient


def test_output_terms_train_the_whole_top_layer(st_teacher, st_data, tmp_path):
    from safetensors.torch import load_file

    from mlminilm import distill

    def changed(out, **kw):
        start = distill.run(config(st_teacher, st_data, tmp_path / f"{out}-0", max_steps=0, **kw)).student
        end = distill.run(config(st_teacher, st_data, tmp_path / out, **kw)).student
        a, b = load_file(start / "model.safetensors"), load_file(end / "model.safetensors")
        return {k for k in a if not torch.equal(a[k], b[k])}, tmp_path / out

    relations_only, _ = changed("rel", hidden_loss_weight=0.0, embedding_loss_weight=0.0)
    top_ffn = {k for k in relations_only if "layer.1.output.dense" in k or "layer.1.intermediate" in k}
    assert not top_ffn  # the pure MiniLM loss reaches nothing above the top layer's Q/K/V: frozen
    with_terms, out = changed("terms", hidden_loss_weight=1.0, embedding_loss_weight=1.0)
    assert any("layer.1.output.dense" in k for k in with_terms) and any("layer.1.intermediate" in k for k in with_terms)
    assert not any("pooler" in k for k in with_terms)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for key in ("attention", "value", "hidden", "embedding"):
        assert all(key in r for r in records if "loss" in r), key
    # The loss is the relations plus the weighted terms.
    r = records[-1]
    assert r["loss"] == pytest.approx(r["attention"] + r["value"] + r["hidden"] + r["embedding"], rel=1e-4)
    card = json.loads((out / "student" / "mlminilm.json").read_text())
    assert "sentence embedding" in card["loss"] and "last hidden states (cosine)" in card["loss"]


def test_output_terms_refusals(monkeypatch, capsys, st_teacher, st_data, tmp_path, tiny_sentencepiece_dir):
    base = (
        "distill",
        "--teacher",
        str(st_teacher),
        "--data",
        str(st_data),
        "--layers",
        "2",
        "--heads",
        "4",
        "--intermediate",
        "64",
    )
    # A width mismatch: refused, not projected.
    assert_error(
        run_main(
            monkeypatch, capsys, *base, "--hidden", "16", "--out", str(tmp_path / "w"), "--hidden-loss-weight", "1"
        ),
        "need equal hidden sizes",
        "student 16, teacher 32",
    )
    # The embedding term needs a sentence-transformers teacher.
    plain = save_tiny_teacher(
        tiny_sentencepiece_dir, tmp_path / "plain", kind="xlmr", layers=2, hidden=32, intermediate=64
    )
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "distill",
            "--teacher",
            str(plain),
            "--data",
            str(st_data),
            "--layers",
            "2",
            "--hidden",
            "32",
            "--heads",
            "4",
            "--intermediate",
            "64",
            "--out",
            str(tmp_path / "p"),
            "--embedding-loss-weight",
            "1",
        ),
        "needs a sentence-transformers teacher",
    )
    assert not (tmp_path / "w").exists() and not (tmp_path / "p").exists()


# ------------------------------------------------------------------------------------------ the probe


def _tatoeba(folder: Path, make_lines) -> Path:
    folder.mkdir()
    for iso, lang in (("deu", "de"), ("ara", "ar")):
        source = make_lines(lang, 12, seed=3)
        english = make_lines("en", 12, seed=3)
        (folder / f"tatoeba.{iso}-eng.{iso}").write_text("\n".join(source) + "\n", encoding="utf-8")
        (folder / f"tatoeba.{iso}-eng.eng").write_text("\n".join(english) + "\n", encoding="utf-8")
    return folder


def test_probe_rows_at_step_zero_every_n_and_the_end(st_teacher, st_data, tmp_path, make_lines):
    from mlminilm import distill
    from mlminilm.config import EvalTatoebaConfig
    from mlminilm.evaluation import tatoeba

    tato = _tatoeba(tmp_path / "tatoeba", make_lines)
    out = tmp_path / "run"
    distill.run(config(st_teacher, st_data, out, max_steps=7, save_every=7, probe_tatoeba=tato, probe_every=3))
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    probes = [r for r in records if "probe_tatoeba_xx_to_en" in r]
    assert [r["step"] for r in probes] == [0, 3, 6, 7]
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 8))  # training records unchanged
    assert set(probes[0]["probe_tatoeba"]) == {"de", "ar"} and probes[0]["train_s"] == 0.0
    assert all(b["train_s"] >= a["train_s"] for a, b in zip(probes, probes[1:]))
    # The last probe is what eval-tatoeba reports for the exported student (same embedding, same pairs).
    doc = tatoeba.run(EvalTatoebaConfig(model=str(out / "student"), data=str(tato), precision="fp32"))
    for lang, scores in doc["languages"].items():
        assert probes[-1]["probe_tatoeba"][lang]["xx_to_en"] == pytest.approx(scores["xx_to_en"], abs=0.01)
        assert probes[-1]["probe_tatoeba"][lang]["en_to_xx"] == pytest.approx(scores["en_to_xx"], abs=0.01)


def test_probe_bad_input(monkeypatch, capsys, st_teacher, st_data, tmp_path):
    base = (
        "distill",
        "--teacher",
        str(st_teacher),
        "--data",
        str(st_data),
        "--layers",
        "2",
        "--hidden",
        "32",
        "--heads",
        "4",
        "--intermediate",
        "64",
    )
    assert_error(
        run_main(
            monkeypatch, capsys, *base, "--out", str(tmp_path / "a"), "--probe-tatoeba", str(tmp_path / "missing")
        ),
        "missing",
    )
    assert_error(
        run_main(monkeypatch, capsys, *base, "--out", str(tmp_path / "b"), "--probe-langs", "de"),
        "--probe-langs needs --probe-tatoeba",
    )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_output_terms_auto(st_teacher, st_data, tiny_sentencepiece_dir, tmp_path):
    """auto (the default): on for a sentence-transformers teacher of the student's width, off otherwise."""
    from mlminilm.config import OUTPUT_TERMS_WEIGHT
    from mlminilm.distill import validate

    on = validate(config(st_teacher, st_data, tmp_path)).cfg
    assert (on.hidden_loss_weight, on.embedding_loss_weight) == (OUTPUT_TERMS_WEIGHT, OUTPUT_TERMS_WEIGHT)
    narrow = validate(config(st_teacher, st_data, tmp_path, hidden=16, init="random")).cfg
    assert (narrow.hidden_loss_weight, narrow.embedding_loss_weight) == (0.0, 0.0)
    given = validate(config(st_teacher, st_data, tmp_path, embedding_loss_weight=0.5)).cfg
    assert (given.hidden_loss_weight, given.embedding_loss_weight) == (OUTPUT_TERMS_WEIGHT, 0.5)
    plain = save_tiny_teacher(
        tiny_sentencepiece_dir, tmp_path / "plain", kind="xlmr", layers=2, hidden=32, intermediate=64
    )
    off = validate(config(plain, st_data, tmp_path)).cfg
    assert (off.hidden_loss_weight, off.embedding_loss_weight) == (0.0, 0.0)


@pytest.mark.parametrize("terms", [0.0, 1.0])
def test_negative_teacher_layer_counts_from_the_whole_teachers_top(st_teacher, st_data, tmp_path, terms):
    """--teacher-layer -2 of a 4-layer teacher is layer 2, whether the teacher is cut there (relations only) or
    runs whole (output terms); its Q/K/V equal the ones captured from the untouched teacher."""
    from mlminilm import distill
    from mlminilm.distillation.capture import layer_qkv
    from mlminilm.models.loading import load_encoder, load_teacher

    cfg = config(
        st_teacher,
        st_data,
        tmp_path / "run",
        teacher_layer=-2,
        max_steps=1,
        hidden_loss_weight=terms,
        embedding_loss_weight=terms,
    )
    result = distill.run(cfg)
    card = json.loads((result.student / "mlminilm.json").read_text())
    assert card["teacher_layer"] == 2
    ids = torch.tensor([[0, 5, 6, 7, 2]])
    full = load_encoder(str(st_teacher)).eval()
    cut, _ = load_teacher(str(st_teacher), -1 if terms else -2, torch.float32, torch.device("cpu"))
    with torch.no_grad():
        for a, b in zip(layer_qkv(full, ids, None, 2), layer_qkv(cut, ids, None, 2)):
            torch.testing.assert_close(a, b)
