"""eval-xnli, eval-mlqa and eval-tatoeba: which model, which data, which protocol."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import (
    DEVICES,
    PRECISIONS,
    check_choice,
    problems_to_error,
    unknown_langs,
    unregistered_langs,
)
from mlminilm.config.finetune import QA_MAX_ANSWER_LENGTH, QA_N_BEST, qa_window_problems
from mlminilm.config.limits import int_problems

QA_SCORERS = ("auto", "squad", "mlqa")  # eval-mlqa --scorer; auto: mlqa for MLQA files, squad for the others
EVAL_SPLITS = ("dev", "test")  # eval-xnli / eval-mlqa --split
# eval-xnli / eval-tatoeba --backend: torch (the PyTorch model), or onnx (an `mlminilm export` directory, run by
# onnxruntime on the CPU; tokenisation, batching, pooling and scoring are the same code as torch's)
EVAL_BACKENDS = ("torch", "onnx")


def backend_problems(p: list[str], backend: str, precision: str, device: str) -> None:
    """--backend onnx runs the graph as exported, on the CPU: no autocast precision, no CUDA."""
    check_choice(p, backend, EVAL_BACKENDS, "--backend")
    if backend != "onnx":
        return
    if precision in ("bf16", "fp16"):
        p.append(f"--precision {precision} needs --backend torch: an ONNX graph computes in the dtype it was exported "
                 "in (float32, or int8 weights); leave --precision out or use --precision fp32")
    if device == "cuda":
        p.append("--device cuda needs --backend torch: --backend onnx runs on the CPU (onnxruntime's "
                 "CPUExecutionProvider); use --device cpu or leave --device out")


@dataclass(frozen=True)
class EvalConfig:
    """What both evaluation commands share. `out` None: report on the terminal only, write nothing."""

    model: str = ""
    data: str = ""
    split: str = "test"
    langs: tuple[str, ...] = ()  # empty: the benchmark's languages
    out: Path | None = None
    batch_size: int = 128
    max_seq_len: int | None = None  # None: the fine-tuning run's (run.json in --model), else the task default
    overwrite: bool = False
    precision: str = "auto"
    device: str = "auto"
    quiet: bool = False
    # After the evaluation, write its results into --model's README.md (mlminilm.models.card_results)
    update_card: bool = False

    def _eval_problems(self) -> list[str]:
        p: list[str] = []
        if not self.data:
            p.append("--data is required")
        if self.batch_size < 1:
            p.append(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.max_seq_len is not None and self.max_seq_len < 8:
            p.append(f"--max-seq-len must be at least 8 (got {self.max_seq_len})")
        check_choice(p, self.precision, PRECISIONS, "--precision")
        check_choice(p, self.device, DEVICES, "--device")
        self._lang_problems(p, self.langs, "--langs")
        p += int_problems(self)
        return p

    def _lang_problems(self, p: list[str], langs: tuple[str, ...], flag: str) -> None:
        # XNLI accuracy does not depend on the language: a code the registry does not know is taken (one warning).
        unknown_langs(p, langs, flag)


@dataclass(frozen=True)
class EvalXnliConfig(EvalConfig):
    """`eval-xnli`: a sequence-classification model on every language's XNLI split."""

    split: str = "test"
    # The NLI class of each classifier output (output 0, 1, 2), for heads whose config does not name its labels
    # (id2label LABEL_0...); empty: the names in the model's id2label, and such a head is refused.
    label_order: tuple[str, ...] = ()
    backend: str = "torch"  # EVAL_BACKENDS; onnx: `model` is an `mlminilm export` directory of a classifier

    def __post_init__(self) -> None:
        p = self._eval_problems()
        backend_problems(p, self.backend, self.precision, self.device)
        if not self.model:
            p.append("--model is required (a fine-tuned directory from `mlminilm finetune --task xnli`)")
        check_choice(p, self.split, EVAL_SPLITS, "--split")
        if self.label_order:
            _label_order_problems(p, self.label_order)
        problems_to_error(p)


def _label_order_problems(p: list[str], order: tuple[str, ...]) -> None:
    from mlminilm.errors import DataError
    from mlminilm.tasks.xnli import NLI_LABELS, label_id

    try:
        ids = sorted(label_id(name) for name in order)
    except DataError:
        ids = None
    if ids != list(range(len(NLI_LABELS))):
        p.append(
            f"--label-order must name {', '.join(NLI_LABELS)} once each, in the order of the model's outputs "
            f"(got {','.join(order)!r}), e.g. --label-order {','.join(NLI_LABELS)}"
        )


