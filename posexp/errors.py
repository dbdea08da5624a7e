"""The errors a user can cause or meet; the CLI turns each into one line and an exit code."""


class PosexpError(Exception):
    """A failure with a message meant for the user; exit status 1."""

    exit_code = 1


class UsageError(PosexpError):
    """The command line or config asks for something that cannot run; exit status 2."""

    exit_code = 2
