"""A subscription's claim through the core's entry (``core.stepping.step`` with ``Decide``, round steps 3-4):
the gates before a claim, snapshot mode, the claim to send and the publish pause after it, from values only
(a ``LogView`` fed messages, a ``Subscription``): events in, values out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from geosync_agent.core import stepping, tuning
from geosync_agent.core.now import Now
from geosync_agent.core.planning import Parked
from geosync_agent.core.subscriptions import SubKey, Subscription, SubsTable
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

from .test_core_planning import SUB, TOPIC, Settings, Topic, copies

NS = "geo/ab"


@dataclass
class State:
    """The agent's state as a claim's decision reads it (``stepping.Deciding``)."""

    topics: dict[str, Topic]
    config: Settings = field(default_factory=lambda: Settings(region="a"))
    namespaces: dict[str, frozenset[str]] = field(default_factory=lambda: {NS: frozenset({"a", "b"})})
    heavy_publishes_by: dict[SubKey, Subscription] = field(default_factory=dict)
    heavy_publishes: int = 0


def acked(md: int) -> Subscription:
    """``billing`` in b, its cursor at ``9:md`` (copies of a's ``5:md``)."""
    return Subscription(TOPIC, SUB, cursor=AckState.of(Position(9, md)), received=OriginAcks.of({}))


def decide(
    state: State,
    sub: Subscription,
    *,
    force: bool = False,
    covered: bool = False,
    mono: float = 100.0,
    cpu: Callable[[], float] | None = None,
) -> stepping.Stepped:
    now = Now(mono, 1_000.0 + mono) if cpu is None else Now(mono, 1_000.0 + mono, cpu=cpu)
    event = stepping.Decide(sub, force=force, acknowledgements=False, covered=covered)
    return stepping.step(state, event, now)


def test_a_cursor_that_moved_is_claimed_in_origin_coordinates_for_its_namespace() -> None:
    sub = acked(3)
    out = decide(State({TOPIC: Topic(copies(6))}), sub)
    assert not out.undecided
    assert [ns for ns, _ in out.claims] == [NS]
    assert out.claims[0][1].acks == OriginAcks.of({"a": [Span(5, 0, 3)]})
    assert sub.published == out.claims[0][1].acks
    assert (out.snapshot, out.poll_by, out.effects) == ([], {}, [])


def test_the_same_claim_is_not_decided_twice_unless_a_resync_forces_it() -> None:
    state, sub = State({TOPIC: Topic(copies(6))}), acked(3)
    decide(state, sub)
    assert decide(state, sub, mono=200.0).claims == []
    assert len(decide(state, sub, force=True, mono=300.0).claims) == 1


def test_nothing_is_claimed_while_a_rewind_is_followed_or_the_tail_is_read_again() -> None:
    following = acked(3)
    following.follow = True
    assert decide(State({TOPIC: Topic(copies(6))}), following).undecided
    stale = copies(6)
    stale.stale = True
    out = decide(State({TOPIC: Topic(stale)}), acked(3))
    assert out.undecided
    assert out.claims == []


def test_a_cursor_below_what_the_budget_made_the_tail_forget_parks_its_subscription() -> None:
    log = copies(6)
    log.forget_up_to(Position(9, 4))
    log.budget_floor = Position(9, 4)
    sub = acked(1)
    out = decide(State({TOPIC: Topic(log)}), sub)
    assert out.undecided
    assert sub.parked
    assert out.counts["subscriptions_parked"] == 1
    assert out.notices == [Parked(sub, Position(9, 1), Position(9, 4))]


def test_a_publish_pause_holds_the_claim_and_asks_for_a_poll_when_it_ends_unless_forced() -> None:
    state, sub = State({TOPIC: Topic(copies(6))}), acked(3)
    sub.publish_after = 150.0
    out = decide(state, sub)
    assert out.undecided
    assert out.poll_by == {TOPIC: 150.0}
    assert out.counts["publishes_paused"] == 1
    assert len(decide(state, sub, force=True).claims) == 1


def test_a_topic_snapshot_mode_covers_goes_to_it_not_to_claims() -> None:
    sub = acked(3)
    out = decide(State({TOPIC: Topic(copies(6))}), sub, covered=True)
    assert not out.undecided
    assert (out.snapshot, out.claims) == ([sub], [])
    assert sub.published is None


def test_a_namespace_not_synced_here_sends_nothing() -> None:
    state = State({TOPIC: Topic(copies(6))}, namespaces={})
    out = decide(state, acked(3))
    assert not out.undecided
    assert out.claims == []


def test_a_costly_claim_is_timed_and_paused_for_its_cost() -> None:
    ticks = iter([0.0, 2 * tuning.HEAVY_PLAN_S])
    state, sub = State({TOPIC: Topic(copies(6))}), acked(3)
    out = decide(state, sub, cpu=lambda: next(ticks))
    assert len(out.claims) == 1
    assert sub.publish_took == 2 * tuning.HEAVY_PLAN_S
    assert state.heavy_publishes_by == {sub.key: sub}


@dataclass
class LookedTopic(Topic):
    """A tracked topic as a look's decisions read it (``deciding.LookedTopic``)."""

    unpublished: dict[str, None] = field(default_factory=dict)
    floor_at: float = 0.0


@dataclass
class LookState:
    """The agent's state as a look's decisions read it (``deciding.DecidingLook``)."""

    topics: dict[str, LookedTopic]
    subs: SubsTable = field(default_factory=SubsTable)
    config: Settings = field(default_factory=lambda: Settings(region="a"))
    namespaces: dict[str, frozenset[str]] = field(default_factory=lambda: {NS: frozenset({"a", "b"})})
    heavy_publishes_by: dict[SubKey, Subscription] = field(default_factory=dict)
    heavy_publishes: int = 0


def look_state(topic: LookedTopic, *subs: Subscription) -> LookState:
    state = LookState({TOPIC: topic})
    for sub in subs:
        state.subs[sub.key] = sub
    return state


def due(
    state: LookState, *, moved: list[Subscription], polled: bool = False, mono: float = 100.0
) -> stepping.Stepped:
    states = list(state.subs.values())
    event = stepping.ClaimsDue(
        TOPIC,
        states,
        moved if not polled else states,
        moved,
        polled=polled,
        force=False,
        cursor_set=None,
        acknowledgements=False,
        covered=False,
    )
    return stepping.step(state, event, Now(mono, 1_000.0 + mono))


def test_a_look_decides_what_it_moved_and_keeps_what_was_not_decidable_for_the_next() -> None:
    paused, other = acked(3), acked(2)
    other.name = "audit"
    paused.publish_after = 150.0
    state = look_state(LookedTopic(copies(6)), paused, other)
    out = due(state, moved=[paused, other])
    assert [m.subscription for _, m in out.claims] == ["audit"]
    assert state.topics[TOPIC].unpublished == {SUB: None}
    assert out.poll_by == {TOPIC: 150.0}
    later = due(state, moved=[], mono=200.0)  # the feed named neither: the one left undecided is decided
    assert [m.subscription for _, m in later.claims] == [SUB]
    assert state.topics[TOPIC].unpublished == {}


def test_a_poll_lets_the_tail_forget_what_every_subscription_acknowledged() -> None:
    low, high = acked(2), acked(4)
    high.name = "audit"
    topic = LookedTopic(copies(6))
    state = look_state(topic, low, high)
    due(state, moved=[], polled=True)
    assert topic.tail.index.first == Position(9, 3)  # up to the lower cursor forgotten
    assert topic.floor_at == 100.0 + tuning.FLOOR_EVERY_S
