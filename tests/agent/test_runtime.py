"""The agent's round against fake ports: one acknowledgement followed from region a to region b's cursor, the
admin-API path, the move gate, refusals and untrusted stamps. Each test runs in milliseconds; the lab tests
prove the same against real brokers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from geosync_adapters import admin as adm
from geosync_agent import discovering, supervising, tailing
from geosync_agent.core import tuning
from geosync_agent.recent import Timeline
from geosync_agent.runtime import Now
from geosync_agent.snapshotting import TopicSnapshots
from geosync_core import envelopes, pacing, pluginapi, syncing
from geosync_core.capabilities import Capability
from geosync_core.indexing import OriginRun
from geosync_core.origins import Origin, OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import KEYS, AdminView, FakeRegion, Harness, message

NS = "geo/ab"
TOPIC = f"persistent://{NS}/orders"
CONTROL = f"persistent://{NS}/geosync-control"
SUB = "billing"
A_LOG = [Position(5, e) for e in range(6)]
B_LOG = [Position(9, e) for e in range(6)]


def pair(*, a_reads: bool = True, **settings: object) -> tuple[Harness, Harness]:
    """Region a holds six messages published there; region b their replicated copies (other ledger ids).
    ``a_reads=False``: a's tail has read none of them yet."""
    a = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    b = FakeRegion("b", {NS: ["a", "b"]}, topics={TOPIC: list(B_LOG)})
    for region in (a, b):
        region.cursors[(TOPIC, SUB)] = AckState.of(Position(region.topics[TOPIC][0].ledger, -1))
    # What the interceptors recorded as the entries were written.
    a.origin_runs[TOPIC] = [OriginRun(5, 0, len(A_LOG), "a")]
    b.origin_runs[TOPIC] = [OriginRun(9, 0, len(B_LOG), "a", A_LOG[0])]
    ha, hb = Harness.build(a, **settings), Harness.build(b, **settings)
    for h in (ha, hb):
        h.discover()
        h.step()
    for p in A_LOG if a_reads else ():
        ha.messaging.deliver(TOPIC, message(TOPIC, p))
    deliver_b_copies(hb)
    for h in (ha, hb):
        h.step()  # indexes; the first poll publishes each cursor once
    carry(ha, hb)
    carry(hb, ha)
    return ha, hb


def states_sent(sender: Harness) -> list[tuple[str, OriginAcks]]:
    """(subscription, claims) of every state the sender has sent on the control topic and not carried yet."""
    out: list[tuple[str, OriginAcks]] = []
    for data in sender.sent_on(CONTROL):
        opened = envelopes.open_envelope(sender.agent.keys.keyring, data)
        assert isinstance(opened, envelopes.Envelope)
        decoded = envelopes.decode_ack_states(opened)
        assert not isinstance(decoded, envelopes.Rejected)
        out.extend((m.subscription, m.acks) for m in decoded)
    return out


def carry(sender: Harness, receiver: Harness) -> int:
    """Replicate the sender's control messages to the receiver's control topic; how many."""
    sent = sender.sent_on(CONTROL)
    for i, data in enumerate(sent):
        receiver.messaging.deliver(CONTROL, message(CONTROL, Position(77, i), data=data))
    if CONTROL in sender.messaging.producers:
        sender.messaging.producers[CONTROL].sent.clear()
    return len(sent)


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


def test_tampered_and_replayed_control_messages_change_nothing() -> None:
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()
    [data] = a.sent_on(CONTROL)
    tampered = data.replace(b'"a"', b'"z"', 1)
    b.messaging.deliver(CONTROL, message(CONTROL, Position(77, 0), data=tampered))
    b.messaging.deliver(CONTROL, message(CONTROL, Position(77, 1), data=b"garbage"))
    b.step()
    assert (TOPIC, SUB) not in b.agent.subs or not b.agent.subs[(TOPIC, SUB)].received
    b.messaging.deliver(CONTROL, message(CONTROL, Position(77, 2), data=data))
    b.messaging.deliver(CONTROL, message(CONTROL, Position(77, 3), data=data))
    b.step()
    counters = b.agent.stats.counters
    assert counters["control_rejected_" + envelopes.Reason.REPLAYED.value] == 1
    assert sum(v for k, v in counters.items() if k.startswith("control_rejected_")) == 3
    assert b.region.cursors[(TOPIC, SUB)].mark_delete == B_LOG[1]


def test_a_control_messages_transit_is_measured_when_it_is_taken_not_when_the_round_began() -> None:
    """A message may be taken late in a round (``receive again``, after the polls): its transit is from its
    send to when it was taken, on the wall clock (the fake's rounds run at 1,000 s: a transit measured
    from the round's start would come out negative by decades)."""
    _, b = pair()
    sent_ms = int(time.time() * 1000) - 400
    b.agent.started_ms = sent_ms - 1000  # sent after the agent started: not history read again
    envelope = envelopes.Envelope(
        kind=envelopes.ACK_STATES,
        region="a",
        seq=sent_ms * 1000,
        sent_at_ms=sent_ms,
        payload=envelopes.encode_ack_states([], region="a"),
    )
    b.messaging.deliver(
        CONTROL, message(CONTROL, Position(78, 0), data=envelopes.seal(KEYS["a"].signer, envelope))
    )
    b.step()
    transit = b.agent.status()["control_transit_ms"]
    assert 400 <= transit["p50"] < 60_000


def test_a_genuine_message_copied_where_it_does_not_belong_moves_neither_cursor_nor_guard() -> None:
    """Issue 14: someone with produce permission only copies genuine signed envelopes onto geo/ab's
    control topic: a policy event with a high sequence number, and a's states for another namespace. Both
    are refused as misplaced, and neither pushes b's replay guard past a's next envelope."""
    a, b = pair()
    event = envelopes.Envelope(
        kind="policy-event", region="a", seq=2**62, sent_at_ms=0, payload={"path": "/x"}
    )
    elsewhere = envelopes.Envelope(
        kind=envelopes.ACK_STATES,
        region="a",
        seq=2**62 + 1,
        sent_at_ms=0,
        payload=envelopes.encode_ack_states(
            [
                envelopes.AckStateMessage(
                    "persistent://geo/abc/orders", SUB, "a", OriginAcks.of({"a": [Span(5, 0, 5)]})
                )
            ],
            region="a",
        ),
    )
    for i, env in enumerate((event, elsewhere)):
        b.messaging.deliver(
            CONTROL, message(CONTROL, Position(78, i), data=envelopes.seal(KEYS["a"].signer, env))
        )
    b.step()
    assert b.agent.stats.counters["control_rejected_" + envelopes.Reason.MISPLACED.value] == 2
    assert ("persistent://geo/abc/orders", SUB) not in b.agent.subs
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()
    assert carry(a, b) == 1
    b.step()
    assert b.region.cursors[(TOPIC, SUB)].mark_delete == B_LOG[1]  # a's claims still accepted


def test_two_agents_of_one_region_at_once_are_both_heard() -> None:
    """Issue 17: a second agent of region a (a rolling update) started 30 s after the first numbers its
    envelopes by the wall clock too, so b accepts both agents' envelopes, interleaved, as not replayed."""
    a, b = pair()
    a2 = Harness.build(a.region)
    a2.clock = a.clock + 30
    a2.discover()
    a2.step()
    for p in A_LOG:
        a2.messaging.deliver(TOPIC, message(TOPIC, p))
    a2.step()
    carry(a2, b)
    b.step()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()  # the first agent, whose clock is behind the second's envelopes already accepted
    assert carry(a, b) == 1
    b.step()
    assert b.agent.stats.counters["control_rejected_" + envelopes.Reason.REPLAYED.value] == 0
    assert b.region.cursors[(TOPIC, SUB)].mark_delete == B_LOG[1]


