"""One acknowledgement followed from region a to region b's cursor through the agents' rounds (fake
ports): through the plugin and through the admin API, the move gate, plans made, skipped and made again,
cursor writes landed. Each test runs in milliseconds; the lab tests prove the same against real brokers."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import replace
from typing import Any

import pytest

from geosync_adapters import adminhttp
from geosync_agent.core import logview, tuning
from geosync_core import pluginapi, syncing
from geosync_core.capabilities import Capability
from geosync_core.indexing import OriginRun
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, RangeSet
from tests.agent.fakes import FakeRegion, Harness, message
from tests.agent.pairs import (
    A_LOG,
    B_LOG,
    CONTROL,
    NS,
    SUB,
    TOPIC,
    carry,
    pair,
    states_sent,
)


def test_an_acknowledgement_travels_from_a_to_b_with_its_hole() -> None:
    a, b = pair()
    a.step()
    b.step()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[3]])  # a hole at 5:2
    a.step()
    assert carry(a, b) == 1
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1]).ack(B_LOG[3])
    assert ("plugin_ack", TOPIC, SUB, "9:1", ("9:3",)) in b.region.calls
    assert a.agent.caps.get(Capability.PLUGIN_FEED) is True
    assert b.agent.caps.get(Capability.PLUGIN_CURSOR_WRITES) is None  # its outcome lands next round ...
    b.step(0.01)
    assert b.agent.caps.get(Capability.PLUGIN_CURSOR_WRITES) is True  # ... before that round's observe
    # b's cursor caught up with what a told it: nothing new to echo back.
    b.region.feed.append(b.region.report(TOPIC, SUB))
    b.step()
    assert carry(b, a) == 0


def test_applying_again_changes_nothing() -> None:
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:3])
    a.step()
    carry(a, b)
    b.step()
    writes = [c for c in b.region.calls if c[0] == "plugin_ack"]
    for _ in range(3):
        b.step()
    assert [c for c in b.region.calls if c[0] == "plugin_ack"] == writes


def test_without_the_plugin_moves_go_through_the_admin_api_and_holes_wait_for_consumers() -> None:
    a, b = pair()
    b.region.plugin = False
    b.region.consumers[(TOPIC, SUB)] = 1
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[2]])
    a.step()
    carry(a, b)
    b.step()  # the plugin write is refused ...
    b.step(0.01)  # ... and moved through the admin API when its outcome lands
    assert b.agent.caps.get(Capability.PLUGIN_CURSOR_WRITES) is False
    assert ("expire", TOPIC, SUB, B_LOG[0]) in b.region.calls
    state = b.agent.subs[(TOPIC, SUB)]
    assert state.pending_holes == 1  # a consumer is connected: no shadow consumer joins
    assert not b.messaging.shadow
    b.region.consumers[(TOPIC, SUB)] = 0
    b.discover()  # the consumer left: the next discovery pass says so
    b.step(2.0)
    b.step(2.0)
    assert b.messaging.shadow == [(TOPIC, SUB, (B_LOG[2],))]
    assert b.agent.caps.get(Capability.SKIP_BY_IDS) is False
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[0]).ack(B_LOG[2])


def test_one_mark_delete_move_in_flight() -> None:
    a, b = pair(min_apply_interval_s=0.5)
    b.region.plugin = False
    expire = b.region.expire_messages
    b.region.expire_messages = lambda *args, **kw: None  # type: ignore[method-assign]
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()
    carry(a, b)
    b.step(0.1)  # the plugin write is refused ...
    b.step(0.1)  # ... and the move goes through the admin API when its outcome lands
    moves = b.agent.stats.counters["mark_delete_moves"]
    b.step(0.1)
    b.step(0.1)
    assert b.agent.stats.counters["mark_delete_moves"] == moves == 1  # not seen done yet, not resent
    b.step(3.0)  # past the settle time: sent again
    assert b.agent.stats.counters["mark_delete_moves"] == 2
    b.region.expire_messages = expire  # type: ignore[method-assign]


def test_the_feeds_news_goes_out_before_the_polls_and_claims_that_came_during_them_are_applied() -> None:
    """The round's critical path does not wait on its polls (at 10,000 subscriptions a saturated machine's
    polls took seconds): a's acknowledgements are sent before a's polls begin, and claims that reach b while
    b's polls wait on the broker are applied in that same round."""
    a, b = pair()
    a.step()
    b.step()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[3]])  # a hole at 5:2
    sent_when_polled: list[int] = []
    a_polls, b_polls = a.region.internal_stats, b.region.internal_stats

    def a_poll(topic: str, **kw: Any) -> dict[str, Any]:
        sent_when_polled.append(len(a.sent_on(CONTROL)))
        return a_polls(topic, **kw)

    def b_poll(topic: str, **kw: Any) -> dict[str, Any]:
        carry(a, b)  # a's claims reach b's control topic while b's agent polls
        return b_polls(topic, **kw)

    a.region.internal_stats = a_poll  # type: ignore[method-assign]
    b.region.internal_stats = b_poll  # type: ignore[method-assign]
    a.step(60.0)  # past the resync: every cursor is polled
    assert sent_when_polled[:1] == [1]  # polled once the state was sent
    b.step(60.0)
    assert ("plugin_ack", TOPIC, SUB, "9:1", ("9:3",)) in b.region.calls


