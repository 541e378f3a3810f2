"""A round's cursor changes through the core's entry (``core.stepping.step`` over ``core.planning``): which
subscriptions are created, reset, planned and written, and what the plugin's answers leave to the admin API,
from values only (a ``LogView`` fed messages, ``Subscription``s in a ``SubsTable``): events in, effects out.

One test per invariant ``core.planning`` and ``core.stepping`` state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from geosync_agent.core import planning, quiet, stepping
from geosync_agent.core.effects import (
    AdminMove,
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
from geosync_agent.core.subscriptions import Feed, SubKey, Subscription, SubsTable
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


@dataclass
class Settings:
    region: str = "b"
    min_apply_interval_s: float = 1.0


@dataclass
class State:
    """The agent's state as the step reads it (``stepping.Applying``)."""

    topics: dict[str, Topic]
    subs: SubsTable
    config: Settings = field(default_factory=Settings)
    feed: Feed = field(default_factory=Feed)
    heavy_plans: dict[SubKey, Subscription] = field(default_factory=dict)


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


def sub(md: int | None = -1, *, received: OriginAcks | None = None, name: str = SUB) -> Subscription:
    state = Subscription(
        TOPIC,
        name,
        cursor=None if md is None else AckState.of(Position(9, md)),
        received=received or OriginAcks.of({}),
    )
    state.announced = True
    return state


def world(topic: Topic, *states: Subscription) -> State:
    subs = SubsTable()
    for state in states:
        subs[state.key] = state
    return State({TOPIC: topic}, subs)


def plan(
    state: State,
    *,
    mono: float = 100.0,
    cpu: Callable[[], float] | None = None,
    plugin_writes: bool = True,
    acknowledgements: bool = False,
    claims_known: bool = True,
) -> stepping.Stepped:
    now = Now(mono, 1_000.0 + mono) if cpu is None else Now(mono, 1_000.0 + mono, cpu=cpu)
    due = stepping.ApplyDue(
        plugin_writes=plugin_writes,
        batch_writes=plugin_writes,
        skip_by_ids=True,
        acknowledgements=acknowledgements,
        claims_known=claims_known,
        covered=lambda _t: False,
    )
    return stepping.step(state, due, now)


def test_claims_received_are_planned_into_a_plugin_write_of_the_copies_they_name() -> None:
    topic = Topic(copies(6))
    state = sub(received=claims(3))
    stepped = plan(world(topic, state))
    assert stepped.writes == [PluginAck(state.key, Position(9, 3), (), ())]
    assert list(stepped.work) == [state.key]
    assert stepped.work[state.key][:2] == (state, topic)
    assert stepped.moves == []
    assert stepped.counts["plans_made"] == 1
    assert state.behind_since == 1_100.0
    assert topic.walked is not None
    assert SUB in topic.walked.restless  # a write in flight: looked at again next round


def test_without_plugin_writes_the_plan_is_an_admin_move_through_the_gate() -> None:
    state = sub(received=claims(3))
    stepped = plan(world(Topic(copies(6)), state), plugin_writes=False)
    assert stepped.writes == []
    assert stepped.work == {}
    assert [(m.key, m.move, m.holes) for m in stepped.moves if isinstance(m, AdminMove)] == [
        (state.key, Position(9, 3), ())
    ]


def test_one_not_announced_is_never_planned_and_one_missing_here_is_created_unless_deleted_here() -> None:
    quiet_one = sub(received=claims(3), name="unannounced")
    quiet_one.announced = False
    missing = sub(received=claims(3), name="missing")
    missing.exists = False
    deleted = sub(received=claims(3), name="deleted")
    deleted.exists, deleted.deleted_here = False, True
    stepped = plan(world(Topic(copies(6)), quiet_one, missing, deleted))
    assert stepped.writes == []
    assert stepped.effects == [CreateSubscription(missing.key)]
    assert quiet_one.planned is None
    assert deleted.planned is None


def test_nothing_is_planned_from_a_cursor_below_what_the_tail_forgot() -> None:
    log = copies(10)
    log.forget_up_to(Position(9, 5))  # every subscription known then had acknowledged 9:0..9:5
    state = sub(2, received=claims(8))  # created at the earliest message since, or rewound
    stepped = plan(world(Topic(log), state))
    assert stepped.writes == []
    assert log.stale  # read again from the earliest message
    assert state.waiting == "the topic is being read again"
    assert not state.parked


def test_below_what_the_budget_forgot_a_subscription_is_parked_once() -> None:
    log = copies(10)
    log.forget_oldest(6)  # the budget of entries held made it forget 9:0..9:5
    state = sub(2, received=claims(8))
    agent = world(Topic(log), state)
    stepped = plan(agent)
    assert stepped.writes == []
    assert stepped.notices == [planning.Parked(state, Position(9, 2), Position(9, 5))]
    assert stepped.counts["subscriptions_parked"] == 1
    assert state.parked
    assert not log.stale
    again = plan(agent)  # still parked: restless, but parked only once
    assert again.notices == []
    assert again.writes == []


def test_a_rewind_made_elsewhere_is_not_followed_while_claims_are_made_of_acknowledgements() -> None:
    state = sub(5, received=claims(2))
    state.follow, state.acked = True, AckState.of(Position(9, 5))
    stepped = plan(world(Topic(copies(6)), state), acknowledgements=True)
    assert stepped.notices == [planning.NotFollowed(state)]
    assert stepped.counts["rewinds_not_followed"] == 1
    assert not state.follow
    assert state.acked is None
    assert not any(isinstance(e, ResetCursor) for e in stepped.effects)


