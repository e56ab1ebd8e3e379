"""What scripts/gpu_check.py concludes from its runs: the checks (each passed or failed, with what it saw), the
figures (tokens/s, MFU against named peaks, peak memory, recompiles) and the JSON and Markdown summaries."""

from __future__ import annotations

import json
import math
import statistics
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

# The datasheet peak used when the device's name does not say which part it is (a bare "NVIDIA H100").
REFERENCE_PART = ("H100 SXM", 989.4e12)
BF16_RTOL = 2e-2  # losses of two layouts of the same run, both bf16: ~3 significant digits each
# MFU at the default batch against the datasheet peak. Below a quarter the step is bound by something other than its
# matmuls (host syncs, the loader, recompiles, an unfused relation path): a defect to find, so the check fails.
# Between the floor and the goal (40 %, issue 36) it passes and the figure says how far there is to go.
MFU_FLOOR = 0.25
MFU_GOAL = 0.40


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def junit_counts(path: Path) -> dict:
    """tests / failures / errors / skipped summed over the suites of a pytest --junitxml file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}


def junit_failed(path: Path) -> list[str]:
    """The tests of a JUnit XML file that failed, errored or were skipped (classname::name)."""
    root = ET.parse(path).getroot()
    bad = ("failure", "error", "skipped")
    return [
        f"{case.get('classname')}::{case.get('name')}"
        for case in root.iter("testcase")
        if any(case.find(tag) is not None for tag in bad)
    ]


def log_tail(path: Path, lines: int = 30) -> str:
    """The last lines of a stage's log (scratch stays on the machine; the summaries carry why a stage failed)."""
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def pytest_check(rc: int, counts: dict | None, why: str = "", failed: list[str] | tuple = ()) -> Check:
    """`pytest -m gpu` passes only when it ran tests and none failed, errored or was skipped: a skip means the
    GPU path was not proven (a CPU build of torch skips every one of them and exits 0)."""
    if counts is None:
        return Check("pytest -m gpu", False, why or f"no report (exit {rc})")
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    ok = rc == 0 and counts["tests"] > 0 and passed == counts["tests"]
    detail = (
        f"{passed} passed, {counts['failures']} failed, {counts['errors']} errors, {counts['skipped']} skipped "
        f"(exit {rc})"
    )
    if failed:
        detail += ": " + ", ".join(failed[:8])
    return Check("pytest -m gpu", ok, detail)


def compiled_check(*probes: list[dict]) -> Check:
    """Compiled, read from what dynamo compiled (its unique_graphs counter, per process) rather than from run.json,
    which records what was asked for: a run that fell back to eager would say `compile: true` and count 0."""
    graphs = [int(p.get("unique_graphs", 0)) for records in probes for p in records]
    ok = bool(graphs) and all(g > 0 for g in graphs)
    return Check("compiled", ok, f"graphs compiled per process: {graphs or 'no probe'}")


def read_metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def loss_records(records: list[dict]) -> list[tuple[int, float]]:
    """(step, loss) of the logged training windows, the last record of a step kept (a resumed run logs the steps
    after its checkpoint again)."""
    by_step = {r["step"]: float(r["loss"]) for r in records if "loss" in r and "step" in r}
    return sorted(by_step.items())


def loss_checks(losses: list[tuple[int, float]], steps: int) -> list[Check]:
    values = [v for _, v in losses]
    finite = bool(values) and all(math.isfinite(v) for v in values)
    head, tail = values[:3], values[-3:]
    falls = finite and len(values) >= 6 and statistics.mean(tail) < statistics.mean(head)
    shown = f"{len(values)} logged, first {fmt(head)}, last {fmt(tail)}"
    return [
        Check("loss finite", finite, shown),
        Check("loss falls", falls, f"mean of the last 3 {fmt_mean(tail)} < mean of the first 3 {fmt_mean(head)}"),
        Check("all steps logged", bool(losses) and losses[-1][0] == steps, f"last logged step {last_step(losses)}"),
    ]


def last_step(losses: list[tuple[int, float]]):
    return losses[-1][0] if losses else None


def fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.5g}" for v in values) + "]"


def fmt_mean(values: list[float]) -> str:
    return f"{statistics.mean(values):.5g}" if values else "n/a"


def steady_rate(records: list[dict], first_steps: set[int]) -> float | None:
    """The median tokens/s over the logged windows, leaving out each process's first window (compiling)."""
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r and r.get("step") not in first_steps]
    return statistics.median(rates) if rates else None


def mfu(tokens_per_s: float | None, flops_per_token: float, part: tuple[str, float] | None, gemm: float | None) -> dict:
    """Model FLOPs utilisation against the part's datasheet peak (REFERENCE_PART's when the name does not say which
    part) and against a large bf16 GEMM measured on this GPU (what its tensor cores give here): each named with its
    peak, once."""
    if tokens_per_s is None:
        return {}
    achieved = tokens_per_s * flops_per_token
    name, peak = part or REFERENCE_PART
    out = {f"datasheet {name} ({peak / 1e12:.0f} TFLOP/s)": achieved / peak}
    if gemm:
        out[f"measured bf16 GEMM ({gemm / 1e12:.0f} TFLOP/s)"] = achieved / gemm
    return out


