"""The language registry (`mlminilm.langs`): one TOML file per language, next to this module.

Each file says which benchmarks cover the language, its script, its ISO 639-3 code, whether it is written with
spaces between words and, where it has them, how the MLQA scorer normalises answers in it (article pattern,
segmentation), so adding a language is adding a data file, not code. The files are written by
`scripts/generate_langs.py` from the published lists (XLM-R's CC-100, XTREME, LASER's Tatoeba); a file added by
hand works the same. The reader lives in the data package itself: a `mlminilm/langs.py` module and a
`mlminilm/langs/` data package cannot share a name (in an installed wheel the package would shadow the module).

A code the registry does not know is taken, with one warning, wherever nothing depends on the language
(`accept_codes`, `warn_unregistered`: prepare, distill, trim, eval-xnli, eval-tatoeba) as long as it can be a
language code (ISO 639-1 or 639-3, optionally with a variant suffix such as `zh-Hant` or `hi_rom`); what needs the
registry's facts (MLQA normalisation) refuses it (`validate_codes`).
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from dataclasses import dataclass
from importlib import resources

from mlminilm.errors import DataError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# cc100: XLM-R's 100 pre-training entries; xtreme: XTREME's 40 languages; tatoeba: LASER's 112 test languages.
BENCHMARKS = ("xnli", "mlqa", "xquad", "tydiqa", "cc100", "xtreme", "tatoeba")
SEGMENTATIONS = ("whitespace", "mixed")
ADD_A_LANGUAGE = 'add langs/<code>.toml (README "Languages")'
# What depends on a language being registered: eval-mlqa's answer normalisation (mlminilm.metrics.mlqa).
MLQA_NEEDS = (
    'MLQA normalisation needs the language\'s rules: add langs/<code>.toml with an [mlqa] table, see README "Languages"'
)

# Every ISO 639-1 code (184, "sh" included), to tell a two-letter code the registry does not know from a typo.
# Source: the alpha_2 codes of Debian's iso-codes (data/iso_639-3.json), which follows the ISO 639-3 tables.
ISO639_1 = frozenset(
    """
aa ab ae af ak am an ar as av ay az ba be bg bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee el en eo es
et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it iu ja jv ka kg ki
kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no
nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg sh si sk sl sm sn so sq sr ss st su sv sw ta
te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu
""".split()
)
# A language code: ISO 639-1 (two letters) or 639-3 (three), optionally with script / variant subtags joined by
# "-" or "_" as CC-100 names its files (zh-Hant, hi_rom, sr_Latn).
_CODE = re.compile(r"^([a-z]{2,3})((?:[-_][A-Za-z0-9]{2,8})*)$")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Language:
    code: str
    name: str
    script: str  # ISO 15924 name, e.g. "Latin", "Han"
    benchmarks: tuple[str, ...]
    article_pattern: str | None  # MLQA `remove_articles` regex; None: the scorer removes nothing
    # MLQA `white_space_fix`: "whitespace" or "mixed" (CJK characters split apart); None: no [mlqa] table, no rules
    segmentation: str | None
    iso639_3: str | None = None  # the ISO 639-3 code Tatoeba (LASER / XTREME) files use: "deu", "cmn", "swh"
    spaces: bool = True  # False: written without spaces between words (zh, ja, th, lo, km, my)
    variant_of: str | None = None  # a CC-100 script / encoding variant (hi_rom, my_zaw, zh-Hant) of this language

    @property
    def has_mlqa_rules(self) -> bool:
        """Whether the file has an [mlqa] table, i.e. the MLQA scorer knows how to normalise answers in it."""
        return self.segmentation is not None


def _parse(data: dict) -> Language:
    mlqa = data.get("mlqa")
    return Language(
        code=data["code"],
        name=data["name"],
        script=data["script"],
        benchmarks=tuple(data["benchmarks"]),
        article_pattern=mlqa.get("article_pattern") if mlqa is not None else None,
        # None: no [mlqa] table, no MLQA rules (segmentation defaults to whitespace inside a table).
        segmentation=mlqa.get("segmentation", "whitespace") if mlqa is not None else None,
        iso639_3=data.get("iso639_3"),
        spaces=data.get("spaces", True),
        variant_of=data.get("variant_of"),
    )


@functools.cache
def all_languages() -> dict[str, Language]:
    """Every registered language by code, in code order."""
    files = resources.files(__name__)
    found = {}
    for entry in sorted(files.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            language = _parse(tomllib.loads(entry.read_text(encoding="utf-8")))
            found[language.code] = language
    return dict(sorted(found.items()))  # "zh" before "zh-Hant", whatever the file names' order


def _known() -> str:
    return ", ".join(all_languages())


def get_language(code: str) -> Language:
    try:
        return all_languages()[code]
    except KeyError:
        raise DataError(f"unknown language {code!r}; known: {_known()}") from None


def benchmark_languages(name: str) -> list[str]:
    """Sorted codes of the languages a benchmark (one of BENCHMARKS) covers."""
    if name not in BENCHMARKS:
        raise DataError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    return sorted(code for code, lang in all_languages().items() if name in lang.benchmarks)


def validate_codes(codes, needs: str | None = None) -> None:
    """Raise one DataError naming every code the registry does not know, at once: for what depends on the
    registry's facts about a language. `needs` says what depends on them (one clause, put in the message)."""
    unknown = sorted({code for code in codes if code not in all_languages()})
    if unknown:
        names = ", ".join(repr(code) for code in unknown)
        noun = "language" if len(unknown) == 1 else "languages"
        why = f" ({needs})" if needs else ""
        raise DataError(f"unknown {noun} {names}{why}; known: {_known()}")


