"""What both evaluations (and fine-tuning's dev evaluation) share: task heads, batching sorted by length,
settings inherited from the fine-tuning run, and report directories that appear whole or not at all."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlminilm.errors import CheckpointError, ConfigError
from mlminilm.models.loading import load_config

# task -> (architecture suffix, what the head is called in messages)
HEADS = {
    "xnli": ("ForSequenceClassification", "sequence-classification"),
    "qa": ("ForQuestionAnswering", "span-extraction (question-answering)"),
}
# Model types whose position ids start after the padding index (RoBERTa's offset of pad_token_id + 1).
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "xmod", "data2vec-text")


def check_head(model: str, task: str):
    """The model's config, after checking that the model carries the head `task` needs."""
    config = load_config(model)
    suffix, name = HEADS[task]
    archs = list(config.architectures or [])
    if not any(arch.endswith(suffix) for arch in archs):
        found = ", ".join(archs) or "none recorded"
        raise ConfigError(
            f"model {model} has no {name} head (architectures: {found}); "
            f"run `mlminilm finetune --task {task} --model {model} ...` first and evaluate its output"
        )
    if task == "qa" and config.num_labels != 2:
        raise ConfigError(
            f"model {model}: a question-answering head has 2 outputs (start, end), this one {config.num_labels}"
        )
    return config


def position_limit(config) -> int | None:
    """The longest input (special tokens included) the model's position embeddings allow, if known."""
    n = getattr(config, "max_position_embeddings", None)
    if not n:
        return None
    if config.model_type in _OFFSET_POSITIONS:
        n -= (config.pad_token_id if config.pad_token_id is not None else 1) + 1
    return n


def check_length(config, model: str, max_seq_len: int) -> None:
    limit = position_limit(config)
    if limit is not None and max_seq_len > limit:
        raise ConfigError(
            f"--max-seq-len {max_seq_len} is longer than model {model} allows ({limit} positions); "
            f"use --max-seq-len {limit} or less"
        )


def run_settings(model: str) -> dict:
    """The fine-tuning run's resolved config (run.json in a `finetune` output), or {} for any other model."""
    path = Path(model) / "run.json"
    if not path.is_file():
        return {}
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")).get("config", {}))
    except (OSError, ValueError):
        return {}


def read_selection(model: str | None) -> dict | None:
    """The checkpoint-selection record (selection.json) of a `finetune` output directory, if any."""
    if not model:
        return None
    path = Path(model) / "selection.json"
    if not path.is_file():
        return {"rule": "unknown: the model directory has no selection.json (not a `mlminilm finetune` output)"}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"rule": f"unknown: {path} is not readable JSON"}


def throughput_record(examples: int, elapsed: float, rt, batch_size: int, span=None, **rates: int) -> dict:
    """A report's throughput record: examples per second, `rates` (name -> count, e.g. sentences=...) as
    `<name>_per_s`, the time, what ran it and how; with `span` (evaluation.machine.Span, started with the timed
    work), the process's CPU time, the load and the machine beside them. `precision` is the autocast dtype
    (float32: none); on the CPU `native_bf16` says whether the CPU multiplies bf16 in hardware (what
    `--precision auto` goes by)."""
    import torch

    from mlminilm.training.runtime import cpu_has_native_bf16

    per_s = {f"{name}_per_s": count / max(elapsed, 1e-9) for name, count in rates.items()}
    return {
        "examples_per_s": examples / max(elapsed, 1e-9),
        **per_s,
        "elapsed_s": elapsed,
        "device": device_name(rt),
        "precision": str(rt.dtype).replace("torch.", ""),
        **({"native_bf16": cpu_has_native_bf16()} if rt.device.type == "cpu" else {}),
        "batch_size": batch_size,
        **({"threads": torch.get_num_threads(), **span.record()} if span is not None else {}),
    }


def device_name(rt) -> str:
    """What ran the evaluation, for throughput figures: the GPU's name, or the CPU with its thread count."""
    import platform

    import torch

    if rt.device.type == "cuda":
        return torch.cuda.get_device_name(rt.device)
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


# ------------------------------------------------------------------------------------------ batching


def length_order(lengths) -> np.ndarray:
    """Indices from the longest to the shortest (stable): similar lengths share a batch, the first batch
    shows the peak memory at once."""
    return np.argsort(-np.asarray(lengths), kind="stable")


