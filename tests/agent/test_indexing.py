"""Indexing through the agents' rounds (fake ports): stamps malformed or set by applications, the
interceptors' record, origins asked together or read from headers, entries forgotten and the budget."""

from __future__ import annotations

import pytest

from geosync_adapters import admin as adm
from geosync_core.indexing import OriginRun
from geosync_core.origins import Origin
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import FakeRegion, Harness, message
from tests.agent.pairs import (
    A_LOG,
    B_LOG,
    NS,
    SUB,
    TOPIC,
    acknowledge_on_a_new_subscription,
    carry,
    deliver_b_copies,
    pair,
    states_sent,
)


@pytest.mark.parametrize("stamp", ["not-a-position", "1:2:3", "-5:1", "", "9" * 40 + ":x"])
def test_a_malformed_stamp_is_counted_and_blocks_no_one_else(stamp: str) -> None:
    """Where the broker cannot name the entry either (a copy whose headers carry no stamp), it is left
    unindexed."""
    a, b = pair()
    topic = TOPIC
    bad = Position(9, 6)
    b.region.topics[topic].append(bad)
    b.region.headers[(topic, bad)] = adm.EntryHeaders("a", {}, None)
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


@pytest.mark.parametrize("stamp", ["not-a-position", "1:2:3", ""])
def test_a_malformed_stamp_on_an_entry_the_broker_names_is_indexed_as_the_broker_names_it(stamp: str) -> None:
    """An application set a stamp that is no position on a message published here: the broker's view (its
    headers: not replicated) names it, so it is indexed as this region's own and synced like any other
    (left unindexed, no region would apply its acknowledgement: issue 45, ``tests/sim/test_hostile.py``)."""
    _, b = pair()
    bad = Position(9, 6)
    b.region.topics[TOPIC].append(bad)
    b.messaging.deliver(TOPIC, message(TOPIC, bad, properties={"__MSG_PROP_REPL_SOURCE_POSITION": stamp}))
    b.step()
    assert b.agent.stats.counters["malformed_stamps"] == 0
    assert b.agent.stats.counters["spoofed_stamps"] == 1
    tail = b.agent.topics[TOPIC].tail
    assert bad not in tail.unresolved
    assert tail.index.origin_of(bad) == Origin("b", bad)


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
