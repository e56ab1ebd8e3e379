"""eval-xnli, eval-mlqa and eval-tatoeba: which model, which data, which protocol."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import (
    PRECISIONS,
    Config,
    device_option,
    quiet_option,
    unknown_langs,
    unregistered_langs,
)
from mlminilm.config.finetune import (
    QA_DOC_STRIDE,
    QA_MAX_ANSWER_LENGTH,
    QA_MAX_QUERY_LENGTH,
    QA_N_BEST,
)
from mlminilm.config.options import COMMA, option

QA_SCORERS = ("auto", "squad", "mlqa")  # eval-mlqa --scorer; auto: mlqa for MLQA files, squad for the others
EVAL_SPLITS = ("dev", "test")  # eval-xnli / eval-mlqa --split
# eval-xnli / eval-tatoeba --backend: torch (the PyTorch model), onnx or openvino (an `mlminilm export` directory
# of that format, run by onnxruntime or OpenVINO on the CPU; tokenisation, batching, pooling and scoring are the
# same code as torch's)
EVAL_BACKENDS = ("torch", "onnx", "openvino")

# Help of the options the evaluations share (eval-tatoeba's config is no EvalConfig; compare's --out and
# --overwrite read as theirs).
OUT_HELP = "Report directory: metrics.json/.csv/.md, chart.png, predictions/ (must be empty unless --overwrite)."
OVERWRITE_HELP = "Replace an existing report in --out."
BATCH_HELP = "Inputs per forward pass (sorted by length)."
PRECISION_HELP = "auto (bf16 on CUDA and on CPUs with native bf16, AVX512-BF16 or AMX; else fp32), fp32 or bf16."
UPDATE_CARD_HELP = (
    "After the evaluation, write its results into --model's README.md: Hub model-index metadata and a "
    "table (a re-run replaces them; the rest of the card is kept). --model must be a local directory."
)
BACKEND_HELP = (
    "torch: the PyTorch model; onnx / openvino: --model is a `mlminilm export` directory whose onnx/model.onnx "
    "runs in onnxruntime (openvino/openvino_model.xml in OpenVINO) on the CPU (float32 or int8, as exported), with "
    "the same tokenisation, batching and scoring."
)


def backend_problems(p: list[str], backend: str, precision: str, device: str) -> None:
    """--backend onnx / openvino runs the graph as exported, on the CPU: no autocast precision, no CUDA."""
    if backend not in ("onnx", "openvino"):
        return
    if precision in ("bf16", "fp16"):
        p.append(
            f"--precision {precision} needs --backend torch: an exported graph computes in the dtype it was "
            "exported in (float32, or int8 weights); leave --precision out or use --precision fp32"
        )
    if device == "cuda":
        p.append(
            f"--device cuda needs --backend torch: --backend {backend} runs on the CPU "
            f"({'onnxruntime' if backend == 'onnx' else 'OpenVINO'}); use --device cpu or leave --device out"
        )


@dataclass(frozen=True)
class EvalConfig(Config):
    """What both evaluation commands share. `out` None: report on the terminal only, write nothing."""

    # model, data and split: each evaluation declares its own option
    model: str = ""
    data: str = ""
    split: str = "test"
    # empty: the benchmark's languages
    langs: tuple[str, ...] = option(
        (),
        repeat=COMMA,
        group="inputs",
        help="Only these languages, comma-separated or repeated "
        "(default: every language with a file in --data; MLQA: its 7).",
    )
    out: Path | None = option(None, group="output", help=OUT_HELP, replay=False)
    batch_size: int = option(128, min=1, group="machine", help=BATCH_HELP)
    # None: the fine-tuning run's (run.json in --model), else the task default
    max_seq_len: int | None = option(
        None, min=8, group="inputs", help="Tokens per input (default: the fine-tuning run's, from run.json in --model)."
    )
    overwrite: bool = option(False, group="output", help=OVERWRITE_HELP, replay=False)
    precision: str = option("auto", choices=PRECISIONS, group="machine", help=PRECISION_HELP)
    device: str = device_option()
    quiet: bool = quiet_option()
    # After the evaluation, write its results into --model's README.md (mlminilm.models.card_results)
    update_card: bool = option(False, group="output", help=UPDATE_CARD_HELP)

    def problems(self) -> list[str]:
        # Only what no single declaration says; the ranges and choices: Config (options.declared_problems).
        p: list[str] = []
        if not self.data:
            p.append("--data is required")
        self._lang_problems(p, self.langs, "--langs")
        return p

    def _lang_problems(self, p: list[str], langs: tuple[str, ...], flag: str) -> None:
        # XNLI accuracy does not depend on the language: a code the registry does not know is taken (one warning).
        unknown_langs(p, langs, flag)


@dataclass(frozen=True)
class EvalXnliConfig(EvalConfig):
    """`eval-xnli`: a sequence-classification model on every language's XNLI split."""

    model: str = option(
        "", required=True, group="inputs", help="A fine-tuned directory (`mlminilm finetune --task xnli`) or hub id."
    )
    data: str = option(
        "",
        required=True,
        group="inputs",
        help="XNLI: a directory in the XTREME layout ({split}-XX.tsv) or XNLI-1.0 (xnli.{split}.tsv), or hf:xnli.",
    )
    split: str = option("test", choices=EVAL_SPLITS, group="inputs", help="test or dev.")
    # The NLI class of each classifier output (output 0, 1, 2), for heads whose config does not name its labels
    # (id2label LABEL_0...); empty: the names in the model's id2label, and such a head is refused.
    label_order: tuple[str, ...] = option(
        (),
        repeat=COMMA,
        group="inputs",
        help="For a classifier whose config does not name its labels (LABEL_0...): the NLI class of output 0, 1, 2, "
        "comma-separated, e.g. entailment,neutral,contradiction. Such a model is refused without it.",
    )
    # EVAL_BACKENDS; onnx: `model` is an `mlminilm export` directory of a classifier
    backend: str = option("torch", choices=EVAL_BACKENDS, group="machine", help=BACKEND_HELP)

    def problems(self) -> list[str]:
        p = super().problems()
        backend_problems(p, self.backend, self.precision, self.device)
        if not self.model:
            p.append("--model is required (a fine-tuned directory from `mlminilm finetune --task xnli`)")
        if self.label_order:
            _label_order_problems(p, self.label_order)
        return p


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

    model: str = option("", group="inputs", help="A fine-tuned directory (`mlminilm finetune --task qa`) or hub id.")
    data: str = option(
        "",
        required=True,
        group="inputs",
        help="An MLQA directory ({split}-context-C-question-Q.json, also under "
        "{split}/), a directory of xquad.XX.json or tydiqa.goldp.XX.{split}.json files, or one "
        "SQuAD-format file.",
    )
    # the MLQA test split is not public everywhere; dev is what ../shared/data has
    split: str = option("dev", choices=EVAL_SPLITS, group="inputs", help="dev or test.")
    # MLQA: all context x question pairs, not only the monolingual ones
    gxlt: bool = option(False, group="inputs", help="MLQA: every context x question language pair (7x7).")
    # the language of a --data file whose name does not carry it
    lang: str | None = option(None, group="inputs", help="Language of a --data file whose name does not tell it.")
    # score these prediction files instead of running a model
    predictions: Path | None = option(
        None,
        group="inputs",
        help="Score these official-format prediction files ({question_id: "
        "answer}, named like the data files) instead of running a model.",
    )
    # None: the fine-tuning run's, else QA_DOC_STRIDE
    doc_stride: int | None = option(
        None,
        min=1,
        group="inputs",
        help=f"Context tokens shared by consecutive windows (default: the fine-tuning run's, else {QA_DOC_STRIDE}).",
    )
    # None: the fine-tuning run's, else QA_MAX_QUERY_LENGTH
    max_query_length: int | None = option(
        None,
        min=1,
        group="inputs",
        help=f"Question tokens kept (default: the fine-tuning run's, else {QA_MAX_QUERY_LENGTH}).",
    )
    n_best: int = option(QA_N_BEST, min=1, group="method", help="Start and end candidates per window.")
    max_answer_length: int = option(QA_MAX_ANSWER_LENGTH, min=1, group="method", help="Longest answer, in tokens.")
    # QA_SCORERS: auto = mlqa for MLQA files, squad (SQuAD v1.1, as XTREME) for the others
    scorer: str = option(
        "auto",
        choices=QA_SCORERS,
        group="method",
        help="auto: MLQA's official scorer for MLQA files, the SQuAD "
        "v1.1 scorer for XQuAD, TyDiQA-GoldP and other SQuAD-format files (as XTREME); squad or "
        "mlqa: that scorer for every file.",
    )

    def problems(self) -> list[str]:
        p = super().problems()
        if not self.model and self.predictions is None:
            p.append("--model is required (a directory from `mlminilm finetune --task qa`), or --predictions DIR")
        if self.model and self.predictions is not None:
            p.append("--model and --predictions cannot be used together: --predictions scores existing files")
        if self.update_card and self.predictions is not None:
            p.append(
                "--update-card writes the evaluated model's card; --predictions scores files of no model: "
                "leave --update-card out, or evaluate the model with --model DIR"
            )
        if self.lang is not None:
            self._lang_problems(p, (self.lang,), "--lang")
        return p

    def _lang_problems(self, p: list[str], langs: tuple[str, ...], flag: str) -> None:
        from mlminilm.langs import MLQA_NEEDS

        unregistered_langs(p, langs, flag, MLQA_NEEDS)  # MLQA normalisation depends on the language


