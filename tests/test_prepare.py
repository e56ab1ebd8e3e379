"""`prepare`: text -> packed int32 shards, the manifest, the reader distill uses, and the CLI's errors."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from helpers import run_cli
from mlminilm.config import PrepareConfig, default
from mlminilm.corpus import prepare
from mlminilm.corpus.dataset import PreparedData, sampling_probabilities
from mlminilm.corpus.manifest import MANIFEST, tokenizer_identity
from mlminilm.errors import ConfigError, DataError

TOKENIZERS = ["tiny_wordpiece_dir", "tiny_sentencepiece_dir"]
SEQ_LEN = 16  # short, so a tiny corpus fills many sequences and shards


@pytest.fixture(params=TOKENIZERS)
def tokenizer_dir(request) -> Path:
    return request.getfixturevalue(request.param)


def _prepare(teacher, inputs, out, **options) -> prepare.PrepareResult:
    options = {"seq_len": SEQ_LEN, "workers": 1, "shard_sequences": 7, **options}
    return prepare.run(PrepareConfig(teacher=str(teacher), inputs=tuple(str(i) for i in inputs), out=out, **options))


def _corpus_lines(directory: Path) -> dict[str, list[str]]:
    return {path.stem: path.read_text(encoding="utf-8").splitlines() for path in sorted(directory.glob("*.txt"))}


def _shard_contents(out: Path, lang: str) -> np.ndarray:
    """A language's shards read straight from the files, independently of PreparedData."""
    return np.concatenate([np.fromfile(path, "<i4") for path in sorted((out / "shards").glob(f"{lang}-*.bin"))])


def _stored_documents(data: PreparedData, lang: str) -> list[list[int]]:
    """Undo the packing: strip each sequence's wrapper and the padding, join, split on the separator."""
    cls_id, sep_id, pad_id = (data.tokenizer[f"{name}_token_id"] for name in ("cls", "sep", "pad"))
    sequences = data.batch([(lang, i) for i in range(data.num_sequences(lang))])
    padded = data.manifest["languages"][lang]["padded_tokens"]
    stream: list[int] = []
    for i, sequence in enumerate(sequences.tolist()):
        last = i == len(sequences) - 1
        end = len(sequence) - (padded if last else 0)
        assert sequence[0] == cls_id and sequence[end - 1] == sep_id
        assert sequence[end:] == [pad_id] * (len(sequence) - end)
        assert pad_id not in sequence[:end], "padding only at the end of a language's last sequence"
        stream += sequence[1 : end - 1]
    assert stream[-1] == sep_id, "every document ends with the separator"
    documents, current = [], []
    for token in stream:
        if token == sep_id:
            documents.append(current)
            current = []
        else:
            current.append(token)
    return documents