def test_a_cursor_read_again_unchanged_keeps_its_object_and_is_not_planned_again() -> None:
    """At 10,000 subscriptions the apply step tells the unchanged ones by identity: a poll that parses a
    cursor equal to the one held keeps the held object, and apply plans nothing for it."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[2]])
    a.step()
    carry(a, b)
    b.step()
    b.step()
    state = b.agent.subs[(TOPIC, SUB)]
    held, plans = state.cursor, state.planned
    assert held is not None
    assert plans is not None
    b.step(60.0)  # past the resync: the cursor is polled and parsed anew
    assert ("internal_stats", TOPIC) in b.region.calls[-3:]
    assert state.cursor is held
    assert state.planned is plans


def test_a_backlog_longer_than_the_planning_window_is_applied_over_several_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logview, "LOG_WINDOW", 2)
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [*A_LOG[:4], A_LOG[5]])
    a.step()
    carry(a, b)
    seen = []
    for _ in range(4):
        b.step()
        seen.append(b.region.cursors[(TOPIC, SUB)])
    assert seen[0] == AckState.of(B_LOG[1])  # the first window: two entries
    assert seen[-1] == AckState.of(B_LOG[3]).ack(B_LOG[5])


def test_entries_beyond_the_planning_window_above_a_hole_kept_for_good_are_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 17.8's hour: a's consumer never acknowledges the first message, so the mark-delete stays below
    it in both regions. A window of the first LOG_WINDOW entries above the mark-delete never moved, and b
    stopped applying 50,000 entries above its first hole; the budget counts only the entries the cursor
    does not hold, so each plan goes past what the last one applied."""
    monkeypatch.setattr(logview, "LOG_WINDOW", 2)
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[1:])
    a.step()
    carry(a, b)
    for _ in range(6):
        b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(Position(9, -1)).ack(*B_LOG[1:])


def deliver_interleaved(a: Harness | None, b: Harness | None) -> None:
    """What the readers of ``interleaved_pair`` hand over, from the earliest message."""
    if a is not None:
        a.messaging.deliver(TOPIC, message(TOPIC, Position(5, 0)))
        for local, origin in ((Position(5, 1), "9:0"), (Position(5, 2), "9:2")):
            stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": origin}
            a.messaging.deliver(TOPIC, message(TOPIC, local, properties=stamp, producer="b-1-0"))
    if b is not None:
        b.messaging.deliver(TOPIC, message(TOPIC, Position(9, 0)))
        stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": "5:0"}
        b.messaging.deliver(TOPIC, message(TOPIC, Position(9, 1), properties=stamp, producer="a-1-0"))
        b.messaging.deliver(TOPIC, message(TOPIC, Position(9, 2)))


