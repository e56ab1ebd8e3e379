"""eval-tatoeba: the nearest-neighbour rule against a naive loop and a hand-worked tie, pooling, the layer rule,
sentence-transformers setups, the reader's errors, the CLI report on a tiny model, and (realdata) the 14 shared
Tatoeba languages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import sample_lines

from helpers import assert_one_line_error, cli, run_main, save_tiny_teacher, tiny_encoder_fixture

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPORT_FILES = ("metrics.json", "metrics.csv", "metrics.md", "chart.png")
REAL_COUNTS = {
    "ar": 1000,
    "bg": 1000,
    "de": 1000,
    "el": 1000,
    "es": 1000,
    "fr": 1000,
    "hi": 1000,
    "ru": 1000,
    "sw": 390,
    "th": 548,
    "tr": 1000,
    "ur": 1000,
    "vi": 1000,
    "zh": 1000,
}


# 3 layers (XTREME rule: hidden-states index 2), 160 positions (below the default max length 512).
encoder = tiny_encoder_fixture("tiny_wordpiece_dir", "enc", layers=3, hidden=16, heads=2, intermediate=32)


def write_pair(folder: Path, iso: str, source: list[str], english: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"tatoeba.{iso}-eng.{iso}").write_text("".join(s + "\n" for s in source), encoding="utf-8")
    (folder / f"tatoeba.{iso}-eng.eng").write_text("".join(s + "\n" for s in english), encoding="utf-8")
    return folder


def known_answer_lines(lang: str, count: int = 6) -> list[str]:
    """`count` distinct sentences, except that the last repeats the first: the last can never retrieve itself
    (an exact tie goes to the lower index), every other one retrieves its identical copy."""
    lines = list(dict.fromkeys(sample_lines(lang, 3 * count, seed=7)))[: count - 1]
    assert len(lines) == count - 1
    return lines + [lines[0]]


# ------------------------------------------------------------------------------- retrieval and pooling


def test_nearest_hand_worked_tie():
    from mlminilm.evaluation.tatoeba import nearest, retrieval_scores

    keys = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]], dtype=np.float32)  # keys 0 and 2: the same direction
    queries = np.array([[1.0, 0.0], [0.0, 1.0], [3.0, 0.0]], dtype=np.float32)
    # cosines: q0 -> [1, 0, 1], q1 -> [0, 1, 0], q2 -> [1, 0, 1]; ties go to the lowest index.
    assert nearest(queries, keys).tolist() == [0, 1, 0]
    assert nearest(keys, queries).tolist() == [0, 1, 0]
    scores, predicted = retrieval_scores(queries, keys)
    assert scores["correct_xx_to_en"] == 2 and scores["xx_to_en"] == pytest.approx(200 / 3)
    assert scores["correct_en_to_xx"] == 2 and scores["mean"] == pytest.approx(200 / 3)
    assert scores["examples"] == 3 and predicted["en_to_xx"].tolist() == [0, 1, 0]


def test_nearest_matches_naive_float64_loop():
    from mlminilm.evaluation.tatoeba import nearest

    rng = np.random.default_rng(0)
    queries, keys = rng.normal(size=(40, 8)), rng.normal(size=(50, 8))
    keys[7] = 0.0  # a zero vector has similarity 0 with everything
    expected = []
    for q in queries:
        best, best_sim = -1, -np.inf
        for j, k in enumerate(keys):
            norm = np.sqrt(q @ q) * np.sqrt(k @ k)
            sim = q @ k / norm if norm else 0.0
            if sim > best_sim:
                best, best_sim = j, sim
        expected.append(best)
    assert nearest(queries.astype(np.float32), keys.astype(np.float32), chunk=7).tolist() == expected


def test_pool_modes():
    import torch

    from mlminilm.evaluation.embeddings import pool

    hidden = torch.tensor([[[1.0, -2.0], [3.0, 4.0], [100.0, 100.0]]])  # the last position is padding
    mask = torch.tensor([[1, 1, 0]])
    assert pool(hidden, mask, ("mean",)).tolist() == [[2.0, 1.0]]
    assert pool(hidden, mask, ("cls",)).tolist() == [[1.0, -2.0]]
    assert pool(hidden, mask, ("max",)).tolist() == [[3.0, 4.0]]
    assert pool(hidden, mask, ("cls", "mean")).tolist() == [[1.0, -2.0, 2.0, 1.0]]
    assert pool(hidden, mask, ("mean",), skip=1).tolist() == [[3.0, 4.0]]
    assert pool(hidden.bfloat16(), mask, ("mean",)).dtype == torch.float32


def test_layer_rule():
    from mlminilm.evaluation.embeddings import default_layer

    assert {n: default_layer(n) for n in (1, 2, 3, 4, 6, 12, 24)} == {1: 1, 2: 2, 3: 2, 4: 3, 6: 4, 12: 7, 24: 13}


def test_embeddings_equal_the_full_models_hidden_states(encoder):
    """Truncated at the layer, batched and sorted by length: the same vectors as the full model's hidden_states
    mean-pooled one sentence at a time."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from mlminilm.config import TATOEBA_MAX_LENGTH
    from mlminilm.evaluation.embeddings import embed, encode, resolve_spec, truncate_at
    from mlminilm.models.loading import load_config, load_encoder
    from mlminilm.training.runtime import setup_runtime

    spec = resolve_spec(
        str(encoder),
        load_config(str(encoder)),
        None,
        layer=None,
        pooling="auto",
        prefix=None,
        max_length=None,
        default_max_length=TATOEBA_MAX_LENGTH,
    )
    assert (spec.layer, spec.num_layers, spec.pooling, spec.prefix, spec.max_length) == (2, 3, ("mean",), "", 160)
    assert "layers // 2 + 1 = 2 of 3" in spec.describe() and "position limit" in spec.rules["max_length"]
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    sentences = sample_lines("de", 7, seed=3)
    rows, cut = encode(tokenizer, sentences, "", spec.max_length)
    assert cut == 0
    rt = setup_runtime("cpu", "fp32")
    model = truncate_at(load_encoder(str(encoder), dtype=torch.float32), spec.layer).eval()
    assert len(model.encoder.layer) == 2
    got = embed(model, rows, spec, batch_size=3, rt=rt, pad_id=tokenizer.pad_token_id)
    full = AutoModel.from_pretrained(encoder).eval()
    with torch.no_grad():
        for i, sentence in enumerate(sentences):
            out = full(**tokenizer(sentence, return_tensors="pt"), output_hidden_states=True)
            np.testing.assert_allclose(got[i], out.hidden_states[2][0].mean(0).numpy(), rtol=1e-4, atol=1e-5)
    # Sentences past --max-length are cut (and counted), keeping their closing special token.
    rows, cut = encode(tokenizer, [" ".join(sentences)] * 2 + ["kurz"], "", 8)
    assert cut == 2 and [len(ids) for ids in rows["input_ids"]][:2] == [8, 8]
    assert rows["input_ids"][0][-1] == tokenizer.sep_token_id