def mfu_check(tokens_per_s: float | None, flops_per_token: float, part: tuple[str, float] | None) -> Check:
    name, peak = part or REFERENCE_PART
    value = None if tokens_per_s is None else tokens_per_s * flops_per_token / peak
    shown = "no rate" if value is None else f"{value:.1%} of {name}'s {peak / 1e12:.0f} TFLOP/s"
    return Check(
        f"MFU >= {MFU_FLOOR:.0%} of the datasheet peak",
        value is not None and value >= MFU_FLOOR,
        f"{shown} at the default batch (goal {MFU_GOAL:.0%})",
    )


def ddp_checks(one: list[tuple[int, float]], two: list[tuple[int, float]], files: tuple[set, set]) -> list[Check]:
    """torchrun with 2 processes against 1 process with the same global batch: the same losses within bf16
    tolerance, and the same files (rank 1 writes nothing of its own; metrics.jsonl has each step once)."""
    same_steps = [s for s, _ in one] == [s for s, _ in two] and bool(one)
    worst = max((abs(a - b) / max(abs(a), 1e-12) for (_, a), (_, b) in zip(one, two)), default=math.inf)
    return [
        Check(
            "2 processes = 1 process (losses)",
            same_steps and worst <= BF16_RTOL,
            f"{len(one)} logged steps, largest relative difference {worst:.2e} (tolerance {BF16_RTOL:g})",
        ),
        Check(
            "only rank 0 writes",
            files[0] == files[1],
            "same files as the 1-process run" if files[0] == files[1] else f"differ: {sorted(files[0] ^ files[1])}",
        ),
    ]


def verdict(s: dict) -> str:
    """PASSED / FAILED for a GPU run; a CPU toy run (MLMINILM_GPU_CHECK_TOY=1) proves the script, never a GPU."""
    if s.get("toy"):
        return f"TOY RUN on the CPU, not a GPU result ({'checks pass' if s['ok'] else 'checks FAIL'})"
    return "PASSED" if s["ok"] else "FAILED"


def summary(doc: dict) -> dict:
    """The JSON summary: `doc` with its checks as dicts and the verdict."""
    checks = doc["checks"]
    return {
        **doc,
        "checks": [asdict(c) for c in checks],
        "passed": sum(c.ok for c in checks),
        "ok": bool(checks) and all(c.ok for c in checks),
    }


def markdown(s: dict) -> str:
    """The summary as a section to paste into docs/benchmarks/gpu.md (section 17)."""
    fig = s["figures"]
    mfus = ", ".join(f"{v:.1%} of {k}" for k, v in fig["mfu"].items()) or "n/a"
    memory = fig["peak_memory_gib"]
    batch = fig.get("batch") or {}
    picked = (
        f"{batch.get('micro_batch')} x {batch.get('grad_accum')} accumulation = {batch.get('global_batch')} sequences, "
        f"{batch.get('tokens_per_process_step', 0):,} tokens a step ({batch.get('how')})"
        if batch
        else "n/a"
    )
    lines = [
        f"### `make gpu-check` on {s['device']} ({s['date']})",
        "",
        f"{verdict(s)}: {s['passed']} of {len(s['checks'])} checks, {s['wall_s']:.0f} s in all. "
        f"torch {s['torch']}, CUDA {s['cuda']}, Triton {s['triton']}, {s['gpus']} GPU(s).",
        "",
        f"Run: teacher {s['shape']['teacher']} (random init, vocabulary {s['shape']['vocab']:,}), student "
        f"{s['shape']['student']}, batch {s['shape']['batch']} x {s['shape']['seq']}, {s['shape']['steps']} steps, "
        f"`--compile {s['shape']['compile']}`, {s['shape']['device']}.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| tokens/s (median of the logged windows, compiling left out) | {fmt_num(fig['tokens_per_s'])} |",
        f"| model FLOPs per token | {fig['flops_per_token'] / 1e6:,.1f} M |",
        f"| MFU | {mfus} |",
        f"| peak CUDA memory | {'n/a' if memory is None else f'{memory:.2f} GiB'} |",
        f"| recompiles (most in one process) | {fig['recompiles']} |",
        f"| batch (the default's pick) | {picked} |",
        "",
        *[f"- {note}" for note in s.get("notes", [])],
        *([""] if s.get("notes") else []),
        *[f"- recompiled: {reason}" for reason in fig.get("recompile_reasons", [])],
        *([""] if fig.get("recompile_reasons") else []),
        "| check | result | detail |",
        "|---|---|---|",
    ]
    lines += [f"| {c['name']} | {'pass' if c['ok'] else 'FAIL'} | {c['detail']} |" for c in s["checks"]]
    lines += ["", "| stage | seconds |", "|---|---:|"]
    lines += [f"| {name} | {secs:.1f} |" for name, secs in s["stages"].items()]
    return "\n".join(lines) + "\n"


def fmt_num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def write_json(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=_plain) + "\n", encoding="utf-8")
    return path


def _plain(value):
    return asdict(value) if isinstance(value, Check) else str(value)


def write(out: Path, s: dict) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "gpu-check.json", out / "gpu-check.md"
    json_path.write_text(json.dumps(s, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown(s), encoding="utf-8")
    return json_path, md_path