def interleaved_pair() -> tuple[Harness, Harness]:
    """Both regions produce: b's log is b's 9:0, a's 5:0 (copy), b's 9:2; a's log is a's 5:0 then copies of
    b's 9:0 and 9:2. b names its own messages' acknowledgement as one span across the copy between them
    (9:0-9:2), a names the same two messages one by one."""
    a = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: [Position(5, e) for e in range(3)]})
    b = FakeRegion("b", {NS: ["a", "b"]}, topics={TOPIC: [Position(9, e) for e in range(3)]})
    for region in (a, b):
        region.cursors[(TOPIC, SUB)] = AckState.of(Position(region.topics[TOPIC][0].ledger, -1))
    a.origin_runs[TOPIC] = [
        OriginRun(5, 0, 1, "a"),
        OriginRun(5, 1, 1, "b", Position(9, 0)),
        OriginRun(5, 2, 1, "b", Position(9, 2)),
    ]
    b.origin_runs[TOPIC] = [
        OriginRun(9, 0, 1, "b"),
        OriginRun(9, 1, 1, "a", Position(5, 0)),
        OriginRun(9, 2, 1, "b"),
    ]
    ha, hb = Harness.build(a), Harness.build(b)
    for h in (ha, hb):
        h.discover()
        h.step()
    deliver_interleaved(ha, hb)
    for h in (ha, hb):
        h.step()
    carry(ha, hb)
    carry(hb, ha)
    return ha, hb


def test_the_same_acknowledgements_named_otherwise_do_not_move_where_a_subscription_is_consumed() -> None:
    """CI's rewind test, one run in twenty: a's consumers acknowledged everything, b echoed it with its own
    messages joined into one span, and a took the new form for acknowledgements made in b first. a was no
    longer where the subscription is consumed, so the user's rewind in a was not propagated (and b's claims
    acknowledged again what the rewind took back)."""
    a, b = interleaved_pair()
    a.region.consumer_acks(TOPIC, SUB, [Position(5, e) for e in range(3)])
    a.step()
    assert a.agent.subs[(TOPIC, SUB)].active
    carry(a, b)
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(Position(9, 2))
    assert not b.agent.subs[(TOPIC, SUB)].active  # nothing acknowledged in b first
    b.step(60.0)  # b's resync: its claims name 9:0-9:2 as one span
    # That joined form is also what keeps a's claims about b's messages compact: a names them run by run,
    # a span per run of b's messages between a's own. A change that had b take the cursors its writes moved
    # as told, without translating them, sent a's form back instead, and a soak's claims grew by a span per
    # acknowledgement (session 29, reverted).
    assert any(Span(9, 0, 2) in acks.spans("b") for _, acks in states_sent(b))
    assert not b.agent.subs[(TOPIC, SUB)].active  # the joined span names no message b's consumers took
    carry(b, a)
    a.step()
    assert a.agent.subs[(TOPIC, SUB)].active
    # The user rewinds a to the earliest message: b follows.
    a.region.cursors[(TOPIC, SUB)] = AckState.of(Position(5, -1))
    a.region.consumer_acks(TOPIC, SUB, [])
    a.step()
    assert a.agent.stats.counters["rewinds"] == 1
    a.step()  # a forgot what every subscription had acknowledged: it reads the topic again first
    deliver_interleaved(a, None)
    a.step()
    carry(a, b)
    b.step()
    assert b.agent.stats.counters["rewinds_followed"] == 1
    b.step()  # so did b
    deliver_interleaved(None, b)
    for _ in range(3):
        b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(Position(9, -1))


def test_acknowledgements_made_in_another_region_first_still_move_where_it_is_consumed() -> None:
    a, b = interleaved_pair()
    a.region.consumer_acks(TOPIC, SUB, [Position(5, 0)])
    a.step()
    carry(a, b)
    b.step()
    b.region.consumer_acks(TOPIC, SUB, [Position(9, 0), Position(9, 1)])  # a consumer in b: b's 9:0 is news
    b.step()
    assert b.agent.subs[(TOPIC, SUB)].active
    carry(b, a)
    a.step()
    assert not a.agent.subs[(TOPIC, SUB)].active


def test_a_costly_plan_waits_before_it_is_made_again_for_cursor_moves_but_not_for_claims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tuning, "PLAN_WAIT_FACTOR", 1e9)  # every plan counts as costly
    monkeypatch.setattr(tuning, "MAX_PLAN_WAIT_S", 5.0)
    a, b = pair()
    b.metered = True  # plans timed with the round's CPU meter
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0]])
    a.step()
    carry(a, b)
    b.step()
    state = b.agent.subs[(TOPIC, SUB)]
    counters = b.agent.stats.counters
    made = counters["plans_made"]
    assert made >= 1
    b.step()  # the write lands
    # As after a plan its budget cut short (a cursor that moved on from an empty plan needs none at all).
    state.planned_nothing = False
    b.region.consumer_acks(TOPIC, SUB, [B_LOG[5]])  # b's own cursor moves: no new claim
    b.step()
    assert counters["plans_made"] == made  # not planned again within the wait
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[1]])  # new claims: planned at once
    a.step()
    carry(a, b)
    b.step()
    assert counters["plans_made"] > made
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1]).ack(B_LOG[5])
    b.step()  # the write lands
    made = counters["plans_made"]
    state.planned_nothing = False
    b.region.consumer_acks(TOPIC, SUB, [B_LOG[4]])
    b.step()
    assert counters["plans_made"] == made
    b.step(5.0)  # the wait is over
    assert counters["plans_made"] > made
    assert state.plan_took > 0


