"""CLI errors with stable exit codes and a message that says what to do.

Exit codes: 1 generic failure, 2 usage (click), 3 lab error, 4 admin API refused the request,
5 region unreachable, 6 unhealthy (a status check found a problem, or ``policies diff`` found regions
that disagree; ``failover check``: not safe), 7 drift found (``audit drift --fail-on-drift``),
8 cannot tell (``failover check``, ``tenants migrate``: a region, above all the one consumers would leave,
could not be read, so whether a move is safe is unknown; never reported as safe).

A refusal with one of the statuses Pulsar uses for namespace policies (PIP-321) has its own code, the
same whether ``geoctl`` found the problem before calling the broker or the broker answered it:
10 bad request (400: allowed clusters do not contain the replication clusters), 11 forbidden (403:
cluster not allowed for the tenant or namespace, or not registered), 12 not found (404: tenant or
namespace missing), 13 conflict (409: already exists, or peer clusters in one set), 14 precondition
failed (412: empty replication set, "global"). ``EXIT_BY_STATUS`` maps statuses to these codes.
"""

from __future__ import annotations

import click

EXIT_FAILURE = 1
EXIT_LAB = 3
EXIT_REFUSED = 4
EXIT_UNREACHABLE = 5
EXIT_UNHEALTHY = 6
EXIT_UNKNOWN = 8
EXIT_BAD_REQUEST = 10
EXIT_FORBIDDEN = 11
EXIT_NOT_FOUND = 12
EXIT_CONFLICT = 13
EXIT_PRECONDITION = 14

EXIT_BY_STATUS = {
    400: EXIT_BAD_REQUEST,
    403: EXIT_FORBIDDEN,
    404: EXIT_NOT_FOUND,
    409: EXIT_CONFLICT,
    412: EXIT_PRECONDITION,
}


class GeoctlError(click.ClickException):
    exit_code = EXIT_FAILURE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            # click declares exit_code on the class; an instance entry overrides it for this error only.
            self.__dict__["exit_code"] = exit_code