def test_sentence_transformers_setup(encoder, tmp_path):
    from mlminilm.errors import ConfigError
    from mlminilm.evaluation.embeddings import resolve_spec
    from mlminilm.models.loading import load_config
    from mlminilm.models.sentence_encoder import read_sentence_transformers

    model = tmp_path / "st"
    shutil.copytree(encoder, model)
    assert read_sentence_transformers(str(model)) is None  # a plain encoder
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (model / "modules.json").write_text(json.dumps(modules))
    (model / "1_Pooling").mkdir()
    legacy = {
        "word_embedding_dimension": 16,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    (model / "1_Pooling" / "config.json").write_text(json.dumps(legacy))
    (model / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "document": "passage: "}})
    )
    st = read_sentence_transformers(str(model))
    assert (st.pooling, st.normalize, st.not_applied, st.query_prompt) == (("mean",), True, (), "query: ")
    config = load_config(str(model))

    def spec(**options):
        base = dict(layer=None, pooling="auto", prefix=None, max_length=None, default_max_length=512)
        return resolve_spec(str(model), config, read_sentence_transformers(str(model)), **{**base, **options})

    s = spec()
    assert (s.layer, s.pooling, s.prefix) == (3, ("mean",), "query: ")  # the last layer, the model's own pooling
    assert "'query' prompt" in s.rules["prefix"] and "sentence-transformers" in s.rules["layer"]
    assert (spec(prefix="").prefix, spec(layer=1).layer, spec(layer=-1).layer, spec(layer=0).layer) == ("", 1, 3, 0)
    # The newer format (one `pooling_mode`), a Dense module that is not applied, an unsupported mode.
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 16, "pooling_mode": "cls"}))
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (model / "modules.json").write_text(json.dumps(modules))
    s = spec()
    assert s.pooling == ("cls",) and s.record()["sentence_transformers"]["not_applied"] == ["Dense"]
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": ["lasttoken"]}))
    with pytest.raises(ConfigError, match="pools with lasttoken.*--pooling mean"):
        spec()
    assert spec(pooling="max").pooling == ("max",)
    # include_prompt false (INSTRUCTOR-style): the prompt's tokens, less its closing special token, are not pooled.
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean", "include_prompt": False}))
    from transformers import AutoTokenizer

    from mlminilm.evaluation.embeddings import prompt_length

    tokenizer = AutoTokenizer.from_pretrained(model)
    st = read_sentence_transformers(str(model))
    assert prompt_length(tokenizer, spec(), st) == len(tokenizer("query: ")["input_ids"]) - 1 > 1
    assert prompt_length(tokenizer, spec(prefix=""), st) == 0
    with pytest.raises(ConfigError, match=r"--layer 4 is out of range .* 3 layers.*--max-length 200 is longer"):
        spec(layer=4, pooling="mean", max_length=200)


