"""How many pairs each language's full Tatoeba test has: LASER's v1 test files (data/tatoeba/v1), which MTEB's
`mteb/tatoeba-bitext-mining` test split holds as they are (112 languages, 88,877 pairs; counts as its dataset
statistics list them). 1,000 pairs per language, except the 40 languages below with fewer.

`eval-tatoeba --update-card` writes results under MTEB's dataset id only for languages evaluated on their full test:
a folder cut to fewer pairs (a quick run) or holding more is not that test, and a card must not say it is."""

from __future__ import annotations

from mlminilm.errors import DataError

FULL_PAIRS = 1000
_THOUSAND = frozenset(
    "afr ara aze bel ben ber bre bul cat cbk ces cmn cor dan deu dtp ell epo est eus fin fra gle glg heb hin hrv hun "
    "ina ind ido ile isl ita jpn kab kor kzj lat lfn lit lvs mar mhr mkd nds nld nno nob oci pam pes pol por ron rus "
    "slk spa sqi srp swe tat tgl tur uig ukr urd vie war wuu yue zsm".split()
)
_FEWER = {
    "amh": 168, "ang": 134, "arq": 911, "arz": 477, "ast": 127, "awa": 231, "bos": 354, "ceb": 600, "cha": 137,
    "csb": 253, "cym": 575, "dsb": 479, "fao": 262, "fry": 173, "gla": 829, "gsw": 117, "hsb": 483, "hye": 742,
    "jav": 205, "kat": 746, "kaz": 575, "khm": 722, "kur": 410, "mal": 687, "max": 284, "mon": 440, "nov": 257,
    "orv": 835, "pms": 525, "slv": 823, "swg": 112, "swh": 390, "tam": 307, "tel": 234, "tha": 548, "tuk": 203,
    "tzl": 104, "uzb": 428, "xho": 142, "yid": 848,
}  # fmt: skip


def full_test_pairs(iso: str) -> int | None:
    """The pair count of the full test of Tatoeba file code `iso`; None for a code the test does not have."""
    return FULL_PAIRS if iso in _THOUSAND else _FEWER.get(iso)


def check_full_test(sets: dict) -> None:
    """DataError unless every language of `sets` (project code -> TatoebaSet) holds its full test's pairs: the
    one-line refusal of `--update-card` for a subset, naming each language and what the full test holds."""
    problems = []
    for lang, pairs in sets.items():
        full = full_test_pairs(pairs.files.iso)
        if full is None:
            problems.append(f"{lang} ({pairs.files.iso}) is not a language of the Tatoeba test")
        elif len(pairs) != full:
            problems.append(f"{lang}: {len(pairs):,} pairs, the full test {full:,}")
    if problems:
        raise DataError(
            "--update-card files results as the Tatoeba test (MTEB's mteb/tatoeba-bitext-mining), and these files "
            f"are not it ({'; '.join(problems)}); evaluate the full test files (LASER's data/tatoeba/v1), or "
            "leave out --update-card to keep the report alone"
        )