@dataclass(frozen=True)
class EvalMlqaConfig(EvalConfig):
    """`eval-mlqa`: a span-extraction model (or existing predictions) on MLQA / XQuAD / TyDiQA-GoldP files."""

    split: str = "dev"  # the MLQA test split is not public everywhere; dev is what ../shared/data has
    gxlt: bool = False  # MLQA: all context x question pairs, not only the monolingual ones
    lang: str | None = None  # the language of a --data file whose name does not carry it
    predictions: Path | None = None  # score these prediction files instead of running a model
    doc_stride: int | None = None  # None: the fine-tuning run's, else QA_DOC_STRIDE
    max_query_length: int | None = None  # None: the fine-tuning run's, else QA_MAX_QUERY_LENGTH
    n_best: int = QA_N_BEST
    max_answer_length: int = QA_MAX_ANSWER_LENGTH
    scorer: str = "auto"  # QA_SCORERS: auto = mlqa for MLQA files, squad (SQuAD v1.1, as XTREME) for the others

    def __post_init__(self) -> None:
        p = self._eval_problems()
        check_choice(p, self.scorer, QA_SCORERS, "--scorer")
        if not self.model and self.predictions is None:
            p.append("--model is required (a directory from `mlminilm finetune --task qa`), or --predictions DIR")
        if self.model and self.predictions is not None:
            p.append("--model and --predictions cannot be used together: --predictions scores existing files")
        if self.update_card and self.predictions is not None:
            p.append("--update-card writes the evaluated model's card; --predictions scores files of no model: "
                     "leave --update-card out, or evaluate the model with --model DIR")
        check_choice(p, self.split, EVAL_SPLITS, "--split")
        qa_window_problems(p, None, self.doc_stride, self.max_query_length)
        if self.n_best < 1:
            p.append(f"--n-best must be at least 1 (got {self.n_best})")
        if self.max_answer_length < 1:
            p.append(f"--max-answer-length must be at least 1 (got {self.max_answer_length})")
        if self.lang is not None:
            self._lang_problems(p, (self.lang,), "--lang")
        problems_to_error(p)

    def _lang_problems(self, p: list[str], langs: tuple[str, ...], flag: str) -> None:
        from mlminilm.langs import MLQA_NEEDS

        unregistered_langs(p, langs, flag, MLQA_NEEDS)  # MLQA normalisation depends on the language


TATOEBA_MAX_LENGTH = 512  # XTREME's max length for Tatoeba (capped at the model's position limit)
TATOEBA_POOLINGS = ("auto", "mean", "cls", "max")


@dataclass(frozen=True)
class EvalTatoebaConfig:
    """`eval-tatoeba`: cross-lingual sentence retrieval with an encoder as it is (no fine-tuning).

    `layer` is a hidden-states index (0 = the embedding output, N = the output of layer N, negative from the
    end); None: the model's own (the last layer of a sentence-transformers model) or XTREME's rule for base
    encoders, layers // 2 + 1 (7 of 12, 13 of 24). `pooling` auto: the sentence-transformers Pooling module's
    mode, else mean. `prefix` None: the model's "query" prompt (config_sentence_transformers.json), else none.
    `max_length` None: TATOEBA_MAX_LENGTH, or the model's position limit when that is smaller."""

    model: str = ""
    data: str = ""
    langs: tuple[str, ...] = ()  # empty: every language found in `data`
    out: Path | None = None
    layer: int | None = None
    pooling: str = "auto"
    prefix: str | None = None
    max_length: int | None = None
    batch_size: int = 128
    overwrite: bool = False
    precision: str = "auto"
    device: str = "auto"
    quiet: bool = False
    update_card: bool = False  # as EvalConfig.update_card (a sentence-transformers model: its top directory's card)
    backend: str = "torch"  # EVAL_BACKENDS; onnx: `model` is an `mlminilm export` directory, read at its last layer

    def __post_init__(self) -> None:
        from mlminilm.langs import from_iso639_3

        p: list[str] = []
        if not self.model:
            p.append("--model is required (an encoder directory or hub id, e.g. a distilled student)")
        if not self.data:
            p.append("--data is required (a directory of tatoeba.XXX-eng.XXX and tatoeba.XXX-eng.eng files)")
        if self.batch_size < 1:
            p.append(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.max_length is not None and self.max_length < 2:
            p.append(f"--max-length must be at least 2 (got {self.max_length})")
        check_choice(p, self.pooling, TATOEBA_POOLINGS, "--pooling")
        check_choice(p, self.precision, PRECISIONS, "--precision")
        check_choice(p, self.device, DEVICES, "--device")
        backend_problems(p, self.backend, self.precision, self.device)
        p += int_problems(self)
        # A Tatoeba file code given where a project code is expected: name the project code.
        # (A language with no ISO 639-1 code, e.g. ast, has its file code as its project code.)
        iso = [code for code in self.langs if from_iso639_3(code) not in (None, code)]
        if iso:
            p.append(f"--langs takes project language codes, not Tatoeba file codes: use "
                     f"{','.join(from_iso639_3(c) for c in iso)} for {','.join(iso)}")
        unknown_langs(p, tuple(code for code in self.langs if code not in iso), "--langs")
        problems_to_error(p)