def pad_batch(rows: dict[str, list], index, pad_id: int):
    """Tensors of the model inputs of `rows` (lists of token lists) at `index`, padded to the batch's longest."""
    import torch

    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in rows]
    width = max(len(rows["input_ids"][i]) for i in index)
    batch = {}
    for key in keys:
        fill = pad_id if key == "input_ids" else 0
        array = np.full((len(index), width), fill, dtype=np.int64)
        for r, i in enumerate(index):
            seq = rows[key][i]
            array[r, : len(seq)] = seq
        batch[key] = torch.from_numpy(array)
    return batch


def to_device(batch: dict, device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


# ------------------------------------------------------------------------------------ report directories


from mlminilm.io.outputs import current_claim  # noqa: E402


def claims_report(command: str):
    """Decorate an evaluation's (or compare's) `run(cfg)`: the lock on `cfg.out` is taken first and held for the
    whole run; `ReportDir` checks, builds and swaps the report in under it (mlminilm.io.outputs)."""
    from mlminilm.io import outputs
    from mlminilm.report import FILES

    return outputs.claims_report(command, "an evaluation report", (*FILES, "predictions"))


@dataclass
class ReportDir:
    """A report built in a temporary directory beside --out and swapped in when complete, so an error never leaves
    a partial report in --out (the output protocol of mlminilm.io.outputs). `final` None: nothing is written
    (terminal / --json only)."""

    final: Path | None
    overwrite: bool = False
    claim: object = None

    @classmethod
    def open(cls, out: Path | None, overwrite: bool, protect: dict | tuple = ()) -> "ReportDir":
        """Check and claim --out under the lock the command holds (`claims_report`). `protect`: the inputs the
        report must stay out of ({flag: path}, or (flag, path) pairs)."""
        if out is None:
            return cls(None)
        from mlminilm.io.outputs import Claim, refuse_overlap

        claim = current_claim()
        if claim is None or str(claim.given) != str(out):  # a caller without `claims_report`: checks only
            from mlminilm.report import FILES

            claim = Claim(out, "report", "an evaluation report", legacy=(*FILES, "predictions"))
        out = Path(out)
        if claim.out.exists() and not claim.out.is_dir():
            raise CheckpointError(f"--out {out} exists and is not a directory")
        # {flag: path}, or (flag, path) pairs where one flag names several inputs
        refuse_overlap(claim.out, protect)
        claim.check(
            overwrite,
            f"--out {out} exists and is not empty; add --overwrite to replace it",
            error=CheckpointError,
            is_file=f"--out {out} exists and is not a directory",
        )
        return cls(out, overwrite, claim)

    def write(self, fill) -> Path | None:
        """`fill(dir)` writes the files into the temporary directory, which is then swapped in; on any error it is
        removed. With no --out nothing is written. Returns the final directory (None without --out)."""
        if self.final is None:
            return None
        claim = self.claim
        if current_claim() is not claim:  # not under the command's lock (a direct caller): take it for the swap
            from mlminilm.io.outputs import Claim

            with Claim(self.final, claim.command, claim.what, legacy=claim.legacy) as held:
                held.own, held.own_top = claim.own, claim.own_top
                with held.staging() as tmp:
                    fill(tmp)
            return self.final
        with claim.staging() as tmp:
            fill(tmp)
        return self.final

    def publish(self, doc: dict, write_predictions, card: Path | None = None) -> dict:
        """Write `predictions/` (by `write_predictions(dir)`) and the report files (`write`), then, with `card`
        (`card_to_update`), the results into that model card. Returns `doc`, with `report_dir` set when a report
        was written and `card` when a card was."""
        from mlminilm import report

        def fill(out: Path) -> None:
            (out / "predictions").mkdir()
            write_predictions(out / "predictions")
            report.write_reports(doc, out)

        if self.write(fill) is not None:
            doc["report_dir"] = str(self.final)
        if card is not None:  # only once the report is in place
            from mlminilm.models.card_results import update_card

            doc["card"] = str(update_card(card, doc))
        return doc


def card_to_update(cfg) -> Path | None:
    """With --update-card, the model card (README.md in --model) `publish` will write, checked before any work:
    --model a local directory one can write in, its card (if any) readable. None without --update-card."""
    if not getattr(cfg, "update_card", False):
        return None
    from mlminilm.models.card_results import target

    return target(cfg.model)


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