@pytest.mark.parametrize("stamp", ["not-a-position", "1:2:3", "-5:1", "", "9" * 40 + ":x"])
def test_a_malformed_stamp_is_counted_and_blocks_no_one_else(stamp: str) -> None:
    a, b = pair()
    topic = TOPIC
    bad = Position(9, 6)
    b.region.topics[topic].append(bad)
    b.messaging.deliver(topic, message(topic, bad, properties={"__MSG_PROP_REPL_SOURCE_POSITION": stamp}))
    b.step()  # does not raise
    assert b.agent.stats.counters["malformed_stamps"] == 1
    tail = b.agent.topics[topic].tail
    assert bad in tail.unresolved
    assert tail.index.origin_of(bad) is None
    # The remaining entries still sync.
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:3])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)].mark_delete == B_LOG[2]


def acknowledge_on_a_new_subscription(a: Harness, name: str) -> None:
    """A subscription ``name`` appears in a and its consumer acknowledges a's first message."""
    a.region.cursors[(TOPIC, name)] = AckState.of(Position(5, -1))
    a.discover()
    a.step()
    a.region.consumer_acks(TOPIC, name, A_LOG[:1])
    a.step()


def test_a_subscription_another_region_has_is_created_here() -> None:
    a, b = pair()
    acknowledge_on_a_new_subscription(a, "audit")
    carry(a, b)
    b.step()
    assert ("create", TOPIC, "audit") in b.region.calls
    assert b.agent.rediscover.is_set()
    b.discover()
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, "audit")].mark_delete == B_LOG[0]


def test_excluded_subscriptions_are_neither_published_nor_applied() -> None:
    a, b = pair(exclude=("*/billing",))
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()
    assert carry(a, b) == 0
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(Position(9, -1))


def test_claims_for_a_subscription_this_region_leaves_to_its_brokers_are_not_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()  # as an agent that syncs it (an older version) would
    monkeypatch.setattr(discovering, "BROKER_SUBSCRIPTIONS", frozenset({SUB}))
    assert carry(a, b) > 0
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(Position(9, -1))


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


def test_status_reports_capabilities_and_subscriptions() -> None:
    a, _b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:1])
    a.step()
    status = a.agent.status()
    assert status["capabilities"]["plugin_feed"] is True
    assert status["capabilities"]["skip_by_ids"] is None
    assert [s["subscription"] for s in status["synced"]] == [SUB]
    (synced,) = status["synced"]
    assert synced["claim_spans"]["published"] >= 1
    assert synced["waiting"] is None
    assert status["ready"] is True
    # every step of the round is timed, in the order the round takes them
    assert list(status["round_phases"]) == [
        "own",
        "adopt",
        "reopen",
        "revive",
        "index",
        "receive",
        "writes",
        "feed",
        "polls",
        "receive again",
        "apply",
        "bound",
        "snapshots",
    ]
    a.agent.subs[(TOPIC, SUB)].cursor = None  # as after a restart, before the cursor is read again
    a.agent.apply(Now(0.0, 0.0))
    assert a.agent.status()["synced"][0]["waiting"] == "its cursor has not been read here yet"


def test_the_timeline_shows_long_rounds_with_their_steps_and_discovery_passes() -> None:
    a, _b = pair()
    a.agent.timeline = Timeline(at_least_s=0.0)  # every event, however short
    a.discover()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:1])
    a.step()
    events = a.agent.status()["timeline"]
    assert [e["kind"] for e in events] == ["discovery", "round"]
    assert events[0]["began"] == a.clock - 1.0  # the pass's start, as the scan gave it
    assert events[1]["began"] == a.clock  # the round's start (the fake's clock, not the machine's)
    assert 0 <= events[1]["seconds"] < 5  # measured on the machine's clock
    assert 0 <= events[1]["cpu_s"] <= events[1]["seconds"] + 0.01
    assert events[1]["process_cpu_s"] >= events[1]["cpu_s"] - 0.002  # read a moment apart, rounded
    assert all(0 <= cpu <= wall + 0.01 for wall, cpu in events[1]["steps"].values())
    a.agent.timeline = Timeline(at_least_s=60.0)  # the agent's keeps only what is long
    a.step()
    assert a.agent.status()["timeline"] == []


def test_supervisor_restarts_a_failing_task_then_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervising, "FIRST_BACKOFF_S", 0.001)
    monkeypatch.setattr(supervising, "MAX_RESTARTS", 3)
    stop = threading.Event()
    supervisor = supervising.Supervisor(stop)
    runs: list[int] = []

    def flaky() -> None:
        runs.append(1)
        raise RuntimeError("boom")

    supervisor.spawn("flaky", flaky)
    assert stop.wait(5.0)
    supervisor.join("flaky")
    assert len(runs) == 4  # the first run and three restarts
    assert supervisor.given_up == ["flaky"]
    assert not supervisor.alive()


def test_supervisor_leaves_a_task_that_ends_cleanly() -> None:
    stop = threading.Event()
    supervisor = supervising.Supervisor(stop)
    done = threading.Event()
    supervisor.spawn("once", done.set)
    assert done.wait(2.0)
    time.sleep(0.01)
    supervisor.join("once")
    assert supervisor.restarts["once"] == 0
    assert not stop.is_set()


def test_readiness_reflects_a_stalled_or_failing_loop() -> None:
    a, _ = pair()
    now = a.clock
    assert a.agent.readiness(now) == (True, "ready")
    ok, why = a.agent.readiness(now + 61)
    assert not ok
    assert why.startswith("stalled")
    a.agent.failing_since, a.agent.last_error = now - 5, "401 Unauthorized"
    assert a.agent.readiness(now)[0]  # failing for 5 s: not yet
    ok, why = a.agent.readiness(now + 11)
    assert not ok
    assert why.startswith("failing")
    assert "401 Unauthorized" in why
    a.agent.failing_since = None
    a.step()
    assert a.agent.readiness(a.clock)[0]


def test_readiness_reflects_failing_discovery_and_feed() -> None:
    """A region unreachable from the start: the rounds have nothing to fail on (no topic to poll), but
    discovery and the acknowledgement feed fail; the agent is not ready after FAILING_S."""
    a, _ = pair()
    start = a.clock
    a.agent.part_outcome("discovery", OSError("connection refused"), start)
    a.region.feed_error = adm.AdminError("503 Service Unavailable")
    a.step()
    assert a.agent.readiness(a.clock)[0]  # for a second: not yet
    a.step(15)
    ok, why = a.agent.readiness(a.clock)
    assert not ok
    assert why.startswith("failing: acknowledgement feed")
    assert "503" in why
    a.region.feed_error = None
    a.step()
    ok, why = a.agent.readiness(a.clock)
    assert not ok
    assert why.startswith("failing: discovery")
    a.agent.part_outcome("discovery", None, a.clock)
    assert a.agent.readiness(a.clock) == (True, "ready")