def test_a_rewind_made_elsewhere_waits_until_it_is_known_what_claims_are_made_of_then_is_followed() -> None:
    topic = Topic(copies(6))
    state = sub(5, received=claims(2))  # the cursor acknowledges a's 5:0..5:5, the newer claims 5:0..5:2
    state.follow = True
    agent = world(topic, state)
    waiting = plan(agent, claims_known=False)
    assert waiting.effects == []
    assert waiting.writes == []
    assert state.follow
    assert topic.walked is not None
    assert SUB in topic.walked.restless
    followed = plan(agent)
    assert followed.effects == [ResetCursor(state.key, Position(9, 2))]
    assert not state.follow


def test_a_plan_that_asks_for_nothing_is_no_work_and_leaves_the_subscription_quiet() -> None:
    topic = Topic(copies(6))
    state = sub(3, received=claims(3))  # everything claimed is acknowledged here already
    for plugin_writes in (True, False):
        stepped = plan(world(topic, state), plugin_writes=plugin_writes)
        assert stepped.writes == []
        assert stepped.moves == []
        assert stepped.effects == []
    assert state.planned_nothing
    assert state.behind_since is None
    assert topic.walked is not None
    assert SUB not in topic.walked.restless


def test_after_a_costly_plan_only_new_claims_are_planned_before_its_wait_has_passed() -> None:
    state = sub(received=claims(2))
    agent = world(Topic(copies(6)), state)
    meter = iter([0.0, 0.2, 1.0, 1.2])  # the plan took 0.2 CPU-s
    plan(agent, cpu=lambda: next(meter))
    wait = plan_wait(0.2, heavy=0)
    assert wait > 0
    assert state.plan_after == 100.0 + wait
    state.cursor = AckState.of(Position(9, 1))  # the cursor alone moved
    assert plan(agent, mono=100.0 + wait / 2).writes == []
    state.received = claims(4)  # new claims: planned at once
    assert list(plan(agent, mono=100.0 + wait / 2, cpu=lambda: next(meter)).work) == [state.key]


def test_a_plugin_write_carries_what_it_was_planned_from_only_where_the_plugin_checks_it() -> None:
    state = sub(1, received=claims(3))
    agent = world(Topic(copies(6)), state)
    agent.feed = Feed(write_version=pluginwrites.WRITE_VERSION - 1)
    [write] = plan(agent).writes
    assert write.planned_from is None
    agent.feed = Feed(write_version=pluginwrites.WRITE_VERSION)
    state.planned = None  # planned again
    [write] = plan(agent).writes
    assert write.planned_from == Position(9, 1)
    agent.feed.planned_from_refused_at = 100.0 - REPROBE_S / 2  # one was refused a moment ago
    state.planned = None
    [write] = plan(agent).writes
    assert write.planned_from is None


def landed(
    agent: State,
    work: planning.Work,
    outcomes: list[Outcome],
    *,
    moved_away: tuple[SubKey, ...] = (),
    no_plugin: bool = False,
) -> stepping.Stepped:
    event = stepping.Landed(
        work, outcomes, moved_away=frozenset(moved_away), no_plugin=no_plugin, skip_by_ids=True
    )
    return stepping.step(agent, event, Now(101.0, 1_101.0))


def test_a_whole_write_settles_its_plan_and_what_the_plugin_could_not_take_goes_to_the_admin_api() -> None:
    written, refused, elsewhere, moved = (sub(1, received=claims(3), name=n) for n in "wxyz")
    agent = world(Topic(copies(6)), written, refused, elsewhere, moved)
    work = plan(agent).work
    outcomes: list[Outcome] = [
        CursorWritten(written.key, pluginapi.CursorReport(TOPIC, "w", Position(9, 3), "[]"), True, 0),
        NotWritten(refused.key, fallback=False, reason="refused"),  # planned again next round
        NotWritten(elsewhere.key, fallback=True, reason="not_loaded"),
        NotWritten(moved.key, fallback=True, reason="not_loaded"),  # its topic was handed off
    ]
    event = stepping.Written(work, outcomes, covered=lambda topic: False, judged=True, acknowledgements=False)
    settled = stepping.step(agent, event, Now(101.0, 1_101.0))
    assert settled.counts["plans_settled_by_writes"] == 1
    assert written.cursor == AckState.of(Position(9, 3))  # as the write answered
    assert written.planned is not None
    assert written.planned[0] is written.cursor
    stepped = landed(agent, work, outcomes, moved_away=(moved.key,))
    assert [m.key for m in stepped.moves if isinstance(m, AdminMove)] == [elsewhere.key]
    assert stepped.writes == []


def test_where_the_first_writes_found_no_plugin_their_cursors_are_read_and_planned_again() -> None:
    state = sub(1, received=claims(3))
    agent = world(Topic(copies(6)), state)
    work = plan(agent).work
    outcomes: list[Outcome] = [NotWritten(state.key, fallback=True, reason="no plugin")]
    stepped = landed(agent, work, outcomes, no_plugin=True)
    assert stepped.moves == []
    assert stepped.poll_soon == [TOPIC]
    assert state.planned is None


def test_writes_whose_outcomes_were_lost_are_planned_again() -> None:
    state = sub(1, received=claims(3))
    agent = world(Topic(copies(6)), state)
    work = plan(agent).work
    assert stepping.step(agent, stepping.Lost(work), Now(101.0, 1_101.0)) == stepping.Stepped()
    assert state.planned is None
