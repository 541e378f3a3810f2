"""Applying a plan (``core.applying``): what the admin API is asked to do, and when a write settles a plan.

One test per invariant the module states, with plan and subscription values.
"""

from __future__ import annotations

from geosync_agent.core import applying
from geosync_agent.core.effects import AdminMove
from geosync_agent.core.subscriptions import Subscription
from geosync_core import pacing, syncing
from geosync_core.origins import OriginAcks
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range

TOPIC = "persistent://geo/ab/orders-partition-1"
HOLES = (Position(5, 7), Position(5, 9))


def sub(md: int = 2, *, pending: pacing.PendingMove | None = None, consumers: int = 0) -> Subscription:
    return Subscription(
        TOPIC, "billing", cursor=AckState.of(Position(5, md)), consumers=consumers, pending_move=pending
    )


def move(
    state: Subscription, plan: syncing.ApplyPlan, *, now: float = 100.0, skip: bool = True
) -> AdminMove | None:
    return applying.admin_move(
        state, plan, partition=1, region="b", now=now, min_interval_s=1.0, skip_by_ids=skip
    )


def test_a_plan_goes_to_the_admin_api_as_a_move_and_its_holes_for_the_subscription_it_names() -> None:
    asked = move(sub(consumers=2), syncing.ApplyPlan(Position(5, 5), HOLES), skip=False)
    assert asked == AdminMove(
        key=(TOPIC, "billing"),
        partition=1,
        move=Position(5, 5),
        holes=HOLES,
        skip_by_ids=False,
        consumers=2,
        shadow_name="geosync-shadow-b",
    )


def test_a_mark_delete_moves_only_through_the_gate_while_holes_still_go() -> None:
    in_flight = pacing.PendingMove(Position(5, 5), at=99.5)  # sent half a second ago, not there yet
    asked = move(sub(pending=in_flight), syncing.ApplyPlan(Position(5, 6), HOLES))
    assert asked is not None
    assert (asked.move, asked.holes) == (None, HOLES)
    assert move(sub(pending=in_flight), syncing.ApplyPlan(Position(5, 6), ())) is None
    settled = pacing.PendingMove(Position(5, 5), at=10.0)  # long ago, and a new target: the gate opens
    asked = move(sub(pending=settled), syncing.ApplyPlan(Position(5, 6), ()))
    assert asked is not None
    assert asked.move == Position(5, 6)


def test_a_plan_with_nothing_to_move_and_no_holes_asks_for_nothing_and_leaves_no_hole_pending() -> None:
    state = sub()
    state.pending_holes = 3
    assert move(state, syncing.ApplyPlan(None, ())) is None
    assert state.pending_holes == 0


def planned(state: Subscription) -> Subscription:
    assert state.cursor is not None
    state.planned = (state.cursor, 4, OriginAcks.of({}))
    return state


def test_a_write_that_did_all_a_whole_plan_asked_settles_it() -> None:
    state = planned(sub(2))
    state.behind_since = 7.0
    state.cursor = AckState.of(
        Position(5, 5), [Range(Position(5, 6), Position(5, 7))]
    )  # as the write answered
    assert applying.settle_plan(state, syncing.ApplyPlan(Position(5, 5), (Position(5, 7),)))
    assert state.planned == (state.cursor, 4, OriginAcks.of({}))  # the same log and claims, this cursor
    assert state.planned_nothing
    assert state.behind_since is None


def test_a_plan_cut_short_stopped_at_an_unindexed_entry_or_not_carried_out_does_not_settle() -> None:
    for plan, cursor in (
        (syncing.ApplyPlan(Position(5, 5), (), complete=False), AckState.of(Position(5, 5))),
        (syncing.ApplyPlan(Position(5, 5), (), blocked_by=Position(5, 6)), AckState.of(Position(5, 5))),
        (
            syncing.ApplyPlan(Position(5, 5), (Position(5, 7),)),
            AckState.of(Position(5, 5)),
        ),  # the hole not there
        (syncing.ApplyPlan(Position(5, 5), ()), AckState.of(Position(5, 4))),  # the mark-delete short of it
    ):
        state = planned(sub(2))
        before = state.planned
        state.cursor = cursor
        assert not applying.settle_plan(state, plan)
        assert state.planned is before
        assert not state.planned_nothing