def test_readiness_before_the_first_round() -> None:
    region = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    h = Harness.build(region)
    ok, why = h.agent.readiness(h.clock)
    assert not ok
    assert why.startswith("starting")


def test_readiness_reflects_failing_publishes() -> None:
    a, _ = pair()
    started = time.monotonic()
    a.agent.round_done_at = started
    a.agent.on_sent(False)
    assert a.agent.readiness(started + 1)[0]
    ok, why = a.agent.readiness(started + 16)
    assert not ok
    assert "control message" in why
    a.agent.on_sent(True)
    assert a.agent.readiness(started + 16)[0]


def test_a_stamp_an_application_set_acknowledges_nothing_elsewhere() -> None:
    """An application in a publishes a message carrying a source-position stamp that names b's entry 9:4.
    The interceptor recorded the entry as published in a, so it is indexed as a's own: acknowledging it in
    a must not acknowledge b's 9:4 (with two regions the stamp alone would name exactly that entry)."""
    a, b = pair()
    forged = Position(5, 6)
    a.region.topics[TOPIC].append(forged)
    a.region.origin_runs[TOPIC] = [OriginRun(5, 0, 7, "a")]
    a.messaging.deliver(
        TOPIC, message(TOPIC, forged, properties={"__MSG_PROP_REPL_SOURCE_POSITION": str(B_LOG[4])})
    )
    a.step()
    assert a.agent.stats.counters["spoofed_stamps"] == 1
    a.region.consumer_acks(TOPIC, SUB, [forged])
    a.step()
    carry(a, b)
    b.step()
    assert B_LOG[4] not in b.region.cursors[(TOPIC, SUB)]


def test_the_interceptors_record_names_a_replicated_entrys_region_and_source() -> None:
    """Where the interceptor recorded a replicated entry's source, that position wins over the stamp."""
    _, b = pair()
    b.region.origin_runs[TOPIC] = [OriginRun(9, 0, 7, "a", Position(5, 0))]
    b.messaging.deliver(
        TOPIC,
        message(TOPIC, Position(9, 6), properties={"__MSG_PROP_REPL_SOURCE_POSITION": "5:99"}, producer="x"),
    )
    b.agent.origin_lookups.asked.clear()
    b.step()
    origin = b.agent.topics[TOPIC].tail.index.origin_of(Position(9, 6))
    assert origin is not None
    assert (origin.region, origin.position) == ("a", Position(5, 6))
    assert b.agent.resolver.spoofed == 0


def test_a_claim_for_a_topic_not_tracked_yet_asks_for_discovery_at_once() -> None:
    _, b = pair()
    b.agent.rediscover.clear()
    fresh = f"persistent://{NS}/fresh"
    claim = envelopes.AckStateMessage(fresh, SUB, "a", OriginAcks.of({"a": [Span(5, 0, 3)]}))
    b.agent._take_claims(claim, Now(b.clock, b.clock))
    assert b.agent.rediscover.is_set()
    assert b.agent.stats.counters["rediscover_for_claims"] == 1
    b.step(0.1)  # replication has not created the topic here yet: nothing tracked, asked again later
    assert fresh not in b.agent.topics
    b.region.topics[fresh] = [Position(31, 0)]
    b.region.cursors[(fresh, "other")] = AckState.of(Position(31, -1))
    b.step(0.1)  # too soon to ask again
    assert fresh not in b.agent.topics
    b.step(1.0)  # looked up alone (no discovery pass): tracked with the subscriptions it has here
    assert fresh in b.agent.topics
    assert b.agent.stats.counters["tracked_from_claims"] == 1
    assert b.agent.subs[(fresh, "other")].exists
    assert ("create", fresh, SUB) in b.region.calls  # the claimed one: created in the same round


def test_a_subscription_created_with_its_traffic_is_claimed_as_soon_as_its_entries_are_read() -> None:
    """Issue 12's fresh-topic burst: the feed's first report starts tracking the topic and subscription
    (no discovery pass), and acknowledgements of entries the tail had not read yet are claimed in the round
    that reads them, not at the next poll or resync."""
    a, b = pair()
    fresh = f"persistent://{NS}/fresh"
    a_log, b_log = [Position(21, e) for e in range(4)], [Position(31, e) for e in range(4)]
    for h, log in ((a, a_log), (b, b_log)):
        h.region.topics[fresh] = list(log)
        h.region.cursors[(fresh, SUB)] = AckState.of(Position(log[0].ledger, -1))
    a.region.origin_runs[fresh] = [OriginRun(21, 0, 4, "a")]
    b.region.origin_runs[fresh] = [OriginRun(31, 0, 4, "a", a_log[0])]
    b.discover()  # b has the copies (and will create the subscription from a's claim)
    b.step()
    a.region.consumer_acks(fresh, SUB, [a_log[0], a_log[1], a_log[3]])
    a.step()
    assert fresh in a.agent.topics
    assert (fresh, SUB) in a.agent.subs
    assert a.agent.stats.counters["tracked_from_feed"] == 1
    carry(a, b)  # nothing a can name yet
    polls = a.agent.stats.counters["cursor_polls"]
    for p in a_log:
        a.messaging.deliver(fresh, message(fresh, p))
    a.step(0.05)  # too soon for a poll or a resync: the tail's progress alone sends the claim
    assert a.agent.stats.counters["cursor_polls"] == polls
    assert carry(a, b) == 1
    for p, origin in zip(b_log, a_log, strict=True):
        stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}
        b.messaging.deliver(fresh, message(fresh, p, properties=stamp, producer="a-1-0"))
    b.step()
    assert b.region.cursors[(fresh, SUB)] == AckState.of(b_log[1]).ack(b_log[3])


def test_a_subscription_deleted_here_is_not_created_again_until_it_exists_again() -> None:
    a, b = pair()
    del b.region.cursors[(TOPIC, SUB)]  # an operator deletes it in b on purpose
    b.step()  # a discovery pass started before the deletion is older news: nothing changes yet
    b.discover()
    b.step()
    assert b.agent.subs[(TOPIC, SUB)].deleted_here
    assert b.agent.stats.counters["subscriptions_deleted_here"] == 1
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:3])
    a.step()
    carry(a, b)
    for _ in range(3):
        b.step()
    assert ("create", TOPIC, SUB) not in b.region.calls  # the old code created it at the earliest message
    assert (TOPIC, SUB) not in b.region.cursors
    # Created here again (by the operator): synced again.
    b.region.cursors[(TOPIC, SUB)] = AckState.of(Position(9, -1))
    b.discover()
    b.step()
    b.step()
    assert not b.agent.subs[(TOPIC, SUB)].deleted_here
    assert b.region.cursors[(TOPIC, SUB)].mark_delete == B_LOG[2]


@pytest.mark.parametrize("begun", [0.0, 1.5], ids=["before-the-round", "during-the-round"])
def test_a_subscription_the_agent_creates_is_not_taken_for_deleted_by_an_older_pass(begun: float) -> None:
    """A discovery pass that began before the agent created the subscription does not list it: older news.
    ``during-the-round`` (CI, once): the pass began while b's round was under way (the round starts at +1) and
    read the topic before the round created the subscription; the creation was dated at the round's start,
    earlier than the pass, so b took its own subscription for deleted by a user."""
    a, b = pair()
    acknowledge_on_a_new_subscription(a, "audit")
    stale = discovering.scan(AdminView(b.region), b.config, now=b.clock + begun)
    carry(a, b)
    b.step()
    assert ("create", TOPIC, "audit") in b.region.calls
    b.agent.discovered.put(stale)
    b.step()
    assert not b.agent.subs[(TOPIC, "audit")].deleted_here
    b.discover()
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, "audit")].mark_delete == B_LOG[0]
    # One deleted afterwards is still seen deleted by a pass begun after the round that created it.
    del b.region.cursors[(TOPIC, "audit")]
    b.discover()
    b.step()
    assert b.agent.subs[(TOPIC, "audit")].deleted_here