def is_language_code(code: str) -> bool:
    """Whether `code` is registered or can be a language code: ISO 639-1 (a code ISO 639-1 assigns) or ISO 639-3
    (three lowercase letters), optionally with variant subtags (zh-Hans, sr_Latn)."""
    if code in all_languages():
        return True
    match = _CODE.match(code)
    return match is not None and (len(match[1]) == 3 or match[1] in ISO639_1)


def _second_code(code: str) -> str | None:
    """A registered language's ISO 639-3 code used as a project code ("deu"): the message naming the registry's
    code, so that one language never goes by two codes; else None."""
    match = _CODE.match(code)
    same = from_iso639_3(match[1]) if match and code not in all_languages() else None
    if same is None or same == match[1]:
        return None
    return f"{code!r} is the ISO 639-3 code of {same} ({all_languages()[same].name}): use {same}{match[2]}"


def accept_codes(codes) -> list[str]:
    """Check codes where nothing depends on the registry knowing the language. Raises one DataError naming every
    code that cannot be a language code (with the registered ones) and every registered language's second code;
    returns the valid codes the registry does not know, sorted, for `warn_unregistered`."""
    codes = sorted(set(codes))
    bad = [code for code in codes if not is_language_code(code)]
    messages = [message for code in codes if code not in bad and (message := _second_code(code))]
    if bad:
        names = ", ".join(repr(code) for code in bad)
        if len(bad) == 1:
            what = f"unknown language {names} (not an ISO 639-1 or 639-3 code"
        else:
            what = f"unknown languages {names} (not ISO 639-1 or 639-3 codes"
        messages.insert(
            0,
            f"{what}: two or three lowercase letters, two-letter ones assigned by ISO 639-1, "
            f"e.g. de, ast, zh-Hant); known: {_known()}",
        )
    if messages:
        raise DataError("; ".join(messages))
    return [code for code in codes if code not in all_languages()]


def warn_unregistered(codes, how: str = "taken as given") -> None:
    """One warning naming every code the registry does not know (nothing when there is none)."""
    unknown = sorted(set(codes) - set(all_languages()))
    if unknown:
        noun = "language" if len(unknown) == 1 else "languages"
        log.warning(
            "%s %s not in the language registry (langs/): %s; to record a name and script, %s",
            noun,
            ", ".join(unknown),
            how,
            ADD_A_LANGUAGE,
        )


def to_iso639_3(code: str) -> str:
    """The ISO 639-3 code of a registered language, as Tatoeba file names spell it ("zh" -> "cmn")."""
    iso = get_language(code).iso639_3
    if iso is None:
        having = ", ".join(c for c, lang in all_languages().items() if lang.iso639_3)
        raise DataError(f"language {code!r} has no ISO 639-3 code in langs/{code}.toml; languages with one: {having}")
    return iso


def from_iso639_3(iso: str) -> str | None:
    """The registered language whose ISO 639-3 code is `iso` ("cmn" -> "zh"), or None. CC-100's variants
    (hi_rom, zh-Hant) share their language's code and are never the answer: a Tatoeba file means the language."""
    return _by_iso639_3().get(iso)


@functools.cache
def _by_iso639_3() -> dict[str, str]:
    return {lang.iso639_3: code for code, lang in all_languages().items() if lang.iso639_3 and not lang.variant_of}
