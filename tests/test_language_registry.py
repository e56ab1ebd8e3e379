"""The language registry as a whole (issue 17): every file parses, codes are unique, the ISO 639-3 map is one-to-one
where Tatoeba needs it, the published lists are all there, the generator script reproduces langs/; and codes the
registry does not know are taken with one warning where nothing depends on them (prepare, distill's probe, trim)
and refused in one line where something does (MLQA)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from importlib import resources

import pytest

from helpers import REPO, assert_error, run_main
from mlminilm import langs
from mlminilm.errors import DataError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WARNING = "not in the language registry"

# XTREME's 40 languages as its README lists them (google-research/xtreme, "Tasks and Languages").
XTREME = (
    "af ar bg bn de el en es et eu fa fi fr he hi hu id it ja jv ka kk ko ml mr ms my nl pt ru sw ta te th tl tr "
    "ur vi yo zh"
).split()
# The 36 Tatoeba languages of XTREME's task with their file codes (xtreme utils_preprocess.py, tatoeba_preprocess).
XTREME_TATOEBA = {
    "af": "afr",
    "ar": "ara",
    "bg": "bul",
    "bn": "ben",
    "de": "deu",
    "el": "ell",
    "es": "spa",
    "et": "est",
    "eu": "eus",
    "fa": "pes",
    "fi": "fin",
    "fr": "fra",
    "he": "heb",
    "hi": "hin",
    "hu": "hun",
    "id": "ind",
    "it": "ita",
    "ja": "jpn",
    "jv": "jav",
    "ka": "kat",
    "kk": "kaz",
    "ko": "kor",
    "ml": "mal",
    "mr": "mar",
    "nl": "nld",
    "pt": "por",
    "ru": "rus",
    "sw": "swh",
    "ta": "tam",
    "te": "tel",
    "th": "tha",
    "tl": "tgl",
    "tr": "tur",
    "ur": "urd",
    "vi": "vie",
    "zh": "cmn",
}
# Languages written without spaces between words.
UNSPACED = {"ja", "km", "lo", "my", "my_zaw", "th", "wuu", "yue", "zh", "zh-Hant"}
# The only languages that share an ISO 639-3 code with another: CC-100's script / encoding variants of a language
# (romanized text, the Zawgyi font encoding of Burmese, Traditional characters). They are the same language, so the
# same code; Tatoeba's files are in the language's own script, so the code maps back to the language, never to them.
VARIANTS = {
    "bn_rom": "bn",
    "hi_rom": "hi",
    "my_zaw": "my",
    "ta_rom": "ta",
    "te_rom": "te",
    "ur_rom": "ur",
    "zh-Hant": "zh",
}


def _generator():
    spec = importlib.util.spec_from_file_location("generate_langs", REPO / "scripts" / "generate_langs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _toml_files():
    return sorted(e for e in resources.files("mlminilm.langs").iterdir() if e.name.endswith(".toml"))


# ------------------------------------------------------------------------------------------ the files


def test_every_file_parses_into_the_registry():
    files = _toml_files()
    registry = langs.all_languages()
    assert len(files) == len(registry) >= 140
    for entry in files:
        parsed = langs._parse(tomllib.loads(entry.read_text(encoding="utf-8")))
        assert registry[entry.name.removesuffix(".toml")] == parsed, entry.name
    assert list(registry) == sorted(registry)


def test_codes_are_unique_and_say_what_they_are():
    codes = list(langs.all_languages())
    assert len({code.lower() for code in codes}) == len(codes)  # no two files differ by case only
    for code, language in langs.all_languages().items():
        assert re.fullmatch(r"[a-z]{3}", language.iso639_3), code
        if language.variant_of:
            assert code in VARIANTS and code.startswith(language.variant_of) and code[len(language.variant_of)] in "-_"
        elif len(code) == 2:
            assert code in langs.ISO639_1, code  # ISO 639-1 where the language has a code there
        else:
            # Else ISO 639-3, and then the file code is the project code: an unregistered Tatoeba file code is its
            # own project code, so it can never be taken for a registered language.
            assert len(code) == 3 and code == language.iso639_3, code
    assert len(langs.ISO639_1) == 184 and {"qu", "zu", "sh"} <= langs.ISO639_1 and "xx" not in langs.ISO639_1


def test_iso639_3_map_is_one_to_one_but_for_the_cc100_variants():
    by_iso: dict[str, list[str]] = {}
    for code, language in langs.all_languages().items():
        by_iso.setdefault(language.iso639_3, []).append(code)
    shared = {iso: codes for iso, codes in by_iso.items() if len(codes) > 1}
    assert shared == {langs.to_iso639_3(base): sorted([base, variant]) for variant, base in VARIANTS.items()}
    for variant, base in VARIANTS.items():
        assert langs.get_language(variant).variant_of == base
        assert langs.from_iso639_3(langs.to_iso639_3(variant)) == base
    # Both ways for every other language.
    for code, language in langs.all_languages().items():
        if not language.variant_of:
            assert langs.from_iso639_3(langs.to_iso639_3(code)) == code


def test_the_published_lists_are_all_there():
    generator = _generator()
    assert (len(generator.CC100), len(generator.XTREME), len(generator.TATOEBA)) == (100, 40, 112)
    assert len(set(generator.CC100)) == 100 and len(set(generator.TATOEBA)) == 112
    assert langs.benchmark_languages("cc100") == sorted(generator.CC100)
    assert langs.benchmark_languages("xtreme") == sorted(XTREME)
    tatoeba = langs.benchmark_languages("tatoeba")
    assert len(tatoeba) == 112 and "en" not in tatoeba  # English is the other side of every pair
    assert {langs.to_iso639_3(code) for code in tatoeba} == set(generator.TATOEBA)
    for code, iso in XTREME_TATOEBA.items():
        assert langs.to_iso639_3(code) == iso and code in tatoeba, code
    # The first four benchmarks keep their published sets (tests/test_langs.py checks them one by one).
    assert len(langs.benchmark_languages("xnli")) == 15 and len(langs.benchmark_languages("mlqa")) == 7
    # The three languages issue 17 was opened for, and a few more facts that are easy to get wrong.
    for code, name, script, iso in (
        ("ja", "Japanese", "Japanese", "jpn"),
        ("it", "Italian", "Latin", "ita"),
        ("pt", "Portuguese", "Latin", "por"),
        ("fa", "Persian", "Arabic", "pes"),
        ("ms", "Malay", "Latin", "zsm"),
        ("am", "Amharic", "Ethiopic", "amh"),
        ("yue", "Cantonese", "Han", "yue"),
        ("nb", "Norwegian Bokmål", "Latin", "nob"),
    ):
        language = langs.get_language(code)
        assert (language.name, language.script, language.iso639_3) == (name, script, iso), code


def test_spaces_and_mlqa_rules():
    assert {code for code, lang in langs.all_languages().items() if not lang.spaces} == UNSPACED
    with_rules = {code for code, lang in langs.all_languages().items() if lang.has_mlqa_rules}
    assert with_rules == set("ar bg bn de el en es fi fr hi id ko ro ru sw te th tr ur vi zh".split())


def test_generator_writes_langs_and_twice_writes_the_same(tmp_path):
    generator = _generator()
    assert generator.main(["--check"]) == 0  # langs/ is what the script writes
    assert generator.main(["--out", str(tmp_path)]) == 0
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert generator.main(["--out", str(tmp_path)]) == 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == first
    assert first == {e.name: e.read_bytes() for e in _toml_files()}
    (tmp_path / "de.toml").write_text('code = "de"\n', encoding="utf-8")
    assert generator.main(["--check", "--out", str(tmp_path)]) == 1


# ------------------------------------------------------------------------------ codes the registry lacks


def test_accept_codes():
    accepted = langs.accept_codes(["de", "ja", "qu", "zza", "zh-Hans", "sr_Latn", "qu"])
    assert accepted == ["qu", "sr_Latn", "zh-Hans", "zza"]  # the unregistered ones, sorted, once each
    with pytest.raises(DataError) as info:
        langs.accept_codes(["de", "xx", "README", "deu"])
    message = str(info.value)
    assert message.startswith("unknown languages 'README', 'xx' (not ISO 639-1 or 639-3 codes")
    assert "'deu' is the ISO 639-3 code of de (German): use de" in message and "known: af, am" in message
    assert "\n" not in message


def test_warn_unregistered_is_one_line_or_nothing():
    import logging

    logger = logging.getLogger("mlminilm.langs")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    try:
        langs.warn_unregistered(["de", "ja"])
        assert records == []
        langs.warn_unregistered(["zza", "de", "qu", "zza"])
    finally:
        logger.removeHandler(handler)
    assert len(records) == 1 and records[0].levelname == "WARNING"
    text = records[0].getMessage()
    assert text.startswith("languages qu, zza not in the language registry (langs/): taken as given")
    assert "langs/<code>.toml" in text


def _corpus(folder, files: dict[str, str]):
    folder.mkdir()
    for name, line in files.items():
        (folder / name).write_text("".join(f"{line} {i}\n" for i in range(30)), encoding="utf-8")
    return folder


def test_prepare_takes_languages_beyond_the_first_21_and_unregistered_codes(wp_teacher, tmp_path, monkeypatch, capsys):
    corpus = _corpus(
        tmp_path / "corpus",
        {
            "ja.txt": "猫はマットの上で寝ています。",  # registered since issue 17
            "it.txt": "Il gatto dorme sul tappeto.",
            "qu.txt": "Misi puñuchkan.",  # Quechua: ISO 639-1, not in langs/
        },
    )
    out = tmp_path / "data"
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "prepare",
        "--teacher",
        str(wp_teacher),
        "--input",
        str(corpus),
        "--input",
        f"zza={corpus / 'qu.txt'}",
        "--out",
        str(out),
        "--workers",
        "1",
        "--seq-len",
        "16",
    )
    assert code == 0, stderr
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert sorted(manifest["languages"]) == ["it", "ja", "qu", "zza"]
    assert all(manifest["languages"][lang]["sequences"] > 0 for lang in manifest["languages"])
    warnings = [line for line in stderr.splitlines() if WARNING in line]
    assert len(warnings) == 1 and "languages qu, zza not in" in warnings[0], stderr


def test_prepare_refuses_what_cannot_be_a_language_code(wp_teacher, tmp_path, monkeypatch, capsys):
    out = tmp_path / "data"
    for name, needles in (
        ("notes.txt", ("unknown language 'notes'", "not an ISO 639-1 or 639-3 code", "known: af")),
        ("deu.txt", ("'deu' is the ISO 639-3 code of de (German): use de",)),
        ("xx.txt", ("unknown language 'xx'",)),
    ):
        corpus = _corpus(tmp_path / name, {"de.txt": "Der Hund läuft.", name: "Der Hund läuft."})
        assert_error(
            run_main(
                monkeypatch,
                capsys,
                "prepare",
                "--teacher",
                str(wp_teacher),
                "--input",
                str(corpus),
                "--out",
                str(out),
                "--workers",
                "1",
            ),
            *needles,
        )
        assert not out.exists()


def test_distill_probe_and_trim_take_unregistered_codes(wp_teacher, tmp_path, monkeypatch, capsys):
    corpus = _corpus(tmp_path / "corpus", {"de.txt": "Der Hund läuft jeden Morgen.", "qu.txt": "Misi puñuchkan."})
    data = tmp_path / "data"
    assert (
        run_main(
            monkeypatch,
            capsys,
            "prepare",
            "--teacher",
            str(wp_teacher),
            "--input",
            str(corpus),
            "--out",
            str(data),
            "--workers",
            "1",
            "--seq-len",
            "16",
        )[0]
        == 0
    )
    tatoeba = tmp_path / "tatoeba"
    tatoeba.mkdir()
    for iso, line in (("deu", "Der Hund läuft"), ("qya", "Aiya Eärendil")):  # qya (Quenya): not in langs/
        (tatoeba / f"tatoeba.{iso}-eng.{iso}").write_text("".join(f"{line} {i}\n" for i in range(4)), encoding="utf-8")
        (tatoeba / f"tatoeba.{iso}-eng.eng").write_text("".join(f"The dog {i}\n" for i in range(4)), encoding="utf-8")
    out = tmp_path / "run"
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "distill",
        "--teacher",
        str(wp_teacher),
        "--data",
        str(data),
        "--out",
        str(out),
        "--layers",
        "1",
        "--hidden",
        "32",
        "--heads",
        "4",
        "--intermediate",
        "64",
        "--max-steps",
        "0",
        "--probe-tatoeba",
        str(tatoeba),
        "--probe-langs",
        "qya,de",
        "--device",
        "cpu",
    )
    assert code == 0, stderr
    warnings = [line for line in stderr.splitlines() if WARNING in line]
    assert len(warnings) == 1 and "language qya not in" in warnings[0], stderr
    probes = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert set(next(r for r in probes if "probe_tatoeba" in r)["probe_tatoeba"]) == {"qya", "de"}

    trimmed = tmp_path / "trimmed"
    code, stdout, stderr = run_main(
        monkeypatch,
        capsys,
        "trim",
        "--model",
        str(wp_teacher),
        "--corpus",
        str(corpus),
        "--langs",
        "qu,de",
        "--out",
        str(trimmed),
        "--workers",
        "1",
    )
    assert code == 0, stderr
    warnings = [line for line in stderr.splitlines() if WARNING in line]
    assert len(warnings) == 1 and "language qu not in" in warnings[0], stderr
    assert (trimmed / "config.json").is_file()


def test_what_depends_on_the_language_refuses_unregistered_codes(tmp_path, monkeypatch, capsys):
    # eval-mlqa: MLQA normalisation needs the language's rules; the one line says so and how to add a language.
    line = assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-mlqa",
            "--data",
            str(tmp_path),
            "--predictions",
            str(tmp_path),
            "--langs",
            "en,qu",
        ),
        "--langs: unknown language 'qu'",
        "MLQA normalisation needs the language's rules",
        "langs/<code>.toml with an [mlqa] table",
    )
    assert "'en'" not in line
    assert_error(
        run_main(
            monkeypatch,
            capsys,
            "eval-mlqa",
            "--data",
            str(tmp_path / "dev.json"),
            "--predictions",
            str(tmp_path),
            "--lang",
            "zza",
        ),
        "--lang: unknown language 'zza'",
        "MLQA normalisation",
    )


@pytest.mark.realdata
def test_real_tatoeba_languages_map_both_ways(shared_data):
    isos = sorted({p.name.split(".")[1].split("-")[0] for p in (shared_data / "tatoeba").glob("tatoeba.*-eng.*")})
    assert len(isos) == 14
    codes = {iso: langs.from_iso639_3(iso) for iso in isos}
    assert sorted(codes.values()) == "ar bg de el es fr hi ru sw th tr ur vi zh".split()
    assert all(langs.to_iso639_3(code) == iso for iso, code in codes.items())
    assert all("tatoeba" in langs.get_language(code).benchmarks for code in codes.values())
