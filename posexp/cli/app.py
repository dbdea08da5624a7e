"""The posexp command: its Typer app, the main options, and ``main``, which every invocation
goes through and which always ends in SystemExit.  The commands live in run_commands.py
(train, eval, sweep, resume, finetune), result_commands.py (report, ls, compare,
reproduce) and pretrained_command.py (pretrained); each is a thin layer over the config,
run, report and claims packages."""

from __future__ import annotations

from typing import NoReturn

import typer

from posexp.cli.errors import fail
from posexp.cli.help import encodings_text
from posexp.config import register
from posexp.errors import PosexpError, UsageError, flat
from posexp.version import __version__

HELP = {"help_option_names": ["-h", "--help"], "max_content_width": 92}
EXTRA = {**HELP, "allow_extra_args": True, "ignore_unknown_options": True}

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=HELP,
)


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"posexp {__version__}")
        raise typer.Exit()


MAIN_HELP = """Which positional encoding keeps working past the length it was trained on?

posexp trains small GPT-style decoders with each positional encoding ({encodings}) on
short windows, scores the same held-out tokens with longer windows, and writes the
extrapolation curve. Every command takes --help.

\b
Examples:
  posexp train encoding=alibi               one run, about 2 minutes on a CPU
  posexp sweep encoding=rope,alibi seed=0,1 four runs
  posexp report results/default             plots and tables of every run there
"""


@app.callback(help=MAIN_HELP.format(encodings=encodings_text()))
def main_options(
    version: bool = typer.Option(False, "--version", callback=version_callback,
                                 is_eager=True, help="Print posexp's version and exit."),
) -> None:
    """posexp's options, before the command."""


def click_exceptions():
    """The exceptions of the click that Typer runs on: its own copy since Typer 0.20."""
    try:
        from typer import _click

        return _click.exceptions
    except ImportError:
        import click

        return click.exceptions


def main(args: list[str] | None = None) -> NoReturn:
    """The posexp command (``args`` default to sys.argv[1:]); always ends in SystemExit.
    The parser's own errors (an unknown option of report, a missing RUN_DIR, a misspelt
    command) are one line too."""
    click = click_exceptions()
    register()
    command = typer.main.get_command(app)
    try:
        code = command.main(args=args, prog_name="posexp", standalone_mode=False)
    except SystemExit:
        raise
    except click.NoArgsIsHelpError as e:  # `posexp` alone: the help
        typer.echo(e.format_message())
        raise SystemExit(0) from None
    except getattr(click, "Abort", ()):  # click's own; Typer's copy raises KeyboardInterrupt
        fail(KeyboardInterrupt())
    except click.UsageError as e:
        path = e.ctx.command_path if e.ctx is not None else "posexp"
        fail(UsageError(f"{flat(e.format_message()).rstrip('.')}; see {path} --help"))
    except click.ClickException as e:
        fail(PosexpError(flat(e.format_message())))
    except BaseException as e:
        fail(e)
    raise SystemExit(code if isinstance(code, int) else 0)
