"""How a command is called from Python: `distill(DistillConfig(...))` or `distill(teacher=..., data=..., out=...)`
(keyword options are the config's fields; given beside a config they replace its fields), with the logs shown
where nobody configured logging, as in a notebook.

The library's commands live in modules named after them (mlminilm.distill, .assist, .finetune, .compare, and the
package mlminilm.export), so `from mlminilm import distill` may give the module itself (Python binds a package's
imported submodule to the package's attribute of that name). Those modules are made callable (`command_module`),
so that the name is the command either way and `mlminilm.distill.run` keeps working.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
from typing import Any, Callable

from mlminilm import logging as mlog


def call(run: Callable, config_class: type, config: Any = None, options: dict | None = None):
    """`run(config)`, the config built from `options` (or `config` with them replaced); logging set up first
    when neither mlminilm's logger nor the root logger has a handler."""
    options = options or {}
    if config is None:
        config = config_class(**options)
    elif not isinstance(config, config_class):
        raise TypeError(f"expected a {config_class.__name__}, got {type(config).__name__}")
    elif options:
        config = dataclasses.replace(config, **options)
    if not mlog.configured():
        mlog.setup(quiet=getattr(config, "quiet", False))
    return run(config)


def command(run: Callable, config_class: type, name: str) -> Callable:
    """`run` as a function of a config or of keyword options (`call`)."""

    @functools.wraps(run)
    def invoke(config: Any = None, /, **options):
        return call(run, config_class, config, options)

    invoke.__name__ = invoke.__qualname__ = name
    invoke.__doc__ = (
        f"Run `mlminilm {name.replace('_', '-')}`: pass a {config_class.__name__} or its fields as "
        f"keyword options.\n\n{run.__doc__ or ''}"
    )
    return invoke


class _CommandModule(types.ModuleType):
    """A command's module that is also the command: calling it calls its `run` through `call`."""

    def __call__(self, config: Any = None, /, **options):
        return call(self.run, self.CONFIG, config, options)


def command_module(name: str, config_class: type) -> None:
    """Make the module `name` callable as its command (it keeps every attribute; `run` stays its entry point)."""
    module = sys.modules[name]
    module.CONFIG = config_class
    module.__class__ = _CommandModule
