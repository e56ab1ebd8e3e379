"""Models and configs that would train on garbage (issue 19): weights that lack or add tensors, half a pooler, a
config that is absurd or contradicts its weights, a vocabulary larger than the embedding rows. Every command that
loads a model refuses them with one `Error:` line (exit 1), before it writes anything."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import assert_error, one_step_distill_args, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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
    line = assert_error(run_main(monkeypatch, capsys, *one_step_distill_args(teacher, wp_data, out)), named, verb)
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
    assert_error(
        run_main(monkeypatch, capsys, *one_step_distill_args(half, wp_data, tmp_path / "out")), "pooler.dense.bias"
    )
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
        assert_error(run_main(monkeypatch, capsys, *one_step_distill_args(teacher, wp_data, out)), named)
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
    assert_error(
        run_main(monkeypatch, capsys, *one_step_distill_args(small, wp_data, out)), f"{len(tokenizer)} ids", "50"
    )
    assert_error(
        run_main(
            monkeypatch, capsys, "finetune", "--model", str(small), "--train", str(task_files["nli"]), "--out", str(out)
        ),
        f"{len(tokenizer)} ids",
        "50 embedding rows",
    )
    assert not out.exists()


# ------------------------------------------ tokenizer files named outside the model directory (issue 53, item 7)


def _with_tokenizer_config(model: Path, to: Path, **values) -> Path:
    """A copy of `model` whose tokenizer_config.json also holds `values`."""
    shutil.copytree(model, to)
    config = to / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text(encoding="utf-8")), **values}), encoding="utf-8")
    return to


def test_tokenizer_files_named_outside_the_model_directory_are_refused(
    wp_teacher, wp_data, xnli_model, task_files, tiny_corpus_dir, tmp_path, monkeypatch, capsys
):
    """tokenizer_config.json's `tokenizer_file` (`vocab_file`, `merges_file`, ...) is opened as given by the
    transformers the project supports (4.x lets it win over the folder's own file): one that is absolute, climbs
    out with `..` or leaves through a symlink is refused in one line by every command, before anything is written;
    a plain name inside the folder, null, and the `special_tokens_map_file` record (never opened) load as before."""
    other = tmp_path / "models" / "tok"
    shutil.copytree(wp_teacher, other)  # a whole tokenizer beside the model: what the paths make transformers read
    out = tmp_path / "out"
    cases = [
        ("tokenizer_file", "../tok/tokenizer.json", "leads outside"),
        ("vocab_file", str(other / "vocab.txt"), "is absolute"),
        ("merges_file", "sub/../../tok/merges.txt", "leads outside"),
        ("spm_file", "linked.model", "leads outside"),
    ]
    for n, (key, value, why) in enumerate(cases):
        teacher = _with_tokenizer_config(wp_teacher, tmp_path / "models" / f"teacher{n}", **{key: value})
        (teacher / "linked.model").symlink_to(other / "vocab.txt")
        named = (f"{teacher / 'tokenizer_config.json'}: {key!r}: path {value!r} {why}", f"remove {key!r}")
        assert_error(run_main(monkeypatch, capsys, *one_step_distill_args(teacher, wp_data, out)), *named)
        assert_error(
            run_main(monkeypatch, capsys, "trim", "--model", str(teacher), "--data", str(wp_data), "--out", str(out)),
            *named,
        )
        assert not out.exists()
    teacher = tmp_path / "models" / "teacher0"
    named = f"{teacher / 'tokenizer_config.json'}: 'tokenizer_file': path '../tok/tokenizer.json' leads outside"
    prepare = ("prepare", "--teacher", str(teacher), "--out", str(out), "--input", str(tiny_corpus_dir))
    assert_error(run_main(monkeypatch, capsys, *prepare), named)
    assert_error(run_main(monkeypatch, capsys, "export", "--model", str(teacher), "--out", str(out)), named)
    classifier = _with_tokenizer_config(xnli_model, tmp_path / "models" / "classifier", tokenizer_file="/etc/passwd")
    evaluate = ("eval-xnli", "--data", str(task_files["xnli"]), "--out", str(out))
    assert_error(run_main(monkeypatch, capsys, *evaluate, "--model", str(classifier)), "'/etc/passwd' is absolute")
    assert not out.exists()

    # A name inside the folder, null, and a record of where another machine saved the tokenizer: as before.
    fine = _with_tokenizer_config(
        xnli_model,
        tmp_path / "models" / "fine",
        tokenizer_file="tokenizer.json",
        vocab_file=None,
        special_tokens_map_file="/home/someone/.cache/special_tokens_map.json",
    )
    code, _, stderr = run_main(monkeypatch, capsys, *evaluate, "--model", str(fine))
    assert code == 0, stderr
