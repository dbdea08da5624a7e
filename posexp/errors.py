"""The errors a user can cause or meet; the CLI (cli.fail) turns each into one line on stderr,
``posexp: error: <message>``, and its exit code."""


class PosexpError(Exception):
    """A failure with a message meant for the user; exit status 1."""

    exit_code = 1
    label = "error: "  # after "posexp: " on the line printed


class UsageError(PosexpError):
    """The command line or config asks for something that cannot run; exit status 2."""

    exit_code = 2


class Stopped(PosexpError):
    """The user stopped the command (a signal): not an error, so the line reads
    ``posexp: stopped by SIGINT ...``; exit status 128 + the signal's number."""

    label = ""
