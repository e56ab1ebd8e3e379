"""`distill --passages`: the in-batch score KL against a float64 loop, the stateless one-language draw, a tiny run
with --parallel beside it (what it records, the target cache reused), and the refusals of bad input."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import sample_lines

from helpers import TINY_STUDENT, assert_error, run_killed_after_checkpoint, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _passages_file(path: Path, n: int = 24, lang: str = "de", seed: int = 0) -> Path:
    """n pairs: a short question, a passage of three lines (every passage distinct)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    questions, lines = sample_lines(lang, n, seed=seed + 1), sample_lines(lang, 3 * n, seed=seed + 2)
    rows = [f"{q}?\t{i}. {' '.join(lines[3 * i : 3 * i + 3])}" for i, q in enumerate(questions)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _pairs_file(path: Path, n: int = 24, lang: str = "de") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [f"{a}\t{b}" for a, b in zip(sample_lines("en", n), sample_lines(lang, n, seed=1))]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------ the KL term


def _kl_loop(tq, tp, sq, sp, tau):
    """KL(teacher || student) of the row and the column softmaxes, by hand in float64."""

    def unit(rows):
        return [[x / math.sqrt(sum(y * y for y in r)) for x in r] for r in rows]

    def scores(q, p):
        q, p = unit(q), unit(p)
        return [[sum(a * b for a, b in zip(qi, pj)) / tau for pj in p] for qi in q]

    def softmax(row):
        top = max(row)
        e = [math.exp(x - top) for x in row]
        return [x / sum(e) for x in e]

    def kl(t, s):
        total = 0.0
        for trow, srow in zip(t, s):
            pt, ps = softmax(trow), softmax(srow)
            total += sum(a * (math.log(a) - math.log(b)) for a, b in zip(pt, ps))
        return total / len(t)

    t, s = scores(tq, tp), scores(sq, sp)
    transpose = lambda m: [list(c) for c in zip(*m)]  # noqa: E731
    return (kl(t, s) + kl(transpose(t), transpose(s))) / 2


def test_passage_kl_against_a_float64_loop():
    from mlminilm.distillation.losses import score_kl

    tq = [[1.0, 0.2, 0.0], [0.1, 1.0, 0.3], [0.0, 0.4, 1.0]]
    tp = [[0.9, 0.1, 0.2], [0.2, 0.8, 0.1], [0.3, 0.3, 0.9]]
    sq = [[0.7, 0.5, 0.1], [0.3, 0.9, 0.2], [0.2, 0.1, 1.0]]
    sp = [[1.0, 0.4, 0.0], [0.1, 0.6, 0.5], [0.6, 0.2, 0.8]]
    for tau in (0.5, 0.1):
        got = score_kl(*(torch.tensor(x) for x in (tq, tp, sq, sp)), tau)
        assert float(got) == pytest.approx(_kl_loop(tq, tp, sq, sp, tau), rel=1e-4, abs=1e-7)
    # The student scoring as the teacher does: zero, also with other vector lengths (scores are of unit vectors).
    same = score_kl(*(torch.tensor(x) for x in (tq, tp)), torch.tensor(tq) * 3, torch.tensor(tp) * 0.5, 0.02)
    assert float(same) == pytest.approx(0.0, abs=1e-6)


def test_passage_kl_is_the_average_of_both_directions():
    """Rows alone and columns alone, each against the float64 loop's single direction."""
    from mlminilm.distillation.losses import score_kl

    g = torch.Generator().manual_seed(0)
    tq, tp, sq, sp = (torch.randn(4, 5, generator=g, dtype=torch.float64) for _ in range(4))
    both = float(score_kl(tq, tp, sq, sp, 0.3))
    # Swapping questions and passages transposes the score matrices: the same average of the two directions.
    assert float(score_kl(tp, tq, sp, sq, 0.3)) == pytest.approx(both, rel=1e-5)
    assert both == pytest.approx(_kl_loop(tq.tolist(), tp.tolist(), sq.tolist(), sp.tolist(), 0.3), rel=1e-4)


def _hidden_cosine_loop(teacher, student, mask):
    """1 - cos of each real token's states, averaged over a passage's tokens then over passages, in float64."""
    per_passage = []
    for t_rows, s_rows, m_row in zip(teacher.tolist(), student.tolist(), mask.tolist()):
        distances = []
        for t, s, real in zip(t_rows, s_rows, m_row):
            if real:
                dot = sum(a * b for a, b in zip(t, s))
                distances.append(1 - dot / math.sqrt(sum(a * a for a in t) * sum(b * b for b in s)))
        per_passage.append(sum(distances) / len(distances))
    return sum(per_passage) / len(per_passage)


def test_passage_hidden_term_against_a_float64_loop(st_teacher, tmp_path):
    """The term compares the student's last hidden states of the passages with the teacher's, run on the same
    micro-batch: against a float64 loop over the two models' own outputs (padding left out), and 0 for a student
    that is the teacher."""
    from mlminilm.config import DistillConfig
    from mlminilm.corpus.passages import PassageBatch
    from mlminilm.distillation import objective
    from mlminilm.models.loading import load_config, load_teacher
    from mlminilm.models.student import build_student, student_config

    teacher, layer = load_teacher(str(st_teacher), -1, torch.float32, torch.device("cpu"))
    kw = dict(out=tmp_path / "x", teacher=str(st_teacher), layers=2, hidden=32, heads=4, intermediate=64)
    kw.update(relation_loss_weight=0.0, hidden_loss_weight=0.0, embedding_loss_weight=0.0, passages=tmp_path)
    cfg = DistillConfig(**kw, passage_embedding_weight=0.0, passage_loss_weight=0.0, passage_hidden_weight=2.0)
    student = build_student(student_config(load_config(str(st_teacher)), cfg.shape, 0.0), 0).eval()
    g = torch.Generator().manual_seed(0)
    q_ids, p_ids = torch.randint(5, 150, (3, 6), generator=g), torch.randint(5, 150, (3, 11), generator=g)
    p_mask = torch.ones_like(p_ids)
    p_mask[1, 7:], p_mask[2, 3:] = 0, 0  # padded passages: their pads must not count
    targets = torch.zeros(3, 32)
    batch = PassageBatch(q_ids, torch.ones_like(q_ids), p_ids, p_mask, "de", targets, targets)
    forward = objective.StudentForward(student)
    parts = objective.distill_terms(teacher, layer, forward, None, None, cfg, batches={"passages": batch})
    assert set(parts) == {"passage_hidden"}
    with torch.no_grad():
        t_states = teacher(input_ids=p_ids, attention_mask=p_mask).last_hidden_state.double()
        s_states = student(input_ids=p_ids, attention_mask=p_mask).last_hidden_state.double()
    assert float(parts["passage_hidden"].detach()) == pytest.approx(
        _hidden_cosine_loop(t_states, s_states, p_mask), rel=1e-4
    )
    assert float(parts["passage_hidden"].detach()) > 0.01
    forward = objective.StudentForward(teacher)
    same = objective.distill_terms(teacher, layer, forward, None, None, cfg, batches={"passages": batch})
    assert float(same["passage_hidden"]) == pytest.approx(0.0, abs=1e-5)


# ------------------------------------------------------------------------------------------ the draw


def _pairs(tmp_path: Path):
    from mlminilm.corpus.passages import read_passages

    folder = tmp_path / "qp"
    _passages_file(folder / "de.tsv", n=40, lang="de")
    _passages_file(folder / "fr.tsv", n=10, lang="fr")
    # ar: 12 pairs over 3 distinct passages only (fewer than a batch of 8)
    rows = [f"Frage {i}?\tالقطة تنام {i % 3}." for i in range(12)]
    (folder / "ar.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return read_passages(folder)


def test_draw_one_language_distinct_passages_stateless(tmp_path):
    from mlminilm.corpus.passages import PassageDraw
    from mlminilm.distillation.inputs import StepRange
    from mlminilm.distillation.inputs.passages import drawn_texts

    pairs = _pairs(tmp_path)
    assert pairs.lang_counts() == {"ar": 12, "de": 40, "fr": 10}
    draw = PassageDraw(pairs, seed=3)
    seen_langs = set()
    for step in range(40):
        for slot in range(3):
            lang, picked = draw.indices(step, slot, 8)
            seen_langs.add(lang)
            assert {pairs.langs[i] for i in picked} == {lang}  # one language per micro-batch
            passages = [pairs.passages[i] for i in picked]
            assert len(set(passages)) == len(passages)  # distinct passages
            assert len(picked) == (3 if lang == "ar" else 8)  # a language with fewer takes what it has
            assert (lang, picked) == PassageDraw(pairs, seed=3).indices(step, slot, 8)  # from (seed, step) alone
    assert seen_langs == {"ar", "de", "fr"}
    assert [draw.indices(s, 0, 8) for s in range(5)] != [draw.indices(s, 0, 8) for s in range(5, 10)]
    assert [draw.indices(s, 0, 8) for s in range(5)] != [PassageDraw(pairs, 4).indices(s, 0, 8) for s in range(5)]
    # Resume: the draws of steps 5.. do not depend on having drawn 0..4 first.
    fresh = PassageDraw(pairs, seed=3)
    assert [fresh.indices(s, 1, 8) for s in range(5, 9)] == [draw.indices(s, 1, 8) for s in range(5, 9)]
    # The language mix follows sqrt(count): de drawn most, over many steps.
    langs = [draw.indices(s, 0, 4)[0] for s in range(600)]
    shares = {k: langs.count(k) / len(langs) for k in ("ar", "de", "fr")}
    expected = {k: math.sqrt(n) / sum(map(math.sqrt, (12, 40, 10))) for k, n in pairs.lang_counts().items()}
    assert all(abs(shares[k] - expected[k]) < 0.07 for k in shares), (shares, expected)
    questions, passages = drawn_texts(draw, StepRange(0, 4, 8, 3, 1))  # 3 micro-batches a step
    assert len(questions) == len(passages) and set(passages) <= set(pairs.passages)


def test_sampler_batches_match_the_draw(tmp_path, tiny_sentencepiece_dir):
    from mlminilm.corpus.passages import PassageDraw, PassageSampler
    from mlminilm.models.loading import load_tokenizer

    pairs = _pairs(tmp_path)
    draw = PassageDraw(pairs, seed=0)
    table = lambda texts: torch.tensor([[float(len(t)), 1.0] for t in texts])  # noqa: E731
    sampler = PassageSampler(
        draw, load_tokenizer(str(tiny_sentencepiece_dir)), prompts=("query: ", "passage: "), lengths=(16, 32),
        tables=(table, table),
    )  # fmt: skip
    # world 2, accumulation 1 draws what world 1, accumulation 2 draws (slot = micro * world + rank)
    a = sampler.batch(7, 0, 4, 1, 1, 2)
    b = sampler.batch(7, 1, 4, 2, 0, 1)
    assert a.lang == b.lang and torch.equal(a.passage_ids, b.passage_ids)
    assert torch.equal(a.question_ids, b.question_ids)
    assert a.question_ids.shape[1] <= 16 and a.passage_ids.shape[1] <= 32
    lang, picked = draw.indices(7, 1, 4)
    assert a.passage_targets[:, 0].tolist() == [float(len(pairs.passages[i])) for i in picked]


def test_nearest_against_a_float64_loop(monkeypatch):
    from mlminilm.corpus.passages import nearest

    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(9, 4)).astype(np.float32) * rng.uniform(0.5, 3, size=(9, 1)).astype(np.float32)
    got = nearest(vectors, 3)
    for i in range(9):
        sims = []
        for j in range(9):
            if j != i:
                dot = sum(float(a) * float(b) for a, b in zip(vectors[i], vectors[j]))
                norms = math.sqrt(sum(float(a) ** 2 for a in vectors[i])) * math.sqrt(
                    sum(float(b) ** 2 for b in vectors[j])
                )
                sims.append((-dot / norms, j))
        assert got[i].tolist() == [j for _, j in sorted(sims)[:3]]
    # ties keep index order; k larger than the others gives all the others
    same = np.ones((4, 2))
    assert nearest(same, 9).tolist() == [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]
    # held a block of rows at a time: the same as all at once
    monkeypatch.setattr("mlminilm.corpus.passages.NEAREST_ROWS", 2)
    assert nearest(vectors, 3).tolist() == got.tolist()
    assert nearest(same, 9).tolist() == [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]


def test_grouped_draw_fills_batches_with_each_anchors_neighbours(tmp_path):
    from mlminilm.corpus.passages import STREAM, PassageDraw, nearest
    from mlminilm.distillation.inputs import StepRange
    from mlminilm.distillation.inputs.passages import drawn_texts

    pairs = _pairs(tmp_path)
    plain = PassageDraw(pairs, seed=3)
    # Two far-apart families per language: a passage's nearest are the passages of its own family.
    neighbours = {}
    for lang in plain.langs:
        n = len(plain.passage_groups(lang))
        family = np.arange(n) % 2
        vectors = np.stack([family * 10.0 + 1.0, (1 - family) * 10.0 + 1.0, np.arange(n) * 0.01], axis=1)
        neighbours[lang] = nearest(vectors, 3)
    draw = PassageDraw(pairs, seed=3, neighbours=neighbours)
    assert draw.passage_groups("ar") == sorted(set(p for p, g in zip(pairs.passages, pairs.langs) if g == "ar"))
    for step in range(30):
        lang, picked = draw.indices(step, 0, 8)
        assert (lang, picked) == PassageDraw(pairs, 3, neighbours).indices(step, 0, 8)  # stateless still
        assert lang == plain.indices(step, 0, 8)[0]  # the language draw is unchanged
        passages = [pairs.passages[i] for i in picked]
        assert len(set(passages)) == len(passages) == (3 if lang == "ar" else 8)
        groups = plain.passage_groups(lang)
        index = [groups.index(p) for p in passages]
        # By hand: the draw's own stream gives the language, then the order anchors are taken in; each anchor
        # not in yet brings those of its 3 nearest not in yet.
        rng = np.random.default_rng([3, STREAM, step, 0])
        rng.choice(len(plain.langs), p=plain.probabilities)
        expected = []
        for anchor in rng.permutation(len(groups)).tolist():
            if anchor not in expected:
                expected += [g for g in [anchor, *neighbours[lang][anchor].tolist()] if g not in expected]
        assert index == expected[: len(index)]
        if lang != "ar":  # the first anchor and its 3 nearest: one family
            assert len({g % 2 for g in index[:4]}) == 1 and index[1:4] == neighbours[lang][index[0]].tolist()
    questions, passages = drawn_texts(draw, StepRange(0, 4, 8, 1, 2))  # 2 processes
    assert len(questions) == len(passages) and set(passages) <= set(pairs.passages)


# ------------------------------------------------------------------------------------------ runs


def _base(teacher, out) -> list[str]:
    return [
        "distill", "--teacher", str(teacher), "--out", str(out), *TINY_STUDENT, "--batch-size", "4",
        "--relation-loss-weight", "0", "--hidden-loss-weight", "0", "--embedding-loss-weight", "0",
        "--device", "cpu", "--log-every", "1", "--passage-max-length", "64",
    ]  # fmt: skip


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    qp, par = tmp_path / "qp", tmp_path / "par"
    _passages_file(qp / "de.tsv", n=20, lang="de")
    _passages_file(qp / "fr.tsv", n=12, lang="fr")
    _pairs_file(par / "en-de.tsv")
    return qp, par


def test_passages_and_parallel_run_record_and_cache(monkeypatch, capsys, st_teacher, tmp_path):
    qp, par = _inputs(tmp_path)
    cache = tmp_path / "cache"
    args = [*_base(st_teacher, tmp_path / "run"), "--passages", str(qp), "--parallel", str(par), "--max-steps", "3"]
    code, _, err = run_main(monkeypatch, capsys, *args, "--target-cache", str(cache))
    assert code == 0, err
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["passage_pairs"]["pairs"] == 32 and record["passage_pairs"]["languages"] == {"de": 20, "fr": 12}
    assert len(record["passage_pairs"]["digest"]) == 32
    assert "passage embedding MSE" in record["objective"] and "question -> passage scores" in record["objective"]
    assert "'query: ' / 'passage: '" in record["objective"] and "parallel embedding MSE" in record["objective"]
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "loss" in r]
    assert len(steps) == 3
    for r in steps:
        assert r["passage_embedding"] > 0 and r["passage_scores"] >= 0 and r["parallel"] > 0
    card = json.loads((tmp_path / "run" / "student" / "mlminilm.json").read_text())
    assert card["passages"] == str(qp)
    folders = sorted(p.name for p in cache.iterdir() if p.is_dir())
    # The questions share the parallel sources' table (the same 'query: ' prompt and length); the passages have theirs.
    assert len(folders) == 2
    # A second run with the same cache computes nothing.

    def refuse(*a, **k):
        raise AssertionError("the teacher ran: the targets were not taken from the cache")

    monkeypatch.setattr("mlminilm.distillation.targets.embed_sources", refuse)
    args[args.index(str(tmp_path / "run"))] = str(tmp_path / "again")
    code, _, err = run_main(monkeypatch, capsys, *args, "--target-cache", str(cache))
    assert code == 0, err
    again = [json.loads(line) for line in (tmp_path / "again" / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in again if "loss" in r] == pytest.approx([r["loss"] for r in steps], rel=1e-5)


def test_passages_alone_train_without_running_text(monkeypatch, capsys, st_teacher, tmp_path):
    qp, _ = _inputs(tmp_path)
    args = [*_base(st_teacher, tmp_path / "run"), "--passages", str(qp / "de.tsv"), "--max-steps", "2"]
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert code == 0, err
    steps = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # the passage terms' parts, and the languages the passages were drawn in (issue 50: once dropped)
    assert [sorted(k for k in r if k.startswith("passage")) for r in steps if "loss" in r] == [
        ["passage_embedding", "passage_language_mix", "passage_scores"]
    ] * 2
    assert all(r["passage_language_mix"] == {"de": 1.0} for r in steps if "loss" in r)
    assert all("parallel" not in r for r in steps)
    # The teacher-target lines say what they embedded (issue 55: both said "distinct source sentences").
    said = [line for line in err.splitlines() if "teacher targets for" in line]
    assert len(said) == 2 and "distinct questions:" in said[0] and "distinct passages:" in said[1], said
    assert "source sentences" not in err


def test_passage_hidden_run_logs_the_term_and_says_it(monkeypatch, capsys, st_teacher, tmp_path):
    qp, _ = _inputs(tmp_path)
    args = [*_base(st_teacher, tmp_path / "run"), "--passages", str(qp), "--passage-hidden-weight", "0.5"]
    code, _, err = run_main(monkeypatch, capsys, *args, "--max-steps", "2")
    assert code == 0, err
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["config"]["passage_hidden_weight"] == 0.5
    assert "0.5 x passage last hidden states (cosine" in record["objective"]
    steps = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "loss" in r]
    assert len(steps) == 2
    for r in steps:  # the total is the weighted sum, the new term at its weight
        assert r["passage_hidden"] > 0
        want = r["passage_embedding"] + r["passage_scores"] + 0.5 * r["passage_hidden"]
        assert r["loss"] == pytest.approx(want, rel=1e-4)