def test_a_deleted_topic_is_forgotten_reader_state_and_series() -> None:
    _, b = pair()
    tail = b.agent.topics[TOPIC].tail
    assert tail.reader is not None
    b.agent.snapshots.topics[TOPIC] = TopicSnapshots()  # as if synced in snapshot mode
    del b.region.topics[TOPIC]
    del b.region.cursors[(TOPIC, SUB)]
    b.step()
    b.discover()
    b.step()
    assert TOPIC not in b.agent.topics
    assert not [k for k in b.agent.subs if k[0] == TOPIC]
    assert tail.reader is None  # closed
    assert all(s["topic"] != TOPIC for s in b.agent.status()["synced"])
    assert b.agent.stats.counters["topics_forgotten"] == 1
    assert TOPIC not in b.agent.snapshots.topics  # snapshot mode's cache of it went too


def test_a_topic_tracked_after_a_pass_began_is_kept() -> None:
    _, b = pair()
    fresh = f"persistent://{NS}/fresh"
    stale = discovery_of(b)
    b.region.topics[fresh] = [Position(11, 0)]
    b.region.cursors[(fresh, SUB)] = AckState.of(Position(11, -1))
    b.discover()
    b.step()
    assert fresh in b.agent.topics
    b.agent.discovered.put(stale)
    b.step()
    assert fresh in b.agent.topics


def test_claims_about_a_topic_gone_everywhere_are_forgotten_once_nobody_sends_them() -> None:
    """b never had the topic (or a sidecar of b does not own it): the claims stay while a keeps sending them,
    and go once a has deleted it too (nothing sent for UNLISTED_CLAIMS_RESYNCS resync intervals)."""
    gone = f"persistent://{NS}/gone"
    a, b = pair()
    a.region.topics[gone] = [Position(13, 0), Position(13, 1)]
    a.region.cursors[(gone, SUB)] = AckState.of(Position(13, -1))
    a.discover()
    a.step()
    a.messaging.deliver(gone, message(gone, Position(13, 0)))
    a.region.consumer_acks(gone, SUB, [Position(13, 1)])
    a.step()
    carry(a, b)
    b.step()
    assert (gone, SUB) in b.agent.subs  # kept: the topic may not be replicated here yet
    period = b.config.resync_interval_s
    for _ in range(tuning.UNLISTED_CLAIMS_RESYNCS + 1):  # a republishes what it knows every period
        a.step(period)
        carry(a, b)
        b.discover()
        b.step(period)
    assert (gone, SUB) in b.agent.subs
    assert b.agent.stats.counters.get("claims_forgotten", 0) == 0
    del a.region.topics[gone]
    del a.region.cursors[(gone, SUB)]
    a.discover()
    a.step()
    a.step()
    b.discover()
    b.step(period * tuning.UNLISTED_CLAIMS_RESYNCS - period)
    assert (gone, SUB) in b.agent.subs  # silent for less than the horizon: a may just be slow
    b.discover()
    b.step(period + 1)
    assert (gone, SUB) not in b.agent.subs
    assert b.agent.stats.counters["claims_forgotten"] == 1
    assert (TOPIC, SUB) in b.agent.subs  # a tracked topic's subscriptions are discovery's business


def test_origins_of_replicated_batches_on_several_topics_are_asked_for_together() -> None:
    """Two topics each get a replicated batched entry the interceptor's runs held do not cover: both are asked
    for before draining (in parallel on the pool), and draining asks nothing more."""
    _, b = pair()
    other = f"persistent://{NS}/other"
    b.region.topics[other] = [Position(12, 0)]
    b.region.cursors[(other, SUB)] = AckState.of(Position(12, -1))
    b.discover()
    b.step()
    b.region.origin_runs[TOPIC] = [OriginRun(9, 0, 7, "a", A_LOG[0])]
    b.region.origin_runs[other] = [OriginRun(12, 0, 1, "a", Position(14, 0))]
    b.region.calls.clear()
    b.messaging.deliver(TOPIC, message(TOPIC, Position(9, 6), producer="a-1-0", batch_index=0))
    b.messaging.deliver(other, message(other, Position(12, 0), producer="a-1-0", batch_index=0))
    b.step()
    asked = [c for c in b.region.calls if c[0] == "plugin_origins"]
    assert sorted(asked) == [("plugin_origins", TOPIC, (9, 6)), ("plugin_origins", other, (12, 0))]
    assert b.agent.stats.counters["origin_prefetches"] == 2
    assert b.agent.topics[TOPIC].tail.index.origin_of(Position(9, 6)) == Origin("a", Position(5, 6))
    assert b.agent.topics[other].tail.index.origin_of(Position(12, 0)) == Origin("a", Position(14, 0))


def discovery_of(h: Harness) -> discovering.Discovered:
    """A discovery pass of ``h``'s region as it is now, begun at ``h``'s clock."""
    return discovering.scan(AdminView(h.region), h.config, now=h.clock)


def test_with_auto_topic_creation_off_the_control_topic_is_created_and_a_missing_topic_waits() -> None:
    a = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    a.cursors[(TOPIC, SUB)] = AckState.of(Position(5, -1))
    a.missing = {CONTROL, TOPIC}  # listed by the admin API a moment ago, deleted since; no control topic yet
    h = Harness.build(a)
    h.discover()
    h.step()  # the old code raised TopicNotFound out of the loop here, every round
    assert ("create_topic", CONTROL) in a.calls
    assert h.agent.controls[CONTROL].reader is not None
    assert ("create_topic", TOPIC) not in a.calls  # data topics are never created by the agent
    assert h.agent.topics[TOPIC].tail.reader is None
    assert h.agent.stats.counters["reader_open_failures"] == 1
    a.missing.clear()  # it exists again
    h.step(1.0)
    assert h.agent.topics[TOPIC].tail.reader is None  # not before REOPEN_S
    h.step(5.0)
    assert h.agent.topics[TOPIC].tail.reader is not None


def test_the_readers_due_in_a_round_are_opened_together() -> None:
    """Each open is a round trip to the topic's owner: after a restart at 10,000 subscriptions, 102 of them
    one after the other took 0.65 s of the round that takes the claims queued meanwhile. Topics a discovery
    pass brings are opened by the same round's reopen step, with every other reader due."""
    topics = [f"persistent://{NS}/t{i}" for i in range(4)]
    region = FakeRegion("a", {NS: ["a", "b"]}, topics={t: [Position(5, 0)] for t in topics})
    h = Harness.build(region)
    h.agent.effector.pool = ThreadPoolExecutor(max_workers=8)
    fake_reader = h.messaging.reader
    together = threading.Barrier(len(topics), timeout=5.0)

    def meeting_reader(topic: str, on_message: Callable[..., None], *, start: Position | None = None) -> Any:
        if topic in topics:  # (the control topic is opened alone, as discovery finds its namespace)
            together.wait()  # passed once all four are being opened; one after the other: BrokenBarrierError
        return fake_reader(topic, on_message, start=start)

    h.messaging.reader = meeting_reader  # type: ignore[method-assign]
    h.discover()
    h.step()
    assert all(h.agent.topics[t].tail.reader is not None for t in topics)
    assert not together.broken
    h.messaging.reader = fake_reader  # type: ignore[method-assign]
    region.missing = {topics[0]}  # a reader that cannot be opened now waits REOPEN_S, as alone
    h.agent.topics[topics[0]].tail.close()
    h.step()
    assert h.agent.topics[topics[0]].tail.reader is None
    assert h.agent.stats.counters["reader_open_failures"] == 1
    h.agent.effector.pool.shutdown()


