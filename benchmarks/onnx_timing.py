"""Timing for benchmarks/onnx_speed.py: throughput at a batch size, latency one sentence at a time, and what the
CPU offers int8 (its flags: int8 gains differ between CPUs with and without VNNI)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

# The instructions int8 and bf16 inference use on x86 (/proc/cpuinfo flags): VNNI does a multiply-add of int8 in
# one instruction (AVX512-VNNI, or AVX-VNNI on newer cores); AMX is the tile unit of Sapphire Rapids and later.
INT8_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


def cpu_info() -> dict:
    """The CPU's model name, core count and which of INT8_FLAGS it has (Linux; `unknown` elsewhere)."""
    from step_hardware import cpu_info as machine

    info = machine()
    present = {flag: flag in info["flags"] for flag in INT8_FLAGS}
    vnni = present["avx512_vnni"] or present["avx_vnni"]
    return {
        "model": info["model"],
        "cores": info["cores"],
        "flags": present,
        "int8_dot_product": "VNNI" if vnni else "none",
    }


class Runner:
    """One model (PyTorch or an export's graph) ready to embed the speed set with eval-tatoeba's code, on
    `threads` threads."""

    def __init__(self, model_dir: Path, backend: str, sentences: list[str], threads: int):
        import torch

        from mlminilm.config import TATOEBA_MAX_LENGTH
        from mlminilm.evaluation import embeddings
        from mlminilm.models.loading import load_config, load_encoder, load_tokenizer
        from mlminilm.runtimes.onnx_runtime import OnnxModel
        from mlminilm.training import setup_runtime

        tokenizer = load_tokenizer(str(model_dir))
        self.spec = embeddings.resolve_spec(
            str(model_dir),
            load_config(str(model_dir)),
            None,
            layer=-1,
            pooling="mean",
            prefix="",
            max_length=None,
            default_max_length=TATOEBA_MAX_LENGTH,
        )
        self.rows, _ = embeddings.encode(tokenizer, sentences, "", self.spec.max_length)
        self.rt = setup_runtime("cpu", "fp32")
        self.threads = threads
        if backend == "onnx":
            self.model = OnnxModel(model_dir, threads=threads)
        elif backend == "openvino":
            from mlminilm.runtimes.openvino_runtime import OpenVinoModel

            self.model = OpenVinoModel(model_dir, threads=threads)
        else:
            self.model = load_encoder(str(model_dir), dtype=torch.float32).eval()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.count = len(sentences)
        self.pass_s: list[float] = []
        self.latency_s: list[float] = []

    def _embed(self, rows: dict, batch_size: int) -> None:
        import torch

        from mlminilm.evaluation.embeddings import embed

        torch.set_num_threads(self.threads)  # torch's pool is process-wide: set before each PyTorch call
        embed(self.model, rows, self.spec, batch_size=batch_size, rt=self.rt, pad_id=self.pad_id)

    def one_pass(self, batch_size: int) -> float:
        t0 = time.perf_counter()
        self._embed(self.rows, batch_size)
        return time.perf_counter() - t0

    def one_sentence(self, index: int) -> float:
        rows = {key: [values[index]] for key, values in self.rows.items()}
        t0 = time.perf_counter()
        self._embed(rows, 1)
        return time.perf_counter() - t0

    def throughput(self) -> dict:
        rates = [self.count / t for t in self.pass_s]
        return {
            "sentences": self.count,
            "sentences_per_s": statistics.median(rates),
            "min": min(rates),
            "max": max(rates),
            "passes_s": self.pass_s,
        }

    def latency(self) -> dict:
        ms = sorted(1000 * t for t in self.latency_s)
        return {
            "calls": len(ms),
            "p50_ms": statistics.median(ms),
            "p95_ms": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))],
        }


def measure(runners: dict, batch_size: int, repeats: int, latency_sentences: int, log) -> dict:
    """Every runner: one warm-up pass, then `repeats` rounds of one timed pass each in turn (noise from other
    processes falls on all alike; median per runner); then `latency_sentences` sentences one at a time, the
    runners taking turns sentence by sentence (p50 / p95 of the calls)."""
    for runner in runners.values():
        runner.one_pass(batch_size)
    for round_ in range(repeats):
        for runner in runners.values():
            runner.pass_s.append(runner.one_pass(batch_size))
        log(
            f"round {round_ + 1}/{repeats}: "
            + ", ".join(f"{k} {r.count / r.pass_s[-1]:,.0f}/s" for k, r in runners.items())
        )
    step = max(1, next(iter(runners.values())).count // max(1, latency_sentences))
    picks = list(range(0, next(iter(runners.values())).count, step))[:latency_sentences]
    for runner in runners.values():
        runner.one_sentence(picks[0])  # warm-up at batch 1
    for index in picks:
        for runner in runners.values():
            runner.latency_s.append(runner.one_sentence(index))
    return {key: {"batch": runner.throughput(), "single": runner.latency()} for key, runner in runners.items()}
