"""Bad input to every command, in-process: a bad option value is a usage error (exit 2) naming the option; any
other problem one `Error:` line (exit 1) with what to do. Never a traceback, nothing on stdout, no partial output."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest
from taskdata import save_head_model, squad_doc, write_json, write_nli_tsv, write_xnli_dir

from helpers import assert_error, assert_usage_error, run_main, save_tiny_teacher

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("task")
    return {
        "nli": write_nli_tsv(folder / "train-en.tsv", "en", 12),
        "squad": write_json(folder / "train.json", squad_doc("en", count=2, seed=1)),
        "xnli": write_xnli_dir(folder / "xnli", langs=("en", "de")),
        "mlqa": folder / "mlqa",
    }


@pytest.fixture(scope="module")
def xnli_model(tiny_wordpiece_dir, tmp_path_factory):
    return save_head_model(tiny_wordpiece_dir, tmp_path_factory.mktemp("xnli-model"), "xnli")


def distill_args(teacher, data, out, *extra: str) -> list[str]:
    return [
        "distill",
        "--teacher",
        str(teacher),
        "--data",
        str(data),
        "--out",
        str(out),
        "--layers",
        "2",
        "--hidden",
        "32",
        "--heads",
        "4",
        "--intermediate",
        "64",
        "--max-steps",
        "1",
        *extra,
    ]


def assist_args(teacher, data, out, *extra: str) -> list[str]:
    return [
        "assist",
        "--teacher",
        str(teacher),
        "--data",
        str(data),
        "--out",
        str(out),
        "--layers",
        "2",
        "--hidden",
        "32",
        "--heads",
        "4",
        "--intermediate",
        "64",
        "--assistant-steps",
        "1",
        "--student-steps",
        "1",
        *extra,
    ]


# ------------------------------------------------------------------------------- option values: usage, exit 2

# (command line after the command's required options, the option the usage error must name)
OPTION_CASES = {
    "prepare": [
        (["--seq-len", "2"], "--seq-len"),
        (["--workers", "-1"], "--workers"),
        (["--shard-sequences", "0"], "--shard-sequences"),
        (["--max-docs", "0"], "--max-docs"),
    ],
    "distill": [
        (["--precision", "fp8"], "--precision"),
        (["--objective", "kd"], "--objective"),
        (["--init", "copy"], "--init"),
        (["--lr", "-1"], "--lr"),
        (["--lr", "inf"], "--lr"),
        (["--lr", "nan"], "--lr"),
        (["--max-steps", "-1"], "--max-steps"),
        (["--warmup", "nan"], "--warmup"),
        (["--hidden-loss-weight", "-1"], "--hidden-loss-weight"),
        (["--probe-every", "0"], "--probe-every"),
        (["--embedding-loss-weight", "nan"], "--embedding-loss-weight"),
        (["--hidden-distance", "l1"], "--hidden-distance"),
        (["--warmup", "inf"], "--warmup"),
        (["--weight-decay", "-1"], "--weight-decay"),
        (["--alpha", "2"], "--alpha"),
        (["--dropout", "1"], "--dropout"),
        (["--device", "tpu"], "--device"),
        (["--max-grad-norm", "inf"], "--max-grad-norm"),
        (["--layers", "0"], "--layers"),
        (["--batch-size", "0"], "--batch-size"),
        (["--save-every", "0"], "--save-every"),
    ],
    "assist": [
        (["--warmup", "-1"], "--warmup"),
        (["--assistant-steps", "0"], "--assistant-steps"),
        (["--objective", "kd"], "--objective"),
    ],
    "finetune": [
        (["--task", "ner"], "--task"),
        (["--lr", "-1"], "--lr"),
        (["--epochs", "0"], "--epochs"),
        (["--warmup", "inf"], "--warmup"),
        (["--max-seq-len", "4"], "--max-seq-len"),
    ],
    "eval-xnli": [
        (["--split", "train"], "--split"),
        (["--precision", "fp8"], "--precision"),
        (["--batch-size", "0"], "--batch-size"),
    ],
    "eval-mlqa": [
        (["--split", "train"], "--split"),
        (["--scorer", "exact"], "--scorer"),
        (["--n-best", "0"], "--n-best"),
    ],
    "eval-tatoeba": [(["--pooling", "sum"], "--pooling"), (["--max-length", "1"], "--max-length")],
}


def required(command: str, tmp: Path) -> list[str]:
    """Valid required options of each command (never reached: the bad value stops the parse)."""
    out = ["--out", str(tmp / "out")]
    return {
        "prepare": ["--teacher", "t", "--input", str(tmp), *out],
        "distill": ["--teacher", "t", *out],
        "assist": ["--teacher", "t", *out],
        "finetune": ["--model", "m", "--train", "t.tsv", *out],
        "eval-xnli": ["--model", "m", "--data", str(tmp)],
        "eval-mlqa": ["--model", "m", "--data", str(tmp)],
        "eval-tatoeba": ["--model", "m", "--data", str(tmp)],
    }[command]


@pytest.mark.parametrize(
    "command, extra, option",
    [(command, extra, option) for command, cases in OPTION_CASES.items() for extra, option in cases],
    ids=lambda x: " ".join(x) if isinstance(x, list) else str(x),
)
def test_bad_option_value_is_a_usage_error(command, extra, option, tmp_path, monkeypatch, capsys):
    assert_usage_error(run_main(monkeypatch, capsys, command, *required(command, tmp_path), *extra), option)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "command, option",
    [
        ("prepare", "--teacher"),
        ("distill", "--teacher"),
        ("assist", "--out"),
        ("finetune", "--train"),
        ("eval-xnli", "--model"),
        ("eval-mlqa", "--data"),
        ("eval-tatoeba", "--data"),
    ],
)
def test_missing_required_option_is_a_usage_error(command, option, tmp_path, monkeypatch, capsys):
    args = required(command, tmp_path)
    i = args.index(option)
    assert_usage_error(run_main(monkeypatch, capsys, command, *args[:i], *args[i + 2 :]), option)


# --------------------------------------------------------------------------------------- prepare: exit 1


def test_prepare_bad_inputs(wp_teacher, tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"

    def prepare(*args, env=None):
        return run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            str(wp_teacher),
            "--out",
            str(out),
            "--workers",
            "1",
            *args,
            env=env,
        )

    assert_error(prepare("--input", str(tmp_path / "nowhere")), "does not exist")
    # --langs naming a language no input holds: the message lists what the inputs do hold.
    assert_error(prepare("--input", str(tiny_corpus_dir), "--langs", "fr"), "--langs fr", "ar, de, en, zh")
    # A corrupt .gz (valid header, damaged body): the file is named, no zlib traceback.
    good = gzip.compress(("Der Hund läuft jeden Morgen durch den Park.\n" * 2000).encode())
    damaged = good[:200] + bytes(b ^ 0x5A for b in good[200:400]) + good[400:]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "de.txt.gz").write_bytes(damaged)
    line = assert_error(prepare("--input", str(corpus)), str(corpus / "de.txt.gz"), "gzip")
    assert "zlib" not in line or "Error -3" in line
    # An unknown language file: the known codes are listed.
    (tmp_path / "xx.txt").write_text("some text\n")
    assert_error(prepare("--input", f"xx={tmp_path / 'xx.txt'}"), "unknown language", "de")
    # --out is a file.
    out.write_text("not a directory")
    assert_error(prepare("--input", str(tiny_corpus_dir)), "is a file")
    out.unlink()
    # hf: without the optional datasets package: one clear install hint (not "check the network").
    monkeypatch.setitem(sys.modules, "datasets", None)
    line = assert_error(
        prepare("--input", "hf:wikimedia/wikipedia:20231101.{lang}", "--langs", "de", env={"HF_HUB_OFFLINE": None}),
        "pip install 'mlminilm[hub]'",
    )
    assert "network" not in line
    monkeypatch.delitem(sys.modules, "datasets")
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))


def test_offline_fails_fast_and_says_so(tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    # A hub id that is not in the cache: refused at once, naming HF_HUB_OFFLINE=1.
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            "someone/not-cached-model",
            "--input",
            str(tiny_corpus_dir),
            "--out",
            str(out),
            env={"HF_HUB_OFFLINE": "1"},
        ),
        "someone/not-cached-model",
        "HF_HUB_OFFLINE=1",
    )
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-tatoeba",
            "--model",
            "someone/not-cached-model",
            "--data",
            str(tmp_path),
            env={"HF_HUB_OFFLINE": "1"},
        ),
        "HF_HUB_OFFLINE=1",
    )
    # Online, a hub id that could not be fetched: the hint names HF_HUB_OFFLINE=1 (no network is used here).
    from mlminilm.models.loading import _load_error

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert "set HF_HUB_OFFLINE=1" in str(_load_error("model config", "someone/model", OSError("cannot connect")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # Streaming a Hub dataset cannot work offline: said before any request.
    pytest.importorskip("datasets")
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            "someone/not-cached-model",
            "--input",
            "hf:wikimedia/wikipedia:20231101.{lang}",
            "--langs",
            "de",
            "--out",
            str(out),
            env={"HF_HUB_OFFLINE": "1"},
        ),
        "HF_HUB_OFFLINE=1",
    )
    assert not out.exists()


# --------------------------------------------------------------------------------------- distill: exit 1


def _copy_data(data: Path, to: Path) -> Path:
    shutil.copytree(data, to)
    return to


def test_distill_bad_data(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"

    def distill(data_dir):
        return run_main(monkeypatch, capsys, *distill_args(wp_teacher, data_dir, out))

    assert_error(distill(tmp_path / "missing"), "prepare")
    # A manifest whose shard path leads out of the data directory.
    bad = _copy_data(wp_data, tmp_path / "escape")
    manifest = json.loads((bad / "manifest.json").read_text())
    lang = sorted(manifest["languages"])[0]
    shard = manifest["languages"][lang]["shards"][0]
    assert shard["bytes"] == (bad / shard["file"]).stat().st_size and len(shard["digest"]) == 32  # recorded by prepare
    manifest["languages"][lang]["shards"][0]["file"] = "../../etc/passwd"
    (bad / "manifest.json").write_text(json.dumps(manifest))
    assert_error(distill(bad), "inside the data directory", "prepare")
    # A value of the wrong type.
    manifest["languages"][lang]["shards"][0]["file"] = f"shards/{lang}-00000.bin"
    manifest["seq_len"] = "32"
    (bad / "manifest.json").write_text(json.dumps(manifest))
    assert_error(distill(bad), "seq_len must be an integer")
    # A shard changed since prepare: same size, other bytes.
    changed = _copy_data(wp_data, tmp_path / "changed")
    shard = changed / "shards" / f"{lang}-00000.bin"
    raw = bytearray(shard.read_bytes())
    raw[8:12] = bytes(reversed(raw[8:12])) if raw[8:12] != bytes(reversed(raw[8:12])) else b"\x01\x00\x00\x00"
    shard.write_bytes(bytes(raw))
    assert_error(distill(changed), "digest")
    # A truncated shard.
    truncated = _copy_data(wp_data, tmp_path / "truncated")
    shard = truncated / "shards" / f"{lang}-00000.bin"
    shard.write_bytes(shard.read_bytes()[:-4])
    assert_error(distill(truncated), "bytes, expected")
    assert not out.exists()


def test_distill_out_is_a_file_and_student_larger_than_teacher(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "file"
    out.write_text("mine")
    assert_error(run_main(monkeypatch, capsys, *distill_args(wp_teacher, wp_data, out)), "is a file")
    assert out.read_text() == "mine"
    # A student deeper than its 4-layer teacher trains, with a warning.
    code, stdout, stderr = run_main(
        monkeypatch, capsys, *distill_args(wp_teacher, wp_data, tmp_path / "big"), "--layers", "5"
    )
    assert code == 0, stderr
    assert "larger than teacher" in stderr and "layers 5 > 4" in stderr


def test_distill_vocabulary_mismatch_says_what_differs(
    wp_teacher, wp_data, tiny_sentencepiece_dir, tiny_corpus_dir, tmp_path, monkeypatch, capsys
):
    from transformers import AutoTokenizer

    # Same ids count, other tokens: a WordPiece tokenizer with two tokens swapped.
    tok = AutoTokenizer.from_pretrained(wp_teacher)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    words = [w for w, _ in vocab]
    words[10], words[11] = words[11], words[10]
    other = tmp_path / "other-teacher"
    shutil.copytree(wp_teacher, other)
    (other / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    (other / "tokenizer.json").unlink(missing_ok=True)
    line = assert_error(
        run_main(monkeypatch, capsys, *distill_args(other, wp_data, tmp_path / "o")),
        "another tokenizer",
        f"both have {len(words)} ids",
        "different tokens or ids",
    )
    # Said once, not "(N ids), not ... (N ids)"; counted as "N ids" since the paths and digests in the line may
    # hold the digits N by chance.
    assert line.count(f"{len(words)} ids") == 1
    # Another size: both sizes are named.
    sp_teacher = save_tiny_teacher(tiny_sentencepiece_dir, tmp_path / "sp", kind="xlm-roberta")
    assert_error(
        run_main(monkeypatch, capsys, *distill_args(sp_teacher, wp_data, tmp_path / "o")),
        f"the data's has {len(words)} ids",
    )


def test_distill_vocabulary_must_fit_the_embedding_rows(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    small = tmp_path / "small-embeddings"
    shutil.copytree(wp_teacher, small)
    config = json.loads((small / "config.json").read_text())
    config["vocab_size"] = 50  # the tokenizer has ~600 ids: most of the data's ids have no embedding row
    (small / "config.json").write_text(json.dumps(config))
    assert_error(run_main(monkeypatch, capsys, *distill_args(small, wp_data, tmp_path / "o")), "embedding rows", "50")


# ---------------------------------------------------------------------------------------- assist: exit 1


def test_assist_bad_input(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    file = tmp_path / "file"
    file.write_text("mine")
    assert_error(run_main(monkeypatch, capsys, *assist_args(wp_teacher, wp_data, file)), "is a file")
    assert_error(
        run_main(monkeypatch, capsys, *assist_args(wp_teacher, tmp_path / "nodata", tmp_path / "o")), "prepare"
    )
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------- finetune and evaluation


def test_finetune_bad_input(wp_teacher, task_files, tmp_path, monkeypatch, capsys):
    out = tmp_path / "ft"

    def finetune(*args, env=None):
        return run_main(monkeypatch, capsys, "finetune", "--model", str(wp_teacher), "--out", str(out), *args, env=env)

    assert_error(finetune("--train", str(tmp_path / "none.tsv")), "no such file")
    # QA windows that cannot advance: the message names the flag that exists, --max-seq-len.
    line = assert_error(
        finetune(
            "--task",
            "qa",
            "--train",
            str(task_files["squad"]),
            "--max-seq-len",
            "24",
            "--doc-stride",
            "16",
            "--max-query-length",
            "12",
        ),
        "--max-seq-len",
        "--doc-stride",
    )
    assert "--max-length" not in line
    monkeypatch.setitem(sys.modules, "datasets", None)
    assert_error(finetune("--train", "hf:multi_nli", env={"HF_HUB_OFFLINE": None}), "pip install 'mlminilm[hub]'")
    monkeypatch.delitem(sys.modules, "datasets")
    assert not out.exists()


def test_eval_bad_input(xnli_model, task_files, tmp_path, monkeypatch, capsys):
    out = tmp_path / "report"
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-xnli",
            "--model",
            str(xnli_model),
            "--data",
            str(tmp_path / "x"),
            "--out",
            str(out),
        ),
        str(tmp_path / "x"),
    )
    monkeypatch.setitem(sys.modules, "datasets", None)
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-xnli",
            "--model",
            str(xnli_model),
            "--data",
            "hf:xnli",
            "--langs",
            "de",
            env={"HF_HUB_OFFLINE": None},
        ),
        "pip install 'mlminilm[hub]'",
    )
    monkeypatch.delitem(sys.modules, "datasets")
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-mlqa",
            "--data",
            str(tmp_path / "none.json"),
            "--predictions",
            str(tmp_path / "preds"),
            "--out",
            str(out),
        )
    )
    assert_error(
        run_main(
            monkeypatch, capsys, "eval-tatoeba", "--model", str(xnli_model), "--data", str(tmp_path), "--langs", "deu"
        ),
        "use de for deu",
    )
    assert not out.exists()


def test_configs_refuse_non_finite_numbers_for_python_api_users():
    """The CLI refuses these at parse time; the config dataclasses refuse them too, for code that builds them."""
    from mlminilm.config import DistillConfig, FinetuneConfig
    from mlminilm.errors import ConfigError

    for field, bad, message in [
        ("lr", float("inf"), "--lr must be positive and finite"),
        ("warmup", float("nan"), "--warmup must be non-negative and finite"),
        ("warmup", float("inf"), "--warmup must be non-negative and finite"),
        ("weight_decay", -1.0, "--weight-decay must be non-negative and finite"),
    ]:
        with pytest.raises(ConfigError, match=message):
            DistillConfig(teacher="t", out="o", **{field: bad})
        with pytest.raises(ConfigError, match=message):
            FinetuneConfig(model="m", train="t", out="o", **{field: bad})


# ------------------------------------------- models, configs and data that would train on garbage (issue 19)


def _edited_model(model: Path, to: Path, drop=(), add=(), config=None, as_bin: bool = False) -> Path:
    """A copy of the model directory `model` whose weights lack the tensors `drop` and hold zero tensors `add`
    ({name: shape}) besides, saved as safetensors (or as pytorch_model.bin), with config.json values replaced."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(model, to)
    weights = load_file(to / "model.safetensors")
    for name in drop:
        del weights[name]
    weights.update({name: torch.zeros(shape) for name, shape in dict(add).items()})
    if as_bin:  # no header to read before loading: found by the strict load itself
        (to / "model.safetensors").unlink()
        torch.save(weights, to / "pytorch_model.bin")
    else:
        save_file(weights, to / "model.safetensors", metadata={"format": "pt"})
    if config:
        (to / "config.json").write_text(json.dumps({**json.loads((to / "config.json").read_text()), **config}))
    return to


