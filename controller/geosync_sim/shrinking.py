"""Shrinking a failing schedule: the smallest one found that still fails the same way.

Why apart from ``running``: it is a search over schedules that runs them, not a part of a run.
"""

from __future__ import annotations

from geosync_sim import running


def shrink(
    result: running.Result,
    *,
    budget: int = 80,
    hook: running.AgentHook | None = None,
    kinds: set[str] | None = None,
) -> running.Result:
    """A smaller schedule that still fails with one of ``kinds`` (default: the same violation kinds): drop
    chunks of steps, halving the chunk size down to one step (ddmin's complement pass), while ``budget`` runs
    last."""
    want = kinds or result.kinds()
    best = result
    chunk = max(1, len(best.schedule.steps) // 2)
    runs = 0
    while chunk >= 1 and runs < budget:
        i, progressed = 0, False
        while i < len(best.schedule.steps) and runs < budget:
            drop = set(range(i, min(i + chunk, len(best.schedule.steps))))
            candidate = running.run(best.schedule.without(drop), hook=hook)
            runs += 1
            if candidate.kinds() & want:
                best, progressed = candidate, True
            else:
                i += chunk
        if not progressed:
            chunk //= 2
    return best
