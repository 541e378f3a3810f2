"""A round's cursor changes (``core.planning``): which subscriptions are created, reset, planned and written,
decided from values only (a ``LogView`` fed messages, ``Subscription``s in a ``SubsTable``), with the effects
returned as values.

One test per invariant the module states.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from geosync_agent.core import planning, quiet
from geosync_agent.core.effects import (
    CreateSubscription,
    CursorWritten,
    NotWritten,
    Outcome,
    PluginAck,
    ResetCursor,
)
from geosync_agent.core.logview import LogView
from geosync_agent.core.now import Now
from geosync_agent.core.pauses import plan_wait
from geosync_agent.core.subscriptions import Feed, Subscription, SubsTable
from geosync_core import pluginapi, pluginwrites, resolving
from geosync_core.capabilities import REPROBE_S
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

from .fakes import message

TOPIC = "persistent://geo/ab/orders"
SUB = "billing"


@dataclass
class Topic:
    """A tracked topic as planning reads it (``planning.Topic``)."""

    tail: LogView
    walked: quiet.Walked | None = None


def copies(entries: int, *, first: int = 0, log: LogView | None = None) -> LogView:
    """Region b's log: entries 9:N, copies of a's 5:N."""
    view = log or LogView(TOPIC, -1)
    fed = [
        message(TOPIC, Position(9, e), properties={resolving.REPL_SOURCE_POSITION: f"5:{e}"})
        for e in range(first, first + entries)
    ]
    view.take(fed, resolving.OriginResolver(local="b", lookup=lambda _t, _p: "a"), now=0.0)
    return view


def claims(up_to: int) -> OriginAcks:
    return OriginAcks.of({"a": [Span(5, 0, up_to)]})


def table(*states: Subscription) -> SubsTable:
    subs = SubsTable()
    for state in states:
        subs[state.key] = state
    return subs


def sub(md: int | None = -1, *, received: OriginAcks | None = None, name: str = SUB) -> Subscription:
    state = Subscription(
        TOPIC,
        name,
        cursor=None if md is None else AckState.of(Position(9, md)),
        received=received or OriginAcks.of({}),
    )
    state.announced = True
    return state


def plan(
    topic: Topic,
    subs: SubsTable,
    *,
    mono: float = 100.0,
    cpu: Callable[[], float] | None = None,
    acknowledgements: bool = False,
    claims_known: bool = True,
    batch_writes: bool = True,
) -> planning.Planned[Topic]:
    now = Now(mono, 1_000.0 + mono) if cpu is None else Now(mono, 1_000.0 + mono, cpu=cpu)
    return planning.plan_round(
        {TOPIC: topic},
        subs,
        now=now,
        covered=lambda _t: False,
        heavy_plans={},
        batch_writes=batch_writes,
        acknowledgements=acknowledgements,
        claims_known=claims_known,
    )


def test_claims_received_are_planned_into_a_write_of_the_copies_they_name() -> None:
    topic = Topic(copies(6))
    state = sub(received=claims(3))
    planned = plan(topic, table(state))
    assert list(planned.work) == [state.key]
    written, on, apply_plan = planned.work[state.key]
    assert (written, on) == (state, topic)
    assert apply_plan.new_mark_delete == Position(9, 3)
    assert planned.counts["plans_made"] == 1
    assert state.behind_since == 1_100.0
    assert topic.walked is not None
    assert SUB in topic.walked.restless


def test_one_not_announced_is_never_planned_and_one_missing_here_is_created_unless_deleted_here() -> None:
    topic = Topic(copies(6))
    quiet_one = sub(received=claims(3), name="unannounced")
    quiet_one.announced = False
    missing = sub(received=claims(3), name="missing")
    missing.exists = False
    deleted = sub(received=claims(3), name="deleted")
    deleted.exists, deleted.deleted_here = False, True
    planned = plan(topic, table(quiet_one, missing, deleted))
    assert planned.work == {}
    assert planned.effects == [CreateSubscription(missing.key)]
    assert quiet_one.planned is None
    assert deleted.planned is None


def test_nothing_is_planned_from_a_cursor_below_what_the_tail_forgot() -> None:
    log = copies(10)
    log.forget_up_to(Position(9, 5))  # every subscription known then had acknowledged 9:0..9:5
    state = sub(2, received=claims(8))  # created at the earliest message since, or rewound
    planned = plan(Topic(log), table(state))
    assert planned.work == {}
    assert log.stale  # read again from the earliest message
    assert state.waiting == "the topic is being read again"
    assert not state.parked


def test_below_what_the_budget_forgot_a_subscription_is_parked_once() -> None:
    log = copies(10)
    log.forget_oldest(6)  # the budget of entries held made it forget 9:0..9:5
    state = sub(2, received=claims(8))
    subs, topic = table(state), Topic(log)
    planned = plan(topic, subs)
    assert planned.work == {}
    assert planned.notices == [planning.Parked(state, Position(9, 2), Position(9, 5))]
    assert planned.counts["subscriptions_parked"] == 1
    assert state.parked
    assert not log.stale
    again = plan(topic, subs)  # still parked: restless, but parked only once
    assert again.notices == []
    assert again.work == {}


def test_a_rewind_made_elsewhere_is_not_followed_while_claims_are_made_of_acknowledgements() -> None:
    topic = Topic(copies(6))
    state = sub(5, received=claims(2))
    state.follow, state.acked = True, AckState.of(Position(9, 5))
    planned = plan(topic, table(state), acknowledgements=True)
    assert planned.notices == [planning.NotFollowed(state)]
    assert planned.counts["rewinds_not_followed"] == 1
    assert not state.follow
    assert state.acked is None
    assert not any(isinstance(e, ResetCursor) for e in planned.effects)


def test_a_rewind_made_elsewhere_waits_until_it_is_known_what_claims_are_made_of_then_is_followed() -> None:
    topic = Topic(copies(6))
    state = sub(5, received=claims(2))  # the cursor acknowledges a's 5:0..5:5, the newer claims 5:0..5:2
    state.follow = True
    subs = table(state)
    waiting = plan(topic, subs, claims_known=False)
    assert waiting.effects == []
    assert waiting.work == {}
    assert state.follow
    assert topic.walked is not None
    assert SUB in topic.walked.restless
    followed = plan(topic, subs)
    assert followed.effects == [ResetCursor(state.key, Position(9, 2))]
    assert not state.follow


def test_a_plan_that_asks_for_nothing_is_no_work_and_leaves_the_subscription_quiet() -> None:
    topic = Topic(copies(6))
    state = sub(3, received=claims(3))  # everything claimed is acknowledged here already
    planned = plan(topic, table(state))
    assert planned.work == {}
    assert planned.effects == []
    assert state.planned_nothing
    assert state.behind_since is None
    assert topic.walked is not None
    assert SUB not in topic.walked.restless


def test_after_a_costly_plan_only_new_claims_are_planned_before_its_wait_has_passed() -> None:
    log = copies(6)
    topic = Topic(log)
    state = sub(received=claims(2))
    subs = table(state)
    meter = iter([0.0, 0.2, 1.0, 1.2])  # the plan took 0.2 CPU-s
    plan(topic, subs, cpu=lambda: next(meter))
    wait = plan_wait(0.2, heavy=0)
    assert wait > 0
    assert state.plan_after == 100.0 + wait
    state.cursor = AckState.of(Position(9, 1))  # the cursor alone moved
    assert plan(topic, subs, mono=100.0 + wait / 2).work == {}
    state.received = claims(4)  # new claims: planned at once
    assert list(plan(topic, subs, mono=100.0 + wait / 2, cpu=lambda: next(meter)).work) == [state.key]


def test_a_plugin_write_carries_what_it_was_planned_from_only_where_the_plugin_checks_it() -> None:
    topic = Topic(copies(6))
    state = sub(1, received=claims(3))
    work = plan(topic, table(state)).work
    old = Feed(write_version=pluginwrites.WRITE_VERSION - 1)
    assert planning.plugin_writes(work, old, now_mono=100.0) == [
        PluginAck(state.key, Position(9, 3), (), (), planned_from=None)
    ]
    checks = Feed(write_version=pluginwrites.WRITE_VERSION)
    [write] = planning.plugin_writes(work, checks, now_mono=100.0)
    assert write.planned_from == Position(9, 1)
    checks.planned_from_refused_at = 100.0 - REPROBE_S / 2  # one was refused a moment ago
    [write] = planning.plugin_writes(work, checks, now_mono=100.0)
    assert write.planned_from is None


def test_what_the_plugin_left_goes_to_the_admin_api_and_a_whole_write_settles_its_plan() -> None:
    topic = Topic(copies(6))
    written, refused, elsewhere, moved = (sub(1, received=claims(3), name=n) for n in "wxyz")
    work = plan(topic, table(written, refused, elsewhere, moved)).work
    answered = written.cursor = AckState.of(Position(9, 3))
    outcomes: list[Outcome] = [
        CursorWritten(written.key, pluginapi.CursorReport(TOPIC, "w", Position(9, 3), "[]"), True, 0),
        NotWritten(refused.key, fallback=False, reason="refused"),
        NotWritten(elsewhere.key, fallback=True, reason="not_loaded"),
        NotWritten(moved.key, fallback=True, reason="not_loaded"),
    ]
    assert planning.settled(work, outcomes[0])
    assert written.planned is not None
    assert written.planned[0] is answered
    assert not any(planning.settled(work, o) for o in outcomes[1:])
    assert list(planning.unwritten(work, outcomes, moved_away=[moved.key])) == [elsewhere.key]
    [move] = planning.admin_moves(
        planning.unwritten(work, outcomes).values(),
        region="b",
        now_mono=100.0,
        min_interval_s=1.0,
        skip_by_ids=True,
    )[:1]
    assert (move.key, move.move, move.partition) == (elsewhere.key, Position(9, 3), -1)
