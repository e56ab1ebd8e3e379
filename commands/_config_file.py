"""`--config FILE` on every command: options read from a TOML, YAML or JSON file, the command line winning.

Keys are the option names (`max-steps` or `max_steps`). A run record (`run.json`, which distill, assist and
finetune write) replays the run it records: its `config` is read as the file, except the fields declared with
`replay=False` (`out`, `resume`, `overwrite` and `quiet`: `mlminilm.config.replay_skips`), which the command line says
anew (`mlminilm distill --config runs/a/run.json --out runs/b`).

The file becomes command-line options before click parses anything, so it goes through exactly the checks a typed
option does, and an option typed on the command line replaces the file's (a repeatable one, such as `--langs`,
replaces it whole rather than adding to it).
"""

from __future__ import annotations

import json
from pathlib import Path

from mlminilm.commands._options import CLI_ONLY
from mlminilm.errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20  # a config file is a few options; a run record a few kB


def expand(args: list[str], group) -> list[str]:
    """`args` (the words after `mlminilm`) with `--config FILE` replaced by the options FILE sets that the
    command line does not; `group` is the click group of the commands."""
    if not args or args[0].startswith("-") or args[0] not in group.commands:
        return args
    name, rest = args[0], args[1:]
    found = [i for i, word in enumerate(rest) if word == "--config" or word.startswith("--config=")]
    if not found:
        return args
    if len(found) > 1:
        raise ConfigError("--config is given more than once; give one file")
    at = found[0]
    if rest[at] == "--config":
        if at + 1 >= len(rest):
            raise ConfigError("--config needs a file: --config FILE")
        path, rest = rest[at + 1], rest[:at] + rest[at + 2 :]
    else:
        path, rest = rest[at].split("=", 1)[1], rest[:at] + rest[at + 1 :]
    command = group.commands[name]
    values, replay = _read(Path(path), name, _config_class(command))
    return [name, *_as_options(values, command, rest, path, replay), *rest]


def _config_class(command):
    """The config class a command's options were built from (commands/_options.build), None for any other."""
    return getattr(command.callback, "config_class", None)


def _read(path: Path, command: str, config_class) -> tuple[dict, bool]:
    """The file's options, and whether it is a run record being replayed."""
    if not path.is_file():
        raise ConfigError(f"--config {path}: no such file")
    suffix = path.suffix.lower()
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"--config {path}: {size:,} bytes; a config file is a few options (at most {MAX_CONFIG_BYTES:,} bytes)"
            )
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"--config {path}: not a text file (byte {exc.start} is not UTF-8); give a .toml, "
            ".yaml or .json file of options"
        ) from None
    try:
        if suffix == ".toml":
            import tomllib

            doc = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            doc = _safe_yaml(path, text)
        elif suffix == ".json":
            doc = json.loads(text, object_pairs_hook=_unique_keys)
        else:
            raise ConfigError(f"--config {path}: a .toml, .yaml / .yml or .json file, please (got {suffix or 'none'})")
    except ConfigError:
        raise
    except _KeyTwice as twice:
        # JSON and YAML parsers keep the last of a key given twice; TOML refuses it: all three refuse it here.
        raise ConfigError(f"--config {path}{twice.where}: {twice.key} is given twice; keep one of them") from None
    except Exception as exc:  # noqa: BLE001 - tomllib, yaml and json each have their own error class
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"--config {path}: not readable {suffix[1:].upper()} ({first})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"--config {path}: expected a table of option = value, got {type(doc).__name__}")
    if "command" in doc and isinstance(doc.get("config"), dict):  # a run record
        recorded = str(doc["command"])
        if recorded != command.replace("-", ""):
            raise ConfigError(f"--config {path} records a `{recorded}` run; replay it with `mlminilm {recorded}`")
        # Where to write, whether to resume or replace, and how much to show are the command line's (a run recorded
        # with --quiet replays as loud as the command line says).
        from mlminilm.config import replay_skips

        skips = replay_skips(config_class) if config_class is not None else ()
        return {k: v for k, v in doc["config"].items() if k not in skips}, True
    return doc, False


class _KeyTwice(Exception):
    """A key given twice in one table of a JSON or YAML file (`where`: ":LINE" when the parser knows it)."""

    def __init__(self, key, where: str = ""):
        super().__init__(key)
        self.key, self.where = key, where