def test_a_cursor_consumers_moved_on_from_an_empty_plan_is_not_planned_again() -> None:
    """In the consuming region every acknowledgement moves a cursor: planning it again against claims it
    already holds found nothing, for every acknowledgement (at 10,000 subscriptions, a's whole apply step).
    A claim that names something new is planned at once."""
    a, b = pair()
    b.region.consumer_acks(TOPIC, SUB, [B_LOG[3]])  # b's consumers acknowledge the copy of a's 5:3
    b.step()
    carry(b, a)
    a.step()
    assert a.region.cursors[(TOPIC, SUB)] == AckState.of(Position(5, -1)).ack(A_LOG[3])
    a.step()  # the write lands
    counters = a.agent.stats.counters
    made, skipped = counters["plans_made"], counters["plans_skipped_for_moves_on"]
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1]])
    a.step()
    a.step()
    assert counters["plans_made"] == made
    assert counters["plans_skipped_for_moves_on"] > skipped
    assert a.region.cursors[(TOPIC, SUB)] == AckState.of(A_LOG[1]).ack(A_LOG[3])
    b.region.consumer_acks(TOPIC, SUB, [B_LOG[5]])  # news from b: planned and applied at once
    b.step()
    carry(b, a)
    a.step()
    assert counters["plans_made"] > made
    assert a.region.cursors[(TOPIC, SUB)] == AckState.of(A_LOG[1]).ack(A_LOG[3], A_LOG[5])


def test_a_plan_is_made_again_for_appended_entries_only_when_the_claims_name_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every topic grows all the time: planning each subscription again at every new entry was most of b's
    apply step at 10,000 subscriptions. Entries nobody claims change no plan; a claim that arrived before
    the copy it names is applied as soon as the copy is read."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1])
    b.step()  # the write lands
    plans: list[str] = []
    plan_apply = syncing.plan_apply

    def counted(*args: object, **kwargs: object) -> syncing.ApplyPlan:
        plans.append("planned")
        return plan_apply(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(syncing, "plan_apply", counted)
    for entry in (6, 7):  # b's own producer: nobody claims these
        own = Position(9, entry)
        b.region.topics[TOPIC].append(own)
        b.messaging.deliver(TOPIC, message(TOPIC, own))
    b.step()
    b.step()
    assert plans == []
    # not even looked at: the new entries' origins lie above everything claimed (``core.quiet``)
    assert b.agent.stats.counters["apply_looks_skipped"] >= 2
    # a acknowledges a message of its own whose copy b has not read yet: planned at the claim (nothing to
    # apply for it yet), and again when the copy is read.
    newest = Position(5, 6)
    a.region.topics[TOPIC].append(newest)
    a.messaging.deliver(TOPIC, message(TOPIC, newest))
    a.step()
    a.region.consumer_acks(TOPIC, SUB, [*A_LOG[2:], newest])
    a.step()
    carry(a, b)
    settled = b.agent.stats.counters["plans_settled_by_writes"]
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[5])
    b.step()  # the write answered the cursor the plan makes: not planned again
    assert len(plans) == 1
    assert b.agent.stats.counters["plans_settled_by_writes"] == settled + 1
    copy = Position(9, 8)
    b.region.topics[TOPIC].append(copy)
    b.region.origin_runs[TOPIC].append(OriginRun(9, 8, 1, "a", newest))  # what the interceptor recorded
    stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(newest)}
    b.messaging.deliver(TOPIC, message(TOPIC, copy, properties=stamp, producer="a-1-0"))
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[5]).ack(copy)
    assert len(plans) == 2  # and for the copy