QUERY = "encoder.layer.1.attention.self.query.weight"


@pytest.mark.parametrize(
    "edit, named, verb",
    [
        (dict(drop=[QUERY]), QUERY, "lack"),  # seen in the safetensors header: before the teacher loads
        (dict(drop=[QUERY], as_bin=True), QUERY, "lack"),  # pytorch_model.bin: seen as it loads
        (dict(drop=["embeddings.token_type_embeddings.weight"]), "embeddings.token_type_embeddings.weight", "lack"),
        (
            dict(add={"encoder.layer.0.attention.self.extra.weight": (4,)}),
            "encoder.layer.0.attention.self.extra",
            "hold",
        ),
        (dict(add={"embeddings.extra.weight": (4,)}), "embeddings.extra.weight", "hold"),
    ],
    ids=["layer-query", "bin-layer-query", "token-types", "extra-in-a-layer", "extra-in-embeddings"],
)
def test_distill_refuses_a_teacher_whose_weights_lack_or_add_tensors(
    edit, named, verb, wp_teacher, wp_data, tmp_path, monkeypatch, capsys
):
    """Such a teacher used to distil with the missing tensor randomly initialised (exit 0)."""
    teacher = _edited_model(wp_teacher, tmp_path / "teacher", **edit)
    out = tmp_path / "out"
    line = assert_error(run_main(monkeypatch, capsys, *distill_args(teacher, wp_data, out)), named, verb)
    assert str(teacher) in line
    assert not out.exists()


