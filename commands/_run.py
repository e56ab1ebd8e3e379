"""How a command starts once click has parsed its options: logging as --quiet / --verbose say, then the one config
its options translate into. What follows is the command's own: one `mlminilm.<verb>.run(config)` call and its
result shown (`render` for the evaluations, `emit` for the training commands)."""

from __future__ import annotations

from mlminilm.commands._eval_options import split_langs
from mlminilm.commands._params import value

# Options that steer the CLI itself and have no config field: where the result goes and how much is logged.
CLI_ONLY = ("json_out", "verbose")


def configure(cls, options: dict):
    """Set up logging and build `cls` from a command's options, passed as its `locals()` taken before anything
    else, so that they are exactly its parameters. Each option is the config field of the same name (the names
    are the same by convention; tests/test_cli.py holds their defaults equal): a choice as its plain string, a
    repeatable option (--langs de,fr --langs zh) as one tuple of its comma-separated items, any other as given."""
    from mlminilm import logging as mlog

    mlog.setup(quiet=options["quiet"], verbose=options["verbose"])
    return cls(**{name: _field_value(x) for name, x in options.items() if name not in CLI_ONLY})


def _field_value(x):
    return split_langs(x) if isinstance(x, list) else value(x)
