"""Claims that say their subscription is Key_Shared (issue 45, the rebuilt region's seeds 5043 and 5430): a
region where nobody consumed the subscription cannot tell its type (its stats say ``None``), and applies
others' claims keeping per-key order (``keyorder.key_ordered_plan``) only when it knows."""

from __future__ import annotations

from typing import cast

from geosync_agent.core import applying, generations
from geosync_agent.core.generations import Taken
from geosync_agent.core.subscriptions import Subscription
from geosync_core import ackstates, syncing
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

TOPIC = "persistent://geo/ab/orders"
SUB = "billing"


def claimed(acks: OriginAcks, *, key_shared: bool, generation: int = 0) -> ackstates.AckStateMessage:
    return ackstates.AckStateMessage(TOPIC, SUB, "b", acks, generation, key_shared)


def test_claims_that_say_key_shared_make_the_subscription_key_shared_here() -> None:
    state = Subscription(TOPIC, SUB)
    acks = OriginAcks.of({"c": [Span(14, 0, 3)]})
    state.planned = (None, 1, state.received)
    assert generations.take_claims(state, claimed(acks, key_shared=False), index=None, now_wall=1.0) is (
        Taken.CHANGED
    )
    assert not state.key_shared
    # the same claims again, now saying Key_Shared: nothing new to merge, but the type is learned and the
    # subscription planned again (with per-key order)
    state.planned = (None, 1, state.received)
    assert generations.take_claims(state, claimed(acks, key_shared=True), index=None, now_wall=2.0) is (
        Taken.UNCHANGED
    )
    assert state.key_shared
    assert state.planned is None
    # claims that do not say it (an agent before the field) do not make it forgotten
    generations.take_claims(state, claimed(acks, key_shared=False), index=None, now_wall=3.0)
    assert state.key_shared


def test_claims_of_an_older_generation_teach_nothing() -> None:
    state = Subscription(TOPIC, SUB)
    state.generation = 5
    acks = OriginAcks.of({"c": [Span(14, 0, 3)]})
    taken = generations.take_claims(
        state, claimed(acks, key_shared=True, generation=4), index=None, now_wall=1.0
    )
    assert taken is Taken.SUPERSEDED
    assert not state.key_shared


class _Log:
    """c's four messages here, keys k0 k1 k0 k1 (the first two never reached a rebuilt a)."""

    positions = [Position(9, e) for e in range(4)]

    def positions_above(self, floor: Position) -> list[Position]:
        return [p for p in self.positions if p > floor]

    def key_of(self, position: Position) -> str | None:
        return f"k{position.entry % 2}"

    def key_of_message(self, position: Position, index: int) -> str | None:
        return self.key_of(position)

    def size_of(self, position: Position) -> int | None:
        return None

    def origin_region_of(self, position: Position) -> str | None:
        return "c"


def test_a_key_shared_subscriptions_plan_waits_behind_earlier_messages_here() -> None:
    state = Subscription(TOPIC, SUB, cursor=AckState.of(Position(9, -1)))
    plan = syncing.ApplyPlan(None, (Position(9, 2), Position(9, 3)))
    log = cast(applying.KeyedLog, _Log())
    assert applying.keeping_key_order(state, log, plan) is plan  # not known for Key_Shared: as planned
    state.key_shared = True
    kept = applying.keeping_key_order(state, log, plan)
    assert (kept.individual_acks, kept.held) == ((), 2)
    # a plan that held something back never settles: consumers here may free it
    state.planned = (state.cursor, 1, state.received)
    assert not applying.settle_plan(state, kept)