def lookups(h: Harness, topic: str) -> int:
    return h.region.calls.count(("lookup", topic))


def test_a_reader_that_lost_its_broker_is_opened_again_at_its_last_entry_once_the_owner_answers() -> None:
    """The broker of b's control topic died: the client would retry with a backoff of up to a minute; the
    agent opens the reader again as soon as the topic's (new) owner accepts connections, and claims flow."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0]])
    a.step()
    carry(a, b)
    b.step()
    read_last, opened = b.agent.controls[CONTROL].last, b.messaging.opened[CONTROL]
    assert read_last is not None
    b.messaging.disconnected.add(CONTROL)
    b.messaging.dead.add("pulsar://other:6650")  # what the look-up names: still the dead broker
    b.step()
    assert lookups(b, CONTROL) == 0  # disconnected for a moment: the client's own retry may do
    b.step(tuning.STALLED_S)
    assert lookups(b, CONTROL) == 1
    assert b.messaging.opened[CONTROL] == opened  # the owner does not answer: a new reader would wait too
    b.step(1.0)
    assert lookups(b, CONTROL) == 1  # asked again only after STALLED_S
    b.messaging.dead.clear()  # the bundle has a new owner
    b.step(tuning.STALLED_S)
    assert b.messaging.opened[CONTROL] == opened + 1
    assert b.messaging.starts[CONTROL] == read_last  # at the entry read last, not from the earliest
    assert b.agent.stats.counters["readers_revived"] == 1
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[1], A_LOG[3]])
    a.step()
    b.messaging.listeners[CONTROL](message(CONTROL, read_last, data=b"the last entry, delivered again"))
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1]).ack(B_LOG[3])
    rejected = [k for k in b.agent.stats.counters if k.startswith("control_rejected_")]
    assert not rejected  # the entry delivered again was skipped by its position, not read as a message


def test_a_dead_broker_is_probed_once_a_round_for_all_of_its_stalled_readers() -> None:
    """A dead pod's address may let a connection time out (1 s): probing it once per stalled reader would
    stall the round for as many seconds as the broker had topics."""
    _, b = pair()
    b.messaging.disconnected.update({CONTROL, TOPIC})
    b.messaging.dead.add("pulsar://other:6650")
    b.step()
    b.step(tuning.STALLED_S)
    assert lookups(b, CONTROL) == 1
    assert lookups(b, TOPIC) == 1
    assert b.messaging.probes == ["pulsar://other:6650"]


def test_a_reader_that_reconnects_by_itself_is_left_alone() -> None:
    _, b = pair()
    tail = b.agent.topics[TOPIC].tail
    opened = b.messaging.opened[TOPIC]
    b.messaging.disconnected.add(TOPIC)
    b.step()
    b.messaging.disconnected.discard(TOPIC)
    b.step(tuning.STALLED_S)
    assert tail.stalled_since is None
    assert lookups(b, TOPIC) == 0
    assert b.messaging.opened[TOPIC] == opened


def test_a_topic_whose_owner_died_waits_and_the_round_goes_on() -> None:
    """A cursor read redirected to a dead owner used to fail the whole round (every other topic waited for
    the dead broker's metadata session to expire)."""
    other = f"persistent://{NS}/other"
    a, b = pair()
    b.region.topics[other] = [Position(12, 0)]
    b.region.cursors[(other, SUB)] = AckState.of(Position(12, -1))
    b.discover()
    b.step()
    b.region.owner_dead.add(TOPIC)
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1]])
    a.step()
    carry(a, b)
    b.step(b.config.resync_interval_s + 1)  # both topics' resyncs due
    assert b.agent.stats.counters.get("loop_errors", 0) == 0
    assert b.agent.stats.counters["polls_owner_unreachable"] >= 1
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1])  # the claims applied all the same
    polled = b.region.calls.count(("internal_stats", other))
    assert polled >= 1
    asked = b.region.calls.count(("internal_stats", TOPIC))
    b.step(1.0)
    assert b.region.calls.count(("internal_stats", TOPIC)) == asked  # not before STALLED_S
    b.region.owner_dead.clear()  # the bundle has a new owner
    b.step(tuning.STALLED_S)
    assert b.region.calls.count(("internal_stats", TOPIC)) == asked + 1


def test_entries_a_moved_topics_new_owner_never_indexed_are_named_from_their_headers_and_counted() -> None:
    """After a bundle unload the new owner's origin index starts at the topic's new ledger: the entries
    before it are named from their admin headers (one counted look-up each), never guessed from the index."""
    b = FakeRegion("b", {NS: ["a", "b"]}, topics={TOPIC: list(B_LOG)})
    b.cursors[(TOPIC, SUB)] = AckState.of(Position(9, -1))
    b.origin_runs[TOPIC] = [OriginRun(10, 0, 3, "a", Position(5, 6))]  # all the new owner recorded
    for local, origin in zip(B_LOG, A_LOG, strict=True):
        stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}
        b.headers[(TOPIC, local)] = adm.EntryHeaders("a", stamp, None)
    hb = Harness.build(b)
    hb.discover()
    hb.step()
    for p, origin in zip(B_LOG, A_LOG, strict=True):
        stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}
        hb.messaging.deliver(TOPIC, message(TOPIC, p, properties=stamp, producer="x"))
    hb.step()
    index = hb.agent.topics[TOPIC].tail.index
    for local, origin in zip(B_LOG, A_LOG, strict=True):
        found = index.origin_of(local)
        assert found is not None
        assert (found.region, found.position) == ("a", origin)
    assert hb.agent.stats.counters["origin_lookups"] >= len(B_LOG)
    assert hb.agent.stats.counters["origin_plugin_hits"] == 0
    assert hb.agent.origin_lookups.floor[TOPIC] == Position(10, 0)


