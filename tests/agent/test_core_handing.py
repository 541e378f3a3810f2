"""Sidecar mode's ownership change taken into the state through the core's entry (``core.stepping.step``
with ``OwnershipMoved``, over ``core.handing``): from values only.

One test per invariant ``core.handing`` states.
"""

from __future__ import annotations

from geosync_agent.core import stepping, tuning
from geosync_agent.core.adopting import Adopted
from geosync_agent.core.subscriptions import Subscription
from geosync_core.origins import OriginAcks
from geosync_core.ownership import FULL_UPPER, Owned, namespace_of
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

from .test_core_adopting import NOW, State, Tracked

ORDERS = "persistent://geo/ab/orders"
AUDIT = "persistent://geo/ab/audit"
NS = namespace_of(ORDERS)
ALL = Owned({NS: ((0, FULL_UPPER),)})
NONE = Owned({})


def sub(agent: State, topic: str, name: str, *, announced: bool = True) -> Subscription:
    state = Subscription(topic, name, cursor=AckState.of(Position(9, 1)))
    state.announced = announced
    state.published = OriginAcks.of({})
    agent.subs[state.key] = state
    return state


def moved(agent: State, before: Owned, after: Owned) -> Adopted:
    return stepping.step(agent, stepping.OwnershipMoved(before, after), NOW)


def test_a_tracked_topic_no_longer_owned_is_handed_off_and_its_claims_stay() -> None:
    agent = State({ORDERS: Tracked()})
    state = sub(agent, ORDERS, "s")
    state.received_from["b"] = 5.0
    out = moved(agent, ALL, NONE)
    assert out.gone == [ORDERS]
    assert state.cursor is None
    assert state.published is None
    assert state.received_from == {"b": 5.0}  # the claims received stay
    assert out.counts["topics_handed_off"] == 1
    kept = State({ORDERS: Tracked()})
    still = sub(kept, ORDERS, "s")
    assert moved(kept, ALL, ALL).gone == []
    assert moved(kept, NONE, ALL).gone == []
    assert still.cursor is not None


def test_a_claimed_topic_now_owned_is_taken_over_and_queued_for_a_look_up() -> None:
    agent = State({})
    sub(agent, ORDERS, "s")
    sub(agent, AUDIT, "quiet", announced=False)
    out = moved(agent, NONE, ALL)
    assert out.taken_over == [ORDERS]  # audit's only state was never announced
    assert agent.claimed_untracked == {ORDERS: (NOW.mono, NOW.mono + tuning.CLAIMED_LOOKUP_S)}
    assert out.counts["ownership_changes"] == 1
    owned_already = State({})
    sub(owned_already, ORDERS, "s")
    assert moved(owned_already, ALL, ALL).taken_over == []
    assert not owned_already.claimed_untracked
