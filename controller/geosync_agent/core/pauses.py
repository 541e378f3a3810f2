"""How long a costly subscription waits before it is planned or published again.

A subscription whose consumers leave holes for good grows claims of tens of thousands of spans; planning and
publishing it at every acknowledgement would take most of the loop. These rules pace such subscriptions in
proportion to what their last plan or publish cost, so that together they take a bounded share of the loop
and cheap ones are never held back. Costs are CPU seconds the shell measured and passes in.

Invariants (tests in ``tests/agent/test_core.py``): a pause is never negative and never above its cap
(``tuning.MAX_PLAN_WAIT_S``, ``tuning.MAX_PUBLISH_PAUSE_S``); claims of ``tuning.PAUSE_FROM_SPANS`` spans
or fewer that cost nothing to publish are not paused; more heavy subscriptions never shorten a wait.
"""

from __future__ import annotations

from geosync_agent.core import tuning
from geosync_agent.core.subscriptions import SubKey, Subscription


def plan_wait(took: float, *, heavy: int) -> float:
    """Seconds a subscription whose plan ``took`` seconds waits before it is planned again for new entries or
    cursor moves alone, when ``heavy`` subscriptions (at least 1) plan for HEAVY_PLAN_S or more: see
    PLAN_WAIT_FACTOR."""
    return min(tuning.MAX_PLAN_WAIT_S, took * tuning.PLAN_WAIT_FACTOR * max(1, heavy))


def publish_pause(spans: int, *, took: float = 0.0, heavy: int = 1) -> float:
    """Seconds a subscription whose published claims hold ``spans`` spans waits before it is translated and
    published again (0 up to PAUSE_FROM_SPANS). Claims are sent whole and cost time in proportion to their
    spans at both ends; a consumer that leaves one message in ten unacknowledged for good grows them by
    thousands an hour. Sent at every acknowledgement, 4 such subscriptions with ~30,000 spans each took 62 %
    of a core (region_down bench, b cut off for an hour): paced, they cost a bounded share, and their
    acknowledgements reach the other regions up to the pause later.

    Above NEWS_FROM_SPANS the pause is also at least PUBLISH_WAIT_FACTOR times what this publish ``took`` to
    decide and translate, times the ``heavy`` subscriptions whose publishes take HEAVY_PLAN_S or more (the
    plan wait's rule): what a span costs depends on the machine and the load, and with shorter rounds a
    subscription that keeps holes is published more often."""
    by_cost = took * tuning.PUBLISH_WAIT_FACTOR * max(1, heavy) if spans > tuning.NEWS_FROM_SPANS else 0.0
    by_spans = spans * tuning.PAUSE_PER_SPAN_S if spans > tuning.PAUSE_FROM_SPANS else 0.0
    return min(tuning.MAX_PUBLISH_PAUSE_S, max(by_cost, by_spans))


def note_heavy(heavy: dict[SubKey, Subscription], state: Subscription, took: float) -> None:
    """Keep ``heavy`` (the subscriptions whose last plan, or publish, took HEAVY_PLAN_S or more) as
    ``state``'s last one took ``took``: counted as their times are set, since counting them over every
    subscription at each round cost as much as the round's real work."""
    if took >= tuning.HEAVY_PLAN_S:
        heavy[state.key] = state
    elif heavy.get(state.key) is state:
        del heavy[state.key]