class HeldPool(Executor):
    """Work submitted waits until ``release`` (a broker slow to answer the cursor writes)."""

    def __init__(self) -> None:
        self.held: list[tuple[Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.held.append((future, lambda: fn(*args, **kwargs)))
        return future

    def release(self) -> None:
        held, self.held = self.held, []
        for future, call in held:
            future.set_result(call())


def test_the_round_does_not_wait_for_its_cursor_writes_and_the_next_folds_them_before_observing() -> None:
    a, b = pair()
    pool = b.agent.effector.pool = HeldPool()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[2]])
    a.step()
    carry(a, b)
    before = b.region.cursors[(TOPIC, SUB)]
    writes = b.agent.stats.counters.get("plugin_acks", 0)
    b.step()  # plans and sends the write, and returns without its answer
    assert len(pool.held) == 1
    assert b.agent.writes_in_flight is not None
    assert b.region.cursors[(TOPIC, SUB)] == before
    # Meanwhile the broker's feed reports a newer cursor (a consumer in b acknowledged 9:3 after the write).
    pool.release()
    written = b.region.cursors[(TOPIC, SUB)]
    assert written == AckState.of(B_LOG[0]).ack(B_LOG[2])
    b.region.consumer_acks(TOPIC, SUB, [B_LOG[3]])
    b.step(0.1)  # the write's answer is folded first, then the feed's newer report is observed
    state = b.agent.subs[(TOPIC, SUB)]
    assert b.agent.writes_in_flight is None
    assert b.agent.stats.counters["plugin_acks"] == writes + 1
    assert state.cursor == written.ack(B_LOG[3])  # the newer cursor, not the write's older answer
    assert b.agent.stats.counters.get("rewinds", 0) == 0
    assert state.generation == 0