def test_claims_too_large_for_one_message_go_out_in_parts_that_say_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tuning, "MAX_ENVELOPE_BYTES", 1500)
    a_log = [Position(5, e) for e in range(400)]
    b_log = [Position(9, e) for e in range(400)]
    a = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(a_log)})
    b = FakeRegion("b", {NS: ["a", "b"]}, topics={TOPIC: list(b_log)})
    a.cursors[(TOPIC, SUB)] = AckState.of(Position(5, -1))
    b.cursors[(TOPIC, SUB)] = AckState.of(Position(9, -1))
    a.origin_runs[TOPIC] = [OriginRun(5, 0, len(a_log), "a")]
    b.origin_runs[TOPIC] = [OriginRun(9, 0, len(b_log), "a", a_log[0])]
    ha, hb = Harness.build(a), Harness.build(b)
    for h in (ha, hb):
        h.discover()
        h.step()
    for p in a_log:
        ha.messaging.deliver(TOPIC, message(TOPIC, p))
    for p, origin in zip(b_log, a_log, strict=True):
        stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}
        hb.messaging.deliver(TOPIC, message(TOPIC, p, properties=stamp, producer="a-1-0"))
    acked = a_log[1::2]  # every other message: 200 holes, 200 spans (about 5 kB of claims)
    a.consumer_acks(TOPIC, SUB, acked)
    ha.step()
    hb.step()
    sent = ha.sent_on(CONTROL)
    assert len(sent) > 1
    assert all(len(data) <= 1500 for data in sent)
    assert ha.agent.stats.counters["states_split"] > 0
    carry(ha, hb)
    hb.step()
    hb.step()
    cursor = b.cursors[(TOPIC, SUB)]
    assert {p for p in b_log if p in cursor} == set(b_log[1::2])


def deliver_b_copies(b: Harness) -> None:
    for p, origin in zip(B_LOG, A_LOG, strict=True):
        stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}
        b.messaging.deliver(TOPIC, message(TOPIC, p, properties=stamp, producer="a-1-0"))


def test_what_every_subscription_acknowledged_is_forgotten_and_one_below_it_has_the_topic_read_again() -> (
    None
):
    """Issue 17.7: an agent keeps origins, keys and sizes only above its slowest subscription (not for the
    whole retention). A subscription that turns up below what was forgotten is neither planned nor claimed
    from what is left (the mark-delete would jump the forgotten entries: a loss); the topic is read again."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:4])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[3])
    b.region.feed.append(b.region.report(TOPIC, SUB))
    b.step()
    tail = b.agent.topics[TOPIC].tail
    assert tail.index.first == B_LOG[4]
    assert tail.key_of(B_LOG[3]) is None
    assert tail.key_of(B_LOG[4]) == ""
    assert tail.index.origin_of(B_LOG[3]) is None
    # "audit" appears in b at the earliest message (a consumer subscribed there, or a user rewound it)
    b.region.cursors[(TOPIC, "audit")] = AckState.of(Position(9, -1))
    b.discover()
    acknowledge_on_a_new_subscription(a, "audit")  # in a too: a's consumer acknowledges the first message
    a.step()
    assert a.agent.stats.counters["topics_reread"] == 1  # a had forgotten it as well: nothing claimed yet
    assert all(not acks.by_region and not acks.partials for _, acks in states_sent(a))
    carry(a, b)
    for p in A_LOG:  # a's new reader, from the earliest message
        a.messaging.deliver(TOPIC, message(TOPIC, p))
    a.step()
    carry(a, b)
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, "audit")] == AckState.of(Position(9, -1))  # nothing planned on a guess
    assert b.agent.stats.counters["topics_reread"] == 1
    assert b.messaging.starts[TOPIC] is None  # the new reader starts at the earliest message
    deliver_b_copies(b)
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, "audit")] == AckState.of(B_LOG[0])
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[3])
    assert b.agent.stats.counters["topics_reread"] == 1


def test_over_the_budget_the_oldest_entries_go_and_a_subscription_below_them_is_parked_not_moved() -> None:
    a, b = pair(max_tracked_entries=4)
    tail = b.agent.topics[TOPIC].tail
    assert len(tail.details) <= 4  # six read, the oldest over the budget forgotten (and counted)
    assert b.agent.stats.counters["entries_over_budget"] >= 2
    assert tail.key_of(B_LOG[0]) is None
    assert tail.index.origin_of(B_LOG[0]) is None
    # b's subscription is below them: a's acknowledgements are not applied on what is left (no re-read either)
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[4]])
    a.step()
    carry(a, b)
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(Position(9, -1))
    assert b.agent.subs[(TOPIC, SUB)].parked
    assert b.agent.status()["parked"] == [f"{TOPIC} / {SUB}"]
    assert "topics_reread" not in b.agent.stats.counters
    assert a.agent.subs[(TOPIC, SUB)].parked  # a forgot its oldest too: nothing claimed from below them
    # the consumers catch up past the forgotten entries in both regions: synced again from there
    forgotten = tail.budget_floor
    assert forgotten == B_LOG[2]
    b.region.consumer_acks(TOPIC, SUB, B_LOG[:3])
    b.step()
    a.region.consumer_acks(TOPIC, SUB, [*A_LOG[:4], A_LOG[5]])
    a.step()
    assert carry(a, b) == 1
    b.step()
    b.step()
    assert not a.agent.subs[(TOPIC, SUB)].parked
    assert not b.agent.subs[(TOPIC, SUB)].parked
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[5])  # a acknowledged 5:4 before


def test_a_backlog_longer_than_the_planning_window_is_applied_over_several_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tailing, "LOG_WINDOW", 2)
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
    monkeypatch.setattr(tailing, "LOG_WINDOW", 2)
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[1:])
    a.step()
    carry(a, b)
    for _ in range(6):
        b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(Position(9, -1)).ack(*B_LOG[1:])


def test_a_rewind_in_the_active_region_is_followed_and_older_claims_are_dropped() -> None:
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[2], A_LOG[4]])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2]).ack(B_LOG[4])
    old_claims = b.agent.subs[(TOPIC, SUB)].received
    # A user resets a's cursor to just after 5:0 (reset-cursor), and a consumer acknowledges 5:3 after it.
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[0])
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[3]])
    a.step()
    assert a.agent.stats.counters["rewinds"] == 1
    generation = a.agent.subs[(TOPIC, SUB)].generation
    assert generation > 0
    # a had forgotten the entries below 5:2 (every subscription had acknowledged them): it reads them again
    # before it claims from the rewound cursor.
    a.step()
    for p in A_LOG:
        a.messaging.deliver(TOPIC, message(TOPIC, p))
    a.step()
    assert a.agent.stats.counters["topics_reread"] == 1
    carry(a, b)
    b.step()  # b follows: its cursor acknowledges more than the new claims, so it is rewound
    assert ("reset", TOPIC, SUB, (B_LOG[0].ledger, B_LOG[0].entry)) in b.region.calls
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[0]).ack(B_LOG[3])
    assert b.agent.subs[(TOPIC, SUB)].generation == generation
    # b's agent rewound its copy itself: no new generation from b, and b's resync (the new claims) and an
    # envelope of the earlier generation change nothing in a.
    b.step(60.0)
    assert b.agent.stats.counters["rewinds"] == 0
    carry(b, a)
    stale = envelopes.AckStateMessage(TOPIC, SUB, "b", old_claims)
    b.agent.outgoing[NS] = [stale]
    b.agent._flush_states(Now(b.clock, b.clock))
    carry(b, a)
    for _ in range(3):
        a.step()
    assert a.agent.stats.counters["claims_superseded"] >= 1
    assert a.region.cursors[(TOPIC, SUB)] == AckState.of(A_LOG[0]).ack(A_LOG[3])


def test_a_rewind_in_a_passive_region_is_not_propagated() -> None:
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:3])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])
    b.region.cursors[(TOPIC, SUB)] = AckState.of(Position(9, -1))  # someone resets b's copy
    b.step(60.0)  # a resync polls it
    assert b.agent.stats.counters["rewinds_passive"] == 1
    assert b.agent.stats.counters["rewinds"] == 0
    carry(b, a)
    a.step()
    assert a.region.cursors[(TOPIC, SUB)] == AckState.of(A_LOG[2])
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])  # a's claims move the copy forward again


def test_what_a_consumer_acknowledged_before_the_tail_read_it_is_claimed_not_forgotten() -> None:
    """A consumer quicker than its agent: a acknowledges entries its tail has not read yet. The tail must not
    forget them (every subscription is past them) before they are claimed, or b never acknowledges them and
    a failover there delivers them again (found by the lab's exact-sync tests, one run in three)."""
    ha, hb = pair(a_reads=False)
    a, b = ha.region, hb.region
    a.consumer_acks(TOPIC, SUB, [*A_LOG[:3], A_LOG[4]])
    ha.step()  # a's tail has read nothing yet: nothing can be claimed
    for p in A_LOG[:4]:
        ha.messaging.deliver(TOPIC, message(TOPIC, p))
    a.feed.append(a.report(TOPIC, SUB))  # the feed names the cursor again, unchanged
    ha.step()
    for p in A_LOG[4:]:
        ha.messaging.deliver(TOPIC, message(TOPIC, p))
    ha.step()
    carry(ha, hb)
    hb.step()
    hb.step()
    assert b.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2]).ack(B_LOG[4])
    # once claimed, a forgets them (its only subscription is past them), at its next look at the cursors:
    # the feed names this one unchanged (a repeat, passed over), so the safety poll
    a.feed.append(a.report(TOPIC, SUB))
    ha.step(pacing.FEED_SAFETY_POLL_S)
    assert ha.agent.topics[TOPIC].tail.index.first == A_LOG[3]