# -------------------------------------------------------------------------------------------- the reader


def test_iso639_3_lookup():
    from mlminilm.errors import DataError
    from mlminilm.langs import from_iso639_3, to_iso639_3

    assert [to_iso639_3(c) for c in ("zh", "sw", "de", "en")] == ["cmn", "swh", "deu", "eng"]
    assert (from_iso639_3("cmn"), from_iso639_3("ara"), from_iso639_3("qya")) == ("zh", "ar", None)
    # Languages beyond the first 21, with Tatoeba codes that are not the ISO 639-2 ones.
    assert [to_iso639_3(c) for c in ("ja", "fa", "ms", "lv", "nb", "yue")] == ["jpn", "pes", "zsm", "lvs", "nob", "yue"]
    assert [from_iso639_3(c) for c in ("jpn", "pes", "zsm", "lvs", "nob", "ber")] == [
        "ja",
        "fa",
        "ms",
        "lv",
        "nb",
        "ber",
    ]
    # CC-100's variants share their language's code; a Tatoeba file means the language itself.
    assert (to_iso639_3("hi_rom"), from_iso639_3("hin"), from_iso639_3("cmn")) == ("hin", "hi", "zh")
    with pytest.raises(DataError, match="unknown language 'xx'; known: af, am"):
        to_iso639_3("xx")


