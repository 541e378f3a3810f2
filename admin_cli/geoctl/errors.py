"""CLI errors with stable exit codes and a message that says what to do.

Exit codes: 1 generic failure, 2 usage (click), 3 lab error, 4 admin API refused the request,
5 region unreachable, 6 unhealthy (a status check found a problem).
"""

from __future__ import annotations

import click

EXIT_FAILURE = 1
EXIT_LAB = 3
EXIT_REFUSED = 4
EXIT_UNREACHABLE = 5
EXIT_UNHEALTHY = 6


class GeoctlError(click.ClickException):
    exit_code = EXIT_FAILURE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
