"""A topic's tail forgets what every subscription acknowledged: asked afresh at every poll, and by the feed's
looks at most every ``tuning.FLOOR_EVERY_S`` (each asks every subscription of the topic: issue 46)."""

from __future__ import annotations

from geosync_agent.core import tuning
from tests.agent.pairs import A_LOG, SUB, TOPIC, pair


def test_the_feed_asks_what_the_tail_may_forget_at_most_every_floor_period() -> None:
    a, _ = pair()
    index = a.agent.topics[TOPIC].tail.index
    a.step(tuning.FLOOR_EVERY_S)
    assert index.first == A_LOG[0]
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step(tuning.FLOOR_EVERY_S / 10)  # the feed's look: claimed, not forgotten yet
    assert a.agent.subs[(TOPIC, SUB)].claimed_to == A_LOG[1]
    assert index.first == A_LOG[0]
    a.step(tuning.FLOOR_EVERY_S)  # the next look asks again, and the tail forgets
    assert index.first == A_LOG[2]
