"""The control topics through the agents' rounds (fake ports): what is refused (tampered, replayed,
misplaced), transit times, two agents of one region, claims split, paced and resynced."""

from __future__ import annotations

from dataclasses import replace

import pytest

from geosync_agent.core import tuning
from geosync_agent.runtime import Now
from geosync_core import ackstates, envelopes
from geosync_core.indexing import OriginRun
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import KEYS, FakeRegion, Harness, message
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
    send to when it was taken, the round's wall time and what its clock says has passed since (``Now``)."""
    _, b = pair()
    b.clock += 1.0
    sent_ms = int(b.clock * 1000) - 400  # 400 ms before the round began
    b.agent.started_ms = sent_ms - 1000  # sent after the agent started: not history read again
    envelope = envelopes.Envelope(
        kind=ackstates.ACK_STATES,
        region="a",
        seq=sent_ms * 1000,
        sent_at_ms=sent_ms,
        payload=ackstates.encode_ack_states([], region="a"),
    )
    b.messaging.deliver(
        CONTROL, message(CONTROL, Position(78, 0), data=envelopes.seal(KEYS["a"].signer, envelope))
    )
    b.agent.round(Now(b.clock, b.clock, clock=lambda: b.clock + 2.5))  # taken 2.5 s into the round
    transit = b.agent.status()["control_transit_ms"]
    assert transit["p50"] == 2_900
    # with when it was taken, on the monotonic clock (a bench keeps those of its own load's span)
    assert b.agent.status()["control_transit_recent"] == [(round(b.clock + 2.5, 3), 2_900)]


def test_the_time_a_control_message_waited_for_the_loop_is_measured_from_the_readers_hand_over() -> None:
    """Of a control message's transit, the part it spent in the inbox: from when the client handed it over
    (``Received.read_at``, the monotonic clock) until the loop took it (here 2.5 s into a round that began
    0.3 s after it was read)."""
    _, b = pair()
    b.clock += 1.0
    read_at = b.clock - 0.3
    envelope = envelopes.Envelope(
        kind=ackstates.ACK_STATES,
        region="a",
        seq=1,
        sent_at_ms=int(b.clock * 1000),
        payload=ackstates.encode_ack_states([], region="a"),
    )
    data = envelopes.seal(KEYS["a"].signer, envelope)
    b.messaging.deliver(CONTROL, replace(message(CONTROL, Position(78, 0), data=data), read_at=read_at))
    b.agent.round(Now(b.clock, b.clock, clock=lambda: b.clock + 2.5))
    assert b.agent.status()["control_queued_ms"]["p50"] == 2_800
    assert b.agent.status()["control_queued_recent"] == [(round(b.clock + 2.5, 3), 2_800)]


def test_a_receive_step_takes_what_had_arrived_and_leaves_what_arrives_meanwhile_for_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Messages arriving while the step takes others wait for its next turn: a step that drained its inbox
    until empty never ended while they came faster than it took them, and the round's apply step never came
    (issue 46.4). Here each message taken brings another."""
    _, b = pair()
    now = Now(b.clock, b.clock)
    b.agent.receive(now)  # what pair() left there
    taken: list[bytes] = []

    def handle(data: bytes, *, topic: str, now: Now) -> None:
        taken.append(data)
        if len(taken) > 50:
            raise AssertionError("the receive step never ends while messages keep coming")
        b.messaging.deliver(CONTROL, message(CONTROL, Position(78, 0), data=b"later %d" % len(taken)))

    monkeypatch.setattr(b.agent, "handle_control", handle)
    b.messaging.deliver(CONTROL, message(CONTROL, Position(78, 0), data=b"first"))
    b.messaging.deliver(CONTROL, message(CONTROL, Position(78, 0), data=b"second"))
    b.agent.receive(now)
    assert taken == [b"first", b"second"]
    b.agent.receive(now)  # the next turn takes what came meanwhile
    assert taken == [b"first", b"second", b"later 1", b"later 2"]


def test_a_genuine_message_copied_where_it_does_not_belong_moves_neither_cursor_nor_guard() -> None:
    """Issue 14: someone with produce permission only copies genuine signed envelopes onto geo/ab's
    control topic: a policy event with a high sequence number, and a's states for another namespace. Both
    are refused as misplaced, and neither pushes b's replay guard past a's next envelope."""
    a, b = pair()
    event = envelopes.Envelope(
        kind="policy-event", region="a", seq=2**62, sent_at_ms=0, payload={"path": "/x"}
    )
    elsewhere = envelopes.Envelope(
        kind=ackstates.ACK_STATES,
        region="a",
        seq=2**62 + 1,
        sent_at_ms=0,
        payload=ackstates.encode_ack_states(
            [
                ackstates.AckStateMessage(
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
    a.agent.on_sent(False, a.clock)  # a send was lost (the client's thread reports it) ...
    a.step(1.0)
    assert states_sent(a) == []  # ... and sending has not worked since: nothing to make good yet
    a.agent.on_sent(True, a.clock)
    a.step(0.1)
    a.step(tuning.RESYNC_AFTER_LOSS_S)
    assert [name for name, _ in states_sent(a)] == [SUB], "republished soon after the lost send"
    assert a.agent.stats.counters["resyncs_after_lost_sends"] == 1
    assert ts.resync_at > a.clock + 99.0
