"""A discovery pass's listing taken into the state through the core's entry (``core.stepping.step`` with
``Discovered``, over ``core.adopting``): from values only.

One test per invariant ``core.adopting`` states.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from geosync_agent.core import adopting, stepping, tuning
from geosync_agent.core.now import Now
from geosync_agent.core.subscriptions import SubKey, Subscription, SubsTable
from geosync_core import pluginapi
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

ORDERS = "persistent://geo/ab/orders"
AUDIT = "persistent://geo/ab/audit"
NOW = Now(100.0, 10_000.0)


@dataclass
class Config:
    resync_interval_s: float = 60.0


@dataclass
class Tracked:
    tracked_at: float = 0.0


@dataclass
class State:
    """The state as adopting reads it (``adopting.Adopting``)."""

    topics: dict[str, Tracked]
    subs: SubsTable = field(default_factory=SubsTable)
    config: Config = field(default_factory=Config)
    unobserved: dict[SubKey, pluginapi.CursorReport] = field(default_factory=dict)
    lookups: set[str] = field(default_factory=set)
    claimed_untracked: dict[str, tuple[float, float]] = field(default_factory=dict)


def sub(agent: State, topic: str, name: str, *, confirmed_at: float = 10.0) -> Subscription:
    state = Subscription(topic, name, cursor=AckState.of(Position(9, 1)))
    state.confirmed_at = confirmed_at
    agent.subs[state.key] = state
    return state


def report(topic: str, name: str) -> pluginapi.CursorReport:
    return pluginapi.CursorReport(topic, name, Position(9, 1), "[]", ())


def discovered(
    agent: State,
    listed: tuple[str, ...],
    subscriptions: dict[str, dict[str, tuple[int, str]]] | None = None,
    scanned_at: float | None = 50.0,
) -> adopting.Adopted:
    return stepping.step(agent, stepping.Discovered(listed, subscriptions or {}, scanned_at), NOW)


def test_a_topic_not_listed_is_forgotten_unless_tracked_after_the_pass_began() -> None:
    agent = State({ORDERS: Tracked(10.0), AUDIT: Tracked(60.0)})
    old, new = sub(agent, ORDERS, "s"), sub(agent, AUDIT, "s")
    agent.unobserved[old.key] = report(ORDERS, "s")
    agent.claimed_untracked[ORDERS] = (0.0, 1.0)
    out = discovered(agent, ())
    assert out.gone == [ORDERS]  # audit was tracked at 60, after the pass began at 50
    assert list(agent.subs) == [new.key]
    assert not agent.unobserved
    assert not agent.claimed_untracked
    assert out.counts["topics_forgotten"] == 1
    assert out.notices == [adopting.TopicForgotten(ORDERS)]
    assert discovered(agent, (), scanned_at=None).gone == []  # no start time: nothing is forgotten
    assert new.key in agent.subs


def test_claims_about_a_topic_neither_listed_nor_tracked_go_once_no_region_spoke_of_them() -> None:
    agent = State({})
    quiet_s = tuning.UNLISTED_CLAIMS_RESYNCS * 60.0
    stale, fresh, listed = sub(agent, ORDERS, "a"), sub(agent, ORDERS, "b"), sub(agent, AUDIT, "c")
    stale.received_from["b"] = NOW.wall - quiet_s - 1
    fresh.received_from["b"] = NOW.wall - quiet_s + 1
    agent.lookups.add(ORDERS)
    out = discovered(agent, (AUDIT,))
    assert list(agent.subs) == [fresh.key, listed.key]
    assert out.counts["claims_forgotten"] == 1
    assert out.notices == [adopting.ClaimsForgotten([stale.key], quiet_s)]
    fresh.received_from["b"] = 0.0
    discovered(agent, (AUDIT,))
    assert list(agent.subs) == [listed.key]
    assert ORDERS not in agent.lookups


def test_a_listed_subscription_is_confirmed_and_one_never_read_is_polled_at_once() -> None:
    agent = State({ORDERS: Tracked(), AUDIT: Tracked()})
    read = sub(agent, AUDIT, "read")
    back = sub(agent, ORDERS, "back")
    back.deleted_here, back.exists = True, False
    agent.unobserved[back.key] = report(ORDERS, "back")
    out = discovered(
        agent, (ORDERS, AUDIT), {ORDERS: {"new": (2, "Shared"), "back": (0, "")}, AUDIT: {"read": (1, "")}}
    )
    new = agent.subs[(ORDERS, "new")]
    assert new.exists
    assert new.confirmed_at == 50.0
    assert new.consumers == 2
    assert back.exists
    assert not back.deleted_here
    assert back.key not in agent.unobserved
    assert read.confirmed_at == 50.0
    assert read.consumers == 1
    assert out.poll_soon == [ORDERS, ORDERS]  # audit's one was read before


def test_a_subscription_not_listed_stops_existing_and_one_confirmed_before_was_deleted_here() -> None:
    agent = State({ORDERS: Tracked()})
    gone, seen_since, never = (
        sub(agent, ORDERS, "gone"),
        sub(agent, ORDERS, "seen", confirmed_at=70.0),
        sub(agent, ORDERS, "never", confirmed_at=0.0),
    )
    out = discovered(agent, (ORDERS,), {ORDERS: {}})
    assert not gone.exists
    assert gone.deleted_here
    assert seen_since.exists
    assert not seen_since.deleted_here
    assert not never.exists
    assert not never.deleted_here
    assert out.counts["subscriptions_deleted_here"] == 1
    assert out.notices == [adopting.DeletedHere(gone)]
