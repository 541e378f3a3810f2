"""A read of the plugin's acknowledgement feed, through the core's entry (``core.stepping.step`` with
``FeedRead``, round step 1): a broker restart's consequences, the reports held, repeats, what starts
tracking, from values only: events in, values out. One test per invariant ``core.feeding`` states.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from geosync_agent.core import stepping
from geosync_agent.core.now import Now
from geosync_agent.core.subscriptions import Feed, SubKey, Subscription, SubsTable
from geosync_core.origins import OriginAcks, Span
from geosync_core.pluginapi import BatchState, CursorReport
from geosync_core.pluginapi import Feed as Answer
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

from .test_core_planning import SUB, TOPIC, Topic, copies

OTHER = "persistent://geo/ab/payments"


@dataclass
class State:
    """The agent's state as a feed read reads it (``feeding.Feeding``)."""

    topics: dict[str, Topic] = field(default_factory=lambda: {TOPIC: Topic(copies(6))})
    subs: SubsTable = field(default_factory=SubsTable)
    feed: Feed = field(default_factory=lambda: Feed(epoch="run-1", seq=4))
    unobserved: dict[SubKey, CursorReport] = field(default_factory=dict)
    feed_left: dict[str, dict[str, tuple[AckState, AckState | None, bool]]] = field(default_factory=dict)


def tracked(cursor: int = 1, **kw: object) -> tuple[State, Subscription]:
    state = State()
    sub = Subscription(TOPIC, SUB, cursor=AckState.of(Position(9, cursor)))
    for k, v in kw.items():
        setattr(sub, k, v)
    state.subs[sub.key] = sub
    return state, sub


def report(entry: int, *batches: BatchState, topic: str = TOPIC, name: str = SUB) -> CursorReport:
    return CursorReport(topic, name, Position(9, entry), "[]", batches)


def read(
    state: State, *reports: CursorReport, epoch: str = "run-1", owned: bool = True, mono: float = 100.0
) -> stepping.Fed:
    event = stepping.FeedRead(
        Answer(epoch, 5, cursors=reports), in_scope=lambda _t, _n: True, owned=lambda _t: owned
    )
    return stepping.step(state, event, Now(mono, 1_000.0 + mono))


def test_a_broker_restart_polls_every_topic_drops_what_waits_and_applies_own_claims_again() -> None:
    own = OriginAcks.of({"a": [Span(5, 0, 1)]})
    state, sub = tracked(published=own, seen_feed=AckState.of(Position(9, 1)))
    state.unobserved[(TOPIC, "other")] = report(2, BatchState(Position(9, 7), (1,)), name="other")
    state.feed_left[TOPIC] = {SUB: (AckState.of(Position(9, 2)), None, False)}
    fed = read(state, epoch="run-2")
    assert fed.out.poll_soon == [TOPIC]
    assert state.unobserved == {}
    assert state.feed_left == {}
    assert fed.out.counts["feed_reports_dropped"] == 1
    assert sub.received == own
    assert fed.out.counts["own_claims_reapplied"] == 1
    assert sub.seen_feed is None
    assert state.feed.epoch == "run-2"
    first, first_sub = tracked(published=own, seen_feed=AckState.of(Position(9, 1)))
    first.feed = Feed()  # the agent's own first read: nothing restarted
    first.unobserved[(TOPIC, "other")] = report(2, BatchState(Position(9, 7), (1,)), name="other")
    fed = read(first, epoch="run-1")
    assert fed.out.poll_soon == []
    assert (TOPIC, "other") in first.unobserved
    assert first_sub.received == OriginAcks.of({})
    assert first_sub.seen_feed is None


def test_a_report_waits_while_paused_or_its_batches_unread_and_is_dropped_if_not_owned() -> None:
    state, sub = tracked(publish_after=200.0)
    assert read(state, report(3)).cursors == {}
    assert (TOPIC, SUB) in state.unobserved
    sub.publish_after = 0.0
    assert read(state).cursors == {TOPIC: {SUB: AckState.of(Position(9, 3))}}
    unread, _ = tracked()
    assert read(unread, report(3, BatchState(Position(9, 7), (1,)))).cursors == {}  # the tail read 9:0-5
    assert (TOPIC, SUB) in unread.unobserved
    gone, _ = tracked()
    assert read(gone, report(3), owned=False).cursors == {}
    assert gone.unobserved == {}


def test_a_repeat_of_the_last_report_is_not_looked_at_again_unless_the_cursor_moved_since() -> None:
    state, sub = tracked()
    assert read(state, report(3)).cursors == {TOPIC: {SUB: AckState.of(Position(9, 3))}}
    sub.cursor = AckState.of(Position(9, 3))  # the look took it
    repeat = read(state, report(3))
    assert repeat.cursors == {}
    assert repeat.out.counts["feed_repeats_skipped"] == 1
    sub.cursor = AckState.of(Position(9, 4))  # a write set another since
    assert read(state, report(3)).cursors == {TOPIC: {SUB: AckState.of(Position(9, 3))}}


def test_a_report_of_what_is_not_tracked_starts_its_tracking_once_and_asks_for_discovery() -> None:
    state, _ = tracked()
    known = state.subs[(OTHER, "audit")] = Subscription(OTHER, "audit")  # claims arrived first
    fed = read(
        state,
        report(2, topic=OTHER),
        report(3, topic=OTHER, name="audit"),
        report(4, topic=OTHER, name="ledger"),
        report(3, name="audit"),
        report(4, BatchState(Position(9, 3), (0,)), topic="persistent://geo/ab/third"),
    )
    assert fed.track == [OTHER, "persistent://geo/ab/third"]
    assert fed.out.rediscover == ["rediscover_for_feed"]
    assert fed.out.counts["tracked_from_feed"] == 4  # not OTHER's audit: its topic was by then
    made = state.subs[(TOPIC, "audit")]
    assert made.exists
    assert made.confirmed_at == 100.0
    assert known.confirmed_at == 0.0
    assert fed.cursors == {
        OTHER: {
            SUB: AckState.of(Position(9, 2)),
            "audit": AckState.of(Position(9, 3)),
            "ledger": AckState.of(Position(9, 4)),
        },
        TOPIC: {"audit": AckState.of(Position(9, 3))},
    }
    assert ("persistent://geo/ab/third", SUB) in state.unobserved  # its batch waits for the new tail
    state.topics[OTHER] = Topic(copies(6))  # the shell tracked them
    state.topics["persistent://geo/ab/third"] = Topic(copies(6))
    again = read(state, report(5, topic=OTHER))
    assert again.track == []
    assert again.out.rediscover == []
    assert again.out.counts["tracked_from_feed"] == 0