def test_passage_neighbours_run_embeds_every_passage_first(monkeypatch, capsys, st_teacher, tmp_path):
    from mlminilm.distillation import targets

    qp, _ = _inputs(tmp_path)
    embedded: list[list[str]] = []
    real = targets.prepare

    def spy(root, teacher, tokenizer, texts, *a, **k):
        embedded.append(list(texts))
        return real(root, teacher, tokenizer, texts, *a, **k)

    monkeypatch.setattr(targets, "prepare", spy)
    args = [
        *_base(st_teacher, tmp_path / "run"),
        "--passages",
        str(qp),
        "--passage-neighbours",
        "2",
        "--max-steps",
        "2",
    ]
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert code == 0, err
    everything = {line.split("\t")[1] for f in qp.iterdir() for line in f.read_text(encoding="utf-8").splitlines()}
    assert set(embedded[0]) == everything  # the passages first, all of them: the draw is grouped by them
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["passage_neighbours"] == 2
    steps = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in steps if r.get("passage_scores", -1) >= 0]) == 2


def test_passages_refusals(monkeypatch, capsys, st_teacher, tmp_path):
    qp, par = _inputs(tmp_path)
    out = tmp_path / "out"
    base = [*_base(st_teacher, out), "--max-steps", "1"]

    def refused(passages, *needles):
        assert_error(run_main(monkeypatch, capsys, *base, "--passages", str(passages)), "--passages", *needles)
        assert not out.exists()

    refused(tmp_path / "nowhere", "does not exist")
    assert_error(
        run_main(monkeypatch, capsys, *base, "--passage-neighbours", "3"), "--passage-neighbours needs --passages"
    )
    assert not out.exists()
    (tmp_path / "notab").mkdir()
    (tmp_path / "notab" / "de.tsv").write_text("a question without its passage\nanother one\n", encoding="utf-8")
    refused(tmp_path / "notab", "no question-passage pairs", "2 line(s) had no tab")
    bad_name = _passages_file(tmp_path / "named" / "questions.tsv")
    refused(bad_name, "named by its language code", "questions.tsv")
    damaged = tmp_path / "gz" / "de.tsv.gz"
    damaged.parent.mkdir()
    damaged.write_bytes(gzip.compress(qp.joinpath("de.tsv").read_bytes())[:-30])
    refused(damaged, "not a whole gzip file")
    # a student narrower than the teacher: the message names --passages among the terms that need equal widths
    assert_error(
        run_main(monkeypatch, capsys, *base, "--hidden", "16", "--heads", "2", "--passages", str(qp)),
        "--passages compare",
        "leave out --parallel and --passages",
    )
    assert not out.exists()