def test_a_pooler_the_files_never_had_is_allowed_but_not_half_of_one(
    wp_teacher, wp_data, tmp_path, monkeypatch, capsys
):
    from transformers import AutoModel

    from mlminilm.models.loading import load_encoder, load_model

    # e5 ships without pooler weights: no loss or pooling reads the pooler, so such a teacher loads.
    no_pooler = _edited_model(wp_teacher, tmp_path / "no-pooler", drop=["pooler.dense.weight", "pooler.dense.bias"])
    load_encoder(str(no_pooler))
    _, absent = load_model(AutoModel, str(no_pooler))
    assert absent == {"pooler.dense.weight", "pooler.dense.bias"}
    # Half a pooler is a damaged file.
    half = _edited_model(wp_teacher, tmp_path / "half-pooler", drop=["pooler.dense.bias"])
    assert_error(run_main(monkeypatch, capsys, *distill_args(half, wp_data, tmp_path / "out")), "pooler.dense.bias")
    assert not (tmp_path / "out").exists()


def test_finetune_trim_and_evaluation_load_strictly(
    wp_teacher, wp_data, xnli_model, task_files, tmp_path, monkeypatch, capsys
):
    broken = _edited_model(wp_teacher, tmp_path / "broken", drop=[QUERY])
    out = tmp_path / "out"
    # finetune: before anything is written (the header is read with the config), not after featurising the data.
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "finetune",
            "--model",
            str(broken),
            "--train",
            str(task_files["nli"]),
            "--out",
            str(out),
        ),
        QUERY,
    )
    assert_error(
        run_main(monkeypatch, capsys, "trim", "--model", str(broken), "--data", str(wp_data), "--out", str(out)), QUERY
    )
    # An evaluated model must be whole: a classifier without its head's weights used to score a random head.
    headless = _edited_model(xnli_model, tmp_path / "headless", drop=["classifier.weight"])
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-xnli",
            "--model",
            str(headless),
            "--data",
            str(task_files["xnli"]),
            "--out",
            str(out),
        ),
        "classifier.weight",
    )
    assert not out.exists()


