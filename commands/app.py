"""The `mlminilm` entry point: registers the subcommands and turns known errors into one line and exit 1."""

from __future__ import annotations

import importlib
import os
import sys

import typer

from mlminilm import __version__

app = typer.Typer(
    name="mlminilm",
    help="Compress multilingual encoders with MiniLM distillation and measure what survives, per language.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# (command name, module under mlminilm.commands). Only commands that work are listed here.
COMMANDS = [
    ("prepare", "prepare"),
    ("distill", "distill"),
    ("assist", "assist"),
    ("finetune", "finetune"),
    ("eval-xnli", "eval_xnli"),
    ("eval-mlqa", "eval_mlqa"),
    ("eval-tatoeba", "eval_tatoeba"),
]


def _version(value: bool) -> None:
    if value:
        print(f"mlminilm {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """mlminilm: prepare -> distill / assist -> finetune -> eval-xnli / eval-mlqa; eval-tatoeba needs no fine-tuning."""


def _register() -> None:
    for name, module in COMMANDS:
        mod = importlib.import_module(f"mlminilm.commands.{module}")
        app.command(name, help=mod.command.__doc__)(mod.command)


_register()


def main() -> None:
    from mlminilm.errors import MlminilmError

    try:
        app()
    except MlminilmError as exc:
        if os.environ.get("MLMINILM_DEBUG") == "1":
            raise
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("Error: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
