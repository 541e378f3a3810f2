"""What the agent tracks, through its rounds (fake ports): subscriptions created, excluded, deleted;
topics named by claims, deleted, tracked late; control topics created; readers opened, reopened, probed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from geosync_agent import discovering
from geosync_agent.core import tuning
from geosync_agent.snapshotting import TopicSnapshots
from geosync_core import ackstates
from geosync_core.indexing import OriginRun
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import AdminView, FakeRegion, Harness, message
from tests.agent.pairs import (
    A_LOG,
    B_LOG,
    CONTROL,
    NS,
    SUB,
    TOPIC,
    acknowledge_on_a_new_subscription,
    carry,
    pair,
    sealed,
)


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


def test_a_claim_for_a_topic_not_tracked_yet_asks_for_discovery_at_once() -> None:
    _, b = pair()
    b.agent.rediscover.clear()
    fresh = f"persistent://{NS}/fresh"
    claim = ackstates.AckStateMessage(fresh, SUB, "a", OriginAcks.of({"a": [Span(5, 0, 3)]}))
    b.messaging.deliver(CONTROL, message(CONTROL, Position(78, 0), data=sealed("a", [claim], seq=2**61)))
    b.step(0.0)
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
