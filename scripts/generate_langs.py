"""Write the language registry, `langs/<code>.toml`, from the lists below.

    python scripts/generate_langs.py            # (re)write langs/*.toml
    python scripts/generate_langs.py --check    # exit 1 and name the files that differ from what it would write

The registry holds every language of three published lists (each list's source is named where it is defined):
XLM-R's 100 CC-100 entries, XTREME's 40 languages and LASER's 112 Tatoeba test languages, and records for each one
its code, English name, script, ISO 639-3 code, which benchmarks cover it and the facts that change behaviour
(written without spaces between words; the MLQA normalisation rules of the languages that have them). The lists
are facts (codes and names); the text of every file comes from this script, so running it twice writes the same
files. Files in langs/ that the tables below do not name (a language added by hand) are left alone.

Codes: ISO 639-1 where the language has one, else ISO 639-3, as the benchmark files spell them; CC-100's seven
script / encoding variants keep CC-100's own file names (`hi_rom`, `my_zaw`, `zh-Hant`) and name their language
(`variant_of`). `iso639_3` is the code LASER's Tatoeba files use (`cmn` for zh, `swh` for sw, `pes` for fa, `zsm`
for ms, `lvs` for lv), else the language's ISO 639-3 code (a macrolanguage's own code where the ISO 639-1 code
names a macrolanguage: `nor` for no, `nep` for ne).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

LANGS_DIR = Path(__file__).resolve().parent.parent / "langs"

# The benchmark names, in the order every file lists them (mlminilm.langs.BENCHMARKS).
BENCHMARKS = ("xnli", "mlqa", "xquad", "tydiqa", "cc100", "xtreme", "tatoeba")

# XLM-R's pre-training languages: the 100 CC-100 entries of the appendix table of Conneau et al., "Unsupervised
# Cross-lingual Representation Learning at Scale" (ACL 2020, arXiv:1911.02116), also listed by name in
# facebookresearch/fairseq examples/xlmr/README.md. The romanized, Zawgyi and Traditional Chinese entries are
# spelled as CC-100's files (https://data.statmt.org/cc-100/) name them; "Chinese (Simplified)" is zh.
CC100 = """
af am ar as az be bg bn bn_rom br bs ca cs cy da de el en eo es et eu fa fi fr fy ga gd gl gu ha he hi hi_rom hr
hu hy id is it ja jv ka kk km kn ko ku ky la lo lt lv mg mk ml mn mr ms my my_zaw ne nl no om or pa pl ps pt ro ru
sa sd si sk sl so sq sr su sv sw ta ta_rom te te_rom th tl tr ug uk ur ur_rom uz vi xh yi zh zh-Hant
""".split()

# XTREME's 40 languages (Hu et al. 2020, arXiv:2003.11080): google-research/xtreme README.md, "Tasks and Languages".
XTREME = """
af ar bg bn de el en es et eu fa fi fr he hi hu id it ja jv ka kk ko ml mr ms my nl pt ru sw ta te th tl tr ur vi
yo zh
""".split()

# LASER's Tatoeba test sets (Artetxe and Schwenk 2019): the tatoeba.XXX-eng.XXX files of facebookresearch/LASER
# data/tatoeba/v1 (112 languages, each paired with English). XTREME's Tatoeba task uses 36 of them, under the same
# file codes (google-research/xtreme utils_preprocess.py, tatoeba_preprocess).
TATOEBA = """
afr amh ang ara arq arz ast awa aze bel ben ber bos bre bul cat cbk ceb ces cha cmn cor csb cym dan deu dsb dtp ell
epo est eus fao fin fra fry gla gle glg gsw heb hin hrv hsb hun hye ido ile ina ind isl ita jav jpn kab kat kaz khm
kor kur kzj lat lfn lit lvs mal mar max mhr mkd mon nds nld nno nob nov oci orv pam pes pms pol por ron rus slk slv
spa sqi srp swe swg swh tam tat tel tgl tha tuk tur tzl uig ukr urd uzb vie war wuu xho yid yue zsm
""".split()

# The four benchmarks the registry knew first (their sets are checked against the published ones in tests).
XNLI = "ar bg de el en es fr hi ru sw th tr ur vi zh".split()  # XNLI-1.0 (Conneau et al. 2018)
MLQA = "ar de en es hi vi zh".split()  # MLQA v1 (Lewis et al. 2020)
XQUAD = "ar de el en es hi ro ru th tr vi zh".split()  # deepmind/xquad, Romanian included
TYDIQA = "ar bn en fi id ko ru sw te".split()  # TyDiQA-GoldP v1.1, as XTREME uses it

# Every language: code | English name | script (ISO 15924 name) | ISO 639-3 | flags. Flags: `nospaces` (written
# without spaces between words), `variant_of=CODE` (a CC-100 script or encoding variant of CODE's language).
LANGUAGES = """
af     | Afrikaans              | Latin        | afr
am     | Amharic                | Ethiopic     | amh
ang    | Old English            | Latin        | ang
ar     | Arabic                 | Arabic       | ara
arq    | Algerian Arabic        | Arabic       | arq
arz    | Egyptian Arabic        | Arabic       | arz
as     | Assamese               | Bengali      | asm
ast    | Asturian               | Latin        | ast
awa    | Awadhi                 | Devanagari   | awa
az     | Azerbaijani            | Latin        | aze
be     | Belarusian             | Cyrillic     | bel
ber    | Berber                 | Latin        | ber
bg     | Bulgarian              | Cyrillic     | bul
bn     | Bengali                | Bengali      | ben
bn_rom | Bengali (romanized)    | Latin        | ben | variant_of=bn
br     | Breton                 | Latin        | bre
bs     | Bosnian                | Latin        | bos
ca     | Catalan                | Latin        | cat
cbk    | Chavacano              | Latin        | cbk
ceb    | Cebuano                | Latin        | ceb
ch     | Chamorro               | Latin        | cha
cs     | Czech                  | Latin        | ces
csb    | Kashubian              | Latin        | csb
cy     | Welsh                  | Latin        | cym
da     | Danish                 | Latin        | dan
de     | German                 | Latin        | deu
dsb    | Lower Sorbian          | Latin        | dsb
dtp    | Central Dusun          | Latin        | dtp
el     | Greek                  | Greek        | ell
en     | English                | Latin        | eng
eo     | Esperanto              | Latin        | epo
es     | Spanish                | Latin        | spa
et     | Estonian               | Latin        | est
eu     | Basque                 | Latin        | eus
fa     | Persian                | Arabic       | pes
fi     | Finnish                | Latin        | fin
fo     | Faroese                | Latin        | fao
fr     | French                 | Latin        | fra
fy     | Western Frisian        | Latin        | fry
ga     | Irish                  | Latin        | gle
gd     | Scottish Gaelic        | Latin        | gla
gl     | Galician               | Latin        | glg
gsw    | Swiss German           | Latin        | gsw
gu     | Gujarati               | Gujarati     | guj
ha     | Hausa                  | Latin        | hau
he     | Hebrew                 | Hebrew       | heb
hi     | Hindi                  | Devanagari   | hin
hi_rom | Hindi (romanized)      | Latin        | hin | variant_of=hi
hr     | Croatian               | Latin        | hrv
hsb    | Upper Sorbian          | Latin        | hsb
hu     | Hungarian              | Latin        | hun
hy     | Armenian               | Armenian     | hye
ia     | Interlingua            | Latin        | ina
id     | Indonesian             | Latin        | ind
ie     | Interlingue            | Latin        | ile
io     | Ido                    | Latin        | ido
is     | Icelandic              | Latin        | isl
it     | Italian                | Latin        | ita
ja     | Japanese               | Japanese     | jpn | nospaces
jv     | Javanese               | Latin        | jav
ka     | Georgian               | Georgian     | kat
kab    | Kabyle                 | Latin        | kab
kk     | Kazakh                 | Cyrillic     | kaz
km     | Khmer                  | Khmer        | khm | nospaces
kn     | Kannada                | Kannada      | kan
ko     | Korean                 | Hangul       | kor
ku     | Kurdish                | Latin        | kur
kw     | Cornish                | Latin        | cor
ky     | Kyrgyz                 | Cyrillic     | kir
kzj    | Coastal Kadazan        | Latin        | kzj
la     | Latin                  | Latin        | lat
lfn    | Lingua Franca Nova     | Latin        | lfn
lo     | Lao                    | Lao          | lao | nospaces
lt     | Lithuanian             | Latin        | lit
lv     | Latvian                | Latin        | lvs
max    | North Moluccan Malay   | Latin        | max
mg     | Malagasy               | Latin        | mlg
mhr    | Eastern Mari           | Cyrillic     | mhr
mk     | Macedonian             | Cyrillic     | mkd
ml     | Malayalam              | Malayalam    | mal
mn     | Mongolian              | Cyrillic     | mon
mr     | Marathi                | Devanagari   | mar
ms     | Malay                  | Latin        | zsm
my     | Burmese                | Myanmar      | mya | nospaces
my_zaw | Burmese (Zawgyi)       | Myanmar      | mya | nospaces variant_of=my
nb     | Norwegian Bokmål       | Latin        | nob
nds    | Low German             | Latin        | nds
ne     | Nepali                 | Devanagari   | nep
nl     | Dutch                  | Latin        | nld
nn     | Norwegian Nynorsk      | Latin        | nno
no     | Norwegian              | Latin        | nor
nov    | Novial                 | Latin        | nov
oc     | Occitan                | Latin        | oci
om     | Oromo                  | Latin        | orm
or     | Oriya                  | Oriya        | ori
orv    | Old Russian            | Cyrillic     | orv
pa     | Punjabi                | Gurmukhi     | pan
pam    | Pampanga               | Latin        | pam
pl     | Polish                 | Latin        | pol
pms    | Piedmontese            | Latin        | pms
ps     | Pashto                 | Arabic       | pus
pt     | Portuguese             | Latin        | por
ro     | Romanian               | Latin        | ron
ru     | Russian                | Cyrillic     | rus
sa     | Sanskrit               | Devanagari   | san
sd     | Sindhi                 | Arabic       | snd
si     | Sinhala                | Sinhala      | sin
sk     | Slovak                 | Latin        | slk
sl     | Slovenian              | Latin        | slv
so     | Somali                 | Latin        | som
sq     | Albanian               | Latin        | sqi
sr     | Serbian                | Cyrillic     | srp
su     | Sundanese              | Latin        | sun
sv     | Swedish                | Latin        | swe
sw     | Swahili                | Latin        | swh
swg    | Swabian                | Latin        | swg
ta     | Tamil                  | Tamil        | tam
ta_rom | Tamil (romanized)      | Latin        | tam | variant_of=ta
te     | Telugu                 | Telugu       | tel
te_rom | Telugu (romanized)     | Latin        | tel | variant_of=te
th     | Thai                   | Thai         | tha | nospaces
tk     | Turkmen                | Latin        | tuk
tl     | Tagalog                | Latin        | tgl
tr     | Turkish                | Latin        | tur
tt     | Tatar                  | Cyrillic     | tat
tzl    | Talossan               | Latin        | tzl
ug     | Uyghur                 | Arabic       | uig
uk     | Ukrainian              | Cyrillic     | ukr
ur     | Urdu                   | Arabic       | urd
ur_rom | Urdu (romanized)       | Latin        | urd | variant_of=ur
uz     | Uzbek                  | Latin        | uzb
vi     | Vietnamese             | Latin        | vie
war    | Waray                  | Latin        | war
wuu    | Wu Chinese             | Han          | wuu | nospaces
xh     | Xhosa                  | Latin        | xho
yi     | Yiddish                | Hebrew       | yid
yo     | Yoruba                 | Latin        | yor
yue    | Cantonese              | Han          | yue | nospaces
zh     | Chinese                | Han          | cmn | nospaces
zh-Hant | Chinese (Traditional) | Han (Traditional variant) | cmn | nospaces variant_of=zh
"""

# MLQA answer normalisation (the official mlqa_evaluation_v1.py): the article regex and the segmentation of each
# language that has rules, with the comments its file carries. A language without an entry has no [mlqa] table,
# and the MLQA scorer refuses it (mlminilm.metrics.mlqa).
_NO_ARTICLES = "the official MLQA scorer removes no articles for this language"
MLQA_RULES: dict[str, tuple[str | None, str, tuple[str, ...]]] = {
    "ar": (r"\sال^|ال", "whitespace", ()),
    "de": (r"\b(ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b", "whitespace", ()),
    "en": (r"\b(a|an|the)\b", "whitespace", ()),
    "es": (r"\b(un|una|unos|unas|el|la|los|las)\b", "whitespace", ()),
    "hi": (None, "whitespace", (_NO_ARTICLES,)),
    "vi": (r"\b(của|là|cái|chiếc|những)\b", "whitespace", ()),
    "zh": (
        None,
        "mixed",
        (_NO_ARTICLES, "every CJK character U+4E00-U+9FA5 and every punctuation character is its own token"),
    ),
    # Languages outside MLQA that the registry has scored since its start (XQuAD / TyDiQA-GoldP extras): the
    # official scorer has no rules for them; no articles and whitespace tokens, as its default branch would be.
    **{code: (None, "whitespace", ()) for code in "bg bn el fi fr id ko ro ru sw te th tr ur".split()},
}


def parse_languages() -> dict[str, dict]:
    languages: dict[str, dict] = {}
    for line in LANGUAGES.strip().splitlines():
        fields = [field.strip() for field in line.split("|")]
        code, name, script, iso = fields[:4]
        flags = fields[4].split() if len(fields) > 4 else []
        if code in languages:
            raise SystemExit(f"LANGUAGES names {code} twice")
        record = {
            "code": code,
            "name": name,
            "script": script,
            "iso639_3": iso,
            "spaces": "nospaces" not in flags,
            "variant_of": None,
        }
        for flag in flags:
            if flag.startswith("variant_of="):
                record["variant_of"] = flag.split("=", 1)[1]
            elif flag != "nospaces":
                raise SystemExit(f"{code}: unknown flag {flag!r}")
        languages[code] = record
    return languages


def benchmark_sets(languages: dict[str, dict]) -> dict[str, set[str]]:
    """The registry codes each benchmark covers; Tatoeba's file codes mapped through `iso639_3` (variants share
    their language's code and are never what a Tatoeba file means)."""
    by_iso = {}
    for code, lang in languages.items():
        if lang["variant_of"] is None:
            if lang["iso639_3"] in by_iso:
                raise SystemExit(f"{code} and {by_iso[lang['iso639_3']]} share ISO 639-3 {lang['iso639_3']}")
            by_iso[lang["iso639_3"]] = code
    missing = [iso for iso in TATOEBA if iso not in by_iso]
    if missing:
        raise SystemExit(f"Tatoeba codes with no language in LANGUAGES: {', '.join(missing)}")
    sets = {
        "xnli": set(XNLI),
        "mlqa": set(MLQA),
        "xquad": set(XQUAD),
        "tydiqa": set(TYDIQA),
        "cc100": set(CC100),
        "xtreme": set(XTREME),
        "tatoeba": {by_iso[iso] for iso in TATOEBA},
    }
    for name, codes in sets.items():
        unknown = sorted(codes - set(languages))
        if unknown:
            raise SystemExit(f"{name} names languages missing from LANGUAGES: {', '.join(unknown)}")
    return sets


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def render(lang: dict, benchmarks: list[str]) -> str:
    lines = [
        f"code = {_string(lang['code'])}",
        f"name = {_string(lang['name'])}",
        f"script = {_string(lang['script'])}",
        f"benchmarks = [{', '.join(_string(b) for b in benchmarks)}]",
        f"iso639_3 = {_string(lang['iso639_3'])}",
        f"spaces = {'true' if lang['spaces'] else 'false'}",
    ]
    if lang["variant_of"]:
        lines.append(f"variant_of = {_string(lang['variant_of'])}")
    rules = MLQA_RULES.get(lang["code"])
    if rules is not None:
        pattern, segmentation, comments = rules
        lines += ["", "[mlqa]"]
        lines += [f"# {comment}" for comment in comments]
        if pattern is not None:
            lines.append(f"article_pattern = '{pattern}'")  # a literal string: the regex's backslashes stay
        lines.append(f"segmentation = {_string(segmentation)}")
    return "\n".join(lines) + "\n"


