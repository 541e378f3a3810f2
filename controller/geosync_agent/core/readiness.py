"""Whether the agent is doing its work, and why not: what /readyz answers.

Kubernetes stops counting on a pod that is not ready; the reasons are for the operator who reads /readyz.
The shell records when rounds, sends and the parts the rounds go on without last failed; this says what
that means at ``now`` (monotonic seconds).

Invariants (tests in ``tests/agent/test_core_sealing.py``): not ready before the first round; not ready
once no round completed for ``tuning.STALL_S``, or rounds, sends or a part have failed for
``tuning.FAILING_S``; a failure shorter than that leaves the agent ready.
"""

from __future__ import annotations

from geosync_agent.core import tuning


def readiness(
    now: float,
    *,
    round_done_at: float | None,
    failing_since: float | None,
    last_error: str,
    publish_failing_since: float | None,
    parts_failing: dict[str, tuple[float, str]],
) -> tuple[bool, str]:
    """Whether the agent is doing its work, and why not: before its first round, when no round completed
    for ``STALL_S`` (a stuck loop), or when rounds have failed for ``FAILING_S`` (an admin API or broker
    down or refusing it, an expired token), every control message sent for as long failed, or discovery
    or the acknowledgement feed did (a region unreachable from the start leaves the rounds with nothing
    to fail on).

    ``round_done_at``: when the last round completed (None before the first); ``failing_since``: the first
    of the rounds failing since the last good one (None: the last was good), ``last_error`` its error;
    ``publish_failing_since``: since when every control-message send failed (None: the last went out);
    ``parts_failing``: per part the rounds go on without, when it first failed since its last success and
    its last error."""
    if round_done_at is None:
        return False, "starting: no round completed yet"
    if now - round_done_at > tuning.STALL_S:
        return False, f"stalled: no round completed for {now - round_done_at:.0f} s"
    if failing_since is not None and now - failing_since >= tuning.FAILING_S:
        failing = now - failing_since
        return False, f"failing: every round for {failing:.0f} s, last error: {last_error}"
    since = publish_failing_since
    if since is not None and now - since >= tuning.FAILING_S:
        return False, f"failing: no control message could be sent for {now - since:.0f} s"
    for part, (since, error) in sorted(parts_failing.items()):
        if now - since >= tuning.FAILING_S:
            return False, f"failing: {part} for {now - since:.0f} s, last error: {error}"
    return True, "ready"
