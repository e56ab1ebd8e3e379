"""Tables of docs/RETENTION.md and docs/benchmarks/RETENTION_RETRIEVAL.md (experiments/retention*.py).

The retention benchmarks' Markdown tables that several scripts render: a table from rows, and MLQA retrieval's
tables (docs/RETENTION.md and docs/benchmarks/RETENTION_RETRIEVAL.md both show them). A leaf module: it imports no other
benchmark, so the scripts that share it import each other in one direction only."""

from __future__ import annotations

TEACHER = "teacher"
METRIC = "ndcg_at_10"


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def retrieval_scores(report: dict) -> dict:
    """nDCG@10 of one all-pairs eval-retrieval report: per monolingual language, their mean, and the mean over the
    cross-lingual pairs (context language != question language)."""
    langs = report["languages"]
    mono = {k: v[METRIC] for k, v in langs.items() if v["context_lang"] == v["question_lang"]}
    cross = [v[METRIC] for v in langs.values() if v["context_lang"] != v["question_lang"]]
    return {
        "mono": mono,
        "mono_avg": sum(mono.values()) / len(mono),
        "cross_avg": sum(cross) / len(cross) if cross else None,
        "cross_pairs": len(cross),
    }


def share(x: float | None, t: float | None) -> str:
    return "-" if x is None or not t else f"{100 * x / t:.0f} %"


def figure(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def retrieval_tables(res: dict, names: list[str], baseline: str | None) -> list[str]:
    rows = [n for n in names if "retrieval" in res[n]]
    scores = {n: retrieval_scores(res[n]["retrieval"]) for n in rows}
    t = scores[TEACHER]
    langs = list(t["mono"])
    table, kept = [], []
    for n in rows:
        s = scores[n]
        above = "-"
        if baseline in scores and n not in (baseline, TEACHER):
            b = scores[baseline]
            above = f"{sum(s['mono'][lang] > b['mono'][lang] for lang in langs)}/{len(langs)}"
        table.append(
            [n]
            + [figure(s["mono"][lang]) for lang in langs]
            + [f"**{figure(s['mono_avg'])}**", figure(s["cross_avg"])]
            + ([above] if baseline in scores else [])
        )
        if n != TEACHER:
            kept.append(
                [n]
                + [share(s["mono"][lang], t["mono"][lang]) for lang in langs]
                + [f"**{share(s['mono_avg'], t['mono_avg'])}**", share(s["cross_avg"], t["cross_avg"])]
            )
    cross = f"cross-lingual avg ({t['cross_pairs']} pairs)"
    return (
        [
            "",
            "## MLQA dev, question -> passage retrieval: nDCG@10 (%), no fine-tuning",
            "",
            "`eval-retrieval --data MLQA_DEV` (every context x question pair): a question's own context is the one "
            'relevant passage among the distinct contexts of its file, "query: " on questions and "passage: " on '
            "contexts (the model's prompts). The monolingual columns are MTEB's MLQARetrieval setting; the "
            "cross-lingual average is over the pairs whose questions and contexts differ in language (MLQA's G-XLT "
            "pairs).",
            "",
        ]
        + markdown_table(
            ["model"] + langs + ["monolingual avg", cross] + ([f"> {baseline}"] if baseline in scores else []), table
        )
        + [
            "",
            "Kept of the teacher (student / teacher nDCG@10):",
            "",
        ]
        + markdown_table(["model"] + langs + ["monolingual avg", "cross-lingual avg"], kept)
    )