def files() -> dict[str, str]:
    """File name -> text of every registry file this script writes."""
    languages = parse_languages()
    sets = benchmark_sets(languages)
    unused = sorted(code for code in languages if not any(code in s for s in sets.values()))
    if unused:
        raise SystemExit(f"LANGUAGES holds languages no list names: {', '.join(unused)}")
    for code, lang in languages.items():
        if lang["variant_of"] and lang["variant_of"] not in languages:
            raise SystemExit(f"{code}: variant_of {lang['variant_of']} is not in LANGUAGES")
    return {
        f"{code}.toml": render(lang, [b for b in BENCHMARKS if code in sets[b]])
        for code, lang in sorted(languages.items())
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    parser.add_argument("--out", type=Path, default=LANGS_DIR, help="the registry folder (default: langs/)")
    args = parser.parse_args(argv)
    wanted = files()
    stale = [
        name
        for name, text in wanted.items()
        if not (args.out / name).is_file() or (args.out / name).read_text(encoding="utf-8") != text
    ]
    if args.check:
        if stale:
            print(
                f"{len(stale)} of {len(wanted)} files in {args.out} differ from the script's: {', '.join(stale)}",
                file=sys.stderr,
            )
            return 1
        print(f"{len(wanted)} files in {args.out} are up to date")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (args.out / name).write_text(wanted[name], encoding="utf-8")
    print(f"wrote {len(stale)} of {len(wanted)} files in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
