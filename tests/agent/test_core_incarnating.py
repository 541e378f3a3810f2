"""The other regions' lives through the core's entry (``core.stepping.step`` with ``IncarnationsNamed`` and
``RegionRebuilt``, round step 7): what is learned, when the logs' ends are asked for first, and what a
rebuild renames, from values only: events in, values out. One test per invariant ``core.incarnating``
states.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from geosync_agent.core import incarnating, quiet, receiving, stepping
from geosync_agent.core.logview import LogView
from geosync_agent.core.now import Now
from geosync_agent.core.subscriptions import Subscription, SubsTable
from geosync_core import incarnations, resolving
from geosync_core.ackstates import AckStateMessage
from geosync_core.incarnations import Incarnation, Known
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

from .fakes import message
from .test_core_planning import SUB, TOPIC, Settings, copies

A1, A2, A3 = Incarnation(1_000, "one"), Incarnation(2_000, "two"), Incarnation(3_000, "three")
RETIRED = incarnations.retired("a", A1)
NOW = Now(100.0, 1_100.0)
END = Position(9, 7)
"""Where b's log ends when it learns of a's rebuild."""


@dataclass
class Topic:
    """A tracked topic as learning a life reads it (``incarnating.ResyncedTopic``)."""

    tail: LogView
    resync_at: float = 500.0
    walked: quiet.Walked | None = None


@dataclass
class State:
    """The agent's state as learning the regions' lives reads it (``incarnating.Learning``): region b, which
    knows a's first life and holds a subscription with claims about a's messages."""

    topics: dict[str, Topic] = field(default_factory=lambda: {TOPIC: Topic(copies(6))})
    subs: SubsTable = field(default_factory=SubsTable)
    incarnations: Known = field(default_factory=lambda: Known({"a": A1}))
    waiting: receiving.Waiting = field(default_factory=dict)
    waiting_count: int = 0
    outgoing: dict[str, list[AckStateMessage]] = field(default_factory=dict)
    checkpoint_at: float = 1_000.0
    config: Settings = field(default_factory=Settings)  # region b

    def __post_init__(self) -> None:
        self.subs[(TOPIC, SUB)] = Subscription(TOPIC, SUB, received=ABOUT_A, published=ABOUT_A)


ABOUT_A = OriginAcks.of({"a": [Span(5, 0, 3)]})
ABOUT_RETIRED = OriginAcks.of({RETIRED: [Span(5, 0, 3)]})


def named(
    state: State, sender: str, tags: dict[str, Incarnation], *, history: bool = False
) -> stepping.Learned:
    return stepping.step(state, stepping.IncarnationsNamed(sender, tags, history), NOW)


def rebuilt(state: State, *, end: Position | None = END, history: bool = False) -> stepping.Learned:
    """a's second life learned, as the shell goes on once ``read_ends`` asked: b's log ends at ``end``."""
    assert named(state, "a", {"a": A2}, history=history).read_ends
    return stepping.step(state, stepping.RegionRebuilt("a", A2, {TOPIC: end}, history), NOW)


def later(log: LogView, entry: int, *, publish_ms: int = 0) -> None:
    """b's reader reads ``9:entry``, a copy of a's ``5:entry`` published at ``publish_ms``."""
    fed = replace(
        message(TOPIC, Position(9, entry), properties={resolving.REPL_SOURCE_POSITION: f"5:{entry}"}),
        publish_ms=publish_ms,
    )
    log.take([fed], resolving.OriginResolver(local="b", lookup=lambda _t, _p: "a"), now=0.0)


def region_of(log: LogView, entry: int) -> str | None:
    origin = log.index.origin_of(Position(9, entry))
    return None if origin is None else origin.region


def test_a_region_speaks_only_for_itself() -> None:
    state = State(incarnations=Known({"a": A1, "b": A1}))
    assert named(state, "c", {"a": A2, "b": A2, "c": A3}) == stepping.Learned()
    assert state.incarnations == Known({"a": A1, "b": A1, "c": A3})  # c's own life only
    assert named(state, "b", {"b": A2}) == stepping.Learned()  # this region's own: its ZooKeeper says it
    assert state.incarnations.get("b") == A1


def test_a_newer_life_is_learned_only_with_the_logs_ends_and_never_an_older_one() -> None:
    state = State(incarnations=Known({"a": A2}))
    assert named(state, "a", {"a": A1}) == stepping.Learned()
    assert named(state, "a", {"a": A2}) == stepping.Learned()
    assert state.incarnations.get("a") == A2
    state = State()
    assert named(state, "a", {"a": A2}) == stepping.Learned(read_ends=True)
    assert state.incarnations.get("a") == A1  # nothing learned or renamed before the ends are read
    assert state.subs[(TOPIC, SUB)].received == ABOUT_A
    assert region_of(state.topics[TOPIC].tail, 0) == "a"


def test_a_rebuilt_regions_old_claims_go_by_the_retired_name() -> None:
    state = State()
    sub = state.subs[(TOPIC, SUB)]
    sub.translated, sub.planned = AckState.of(Position(9, 3)), (None, 1, ABOUT_A)
    queued = AckStateMessage(TOPIC, SUB, "b", ABOUT_A)
    state.outgoing["geo/ab"] = [queued]
    learned = rebuilt(state)
    assert (sub.received, sub.published) == (ABOUT_RETIRED, ABOUT_RETIRED)
    assert sub.translated is None  # made again from the renamed claims
    assert sub.planned is None
    assert state.outgoing["geo/ab"] == [replace(queued, acks=ABOUT_RETIRED)]
    assert state.incarnations.get("a") == A2
    assert state.checkpoint_at == NOW.mono
    assert learned.out.counts["incarnations_changed"] == 1
    assert learned.rebuilt == incarnating.Rebuilt("a", A1, A2, 1, RETIRED)


def test_a_rebuilt_regions_old_entries_go_by_the_retired_name_up_to_the_logs_ends() -> None:
    state = State()
    log = state.topics[TOPIC].tail
    learned = rebuilt(state, end=Position(9, 7))
    assert learned.reread == []
    later(log, 6)
    later(log, 7)
    later(log, 8)  # above the end: the new life's
    assert [region_of(log, e) for e in (0, 5, 6, 7, 8)] == [RETIRED, RETIRED, RETIRED, RETIRED, "a"]


def test_learned_from_history_entries_are_told_apart_by_publish_time_and_every_tail_is_read_again() -> None:
    state = State()
    log = state.topics[TOPIC].tail
    learned = rebuilt(state, end=Position(9, 9), history=True)
    assert learned.reread == [TOPIC]
    assert "rebuilt" in log.stale_reason
    later(log, 6, publish_ms=A2.created_ms - 1)  # the old life's
    later(log, 7, publish_ms=A2.created_ms)  # below the end, but the new life's
    assert [region_of(log, e) for e in (6, 7)] == [RETIRED, "a"]


def test_a_regions_first_life_brings_the_resync_of_its_claims_topics_forward() -> None:
    state = State(incarnations=Known({}))
    state.topics["persistent://geo/ab/other"] = Topic(LogView("persistent://geo/ab/other", -1))
    learned = named(state, "a", {"a": A1})
    assert state.incarnations.get("a") == A1
    assert state.topics[TOPIC].resync_at == NOW.mono
    assert state.topics["persistent://geo/ab/other"].resync_at == 500.0  # no claims about a there
    assert learned.out.counts["resyncs_for_incarnations"] == 1
    assert named(state, "a", {"a": A1}).out.counts["resyncs_for_incarnations"] == 0  # once


def test_claims_that_waited_for_a_life_are_released_once_it_is_learned_and_only_then() -> None:
    state = State()
    early, earlier = AckStateMessage(TOPIC, SUB, "c", ABOUT_A), AckStateMessage(TOPIC, SUB, "c", ABOUT_A)
    state.waiting[("a", A2)] = deque([early])
    state.waiting[("a", A3)] = deque([earlier])
    state.waiting_count = 2
    assert named(state, "c", {"a": A2}).released == []  # c speaks for itself, not a
    learned = rebuilt(state)
    assert learned.released == [({"a": A2}, [early])]
    assert list(state.waiting) == [("a", A3)]
    assert state.waiting_count == 1
