"""The `mlminilm` entry point: registers the subcommands and turns known errors (and filesystem errors) into one
line and exit 1. Bad option values are usage errors, exit 2 (click)."""

from __future__ import annotations

import importlib
import os
import sys

import typer

import mlminilm
from mlminilm.commands._params import bound_integer_options
from mlminilm.version import __version__

app = typer.Typer(
    name="mlminilm",
    help="Compress multilingual encoders with MiniLM distillation and measure what survives, per language.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# (command name, its module under mlminilm.commands), from the one list of commands (mlminilm.COMMANDS).
COMMANDS = [(name, name.replace("-", "_")) for name, _, _ in mlminilm.COMMANDS]


def _version(value: bool) -> None:
    if value:
        print(f"mlminilm {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """mlminilm: prepare -> distill / assist -> finetune -> eval-xnli / eval-mlqa; eval-tatoeba needs no fine-tuning;
    compare sets their reports side by side; export writes a model as an ONNX graph (optionally int8) for serving."""


def _register() -> None:
    for name, module in COMMANDS:
        mod = importlib.import_module(f"mlminilm.commands.{module}")
        bound_integer_options(mod.command)  # huge or negative integers: usage errors (mlminilm.config.limits)
        # EXAMPLES: one or two example command lines, shown at the end of the command's --help.
        app.command(name, help=mod.command.__doc__, epilog=getattr(mod, "EXAMPLES", None))(mod.command)


_register()


def main() -> None:
    from mlminilm.errors import MlminilmError

    try:
        # --config FILE: the file's options become command-line words before click parses (README "Config files").
        from mlminilm.commands._config_file import expand

        sys.argv[1:] = expand(sys.argv[1:], typer.main.get_command(app))
        # One program name however it is started (the `mlminilm` script, `python -m mlminilm`, torchrun): usage
        # lines read as the README's commands, and shell completion uses one variable, _MLMINILM_COMPLETE.
        app(prog_name="mlminilm")
    except MlminilmError as exc:
        if os.environ.get("MLMINILM_DEBUG") == "1":
            raise
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)
    except OSError as exc:  # a read-only or full disk, a file where a directory should be: one line, not a traceback
        if os.environ.get("MLMINILM_DEBUG") == "1":
            raise
        print(f"Error: {os_error_message(exc)}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("Error: interrupted", file=sys.stderr)
        sys.exit(130)


def os_error_message(exc: OSError) -> str:
    """What failed, on which path, and what to do about it."""
    import errno

    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    what = exc.strerror or str(exc) or type(exc).__name__
    advice = {
        errno.ENOSPC: "free some disk space or choose an --out on another disk",
        getattr(errno, "EDQUOT", errno.ENOSPC): "free some disk space or choose an --out on another disk",
        errno.EROFS: "the file system is read-only: choose a writable --out",
        errno.EACCES: "check the permissions of that path, or choose another --out",
        errno.EPERM: "check the permissions of that path, or choose another --out",
        errno.ENOTDIR: "a file stands where a directory is expected: choose another path or move the file",
        errno.EISDIR: "a directory stands where a file is expected: choose another path",
        errno.EEXIST: "remove it or choose another path",
        errno.ENOENT: "check that the path exists",
    }.get(exc.errno, "check the path, its permissions and the free disk space")
    return f"{what}: {paths}; {advice}" if paths else f"{what}; {advice}"


if __name__ == "__main__":
    main()
