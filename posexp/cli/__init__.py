"""The command line: argv and Hydra's flags (args.py), help (help.py), the one place errors
become a line and an exit code (errors.py), and the commands (run_commands.py,
result_commands.py, pretrained_command.py) on the Typer app (app.py)."""

from posexp.cli import run_commands  # noqa: F401, I001 -- the commands, in help's order
from posexp.cli import result_commands  # noqa: F401
from posexp.cli import pretrained_command  # noqa: F401
from posexp.cli.app import app, main

__all__ = ["app", "main"]