class _NoLongerThan:
    """Fail instead of hanging (a 100000-layer teacher used to build until killed): SIGALRM after `seconds`."""

    def __init__(self, seconds: int):
        self.seconds = seconds

    def _hung(self, *_):
        raise TimeoutError(f"still running after {self.seconds} s")

    def __enter__(self):
        import signal

        self.previous = signal.signal(signal.SIGALRM, self._hung)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        import signal

        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous)


@pytest.mark.parametrize(
    "values, named",
    [
        ({"num_hidden_layers": 100000}, "num_hidden_layers is 100000, but the weights hold 4 layers"),
        ({"num_hidden_layers": 2}, "num_hidden_layers is 2, but the weights hold 4 layers"),
        ({"layer_norm_eps": -1e-12}, "layer_norm_eps"),
        ({"num_attention_heads": 5}, "num_attention_heads 5 does not divide hidden_size 64"),
        ({"hidden_size": 0}, "hidden_size 0"),
        ({"intermediate_size": 10**9}, "intermediate_size"),
        ({"vocab_size": 50}, "vocab_size is 50, but the weights hold"),
        ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
    ],
    ids=lambda x: next(iter(x)) if isinstance(x, dict) else None,
)
def test_a_config_that_is_absurd_or_contradicts_its_weights_is_one_line(
    values, named, wp_teacher, wp_data, tmp_path, monkeypatch, capsys
):
    teacher = _edited_model(wp_teacher, tmp_path / "teacher", config=values)
    out = tmp_path / "out"
    with _NoLongerThan(120):
        assert_error(run_main(monkeypatch, capsys, *distill_args(teacher, wp_data, out)), named)
    assert not out.exists()