def test_reader(tmp_path):
    from mlminilm.errors import DataError
    from mlminilm.tasks.tatoeba import load_tatoeba

    data = write_pair(tmp_path / "t", "cmn", ["我们走吧。", "你好！"], ["Let's go.", "Hello!"])
    write_pair(data, "deu", ["Hallo!", "Geh."], ["Hello!", "Go."])
    write_pair(data, "qya", ["Aiya!"], ["Hail!"])  # a language outside langs/: evaluated under its file code
    (data / "tatoeba.deu-eng.deu").write_bytes("\ufeffHallo!\r\nGeh.\r\n".encode())  # BOM and CRLF are fine
    (data / "README").write_text("not a Tatoeba file")
    sets, unregistered = load_tatoeba(data)
    assert list(sets) == ["de", "qya", "zh"] and unregistered == ["qya"]
    assert sets["qya"].files.iso == "qya" and sets["qya"].source == ["Aiya!"]
    assert sets["de"].source == ["Hallo!", "Geh."] and sets["zh"].english == ["Let's go.", "Hello!"]
    assert sets["zh"].files.iso == "cmn" and sets["zh"].files.source.name == "tatoeba.cmn-eng.cmn"
    sets, unregistered = load_tatoeba(data, ["zh"])
    assert list(sets) == ["zh"] and len(sets["zh"]) == 2 and unregistered == []
    sets, unregistered = load_tatoeba(data, ["qya", "de"])  # a file code not in langs/ names its own files
    assert list(sets) == ["qya", "de"] and unregistered == ["qya"]

    with pytest.raises(DataError, match="no such directory"):
        load_tatoeba(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no Tatoeba files"):
        load_tatoeba(tmp_path / "empty")
    with pytest.raises(DataError, match=r"fr: no tatoeba.fra-eng.fra and no tatoeba.fra-eng.eng in .*de \(deu\)"):
        load_tatoeba(data, ["fr"])
    with pytest.raises(DataError, match="English is the other side"):
        load_tatoeba(data, ["en"])
    # Every problem at once: a missing English file, an empty file, mismatched counts, an empty line.
    write_pair(data, "fra", ["Salut."], ["Hi."])
    (data / "tatoeba.fra-eng.eng").unlink()
    (data / "tatoeba.deu-eng.deu").write_text("")
    write_pair(data, "spa", ["Hola.", "Adiós."], ["Hello."])
    write_pair(data, "rus", ["Привет.", "", "Пока."], ["Hi.", "-", "Bye."])
    with pytest.raises(DataError) as info:
        load_tatoeba(data, ["fr", "de"])
    message = str(info.value)
    assert "fr: no tatoeba.fra-eng.eng in" in message and "tatoeba.fra-eng.fra" not in message.split(";")[0]
    with pytest.raises(DataError) as info:
        load_tatoeba(data, ["de", "es", "ru"])
    message = str(info.value)
    assert "tatoeba.deu-eng.deu: the file is empty" in message
    assert "tatoeba.spa-eng.spa has 2 lines but tatoeba.spa-eng.eng has 1" in message
    assert "tatoeba.rus-eng.rus: empty line at line 2" in message and "\n" not in message


# ----------------------------------------------------------------------------------------------- the CLI


def test_cli_report_known_answer(encoder, tmp_path, monkeypatch, capsys):
    data = tmp_path / "tatoeba"
    for iso, lang in (("deu", "de"), ("cmn", "zh"), ("swh", "en")):
        lines = known_answer_lines(lang)
        write_pair(data, iso, lines, lines)
    out = tmp_path / "report"
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-tatoeba",
        "--model",
        str(encoder),
        "--data",
        str(data),
        "--out",
        str(out),
        "--batch-size",
        "1",
        "--precision",
        "fp32",
        "--json",
    )
    assert code == 0, stderr
    printed = json.loads(stdout)  # --json: the document and nothing else on stdout
    for name in REPORT_FILES:
        assert (out / name).is_file(), name
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert printed["languages"] == doc["languages"] and doc["task"] == "tatoeba"
    assert list(doc["languages"]) == ["de", "sw", "zh"] and doc["metrics"] == ["xx_to_en", "en_to_xx", "mean"]
    for lang, scores in doc["languages"].items():
        # 5 of 6 each way: the repeated last line retrieves line 0, its identical twin.
        assert (scores["examples"], scores["correct_xx_to_en"], scores["correct_en_to_xx"]) == (6, 5, 5), lang
        assert scores["xx_to_en"] == pytest.approx(500 / 6) and scores["mean"] == pytest.approx(500 / 6)
        assert scores["duplicate_lines"] == {"xx": 2, "eng": 2} and scores["truncated"] == {"xx": 0, "eng": 0}
        assert (out / "predictions" / f"test-{lang}.tsv").read_text().split() == ["0", "1", "2", "3", "4", "0"]
        assert (out / "predictions" / f"test-{lang}.en_to_xx.tsv").read_text().split()[-1] == "0"
    assert doc["languages"]["zh"]["iso639_3"] == "cmn" and doc["languages"]["zh"]["files"]["eng"].endswith(".eng")
    assert doc["average"] == {
        "xx_to_en": pytest.approx(500 / 6),
        "en_to_xx": pytest.approx(500 / 6),
        "mean": pytest.approx(500 / 6),
        "examples": 18,
    }
    emb = doc["embedding"]
    assert (emb["layer"], emb["num_layers"], emb["pooling"], emb["prefix"], emb["max_length"]) == (
        2,
        3,
        ["mean"],
        "",
        160,
    )
    assert "layers // 2 + 1" in emb["layer_rule"] and emb["weights_dtype"] == "float32"
    assert "layer 2 of 3" in doc["protocol"] and doc["throughput"]["sentences_per_s"] > 0
    assert doc["throughput"]["precision"] == "float32" and set(doc["data"]["files"]) == {"de", "sw", "zh"}
    csv_lines = (out / "metrics.csv").read_text().splitlines()
    assert csv_lines[0] == "language,name,examples,xx_to_en,en_to_xx,mean" and csv_lines[-1].startswith("average,")
    assert "| zh | Chinese | 6 | 83.33 | 83.33 | 83.33 |" in (out / "metrics.md").read_text()
    # The table on stdout, one language, a prefix and a layer of one's own.
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-tatoeba",
        "--model",
        str(encoder),
        "--data",
        str(data),
        "--langs",
        "zh",
        "--layer",
        "-1",
        "--prefix",
        "query: ",
        "--precision",
        "fp32",
    )
    assert code == 0, stderr
    assert "Tatoeba" in stdout and "Chinese" in stdout and "xx->en" in stdout
    assert "layer 3 of 3 (--layer)" in stdout and "prefix 'query: ' (--prefix)" in stdout