def test_a_rewind_that_moves_the_mark_delete_forward_reads_forgotten_entries_again_before_claiming() -> None:
    """A reset-cursor in a to just after 5:2, where a's cursor stood at 5:1 with 5:3 and 5:4 acknowledged:
    the mark-delete moves forward but 5:3 and 5:4 are taken back (a rewind). The new claims are the cursor's
    whole translation, so a reads again the entries it forgot (up to 5:1) before claiming: b ends with
    exactly 5:0-5:2 acknowledged (found by the lab's rewind test, one run in two)."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[3], A_LOG[4]])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1]).ack(B_LOG[3], B_LOG[4])
    a.region.feed.append(a.region.report(TOPIC, SUB))
    a.step()
    assert a.agent.topics[TOPIC].tail.index.first == A_LOG[2]  # a forgot what every subscription acknowledged
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[2])
    a.region.consumer_acks(TOPIC, SUB, [])
    a.step()
    assert a.agent.stats.counters["rewinds"] == 1
    assert carry(a, b) == 0  # nothing claimed from the forgotten tail
    a.step()
    for p in A_LOG:
        a.messaging.deliver(TOPIC, message(TOPIC, p))
    a.step()
    assert a.agent.stats.counters["topics_reread"] == 1
    carry(a, b)
    for _ in range(3):
        b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])


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


def test_a_feed_report_from_before_the_agents_own_rewind_is_not_taken_after_it() -> None:
    """A report the feed gave before b's agent rewound its copy waits for the tail (it names a batch not read
    yet); taken after the rewind, it would show the cursor as it was, and b would claim again, under the new
    generation, what a's user took back."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:5])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[4])
    b.region.feed.append(b.region.report(TOPIC, SUB))  # the feed has spoken once (a read from 0 is special)
    b.step()
    # b's cursor as the feed reports it now, naming a batch at 9:7 that b's reader has not reached.
    ahead = (pluginapi.BatchState(Position(9, 7), (1,)),)
    pending = pluginapi.CursorReport(TOPIC, SUB, B_LOG[4], "[]", ahead)
    b.region.feed.append(pending)
    b.step()
    assert (TOPIC, SUB) in b.agent.unobserved
    # a's user rewinds a to its first entry; b follows.
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[0])
    a.region.consumer_acks(TOPIC, SUB, [])
    a.step()
    assert a.agent.stats.counters["rewinds"] == 1
    a.step()
    for p in A_LOG:
        a.messaging.deliver(TOPIC, message(TOPIC, p))
    a.step()
    carry(a, b)
    b.step()
    b.step()  # b forgot the entries every subscription had acknowledged: it reads them again first
    deliver_b_copies(b)
    b.step()
    b.step()
    assert ("reset", TOPIC, SUB, (B_LOG[0].ledger, B_LOG[0].entry)) in b.region.calls
    assert (TOPIC, SUB) not in b.agent.unobserved  # the report from before the rewind is dropped
    # b's reader reaches 9:7 (two messages published in b).
    b.region.topics[TOPIC] += [Position(9, 6), Position(9, 7)]
    b.region.origin_runs[TOPIC].append(OriginRun(9, 6, 2, "b"))
    for p in (Position(9, 6), Position(9, 7)):
        b.messaging.deliver(TOPIC, message(TOPIC, p, batch_index=0, batch_size=2))
        b.messaging.deliver(TOPIC, message(TOPIC, p, batch_index=1, batch_size=2))
    for _ in range(3):
        b.step()
        carry(b, a)
        a.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[0])
    assert a.region.cursors[(TOPIC, SUB)] == AckState.of(A_LOG[0])


def test_large_claims_are_published_at_a_pace_and_nothing_is_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Claims above PAUSE_FROM_SPANS wait their pause before the next publish; the acknowledgements made
    meanwhile go out with the next one (brought by the topic's poll, due when the pause ends)."""
    monkeypatch.setattr(tuning, "PAUSE_FROM_SPANS", 1)
    monkeypatch.setattr(tuning, "PAUSE_PER_SPAN_S", 2.0)
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[2]])  # two spans: 5:0 and 5:2
    a.step()
    assert carry(a, b) == 1
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[4]])
    a.step(0.5)
    assert carry(a, b) == 0  # within the pause
    # The feed's report waits for the pause's end, unread (its cursor is not translated every round).
    assert a.agent.stats.counters["feed_reports_deferred"] >= 1
    assert (TOPIC, SUB) in a.agent.unobserved
    cursor = a.agent.subs[(TOPIC, SUB)].cursor
    assert cursor is not None
    assert A_LOG[4] not in cursor
    for _ in range(5):
        a.step()
    assert carry(a, b) >= 1
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[0]).ack(B_LOG[2], B_LOG[4])


def test_large_claims_travel_as_their_news_and_whole_at_each_resync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tuning, "NEWS_FROM_SPANS", 1)
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[2]])  # two spans: 5:0 and 5:2
    a.step()
    (first,) = states_sent(a)
    assert first[1] == OriginAcks.of({"a": [Span(5, 0, 0), Span(5, 2, 2)]})
    carry(a, b)
    b.step()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[4]])
    a.step()
    (second,) = states_sent(a)
    assert second[1] == OriginAcks.of({"a": [Span(5, 4, 4)]})  # the news alone
    assert a.agent.stats.counters["states_sent_as_news"] >= 1
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[0]).ack(B_LOG[2], B_LOG[4])
    # A resync sends them whole, for a receiver that missed some.
    a.step(a.agent.config.resync_interval_s + 1)
    whole = [acks for name, acks in states_sent(a) if name == SUB]
    assert whole
    assert whole[-1] == OriginAcks.of({"a": [Span(5, 0, 0), Span(5, 2, 2), Span(5, 4, 4)]})