def test_a_vocabulary_larger_than_the_embedding_rows_is_refused(
    tiny_wordpiece_dir, wp_data, task_files, tmp_path, monkeypatch, capsys
):
    """Config and weights agree on 50 rows, but the tokenizer has ~600 ids."""
    from transformers import AutoModel, AutoTokenizer, BertConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_wordpiece_dir)
    small = tmp_path / "small"
    AutoModel.from_config(
        BertConfig(
            vocab_size=50,
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=160,
        )
    ).save_pretrained(small)
    tokenizer.save_pretrained(small)
    out = tmp_path / "out"
    assert_error(run_main(monkeypatch, capsys, *distill_args(small, wp_data, out)), f"{len(tokenizer)} ids", "50")
    assert_error(
        run_main(
            monkeypatch, capsys, "finetune", "--model", str(small), "--train", str(task_files["nli"]), "--out", str(out)
        ),
        f"{len(tokenizer)} ids",
        "50 embedding rows",
    )
    assert not out.exists()


def _shard_with_ids_outside(data: Path, to: Path, record: str) -> tuple[Path, str]:
    """A copy of prepared data whose first de shard holds -1 and vocab_size + 5 (in each of its sequences, so that
    training reads them), edited by hand with its digest brought up to date. `record`: "true" (the manifest records
    the shard's real id range), "none" (no ranges at all, as an older prepare wrote) or "stale" (the range recorded
    before the edit)."""
    import numpy as np

    from mlminilm.corpus.manifest import shard_digest

    shutil.copytree(data, to)
    manifest = json.loads((to / "manifest.json").read_text())
    shard = manifest["languages"]["de"]["shards"][0]
    ids = np.fromfile(to / shard["file"], dtype="<i4").reshape(shard["sequences"], manifest["seq_len"])
    ids[:, 1], ids[:, 2] = -1, manifest["tokenizer"]["vocab_size"] + 5
    ids.tofile(to / shard["file"])
    shard["digest"] = shard_digest(to / shard["file"])
    for info in manifest["languages"].values():
        for entry in info["shards"]:
            if record == "none":
                entry.pop("id_range", None)
    if record == "true":
        shard["id_range"] = [int(ids.min()), int(ids.max())]
    (to / "manifest.json").write_text(json.dumps(manifest))
    return to, shard["file"]