def test_resume_refuses_passages_that_changed(monkeypatch, capsys, st_teacher, tmp_path):
    from mlminilm import distill
    from mlminilm.config import DistillConfig

    qp, _ = _inputs(tmp_path)
    out = tmp_path / "run"
    kw = dict(teacher=str(st_teacher), out=out, layers=2, hidden=32, heads=4, intermediate=64, batch_size=4)
    kw.update(relation_loss_weight=0.0, hidden_loss_weight=0.0, embedding_loss_weight=0.0, device="cpu")
    kw.update(passage_max_length=64)
    cfg = DistillConfig(**kw, passages=qp, max_steps=4, save_every=2)
    run_killed_after_checkpoint(monkeypatch, 2, distill.run, cfg)
    record = (out / "run.json").read_text()
    cli = ["distill", "--config", str(out / "run.json"), "--out", str(out), "--resume"]
    original = (qp / "de.tsv").read_text(encoding="utf-8")
    (qp / "de.tsv").write_text(original + "Noch eine Frage?\tNoch ein Absatz.\n", encoding="utf-8")
    assert_error(run_main(monkeypatch, capsys, *cli), "--resume", "--passages", "32 pairs when the run started, 33 now")
    assert (out / "run.json").read_text() == record and not (out / "student").exists()
    (qp / "de.tsv").write_text(original, encoding="utf-8")
    code, _, err = run_main(monkeypatch, capsys, *cli)
    assert code == 0, err
    assert np.isfinite([json.loads(x).get("loss", 0) for x in (out / "metrics.jsonl").read_text().splitlines()]).all()


def test_assist_gives_the_passage_terms_to_the_stages_whose_widths_agree(tmp_path):
    """The passage terms compare embeddings with the teacher's: the assistant stage of a narrower student (teacher
    -> assistant of the student's width) cannot have them; the student stage (assistant -> student) can."""
    from mlminilm.assist import stage_configs
    from mlminilm.config import AssistConfig
    from mlminilm.models.loading import TeacherShape

    qp = tmp_path / "qp"
    shape = {"layers": 2, "heads": 4, "intermediate": 64}
    narrow = AssistConfig(teacher="t", data=tmp_path, out=tmp_path / "o", hidden=32, passages=qp, **shape)
    assistant, student = stage_configs(narrow, TeacherShape(12, 128, 4, 512, "bert"))
    assert assistant.passages is None and student.passages == qp
    same = AssistConfig(teacher="t", data=tmp_path, out=tmp_path / "o", hidden=128, passages=qp, **shape)
    assert [s.passages for s in stage_configs(same, TeacherShape(12, 128, 4, 512, "bert"))] == [qp, qp]