def test_round_trip_gives_back_every_document(tokenizer_dir, tiny_corpus_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    _prepare(tokenizer_dir, [tiny_corpus_dir], tmp_path / "out")
    data = PreparedData.open(tmp_path / "out")
    corpus = _corpus_lines(tiny_corpus_dir)
    assert data.languages == sorted(corpus)
    assert data.seq_len == SEQ_LEN
    for lang, lines in corpus.items():
        stored = _stored_documents(data, lang)
        assert stored == [tok.encode(line, add_special_tokens=False) for line in lines]
        expected_text = [tok.decode(tok.encode(line, add_special_tokens=False)) for line in lines]
        assert [tok.decode(ids) for ids in stored] == expected_text


def test_manifest_counts_match_an_independent_count(tokenizer_dir, tiny_corpus_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    result = _prepare(tokenizer_dir, [tiny_corpus_dir], tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert manifest["tokenizer"] == tokenizer_identity(tok)
    assert manifest["seq_len"] == SEQ_LEN and manifest["dtype"] == "int32"
    for lang, lines in _corpus_lines(tiny_corpus_dir).items():
        tokens = sum(len(tok.encode(line, add_special_tokens=False)) + 1 for line in lines)
        sequences = math.ceil(tokens / (SEQ_LEN - 2))
        entry = manifest["languages"][lang]
        assert entry["documents"] == len(lines)
        assert entry["tokens"] == tokens
        assert entry["sequences"] == sequences
        assert entry["padded_tokens"] == sequences * (SEQ_LEN - 2) - tokens
        assert entry["source"] == [str(tiny_corpus_dir / f"{lang}.txt")]
        full, rest = divmod(sequences, 7)
        assert [s["sequences"] for s in entry["shards"]] == [7] * full + ([rest] if rest else [])
        shards = len(entry["shards"])
        assert [s["file"] for s in entry["shards"]] == [f"shards/{lang}-{i:05d}.bin" for i in range(shards)]
    assert result.documents == sum(e["documents"] for e in manifest["languages"].values())
    assert result.sequences == sum(e["sequences"] for e in manifest["languages"].values())


def test_token_counts_are_the_bincount_of_the_shards(tiny_sentencepiece_dir, tiny_corpus_dir, tmp_path):
    _prepare(tiny_sentencepiece_dir, [tiny_corpus_dir], tmp_path / "out")
    data = PreparedData.open(tmp_path / "out")
    stored = np.concatenate([_shard_contents(tmp_path / "out", lang) for lang in data.languages])
    counts = data.token_counts()
    assert counts.dtype == np.int64 and len(counts) == data.tokenizer["vocab_size"]
    assert np.array_equal(counts, np.bincount(stored, minlength=len(counts)))
    assert counts.sum() == sum(data.num_sequences(lang) for lang in data.languages) * SEQ_LEN


def test_output_is_byte_identical_whatever_the_number_of_workers(
    tiny_sentencepiece_dir, tiny_corpus_dir, tmp_path, monkeypatch
):
    monkeypatch.setattr(prepare, "BATCH_DOCUMENTS", 3)  # many batches in flight, to exercise the ordering
    _prepare(tiny_sentencepiece_dir, [tiny_corpus_dir], tmp_path / "one", workers=1)
    _prepare(tiny_sentencepiece_dir, [tiny_corpus_dir], tmp_path / "two", workers=2)
    files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "two") for p in (tmp_path / "two").rglob("*") if p.is_file())
    for name in files:
        if name.name != MANIFEST:
            assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    manifests = [json.loads((tmp_path / d / MANIFEST).read_text()) for d in ("one", "two")]
    assert manifests[0]["languages"] == manifests[1]["languages"]


def test_gzip_json_lines_and_lang_equals_path_inputs(tiny_wordpiece_dir, make_lines, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_wordpiece_dir)
    de, ar, en = make_lines("de", 12), make_lines("ar", 9), make_lines("en", 5)
    with gzip.open(tmp_path / "de.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n\n".join(de) + "\n   \n")  # blank and whitespace-only lines are not documents
    rows = [{"body": text, "id": i} for i, text in enumerate(ar)] + [{"body": "  "}]
    (tmp_path / "ar.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n\n")
    with gzip.open(tmp_path / "english.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps({"body": text}) + "\n" for text in en))
    inputs = [tmp_path / "de.txt.gz", f"ar={tmp_path / 'ar.jsonl'}", f"en={tmp_path / 'english.jsonl.gz'}"]
    _prepare(tiny_wordpiece_dir, inputs, tmp_path / "out", text_field="body")
    data = PreparedData.open(tmp_path / "out")
    for lang, lines in {"de": de, "ar": ar, "en": en}.items():
        assert _stored_documents(data, lang) == [tok.encode(line, add_special_tokens=False) for line in lines]


def test_langs_filter_and_max_docs(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    result = _prepare(tiny_wordpiece_dir, [tiny_corpus_dir], tmp_path / "out", langs=("zh", "de"), max_docs=5)
    assert sorted(result.languages) == ["de", "zh"]
    assert all(stats.documents == 5 for stats in result.languages.values())


def test_bad_json_line_names_file_and_line_and_leaves_nothing(tiny_wordpiece_dir, tmp_path):
    (tmp_path / "en.jsonl").write_text('{"text": "a cat"}\n{"text": "the dog"\n')
    (tmp_path / "zh.jsonl").write_text('{"text": "猫"}\n{"title": "no text"}\n')
    with pytest.raises(DataError, match=r"en\.jsonl:2: not a JSON line"):
        _prepare(tiny_wordpiece_dir, [tmp_path / "en.jsonl"], tmp_path / "out")
    with pytest.raises(DataError, match=r"zh\.jsonl:2: no string field 'text'.*--text-field"):
        _prepare(tiny_wordpiece_dir, [tmp_path / "zh.jsonl"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_failure_after_some_shards_leaves_the_previous_output_alone(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    out = tmp_path / "out"
    _prepare(tiny_wordpiece_dir, [tiny_corpus_dir], out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (tmp_path / "zh.jsonl").write_text('{"text": "猫"}\n' * 5 + "not json\n")
    with pytest.raises(DataError, match=r"zh\.jsonl:6"):
        _prepare(tiny_wordpiece_dir, [tiny_corpus_dir / "de.txt", tmp_path / "zh.jsonl"], out, overwrite=True)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_overwrite_replaces_the_previous_shards(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    out = tmp_path / "out"
    _prepare(tiny_wordpiece_dir, [tiny_corpus_dir], out, shard_sequences=2)
    with pytest.raises(ConfigError, match="not empty; pass --overwrite"):
        _prepare(tiny_wordpiece_dir, [tiny_corpus_dir], out)
    _prepare(tiny_wordpiece_dir, [tiny_corpus_dir / "en.txt"], out, overwrite=True, shard_sequences=1000)
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["en-00000.bin"]
    assert PreparedData.open(out).languages == ["en"]
    assert sorted(p.name for p in out.iterdir()) == [
        ".mlminilm-output.json",
        "manifest.json",
        "shards",
        "token_counts.npy",
    ]


def test_config_validation_names_the_flags():
    with pytest.raises(ConfigError) as info:
        PrepareConfig(teacher="", inputs=(), out=Path("x"), seq_len=2, workers=-1, shard_sequences=0, max_docs=0)
    for flag in ("--teacher", "--input", "--seq-len", "--workers", "--shard-sequences", "--max-docs"):
        assert flag in str(info.value)


def test_cli_option_defaults_come_from_the_config():
    import inspect

    from mlminilm.commands import prepare as command

    for name, parameter in inspect.signature(command.command).parameters.items():
        if parameter.default is not inspect.Parameter.empty and name not in ("json_out", "verbose", "config"):
            assert parameter.default == default(PrepareConfig, name), name


def test_hub_input_fails_clearly_when_offline(tiny_wordpiece_dir, tmp_path):
    with pytest.raises(DataError, match=r"cannot stream Hub dataset hf:wikimedia/wikipedia:20231101\.de .*LANG=PATH"):
        _prepare(tiny_wordpiece_dir, ["hf:wikimedia/wikipedia:20231101.{lang}"], tmp_path / "out", langs=("de",))
    with pytest.raises(DataError, match="needs --langs"):
        _prepare(tiny_wordpiece_dir, ["hf:wikimedia/wikipedia:20231101.{lang}"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- the reader distill uses -------------------------------------------------------------------------------


def test_prepared_data_reads_sequences_across_shards(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    _prepare(tiny_wordpiece_dir, [tiny_corpus_dir], tmp_path / "out", shard_sequences=3)
    data = PreparedData.open(tmp_path / "out")
    stored = {lang: _shard_contents(tmp_path / "out", lang).reshape(-1, SEQ_LEN) for lang in data.languages}
    pairs = [("zh", 4), ("en", 0), ("zh", data.num_sequences("zh") - 1), ("de", 3)]
    batch = data.batch(pairs)
    assert batch.dtype == np.int32 and batch.shape == (len(pairs), SEQ_LEN)
    for row, (lang, index) in zip(batch, pairs):
        assert np.array_equal(row, stored[lang][index])
        assert np.array_equal(data.get(lang, index), row)
    total = sum(len(s) for s in stored.values())
    assert data.language_shares() == pytest.approx({lang: len(s) / total for lang, s in stored.items()})
    with pytest.raises(IndexError):
        data.get("en", data.num_sequences("en"))
    with pytest.raises(DataError, match="holds no language 'fr'; it has: ar, de, en, zh"):
        data.num_sequences("fr")


def test_prepared_data_refuses_incomplete_output(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    with pytest.raises(DataError, match="manifest.json not found.*mlminilm prepare"):
        PreparedData.open(tmp_path)
    out = tmp_path / "out"
    _prepare(tiny_wordpiece_dir, [tiny_corpus_dir], out)
    shard = out / "shards" / "de-00001.bin"
    shard.write_bytes(shard.read_bytes()[:-4])
    (out / "shards" / "en-00000.bin").unlink()
    problems = r"de-00001\.bin has \d+ bytes, expected \d+; shard shards/en-00000\.bin is missing"
    with pytest.raises(DataError, match=problems):
        PreparedData.open(out)
    (out / MANIFEST).write_text("{not json")
    with pytest.raises(DataError, match="cannot be read.*prepare` again"):
        PreparedData.open(out)


def test_sampling_probabilities_hand_worked():
    q = sampling_probabilities({"a": 900, "b": 100}, 0.3)
    # p = 0.9 / 0.1; 0.9^0.3 = 0.968886, 0.1^0.3 = 0.501187; q_a = 0.968886 / 1.470073 = 0.659073
    assert q["a"] == pytest.approx(0.9**0.3 / (0.9**0.3 + 0.1**0.3)) == pytest.approx(0.65907, abs=1e-5)
    assert q["b"] == pytest.approx(0.34093, abs=1e-5)
    assert sampling_probabilities({"a": 3, "b": 1}, 1.0) == pytest.approx({"a": 0.75, "b": 0.25})
    assert sampling_probabilities({"a": 3, "b": 1, "c": 0}, 0.0) == pytest.approx({"a": 0.5, "b": 0.5, "c": 0.0})


# --- real data ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.realdata
def test_real_xlmr_tokenizer_on_ud_text(shared_data, tmp_path):
    xlmr = shared_data / "tokenizers" / "xlm-roberta"
    tok = AutoTokenizer.from_pretrained(xlmr)
    corpus = {}
    for lang in ("ar", "zh", "hi"):
        lines = (shared_data / "corpus" / "ud" / f"{lang}.txt").read_text(encoding="utf-8").splitlines()[:200]
        corpus[lang] = [line for line in lines if line.strip()]
        (tmp_path / f"{lang}.txt").write_text("\n".join(corpus[lang]) + "\n", encoding="utf-8")
    _prepare(xlmr, [tmp_path / f"{lang}.txt" for lang in corpus], tmp_path / "out", seq_len=128, workers=2)
    data = PreparedData.open(tmp_path / "out")
    assert data.tokenizer["vocab_size"] == 250_002
    assert data.token_counts()[65_536:].sum() > 0, "ids above 16 bits must survive"
    for lang, lines in corpus.items():
        stored = _stored_documents(data, lang)
        assert stored == [tok.encode(line, add_special_tokens=False) for line in lines]


# --- the CLI: one `Error:` line, exit 1, nothing left behind --------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli("prepare", *args)


def _assert_one_error_line(run: subprocess.CompletedProcess, *needles: str) -> str:
    assert run.returncode == 1, run.stderr
    errors = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    for needle in needles:
        assert needle in errors[0]
    return errors[0]


def test_cli_bad_inputs(tiny_wordpiece_dir, tmp_path):
    out = tmp_path / "out"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "de.txt").write_text("\n  \n")
    (tmp_path / "xx.txt").write_text("some text\n")
    cases = [
        (tmp_path / "missing", "does not exist"),
        (tmp_path / "empty", "de.txt holds no documents"),
        (tmp_path / "xx.txt", "unknown language 'xx' (not an ISO 639-1 or 639-3 code"),
    ]
    for corpus, needle in cases:
        run = _cli("--teacher", str(tiny_wordpiece_dir), "--input", str(corpus), "--out", str(out))
        _assert_one_error_line(run, needle)
        assert not out.exists()


def test_cli_refuses_a_non_empty_output_and_writes_nothing(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    run = _cli("--teacher", str(tiny_wordpiece_dir), "--input", str(tiny_corpus_dir), "--out", str(out))
    _assert_one_error_line(run, "--overwrite")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_cli_json_prints_only_the_result(tiny_wordpiece_dir, tiny_corpus_dir, tmp_path):
    run = _cli(
        "--teacher",
        str(tiny_wordpiece_dir),
        "--input",
        str(tiny_corpus_dir),
        "--out",
        str(tmp_path / "out"),
        "--workers",
        "1",
        "--langs",
        "en,de",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert sorted(result["languages"]) == ["de", "en"]
    assert result["documents"] == 80