TATOEBA_MAX_LENGTH = 512  # XTREME's max length for Tatoeba (capped at the model's position limit)
TATOEBA_POOLINGS = ("auto", "mean", "cls", "max")


@dataclass(frozen=True)
class EvalTatoebaConfig(Config):
    """`eval-tatoeba`: cross-lingual sentence retrieval with an encoder as it is (no fine-tuning).

    `layer` is a hidden-states index (0 = the embedding output, N = the output of layer N, negative from the
    end); None: the model's own (the last layer of a sentence-transformers model) or XTREME's rule for base
    encoders, layers // 2 + 1 (7 of 12, 13 of 24). `pooling` auto: the sentence-transformers Pooling module's
    mode, else mean. `prefix` None: the model's "query" prompt (config_sentence_transformers.json), else none.
    `max_length` None: TATOEBA_MAX_LENGTH, or the model's position limit when that is smaller."""

    model: str = option(
        "",
        required=True,
        group="inputs",
        help="Any encoder directory or hub id (a distilled student, a teacher, a sentence-transformers model).",
    )
    data: str = option(
        "",
        required=True,
        group="inputs",
        help="A directory of Tatoeba test files as LASER / XTREME distribute them: "
        "tatoeba.XXX-eng.XXX and tatoeba.XXX-eng.eng (ISO 639-3 codes; line i of one translates line i "
        "of the other).",
    )
    # empty: every language found in `data`
    langs: tuple[str, ...] = option(
        (),
        repeat=COMMA,
        group="inputs",
        help="Only these languages (project codes: de, zh, sw, ...; the "
        "file code of a language not in langs/), comma-separated or repeated (default: "
        "every language found in --data).",
    )
    out: Path | None = option(None, group="output", help=OUT_HELP, replay=False)
    layer: int | None = option(
        None,
        group="method",
        help="Hidden-states index to pool (0 = embedding output, N = output of layer N, "
        "-1 = last). Default: the last layer for sentence-transformers models, else XTREME's "
        "layers // 2 + 1 (7 of 12, 13 of 24, 4 of 6).",
    )
    pooling: str = option(
        "auto",
        choices=TATOEBA_POOLINGS,
        group="method",
        help="auto (the model's sentence-transformers Pooling mode, else mean over real tokens), mean, cls or max.",
    )
    prefix: str | None = option(
        None,
        group="inputs",
        help='Text put before every sentence on both sides, e.g. "query: " for e5 '
        "(default: the model's 'query' prompt from config_sentence_transformers.json, else "
        'none; "" for none).',
    )
    max_length: int | None = option(
        None,
        min=2,
        group="inputs",
        help=f"Tokens per sentence, special tokens included (default: "
        f"{TATOEBA_MAX_LENGTH}, or the model's position limit when smaller).",
    )
    batch_size: int = option(128, min=1, group="machine", help=BATCH_HELP)
    overwrite: bool = option(False, group="output", help=OVERWRITE_HELP, replay=False)
    precision: str = option("auto", choices=PRECISIONS, group="machine", help=PRECISION_HELP)
    device: str = device_option()
    quiet: bool = quiet_option()
    # as EvalConfig.update_card (a sentence-transformers model: its top directory's card)
    update_card: bool = option(False, group="output", help=UPDATE_CARD_HELP)
    # EVAL_BACKENDS; onnx: `model` is an `mlminilm export` directory, read at its last layer
    backend: str = option("torch", choices=EVAL_BACKENDS, group="machine", help=BACKEND_HELP)

    def problems(self) -> list[str]:
        # Only what no single declaration says; the ranges and choices: Config (options.declared_problems).
        from mlminilm.langs import from_iso639_3

        p: list[str] = []
        if not self.model:
            p.append("--model is required (an encoder directory or hub id, e.g. a distilled student)")
        if not self.data:
            p.append("--data is required (a directory of tatoeba.XXX-eng.XXX and tatoeba.XXX-eng.eng files)")
        backend_problems(p, self.backend, self.precision, self.device)
        # A Tatoeba file code given where a project code is expected: name the project code.
        # (A language with no ISO 639-1 code, e.g. ast, has its file code as its project code.)
        iso = [code for code in self.langs if from_iso639_3(code) not in (None, code)]
        if iso:
            p.append(
                f"--langs takes project language codes, not Tatoeba file codes: use "
                f"{','.join(from_iso639_3(c) for c in iso)} for {','.join(iso)}"
            )
        unknown_langs(p, tuple(code for code in self.langs if code not in iso), "--langs")
        return p