def test_the_summary_line_says_the_precision(encoder, tmp_path, monkeypatch, capsys):
    """Issue 55, item 6: on a CPU with native bf16, `--precision auto` runs the forward pass under bf16 autocast,
    and the line under the table that says how the embeddings were made says so too (and how to get fp32)."""
    data = tmp_path / "tatoeba"
    lines = known_answer_lines("de")
    write_pair(data, "deu", lines, lines)
    monkeypatch.setattr("mlminilm.training.runtime.cpu_has_native_bf16", lambda: True)

    def summary(*extra: str) -> tuple[str, dict]:
        args = ("eval-tatoeba", "--model", str(encoder), "--data", str(data), "--device", "cpu", *extra)
        code, stdout, stderr = run_main(monkeypatch, capsys, *args)
        assert code == 0, stderr
        code, as_json, stderr = run_main(monkeypatch, capsys, *args, "--json")
        assert code == 0, stderr
        return " ".join(stdout.split()), json.loads(as_json)  # rich wraps the notes at 80 columns here

    text, doc = summary()  # --precision auto
    assert doc["throughput"]["precision"] == "bfloat16" and doc["throughput"]["native_bf16"] is True
    said = "max length 160; computed in bf16 (autocast on a CPU with native bf16; --precision fp32 for float32)"
    assert said in text
    text, doc = summary("--precision", "fp32")
    assert doc["throughput"]["precision"] == "float32" and "max length 160; computed in fp32 " in text


