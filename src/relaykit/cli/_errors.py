"""The one error the CLI reports, and its exit codes."""

from __future__ import annotations

__all__ = ["RUNTIME", "USAGE", "CliError"]

#: Exit code of a command used wrongly (a missing app, a bad option value).
USAGE = 2
#: Exit code of a failure while the command ran (a database that cannot be opened).
RUNTIME = 1


class CliError(Exception):
    """A failure the CLI reports as one line (no traceback) and exit code ``code``.

    >>> CliError("no such file", 2).code
    2
    """

    def __init__(self, message: str, code: int = RUNTIME) -> None:
        super().__init__(message)
        #: The process exit code: 2 for a usage error, 1 for a runtime failure.
        self.code = code
