"""The contrastive term on parallel pairs against a float64 loop (value, gradient, padding, shared sources), and the
teacher-target cache: a hit equals a recomputation, a changed teacher or text misses, a damaged part is never used."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import sample_lines

from helpers import objective_config as config
from helpers import pair_terms

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _pairs_file(path: Path, n: int = 40) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [f"{a}\t{b}" for a, b in zip(sample_lines("en", n), sample_lines("de", n, seed=1))]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _ranking_by_hand(hidden, mask, b, tau, not_negative):
    """Mean-pool the real tokens, normalise, cosine / tau, cross-entropy both ways: scalar loops in float64."""

    def pooled(i):
        rows = [hidden[i][t] for t in range(len(hidden[i])) if mask[i][t]]
        v = [sum(r[j] for r in rows) / len(rows) for j in range(len(rows[0]))]
        norm = math.sqrt(sum(float(x) * float(x) for x in v))
        return [x / norm for x in v]

    vec = [pooled(i) for i in range(2 * b)]
    sim = [[sum(x * y for x, y in zip(vec[i], vec[b + j])) / tau for j in range(b)] for i in range(b)]

    def ce(row_of, i):
        allowed = [j for j in range(b) if j == i or not not_negative[i][j]]
        logs = [row_of(i, j) for j in allowed]
        top = max(logs)
        return -(row_of(i, i) - top - math.log(sum(math.exp(x - top) for x in logs)))

    forward = sum(ce(lambda i, j: sim[i][j], i) for i in range(b)) / b
    backward = sum(ce(lambda i, j: sim[j][i], i) for i in range(b)) / b
    return (forward + backward) / 2


def test_contrastive_term_against_a_float64_loop():
    from mlminilm.distillation.objective import EmbeddingHead

    g = torch.Generator().manual_seed(0)
    b, t, h, tau = 4, 6, 5, 0.07
    hidden = torch.randn(2 * b, t, h, generator=g, dtype=torch.float64)
    mask = torch.ones(2 * b, t, dtype=torch.long)
    mask[1, 3:] = 0
    mask[b + 2, 2:] = 0
    not_negative = torch.zeros(b, b, dtype=torch.bool)
    not_negative[0, 3] = not_negative[3, 0] = True  # pairs 0 and 3 share their source sentence
    cfg = SimpleNamespace(
        parallel=Path("pairs.tsv"), parallel_loss_weight=0.0, parallel_contrastive_weight=1.0, parallel_temperature=tau
    )
    s_hidden = hidden.float().requires_grad_(True)
    parts = pair_terms(torch.zeros(b, h), s_hidden, mask, EmbeddingHead(("mean",), True), cfg, not_negative)
    assert set(parts) == {"contrastive"}
    expected = _ranking_by_hand(hidden.tolist(), mask.tolist(), b, tau, not_negative.tolist())
    assert parts["contrastive"].item() == pytest.approx(expected, rel=1e-5)

    # The gradient: central differences of the float64 loop, at a few real and padded positions.
    parts["contrastive"].backward()
    for i, pos, j in ((0, 0, 0), (1, 2, 3), (b + 2, 1, 4), (b, 5, 2)):
        step = 1e-6
        up, down = hidden.clone(), hidden.clone()
        up[i, pos, j] += step
        down[i, pos, j] -= step
        numeric = (
            _ranking_by_hand(up.tolist(), mask.tolist(), b, tau, not_negative.tolist())
            - _ranking_by_hand(down.tolist(), mask.tolist(), b, tau, not_negative.tolist())
        ) / (2 * step)
        assert s_hidden.grad[i, pos, j].item() == pytest.approx(numeric, rel=1e-3, abs=1e-6)
    assert s_hidden.grad[1, 3:].abs().max().item() == 0.0  # padding gets no gradient
    assert s_hidden.grad[b + 2, 2:].abs().max().item() == 0.0


def test_shared_sides_marks_repeated_sources_and_translations():
    from mlminilm.corpus.parallel import shared_sides

    found = shared_sides(["a", "b", "a", "c"], ["x", "y", "z", "y"])
    expected = np.zeros((4, 4), dtype=bool)
    expected[0, 2] = expected[2, 0] = True  # same source "a"
    expected[1, 3] = expected[3, 1] = True  # same translation "y"
    assert found.numpy().tolist() == expected.tolist()


def test_contrastive_term_in_a_distill_run(st_teacher, st_data, tmp_path):
    from mlminilm import distill

    pairs = _pairs_file(tmp_path / "en-de.tsv")
    cfg = config(
        st_teacher,
        st_data,
        tmp_path / "run",
        hidden_loss_weight=0.0,
        embedding_loss_weight=0.0,
        relation_loss_weight=0.0,
        parallel=pairs,
        parallel_contrastive_weight=0.5,
        max_steps=3,
        save_every=3,
    )
    distill.run(cfg)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "loss" in r]
    assert len(records) == 3
    for r in records:
        assert r["loss"] == pytest.approx(r["parallel"] + 0.5 * r["contrastive"], rel=1e-5)
        assert r["contrastive"] > 0
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert "0.5 x in-batch translation ranking" in run["objective"] and "temperature 0.05" in run["objective"]


# ------------------------------------------------------------------------------------------ the cache


def _teacher_vectors(teacher: Path, texts: list[str], prefix: str = "query: ") -> np.ndarray:
    """The teacher's normalised mean-pooled embeddings with transformers alone, in float64."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(teacher)
    model = AutoModel.from_pretrained(teacher).double().eval()
    enc = tok([prefix + t for t in texts], padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).double()
    return torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1), dim=-1).numpy()