def test_precision_phrase_of_other_set_ups():
    """The phrase for what the CLI test above cannot run: CUDA, a CPU without native bf16, an exported graph
    (its backend line says its dtype) and scored predictions (no run, no throughput)."""
    from mlminilm.report.tables import precision_phrase, summary_line

    def doc(**tp) -> dict:
        return {"summary": "embedding: x", "throughput": {"device": "cpu (x86_64, 2 threads)", **tp}}

    assert precision_phrase(doc(precision="bfloat16", device="NVIDIA H100")) == "computed in bf16 (autocast)"
    assert precision_phrase(doc(precision="float16", device="NVIDIA H100")) == "computed in fp16 (autocast)"
    slow = precision_phrase(doc(precision="bfloat16", native_bf16=False))
    assert slow == "computed in bf16 (autocast on a CPU without native bf16; --precision fp32 for float32)"
    old = precision_phrase(doc(precision="bfloat16"))  # a report from before `native_bf16` was recorded
    assert old == "computed in bf16 (autocast on the CPU; --precision fp32 for float32)"
    assert precision_phrase(doc(precision="int8", backend="onnxruntime")) is None
    assert summary_line({"summary": "embedding: x"}) == "embedding: x" and summary_line({}) is None


def test_cli_every_language_of_the_folder(encoder, tmp_path, monkeypatch, capsys):
    """Hand-made Tatoeba files of languages outside the first 21 (jpn, ita, por, ast, kab: in langs/ since it holds
    LASER's 112) and of one no registered language has (qya, Quenya): all evaluated by default, each under its
    project code, with one warning naming the unregistered one."""
    data = tmp_path / "tatoeba"
    codes = {"jpn": "ja", "ita": "it", "por": "pt", "ast": "ast", "kab": "kab", "qya": "qya"}
    for i, iso in enumerate(codes):
        lines = known_answer_lines(("fr", "ru", "el", "ar", "hi", "de")[i])
        write_pair(data, iso, lines, lines)
    out = tmp_path / "report"
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-tatoeba",
        "--model",
        str(encoder),
        "--data",
        str(data),
        "--out",
        str(out),
        "--precision",
        "fp32",
        "--json",
    )
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert list(doc["languages"]) == sorted(codes.values()) == ["ast", "it", "ja", "kab", "pt", "qya"]
    for iso, lang in codes.items():
        scores = doc["languages"][lang]
        assert scores["iso639_3"] == iso and scores["files"]["xx"].endswith(f"tatoeba.{iso}-eng.{iso}")
        assert (scores["examples"], scores["correct_xx_to_en"], scores["correct_en_to_xx"]) == (6, 5, 5), lang
        assert (out / "predictions" / f"test-{lang}.tsv").is_file()
    assert doc["data"]["unregistered"] == ["qya"] and doc["average"]["examples"] == 36
    warnings = [line for line in stderr.splitlines() if "not in the language registry" in line]
    assert len(warnings) == 1 and "language qya not in" in warnings[0] and "Tatoeba file code" in warnings[0]
    table = (out / "metrics.md").read_text(encoding="utf-8")
    assert "| ja | Japanese | 6 |" in table and "| kab | Kabyle | 6 |" in table and "| qya |  | 6 |" in table

    # --langs: registered codes beyond the first 21 (ast: no ISO 639-1 code, so the file code is the project code)
    # and an unregistered file code, in the order given.
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-tatoeba",
        "--model",
        str(encoder),
        "--data",
        str(data),
        "--langs",
        "qya,pt,ast",
        "--precision",
        "fp32",
        "--json",
    )
    assert code == 0, stderr
    assert list(json.loads(stdout)["languages"]) == ["qya", "pt", "ast"]
    assert sum("not in the language registry" in line for line in stderr.splitlines()) == 1