def _unique_keys(pairs: list[tuple]) -> dict:
    """json's object_pairs_hook: the object, unless a key appears twice in it."""
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _KeyTwice(key)
        seen[key] = value
    return seen


def _safe_yaml(path: Path, text: str):
    """YAML without aliases: an alias (`*name`) is refused while the text is parsed, before anything is expanded,
    so a small file of nested aliases (an "alias bomb") cannot take minutes and gigabytes first. A key given
    twice in one mapping is refused too (_KeyTwice)."""
    import yaml

    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            mark = event.start_mark
            raise ConfigError(
                f"--config {path}:{mark.line + 1}: a YAML alias (*{event.anchor}); config files take "
                "plain values, write the value out"
            )

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise _KeyTwice(key, f":{key_node.start_mark.line + 1}")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return yaml.load(text, Loader=UniqueKeys)  # noqa: S506 - a SafeLoader subclass


def _as_options(values: dict, command, given_args: list[str], path, replay: bool) -> list[str]:
    # Typer ships its own copy of click: options are told apart from arguments by their kind, not their class.
    # CLI_ONLY: how the result is shown, not what the command does (no config field)
    params = [p for p in command.params if getattr(p, "param_type_name", "") == "option" and p.name not in CLI_ONLY]
    options = {}  # by the option's name (--max-steps: max-steps, max_steps) and by its field name
    for param in params:
        options[param.name] = param
        for opt in param.opts:
            if opt.startswith("--"):
                options[opt[2:].replace("-", "_")] = param
    typed = {word.split("=", 1)[0] for word in given_args if word.startswith("-")}
    words, unknown = [], []
    spelled: dict[str, list[str]] = {}  # option -> the keys of the file that name it (max-steps, max_steps)
    for key in values:
        param = options.get(str(key).replace("-", "_"))
        if param is not None:
            spelled.setdefault(param.name, []).append(str(key))
    twice = [keys for keys in spelled.values() if len(keys) > 1]
    if twice:
        raise ConfigError(
            f"--config {path}: "
            + "; ".join(f"{' and '.join(keys)} name the same option" for keys in twice)
            + "; keep one of them"
        )
    for key, value in values.items():
        param = options.get(str(key).replace("-", "_"))
        if param is None:
            if not (replay and _is_default(command, key, value)):
                unknown.append(str(key))
            continue
        if typed & set(param.opts + param.secondary_opts) or value is None:
            continue  # the command line's value wins; None: the option's own default
        words += _words(param, value)
    if unknown:
        names = sorted(next(o for o in p.opts if o.startswith("--"))[2:] for p in params)
        raise ConfigError(f"--config {path}: {_unknown_keys(sorted(unknown), names)}")
    return words


def _unknown_keys(unknown: list[str], names: list[str]) -> str:
    """What to say of the file's keys `unknown`: the closest option names to each (difflib, as the command line's
    "Possible options"), or every option of the command when none is close to any of them."""
    import difflib

    close = {key: difflib.get_close_matches(key.replace("_", "-"), names, n=3, cutoff=0.6) for key in unknown}
    if any(close.values()):
        said = [
            f"{key} (did you mean {' or '.join(near)}?)" if near else f"{key} (no option is close: see --help)"
            for key, near in close.items()
        ]
        return f"unknown option(s) {', '.join(said)}"
    return f"unknown option(s) {', '.join(unknown)}; the options of this command are: {', '.join(names)}"


def _words(param, value) -> list[str]:
    if param.is_flag:
        if value is True:
            return [param.opts[0]]
        if value is False and param.secondary_opts:
            return [param.secondary_opts[0]]
        if value is False:
            return []
        raise ConfigError(f"--config: {param.opts[0]} is a flag: true or false (got {value!r})")
    if isinstance(value, (list, tuple)):
        if not value:
            return []  # an empty list: the option's own default (nothing)
        if param.multiple:
            return [w for item in value for w in (param.opts[0], str(item))]
        return [param.opts[0], ",".join(str(v) for v in value)]
    return [param.opts[0], str(value)]


def _is_default(command, key, value) -> bool:
    """A recorded field that is not an option of the command (e.g. AdamW's betas): fine to replay only when it has
    the value the command would use anyway."""
    import dataclasses

    cls = _config_class(command)
    if cls is None:
        return False
    for f in dataclasses.fields(cls):
        if f.name == key and f.default is not dataclasses.MISSING:
            return f.default == value
    return False