def _parts(folder: Path) -> list[Path]:
    return sorted(folder.glob("*/part-*.safetensors"))


def test_cache_hit_equals_recomputation(st_teacher, st_data, tmp_path, caplog):
    from mlminilm import distill
    from mlminilm.distillation.targets import TargetStore

    pairs = _pairs_file(tmp_path / "en-de.tsv")
    cache = tmp_path / "cache"
    kw = dict(
        hidden_loss_weight=0.0,
        embedding_loss_weight=0.0,
        relation_loss_weight=0.0,
        parallel=pairs,
        max_steps=4,
        save_every=4,
        target_cache=cache,
        precision="fp32",
    )
    with caplog.at_level("INFO"):
        distill.run(config(st_teacher, st_data, tmp_path / "a", **kw))
    assert "computed" in caplog.text
    (part,) = _parts(cache)
    facts = json.loads((part.parent / "fingerprint.json").read_text())
    store = TargetStore(cache, facts)
    assert store.load() > 0
    texts = [line.split("\t")[0] for line in pairs.read_text(encoding="utf-8").splitlines()]
    cached = [t for t in texts if t in set(texts) and store.missing([t]) == []]
    assert cached, "the cache holds the drawn sources"
    np.testing.assert_allclose(store.table()(cached).numpy(), _teacher_vectors(st_teacher, cached), atol=2e-5)

    # A second run with the same cache computes nothing and trains to the same losses; so does a run without the
    # shared cache (its own, filled in that run), and the step's own teacher forward (no cache) agrees too.
    caplog.clear()
    with caplog.at_level("INFO"):
        distill.run(config(st_teacher, st_data, tmp_path / "b", **kw))
    assert " 0 computed" in caplog.text
    distill.run(config(st_teacher, st_data, tmp_path / "c", **{**kw, "target_cache": None}))
    assert _parts(tmp_path / "c" / "teacher-targets")

    def losses(run):
        return [
            json.loads(line)["loss"]
            for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()
            if "loss" in json.loads(line)
        ]

    assert losses("b") == losses("a") and losses("c") == pytest.approx(losses("a"), rel=1e-5)