def test_cli_codes_that_name_no_tatoeba_file(encoder, tmp_path, monkeypatch, capsys):
    data = write_pair(tmp_path / "t", "hin", ["नमस्ते"], ["Hello"])
    write_pair(data, "que", ["Napaykullayki"], ["Hello"])

    def error_line(langs: str) -> str:
        code, stdout, stderr = run_main(
            monkeypatch, capsys, "eval-tatoeba", "--model", str(encoder), "--data", str(data), "--langs", langs
        )
        errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
        assert code == 1 and len(errors) == 1 and not stdout and "Traceback" not in stderr, (code, stdout, stderr)
        return errors[0]

    # A two-letter code langs/ does not have: which file code it means is unknown, and the line says what to do.
    assert "qu: not in langs/, so its Tatoeba file code is unknown" in error_line("qu")
    # CC-100's romanized Hindi is not what Tatoeba's hin files hold.
    assert "hi_rom is CC-100's Hindi (romanized), a variant of hi" in error_line("hi_rom")
    # Where the file is there, the same languages work: the file code as the project code.
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "eval-tatoeba",
        "--model",
        str(encoder),
        "--data",
        str(data),
        "--langs",
        "que,hi",
        "--precision",
        "fp32",
        "--json",
    )
    assert code == 0, stderr
    assert list(json.loads(stdout)["languages"]) == ["que", "hi"]


def test_cli_unknown_language(encoder, tmp_path):
    """The real entry point in a fresh interpreter: exit 1 and one `Error:` line (caught before torch loads)."""
    data = write_pair(tmp_path / "t", "deu", ["Hallo!"], ["Hello!"])
    assert_one_line_error(
        cli("eval-tatoeba", "--model", str(encoder), "--data", str(data), "--langs", "de,xx"),
        "unknown language 'xx'",
        "not an ISO 639-1 or 639-3 code",
        "known: af, am",
    )


def test_cli_errors(encoder, tmp_path, monkeypatch, capsys):
    data = write_pair(tmp_path / "t", "deu", ["Hallo!"], ["Hello!"])

    def error_line(*args: str) -> str:
        code, stdout, stderr = run_main(
            monkeypatch, capsys, "eval-tatoeba", "--model", str(encoder), "--data", str(data), *args
        )
        errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
        assert code == 1 and len(errors) == 1 and not stdout, (code, stdout, stderr)
        return errors[0]

    assert "use de for deu" in error_line("--langs", "deu")
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "eval-tatoeba", "--model", str(encoder), "--data", str(data), "--pooling", "sum"
    )
    assert code == 2 and "'--pooling'" in stderr and "'auto', 'mean', 'cls', 'max'" in stderr  # a usage error
    write_pair(data, "fra", ["Salut.", "Non."], ["Hi."])
    line = error_line("--layer", "9", "--out", str(tmp_path / "o"))  # data and model problems at once
    assert (
        "tatoeba.fra-eng.fra has 2 lines but tatoeba.fra-eng.eng has 1" in line and "--layer 9 is out of range" in line
    )
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------- real data


@pytest.mark.realdata
def test_real_tatoeba_14_languages(shared_data, tiny_sentencepiece_dir, tmp_path):
    from mlminilm.config import EvalTatoebaConfig
    from mlminilm.evaluation import tatoeba
    from mlminilm.tasks.tatoeba import load_tatoeba

    sets, unregistered = load_tatoeba(shared_data / "tatoeba")
    assert {lang: len(s) for lang, s in sets.items()} == REAL_COUNTS and unregistered == []
    assert all(len(s.english) == len(s.source) for s in sets.values())
    model = save_tiny_teacher(
        tiny_sentencepiece_dir, tmp_path / "m", kind="xlmr", layers=1, hidden=16, heads=2, intermediate=32
    )
    doc = tatoeba.run(
        EvalTatoebaConfig(
            model=str(model),
            data=str(shared_data / "tatoeba"),
            langs=("sw", "th"),
            batch_size=256,
            precision="fp32",
            out=tmp_path / "report",
        )
    )
    assert {k: v["examples"] for k, v in doc["languages"].items()} == {"sw": 390, "th": 548}
    assert doc["average"]["examples"] == 938 and (tmp_path / "report" / "chart.png").is_file()
    assert len((tmp_path / "report" / "predictions" / "test-th.tsv").read_text().split()) == 548