def test_the_feeds_repeats_of_a_report_are_skipped_unread_and_a_changed_report_is_taken() -> None:
    """The plugin names a subscription again for its settle time after each acknowledgement: the same
    report again is skipped; a different one (acknowledged further, rewound) is taken as before, and after
    the broker restarted (a new epoch) the same report counts as new."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[2]])
    a.step()
    assert [name for name, _ in states_sent(a)] == [SUB]
    carry(a, b)
    a.region.feed.append(a.region.report(TOPIC, SUB))  # the repeat within the settle time
    a.step(0.1)
    assert a.agent.stats.counters["feed_repeats_skipped"] == 1
    assert states_sent(a) == []
    # Another cursor was taken since (a poll or a write answered one): the same report is news against it.
    state = a.agent.subs[(TOPIC, SUB)]
    taken = state.cursor
    assert taken is not None
    state.cursor = taken.ack(A_LOG[1])
    a.region.feed.append(a.region.report(TOPIC, SUB))
    a.step(0.1)
    assert a.agent.stats.counters["feed_repeats_skipped"] == 1
    assert state.cursor == taken
    carry(a, b)
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[1]])  # acknowledged further: taken and sent
    a.step(0.1)
    assert a.agent.stats.counters["feed_repeats_skipped"] == 1
    assert states_sent(a) == [(SUB, OriginAcks.of({"a": [Span(5, 0, 2)]}))]
    carry(a, b)
    # Someone in a rewinds the subscription to its start: a different report, a rewind, a new generation.
    a.region.cursors[(TOPIC, SUB)] = AckState.of(Position(5, -1))
    a.region.feed.append(a.region.report(TOPIC, SUB))
    a.step(0.1)
    assert a.agent.stats.counters["rewinds"] == 1
    assert state.cursor == AckState.of(Position(5, -1))
    # The broker restarts: the first report of the new epoch is taken even though it is the same.
    generation = state.generation
    a.region.feed.append(a.region.report(TOPIC, SUB))
    real = a.region.plugin_feed
    a.region.plugin_feed = lambda *, since, epoch="", acked=True: replace(  # type: ignore[method-assign]
        real(since=since, epoch=epoch, acked=acked), epoch="epoch-2"
    )
    a.step(0.1)
    assert a.agent.stats.counters["feed_repeats_skipped"] == 1
    assert state.fed is not None
    assert state.generation == generation


@pytest.mark.parametrize(("claims_from", "read"), [("cursor", False), ("acknowledgements", True)])
def test_the_feed_s_acked_blocks_are_read_only_where_claims_are_made_of_them(
    claims_from: str, read: bool
) -> None:
    region = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    region.cursors[(TOPIC, SUB)] = AckState.of(Position(5, -1))
    a = Harness.build(region, claims_from=claims_from)
    real, asked = region.plugin_feed, []

    def recording(*, since: int, epoch: str = "", acked: bool = True) -> pluginapi.Feed:
        asked.append(acked)
        return real(since=since, epoch=epoch, acked=acked)

    region.plugin_feed = recording  # type: ignore[method-assign]
    a.discover()
    a.step()
    a.step(0.1)
    assert asked
    assert set(asked) == {read}


def test_a_broker_restart_has_every_topic_polled_again_but_the_agent_s_own_first_feed_read_does_not() -> None:
    """A new epoch means the broker restarted: what its feed lost only a poll can tell. An agent's first read
    of the feed is no restart: every topic was polled at its first round (a second wave of polls of every
    topic came a round later, most of a restarted agent's rounds at 10,000 subscriptions)."""
    region = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    region.cursors[(TOPIC, SUB)] = AckState.of(Position(5, -1))
    a = Harness.build(region)
    real = region.plugin_feed

    def failing(*, since: int, epoch: str = "", acked: bool = True) -> pluginapi.Feed:
        raise adminhttp.AdminError("the broker is busy")

    region.plugin_feed = failing  # type: ignore[method-assign]
    a.discover()
    a.step()  # the first round polls the topic; its feed read fails (or finds no namespace yet)
    polls = a.agent.stats.counters["cursor_polls"]
    assert polls >= 1
    assert a.agent.stats.counters["feed_reads"] == 0
    a.region.plugin_feed = real  # type: ignore[method-assign]
    a.step(0.01)  # well within the poll interval (0.25 s): no topic is due by its schedule
    assert a.agent.stats.counters["feed_reads"] == 1
    assert a.agent.stats.counters["cursor_polls"] == polls
    runs: list[str] = []

    def restarted(*, since: int, epoch: str = "", acked: bool = True) -> pluginapi.Feed:
        runs.append(epoch)
        return replace(real(since=since, epoch=epoch, acked=acked), epoch="epoch-2")

    region.plugin_feed = restarted  # type: ignore[method-assign]
    a.step(0.01)
    assert a.agent.stats.counters["cursor_polls"] > polls
    a.step(0.01)
    # Each read names the broker run its ``since`` counts in: the first run's, then the restarted one's.
    assert runs == ["epoch-1", "epoch-2"]


def test_a_copy_read_after_the_claim_that_names_it_is_applied_at_once_even_while_a_costly_plan_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan that took long waits before it is made again for cursor moves or new entries alone
    (PLAN_WAIT_FACTOR), but not for the copy of an entry the claims already name: that is news as the claim
    was (on a saturated machine every plan looked costly and such copies waited up to 2 s)."""
    monkeypatch.setattr(tuning, "PLAN_WAIT_FACTOR", 1e9)  # every plan counts as costly
    monkeypatch.setattr(tuning, "MAX_PLAN_WAIT_S", 60.0)
    a, b = pair()
    b.metered = True  # plans timed with the round's CPU meter
    newest = Position(5, 6)
    a.region.topics[TOPIC].append(newest)
    a.messaging.deliver(TOPIC, message(TOPIC, newest))
    a.step()
    a.region.consumer_acks(TOPIC, SUB, [*A_LOG, newest])
    a.step()
    carry(a, b)
    b.step()  # planned at the claim: everything but the copy b has not read yet
    b.step(0.1)
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[5])
    state = b.agent.subs[(TOPIC, SUB)]
    assert b.clock < state.plan_after  # the wait is in force
    copy = Position(9, 6)
    b.region.topics[TOPIC].append(copy)
    b.region.origin_runs[TOPIC].append(OriginRun(9, 6, 1, "a", newest))
    stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(newest)}
    b.messaging.deliver(TOPIC, message(TOPIC, copy, properties=stamp, producer="a-1-0"))
    b.step(0.1)
    b.step(0.1)  # the write's outcome lands
    assert b.clock < state.plan_after
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(copy)


def test_holes_for_a_subscription_deleted_here_since_discovery_take_it_as_deleted_not_as_an_error() -> None:
    """b's copy is deleted after discovery listed it and before the admin move of a's hole lands: the
    effector finds it gone and applies nothing (issue 45, case 1); the round takes it as deleted here, as a
    discovery pass would, instead of an apply error planned and retried every round."""
    a, b = pair(plugin_cursors=False)
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[1]])  # a hole at A_LOG[0]
    a.step()
    carry(a, b)
    del b.region.cursors[(TOPIC, SUB)]  # an operator (or expiry) deletes b's copy
    for _ in range(3):
        b.step()
    assert b.agent.stats.counters.get("subscriptions_deleted_here") == 1
    assert b.agent.stats.counters.get("apply_errors", 0) == 0
    assert (TOPIC, SUB) not in b.region.cursors  # nothing created it again


LATER = f"persistent://{NS}/later"


def _feeding_acked(region: FakeRegion, blocks: list[pluginapi.AckedSet]) -> None:
    """The fake plugin's feed hands ``blocks`` over once, as ``acked`` (claims made of acknowledgements)."""
    real = region.plugin_feed

    def feeding(*, since: int, epoch: str = "", acked: bool = True) -> pluginapi.Feed:
        given, blocks[:] = tuple(blocks), []
        return replace(real(since=since, epoch=epoch, acked=acked), acked=given)

    region.plugin_feed = feeding  # type: ignore[method-assign]


def test_acked_blocks_for_a_subscription_not_tracked_yet_wait_for_it() -> None:
    """The plugin hands a block over once: one naming a topic discovery has not found yet (its namespace
    just replicated, the topic just created) is held until the agent tracks it, not dropped for good."""
    region = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    a = Harness.build(region)
    _feeding_acked(region, [pluginapi.AckedSet(LATER, SUB, RangeSet.parse("[(7:-1..7:2]]"))])
    a.discover()
    a.step(0.1)  # the block arrives; ``later`` is not tracked
    assert a.agent.stats.counters["acked_blocks_dropped"] == 0
    region.topics[LATER] = [Position(7, e) for e in range(5)]
    region.cursors[(LATER, SUB)] = AckState.of(Position(7, 2))
    a.discover()
    a.step(0.1)
    a.step(0.1)
    acked = a.agent.subs[(LATER, SUB)].acked
    assert acked is not None
    assert Position(7, 2) in acked
    assert Position(7, 3) not in acked


def test_acked_blocks_held_too_long_are_dropped_and_counted() -> None:
    region = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    a = Harness.build(region)
    _feeding_acked(region, [pluginapi.AckedSet(LATER, SUB, RangeSet.parse("[(7:-1..7:2]]"))])
    a.discover()
    a.step(0.1)
    a.step(tuning.HELD_ACKED_S / 2)
    assert a.agent.stats.counters["acked_blocks_dropped"] == 0
    a.step(tuning.HELD_ACKED_S)
    assert a.agent.stats.counters["acked_blocks_dropped"] == 1
    assert not a.agent.feed.held


def test_acknowledgements_a_broker_restart_lost_here_are_written_back_from_this_regions_claims() -> None:
    """A broker killed before it persisted its cursor forgets the last acknowledgements (Pulsar writes a
    cursor at most once a second). They were claimed already, and the other regions hold them; with claims
    made of what consumers acknowledged no other region claims them back here, so the agent writes its own
    claims back once the feed shows the broker restarted: the region's consumers do not get those messages
    again, and a failover into this region is judged safe again (the lab's chaos runs: 'c has not applied
    157 acknowledgement(s) of b' after c's broker was killed)."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[3]])
    a.step()
    assert carry(a, b) == 1
    b.step()
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[0])  # the broker restarted and lost 5:1 and 5:3
    real = a.region.plugin_feed
    a.region.plugin_feed = lambda *, since, epoch="", acked=True: replace(  # type: ignore[method-assign]
        real(since=since, epoch=epoch, acked=acked), epoch="epoch-2"
    )
    a.region.feed.append(a.region.report(TOPIC, SUB))
    a.step()  # the cursor lies below what the tail forgot: the topic is read again
    a.step(0.01)  # its new reader opens
    for p in A_LOG:
        a.messaging.deliver(TOPIC, message(TOPIC, p))
    a.step(0.01)
    a.step(0.01)
    assert a.region.cursors[(TOPIC, SUB)] == AckState.of(A_LOG[1]).ack(A_LOG[3])
    assert a.agent.stats.counters["own_claims_reapplied"] == 1
