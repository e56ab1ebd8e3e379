"""The Typer layer: one module per subcommand; each builds one config and calls one core `run`."""