def test_step_with_cached_targets_equals_the_teacher_forward(st_teacher, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    from mlminilm.corpus.parallel import ParallelPairs, ParallelSampler
    from mlminilm.distillation.inputs import StepRange
    from mlminilm.distillation.inputs.pairs import drawn_sources
    from mlminilm.distillation.objective import EmbeddingHead, teacher_embedding
    from mlminilm.distillation.targets import TargetStore, embed_sources, fill, fingerprint, module_digest

    tok = AutoTokenizer.from_pretrained(st_teacher)
    teacher = AutoModel.from_pretrained(st_teacher).eval()
    src, tgt = sample_lines("en", 12), sample_lines("de", 12, seed=1)
    sampler = ParallelSampler(
        ParallelPairs(tuple(src), tuple(tgt), ("de",) * 12, 0), tok, prefix="query: ", max_length=32, seed=0
    )
    head = EmbeddingHead(("mean",), True)
    plain = sampler.batch(0, 0, 6, 1, 0, 1)
    with torch.no_grad():
        direct = teacher_embedding(teacher, plain.source_ids, plain.source_mask, head)
    store = TargetStore(
        tmp_path, fingerprint(module_digest(teacher), head.modes, True, "query: ", 32, width=teacher.config.hidden_size)
    )
    fill(
        store,
        drawn_sources(sampler.pairs, 0, StepRange(0, 1, 6, 1, 1)),
        lambda texts: embed_sources(
            teacher, tok, texts, prefix="query: ", max_length=32, modes=head.modes, normalize=True, device="cpu"
        ),
    )
    with_targets = ParallelSampler(
        sampler.pairs, tok, prefix="query: ", max_length=32, seed=0, target_table=store.table()
    )  # as a distill run makes its sampler: with the cached targets
    cached = with_targets.batch(0, 0, 6, 1, 0, 1)
    assert cached.source_ids.numel() == 0 and torch.equal(cached.both_ids, plain.both_ids)
    torch.testing.assert_close(cached.targets, direct, atol=1e-5, rtol=0)
    cfg = SimpleNamespace(
        parallel=Path("pairs.tsv"), parallel_loss_weight=1.0, parallel_contrastive_weight=1.0, parallel_temperature=0.05
    )
    hidden = torch.randn(12, plain.both_ids.shape[1], 32)
    a = pair_terms(direct, hidden, plain.both_mask, head, cfg, plain.not_negative)
    b = pair_terms(cached.targets, hidden, cached.both_mask, head, cfg, cached.not_negative)
    assert a.keys() == b.keys() and all(a[k].item() == pytest.approx(b[k].item(), rel=1e-5) for k in a)


def test_cache_misses_on_a_changed_teacher_or_text_and_drops_damaged_parts(st_teacher, tmp_path, caplog):
    from transformers import AutoModel

    from mlminilm.distillation.targets import TargetStore, fill, fingerprint, module_digest

    teacher = AutoModel.from_pretrained(st_teacher).eval()
    facts = fingerprint(module_digest(teacher), ("mean",), True, "query: ", 128, width=3)
    texts = ["one", "two", "three"]

    def embed(chunk):
        return np.array([[len(t), 1.0, 2.0] for t in chunk], dtype=np.float32)

    store = TargetStore(tmp_path, facts)
    assert fill(store, texts, embed) == 3
    again = TargetStore(tmp_path, facts)
    assert again.load() == 3 and again.missing(texts + ["four"]) == ["four"]  # a new text misses
    np.testing.assert_array_equal(again.table()(["two"]).numpy(), [[3.0, 1.0, 2.0]])

    # Any change of the teacher's weights (one value) is another fingerprint: nothing is found.
    with torch.no_grad():
        teacher.encoder.layer[0].output.dense.bias[0] += 1e-3
    changed = fingerprint(module_digest(teacher), ("mean",), True, "query: ", 128, width=3)
    assert changed["id"] != facts["id"] and TargetStore(tmp_path, changed).load() == 0
    # So is another prefix or length.
    assert fingerprint(facts["teacher"], ("mean",), True, "", 128, width=3)["id"] != facts["id"]
    assert fingerprint(facts["teacher"], ("mean",), True, "query: ", 64, width=3)["id"] != facts["id"]

    # A damaged part (one flipped byte in its vectors, or cut short) is removed and its texts recomputed.
    for damage in ("flip", "truncate"):
        (part,) = sorted((tmp_path / facts["id"]).glob("part-*.safetensors"))
        raw = bytearray(part.read_bytes())
        if damage == "flip":
            raw[-3] ^= 0xFF
        else:
            raw = raw[: len(raw) // 2]
        part.write_bytes(bytes(raw))
        caplog.clear()
        damaged = TargetStore(tmp_path, facts)
        with caplog.at_level("WARNING"):
            assert damaged.load() == 0
        assert "damaged" in caplog.text and not part.exists()
        assert fill(damaged, texts, embed) == 3
        np.testing.assert_array_equal(damaged.table()(texts).numpy(), embed(texts))


def test_the_shipped_recipe_loads_and_runs(st_teacher, st_data, tmp_path, monkeypatch, capsys):
    """recipes/*.toml are plain --config files: every key an option of distill, the paths on the command line.
    Here on the tiny teacher (its shape on the command line: 3 of its 4 layers), two steps."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    from helpers import run_main

    recipes = sorted((Path(__file__).resolve().parents[1] / "recipes").glob("*.toml"))
    assert recipes
    pairs = _pairs_file(tmp_path / "en-de.tsv")
    for recipe in recipes:
        options = tomllib.loads(recipe.read_text(encoding="utf-8"))
        out = tmp_path / recipe.stem
        code, _, err = run_main(
            monkeypatch,
            capsys,
            "distill",
            "--config",
            str(recipe),
            "--teacher",
            str(st_teacher),
            "--data",
            str(st_data),
            "--parallel",
            str(pairs),
            "--out",
            str(out),
            "--layers",
            "3",
            "--hidden",
            "32",
            "--heads",
            "4",
            "--intermediate",
            "64",
            "--max-steps",
            "2",
            "--save-every",
            "2",
            "--quiet",
        )
        assert code == 0, err
        recorded = json.loads((out / "run.json").read_text())["config"]
        kept = {
            k.replace("-", "_"): v
            for k, v in options.items()
            if k not in ("teacher", "layers", "hidden", "heads", "intermediate", "max-steps", "save-every")
        }
        assert {k: recorded[k] for k in kept} == kept


def test_freeze_layers_keeps_the_bottom_as_the_teacher_has_it(st_teacher, st_data, tmp_path):
    from safetensors.torch import load_file

    from mlminilm import distill
    from mlminilm.errors import ConfigError

    pairs = _pairs_file(tmp_path / "en-de.tsv")
    kw = dict(
        hidden_loss_weight=0.0,
        embedding_loss_weight=0.0,
        relation_loss_weight=0.0,
        parallel=pairs,
        lr=3e-3,
        save_every=3,
        layers=3,
        init_layers="first-last",
    )
    start = distill.run(config(st_teacher, st_data, tmp_path / "init", **{**kw, "max_steps": 0})).student
    result = distill.run(config(st_teacher, st_data, tmp_path / "run", max_steps=3, freeze_layers=2, **kw))
    a, b = load_file(start / "model.safetensors"), load_file(result.student / "model.safetensors")
    moved = {k for k in a if not torch.equal(a[k], b[k])}
    assert moved and all(".layer.2." in k for k in moved)  # only the top layer trains
    assert not any("embeddings" in k or ".layer.0." in k or ".layer.1." in k for k in moved)
    with pytest.raises(ConfigError, match="--freeze-layers must be at least 0 and less than --layers 3"):
        config(st_teacher, st_data, tmp_path / "x", freeze_layers=3, **kw)
    with pytest.raises(ConfigError, match="--freeze-layers needs --init teacher"):
        config(st_teacher, st_data, tmp_path / "x", freeze_layers=1, **{**kw, "init": "random", "init_layers": None})


def test_a_term_without_a_weight_is_an_error():
    from mlminilm.config import DistillConfig
    from mlminilm.distillation.terms import weighted_loss

    cfg = DistillConfig(
        teacher="t",
        data=Path("d"),
        out=Path("o"),
        parallel=Path("p"),
        parallel_loss_weight=2.0,
        parallel_contrastive_weight=0.5,
        relation_loss_weight=3.0,
    )
    one = torch.tensor(1.0)
    assert weighted_loss({"parallel": one, "contrastive": one, "attention": one, "value": one}, cfg).item() == 8.5
    with pytest.raises(KeyError, match="toy"):
        weighted_loss({"parallel": one, "toy": one}, cfg)