def test_prepare_records_each_shards_token_id_range(wp_data):
    import numpy as np

    from mlminilm.corpus.dataset import PreparedData

    manifest = json.loads((wp_data / "manifest.json").read_text())
    vocab = manifest["tokenizer"]["vocab_size"]
    for info in manifest["languages"].values():
        for shard in info["shards"]:
            ids = np.fromfile(wp_data / shard["file"], dtype="<i4")
            assert shard["id_range"] == [int(ids.min()), int(ids.max())]
    lowest, highest = PreparedData.open(wp_data).token_id_range()
    assert 0 <= lowest <= highest < vocab


@pytest.mark.parametrize("record", ["true", "none", "stale"])
def test_token_ids_outside_the_vocabulary_are_one_line(record, wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    """They used to end in `IndexError: index out of range in self` from the embedding (a CUDA assert on a GPU)."""
    data, shard = _shard_with_ids_outside(wp_data, tmp_path / "data", record)
    out = tmp_path / "out"
    line = assert_error(run_main(monkeypatch, capsys, *distill_args(wp_teacher, data, out)), shard, "-1..", "prepare")
    if record == "stale":
        # The recorded range says nothing is wrong: the sequence read during training is checked, before the model.
        assert "changed since prepare" in line
        assert not (out / "student").exists() and not (out / "checkpoints").exists()
    else:  # checked at open, from the manifest or by reading the shards: before anything is written
        assert "outside the tokenizer's 0.." in line
        assert not out.exists()


# Integer options beyond what any run needs: numpy, torch or the operating system used to end them in a traceback
# (or a process killed for memory, `prepare --seq-len 2000000000`).
INTEGER_CASES = [
    ("distill", ["--seed", "-1"], "--seed"),
    ("distill", ["--seed", str(2**70)], "--seed"),
    ("distill", ["--max-steps", str(2 * 10**19)], "--max-steps"),
    ("prepare", ["--seq-len", "2000000000"], "--seq-len"),
    ("assist", ["--seed", "-1"], "--seed"),
    ("finetune", ["--seed", str(2**70)], "--seed"),
    ("distill", ["--grad-accum", str(2**63)], "--grad-accum"),
    ("distill", ["--data-workers", str(10**6)], "--data-workers"),
    ("distill", ["--batch-size", str(10**12)], "--batch-size"),
    ("distill", ["--teacher-layer", str(-(2**64))], "--teacher-layer"),
    ("prepare", ["--workers", str(2**40)], "--workers"),
    ("prepare", ["--max-docs", str(2**64)], "--max-docs"),
    ("finetune", ["--max-seq-len", str(2**40)], "--max-seq-len"),
    ("eval-xnli", ["--batch-size", str(2**64)], "--batch-size"),
    ("eval-mlqa", ["--doc-stride", str(2**64)], "--doc-stride"),
    ("eval-tatoeba", ["--layer", str(-(2**64))], "--layer"),
]


@pytest.mark.parametrize(
    "command, extra, option", INTEGER_CASES, ids=lambda x: " ".join(x) if isinstance(x, list) else str(x)
)
def test_huge_or_negative_integers_are_usage_errors(command, extra, option, tmp_path, monkeypatch, capsys):
    assert_usage_error(run_main(monkeypatch, capsys, command, *required(command, tmp_path), *extra), option)
    assert not (tmp_path / "out").exists()


def test_configs_bound_integers_for_python_api_users():
    from mlminilm.config import DistillConfig, EvalXnliConfig, FinetuneConfig, PrepareConfig
    from mlminilm.errors import ConfigError

    with pytest.raises(ConfigError, match="--seed must be at least 0"):
        DistillConfig(teacher="t", out="o", seed=-1)
    with pytest.raises(ConfigError, match="--seed must be at most 4294967295"):
        FinetuneConfig(model="m", train="t", out="o", seed=2**70)
    with pytest.raises(ConfigError, match="--max-steps must be at most"):
        DistillConfig(teacher="t", out="o", max_steps=2 * 10**19)
    with pytest.raises(ConfigError, match="--seq-len must be at most 65536"):
        PrepareConfig(teacher="t", inputs=("x",), out="o", seq_len=2_000_000_000)
    with pytest.raises(ConfigError, match="--batch-size must be at most"):
        EvalXnliConfig(model="m", data="d", batch_size=2**64)
    # A float option that becomes a step count: finetune --epochs 1e30 trained towards 10^30 steps.
    with pytest.raises(ConfigError, match="give fewer --epochs"):
        FinetuneConfig(model="m", train="t", out="o", epochs=1e30).resolved(steps_per_epoch=1)


def _damaged_gzip(path: Path, text: str) -> Path:
    """Lines of `text` (numbered, so they do not compress to nothing) gzipped, the deflate stream damaged mid-way:
    reading it raises zlib.error (checked here)."""
    import zlib

    good = gzip.compress("".join(f"{i} {text}" for i in range(2000)).encode(), mtime=0)
    for at in range(len(good) // 3, 10, -1):  # the furthest byte in the first third whose flip breaks the stream
        damaged = good[:at] + bytes([good[at] ^ 0xFF]) + good[at + 1 :]
        try:
            gzip.decompress(damaged)
        except zlib.error:
            path.write_bytes(damaged)
            return path
        except (OSError, EOFError):  # a CRC or length error: not the case wanted here
            continue
    raise AssertionError("no single flipped byte damages the deflate stream")


def test_a_damaged_gzip_input_is_one_line_naming_it(wp_teacher, wp_data, task_files, tmp_path, monkeypatch, capsys):
    """Issue 37: a .gz whose deflate stream is damaged was a zlib.error traceback in --parallel (TSV and OPUS file
    pairs) and in finetune --train (every reader of mlminilm.tasks.textfile.read_text)."""
    tsv = _damaged_gzip(tmp_path / "en-de.tsv.gz", "The dog runs.\tDer Hund läuft.\n")
    opus = tmp_path / "opus"
    opus.mkdir()
    with gzip.open(opus / "talks.de-en.en.gz", "wt", encoding="utf-8") as handle:
        handle.write("The dog runs.\n" * 4000)
    _damaged_gzip(opus / "talks.de-en.de.gz", "Der Hund läuft.\n")
    shape = ["--layers", "2", "--hidden", "64", "--heads", "4", "--intermediate", "128", "--max-steps", "1"]
    for parallel, named in ((tsv, tsv), (opus, opus / "talks.de-en.de.gz")):
        args = ["distill", "--teacher", str(wp_teacher), "--data", str(wp_data), "--out", str(tmp_path / "run")]
        line = assert_error(
            run_main(monkeypatch, capsys, *args, *shape, "--parallel", str(parallel)), str(named), "gzip"
        )
        assert "download or compress it again" in line
    train = _damaged_gzip(tmp_path / "train-en.tsv.gz", task_files["nli"].read_text(encoding="utf-8"))
    line = assert_error(
        run_main(
            monkeypatch,
            capsys,
            "finetune",
            "--model",
            str(wp_teacher),
            "--out",
            str(tmp_path / "ft"),
            "--train",
            str(train),
        ),
        str(train),
        "gzip",
    )
    assert not (tmp_path / "run").exists() and not (tmp_path / "ft").exists()


def test_a_missing_opus_partner_is_named_as_the_missing_one(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    """Issue 37: `--parallel talks.de-en.de` without talks.de-en.en said "talks.de-en.en has no partner file
    .../talks.de-en.en": the missing file as the one lacking itself."""
    (tmp_path / "talks.de-en.de").write_text("Der Hund läuft.\n", encoding="utf-8")
    shape = ["--layers", "2", "--hidden", "64", "--heads", "4", "--intermediate", "128", "--max-steps", "1"]
    args = ["distill", "--teacher", str(wp_teacher), "--data", str(wp_data), "--out", str(tmp_path / "run")]
    line = assert_error(
        run_main(monkeypatch, capsys, *args, *shape, "--parallel", str(tmp_path / "talks.de-en.de")),
        "talks.de-en.de has no partner file",
        f"{tmp_path / 'talks.de-en.en'} is missing",
    )
    assert "talks.de-en.en has no partner" not in line