def test_a_costly_plan_waits_before_it_is_made_again_for_cursor_moves_but_not_for_claims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tuning, "PLAN_WAIT_FACTOR", 1e9)  # every plan counts as costly
    monkeypatch.setattr(tuning, "MAX_PLAN_WAIT_S", 5.0)
    a, b = pair()
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
    assert b.agent.stats.counters["plans_skipped_for_unclaimed_entries"] == 1
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


def test_resyncs_stretch_with_the_subscriptions_and_come_soon_after_lost_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Full republishes send at most RESYNC_STATES_PER_S states a second on average: with more subscriptions
    a topic's period stretches beyond resync_interval_s. Sends lost (the client reported them failed) are made
    good by a resync within RESYNC_AFTER_LOSS_S once sending works again, not a whole period on."""
    a, b = pair()
    carry(a, b)
    assert a.agent.resync_period() == a.config.resync_interval_s  # one subscription: the configured period
    monkeypatch.setattr(tuning, "RESYNC_STATES_PER_S", len(a.agent.subs) / 100.0)
    assert a.agent.resync_period() == 100.0
    ts = a.agent.topics[TOPIC]
    a.step(ts.resync_at - a.clock)  # the resync this topic was due
    assert states_sent(a), "a resync sends the state even though nothing changed"
    assert ts.resync_at == a.clock + 100.0
    carry(a, b)
    a.step(a.config.resync_interval_s + 1)  # the configured period passed: no resync yet
    assert states_sent(a) == []
    a.agent.on_sent(False)  # a send was lost (the client's thread reports it) ...
    a.step(1.0)
    assert states_sent(a) == []  # ... and sending has not worked since: nothing to make good yet
    a.agent.on_sent(True)
    a.step(0.1)
    a.step(tuning.RESYNC_AFTER_LOSS_S)
    assert [name for name, _ in states_sent(a)] == [SUB], "republished soon after the lost send"
    assert a.agent.stats.counters["resyncs_after_lost_sends"] == 1
    assert ts.resync_at > a.clock + 99.0


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
    a.region.plugin_feed = lambda *, since: replace(real(since=since), epoch="epoch-2")  # type: ignore[method-assign]
    a.step(0.1)
    assert a.agent.stats.counters["feed_repeats_skipped"] == 1
    assert state.fed is not None
    assert state.generation == generation


def test_a_broker_restart_has_every_topic_polled_again_but_the_agent_s_own_first_feed_read_does_not() -> None:
    """A new epoch means the broker restarted: what its feed lost only a poll can tell. An agent's first read
    of the feed is no restart: every topic was polled at its first round (a second wave of polls of every
    topic came a round later, most of a restarted agent's rounds at 10,000 subscriptions)."""
    region = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    region.cursors[(TOPIC, SUB)] = AckState.of(Position(5, -1))
    a = Harness.build(region)
    real = region.plugin_feed

    def failing(*, since: int) -> pluginapi.Feed:
        raise adm.AdminError("the broker is busy")

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
    region.plugin_feed = lambda *, since: replace(real(since=since), epoch="epoch-2")  # type: ignore[method-assign]
    a.step(0.01)
    assert a.agent.stats.counters["cursor_polls"] > polls


def test_a_copy_read_after_the_claim_that_names_it_is_applied_at_once_even_while_a_costly_plan_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan that took long waits before it is made again for cursor moves or new entries alone
    (PLAN_WAIT_FACTOR), but not for the copy of an entry the claims already name: that is news as the claim
    was (on a saturated machine every plan looked costly and such copies waited up to 2 s)."""
    monkeypatch.setattr(tuning, "PLAN_WAIT_FACTOR", 1e9)  # every plan counts as costly
    monkeypatch.setattr(tuning, "MAX_PLAN_WAIT_S", 60.0)
    a, b = pair()
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


def test_a_restarted_agent_writes_from_the_checkpoints_cursors_and_polls_each_topic_once() -> None:
    """The checkpoint keeps the cursors: a restarted agent's first round plans from them instead of polling
    every topic first (at 10,000 subscriptions 1.2 s of that round), each topic's first poll comes within
    RESTORED_POLL_SPREAD_S, and claims received before its first writes are answered do not make the topics
    due again (plugin writes answer the cursor)."""
    ha, hb = pair()
    hb.region.cursors[(TOPIC, SUB)] = AckState.of(B_LOG[0])  # a consumer in b, before the checkpoint
    hb.region.feed.append(hb.region.report(TOPIC, SUB))
    hb.step()
    state = json.loads(json.dumps(hb.agent.checkpoint()))
    assert state["subscriptions"][0]["cursor"] is not None
    again = Harness.build(hb.region)
    again.messaging.control_positions = dict(hb.messaging.control_positions)  # the same log goes on
    again.agent.restore(state, Now(again.clock, again.clock))
    agent = again.agent
    counters = agent.stats.counters
    assert agent.subs[(TOPIC, SUB)].cursor == AckState.of(B_LOG[0])
    again.step(0.1)  # before discovery's first pass: the feed cannot be read yet
    new = Position(9, len(B_LOG))
    hb.region.topics[TOPIC].append(new)
    again.messaging.deliver(TOPIC, message(TOPIC, new))  # published here meanwhile
    again.step(0.1)
    assert counters.get("cursor_polls", 0) == 0  # new messages make a topic due only without the feed
    again.discover()
    again.step(0.1)
    assert agent.caps.get(Capability.PLUGIN_FEED) is True
    ha.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[3]])
    ha.step()
    assert carry(ha, again)
    again.step(0.1)  # takes the claims and writes them, from the checkpoint's cursor
    again.step(0.1)  # the writes are answered
    assert counters["plugin_acks"] == 1
    assert hb.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1]).ack(B_LOG[3])
    assert counters.get("cursor_polls", 0) == 0
    again.step(tuning.RESTORED_POLL_SPREAD_S)
    assert counters["cursor_polls"] == 1  # its first poll, within the spread


def test_a_checkpoint_without_cursors_has_every_topic_polled_in_the_first_round() -> None:
    """A checkpoint written before cursors were kept (or one holding none): the first round reads them."""
    _, hb = pair()
    state = json.loads(json.dumps(hb.agent.checkpoint()))
    for item in state["subscriptions"]:
        del item["cursor"]
    again = Harness.build(hb.region)
    again.agent.restore(state, Now(again.clock, again.clock))
    assert again.agent.subs[(TOPIC, SUB)].cursor is None
    again.step()
    assert again.agent.stats.counters["cursor_polls"] == 1


def test_a_restarted_agent_that_finds_no_feed_polls_every_topic_at_once() -> None:
    """The checkpoint's cursors put the first polls off on the understanding that the feed reports what
    consumers acknowledge: found absent (a plugin removed meanwhile), every topic is polled at once."""
    _, hb = pair()
    state = json.loads(json.dumps(hb.agent.checkpoint()))
    again = Harness.build(hb.region)
    again.agent.restore(state, Now(again.clock, again.clock))
    counters = again.agent.stats.counters
    again.step(0.1)
    assert counters.get("cursor_polls", 0) == 0
    hb.region.feed_error = adm.AdminNotFound("404 no geosync plugin")
    again.discover()
    again.step(0.1)
    assert again.agent.caps.get(Capability.PLUGIN_FEED) is False
    assert counters["cursor_polls"] == 1
