"""Applying a plan (``core.applying``): what the admin API is asked to do, and when a write settles a plan.

One test per invariant the module states, with plan and subscription values.
"""

from __future__ import annotations

import pytest

from geosync_agent.core import applying, tuning
from geosync_agent.core.effects import AdminMove
from geosync_agent.core.subscriptions import BEFORE_ALL, Subscription
from geosync_core import pacing, syncing
from geosync_core.batches import BatchAcks
from geosync_core.indexing import OriginIndex
from geosync_core.origins import Origin, OriginAcks, Span
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


class FakeLog:
    """A topic's log as the apply step reads it (``applying.Log``): entries 9:0.. replicated from a's 5:0.."""

    def __init__(self, entries: int) -> None:
        self.topic = TOPIC
        self.index = OriginIndex()
        self.last: Position | None = None
        self.sizing: Position | None = None
        self.version = self.rewrites = 0
        self.unresolved: list[Position] = []
        self.append(entries)

    def append(self, n: int) -> None:
        start = 0 if self.last is None else self.last.entry + 1
        for entry in range(start, start + n):
            self.index.append(Position(9, entry), Origin("a", Position(5, entry)))
            self.last = Position(9, entry)
        self.version += 1

    def stretches_above(self, floor: Position) -> syncing.Stretches:
        last = -1 if self.last is None else self.last.entry
        return syncing.Stretches.of(Position(9, e) for e in range(last + 1) if Position(9, e) > floor)


def claims_up_to(entry: int) -> OriginAcks:
    return OriginAcks.of({"a": [Span(5, 0, entry)]})


def planned_on(log: FakeLog, received: OriginAcks) -> Subscription:
    state = Subscription(TOPIC, "billing", cursor=AckState.of(Position(9, 2)), received=received)
    state.planned = (state.cursor, log.version, received)
    state.planned_end, state.planned_rewrites = applying.plan_end(log), log.rewrites
    return state


def test_a_plan_holds_while_only_entries_its_claims_do_not_name_were_appended() -> None:
    log = FakeLog(5)
    state = planned_on(log, claims_up_to(4))
    assert applying.only_unclaimed_appended(state, log, {})  # nothing appended at all
    log.append(3)  # 9:5..9:7, from a's 5:5..5:7: nobody claims them
    assert applying.only_unclaimed_appended(state, log, {})
    state.received = claims_up_to(6)  # other claims than planned from: plan again
    assert not applying.only_unclaimed_appended(state, log, {})
    state = planned_on(log, claims_up_to(6))
    log.append(1)
    assert applying.claims_name_appended(state, log, {}) is False
    named = planned_on(log, claims_up_to(6))
    named.planned_end = Position(9, 4)  # planned before 9:5..9:8 came: the claims name 9:5 and 9:6
    named.planned = (named.cursor, log.version - 1, named.received)
    assert applying.claims_name_appended(named, log, {}) is True
    assert not applying.only_unclaimed_appended(named, log, {})


def test_a_plan_is_made_again_when_indexed_entries_changed_or_too_many_were_appended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = FakeLog(5)
    state = planned_on(log, claims_up_to(4))
    log.append(1)
    log.rewrites += 1  # an entry already indexed was renamed
    assert not applying.claims_and_log_as_planned(state, log, {})
    state = planned_on(log, claims_up_to(4))
    monkeypatch.setattr(tuning, "APPENDED_CHECK_MAX", 2)
    log.append(3)
    assert applying.appended_origins(log, Position(9, 5)) is None
    assert applying.claims_name_appended(state, log, {}) is None  # not known
    assert not applying.claims_and_log_as_planned(state, log, {})


def test_appended_origins_are_read_once_a_round_per_topic_and_end() -> None:
    log = FakeLog(4)
    appended: applying.Appended = {}
    first = applying.appended_above(appended, log, Position(9, 1))
    assert first == [Origin("a", Position(5, 2)), Origin("a", Position(5, 3))]
    log.append(2)  # within the round, the same answer (what the round's first look saw)
    assert applying.appended_above(appended, log, Position(9, 1)) is first
    assert applying.appended_above({}, log, Position(9, 1)) == [
        Origin("a", Position(5, e)) for e in range(2, 6)
    ]


def test_a_log_whose_last_batch_is_still_being_counted_has_no_end_to_plan_to() -> None:
    log = FakeLog(3)
    assert applying.plan_end(log) == Position(9, 2)
    log.sizing = Position(9, 2)
    assert applying.plan_end(log) is None


def test_what_a_cursor_claimed_stops_below_entries_not_read_or_not_named_yet() -> None:
    log = FakeLog(6)
    cursor = AckState.of(Position(9, 9))  # acknowledged past what the tail read
    assert applying.claimed_to(cursor, log) == Position(9, 5)
    log.unresolved = [Position(9, 3)]
    assert applying.claimed_to(cursor, log) == Position(9, 2)
    assert applying.claimed_to(AckState.of(Position(9, 1)), log) == Position(9, 1)
    assert applying.claimed_to(cursor, FakeLog(0)) == BEFORE_ALL


def test_a_plan_without_its_batch_indexes_counts_what_the_cursor_has_not_acknowledged_of_them() -> None:
    cursor = AckState.of(Position(5, 2), batches={Position(5, 4): BatchAcks.of(4, [0])})
    plan = syncing.ApplyPlan(
        Position(5, 3),
        (),
        batch_acks=((Position(5, 4), BatchAcks.of(4, [0, 1, 2])), (Position(5, 6), BatchAcks.of(3, [1]))),
    )
    left, batches, messages = applying.without_batch_indexes(plan, cursor)
    assert left == syncing.ApplyPlan(Position(5, 3), ())
    assert (batches, messages) == (2, 2 + 1)  # 5:4's index 0 was acknowledged already
    nothing = syncing.ApplyPlan(Position(5, 3), ())
    assert applying.without_batch_indexes(nothing, cursor) == (nothing, 0, 0)
