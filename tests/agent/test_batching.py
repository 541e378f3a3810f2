"""The agent with batched producers, against fake ports: a batched replicated copy shows no stamp (its origin
comes from the broker), batch indexes travel from a consumer in one region to the cursor in another, a
broker without batch-index acknowledgements gets whole entries only. The lab tests prove it on real brokers
(integration_tests/test_batch_failover.py)."""

from __future__ import annotations

from geosync_adapters.admin import EntryHeaders
from geosync_core import envelopes
from geosync_core.batches import BatchAcks
from geosync_core.capabilities import Capability
from geosync_core.indexing import OriginRun
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import KEYRING, FakeRegion, Harness, message
from tests.agent.pairs import CONTROL, NS, SUB, TOPIC, carry

A_LOG = [Position(5, e) for e in range(3)]
B_LOG = [Position(9, e) for e in range(3)]
SIZE = 4


def deliver_batches(
    h: Harness, log: list[Position], producer: str, *, indexes: range = range(SIZE), sized: bool = True
) -> None:
    """Batches of ``SIZE`` as the client hands them to a reader, message by message: ``indexes`` of each;
    ``sized``: each message says its batch's size (the client reads it from the entry's metadata)."""
    size = SIZE if sized else None
    for p in log:
        for i in indexes:
            h.messaging.deliver(
                TOPIC, message(TOPIC, p, producer=producer, batch_index=i, key=f"k{i % 2}", batch_size=size)
            )


def batched_pair(*, b_headers: bool = True, **settings: object) -> tuple[Harness, Harness]:
    """a holds three batches of four published there by an application-named producer; b their replicated
    copies, which (batched) carry no visible stamp: b's broker tells the origin in the entry's headers."""
    a = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    b = FakeRegion("b", {NS: ["a", "b"]}, topics={TOPIC: list(B_LOG)})
    for region in (a, b):
        region.cursors[(TOPIC, SUB)] = AckState.of(Position(region.topics[TOPIC][0].ledger, -1))
    a.origin_runs[TOPIC] = [OriginRun(5, 0, len(A_LOG), "a")]
    if b_headers:
        for local, origin in zip(B_LOG, A_LOG, strict=True):
            stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}
            b.headers[(TOPIC, local)] = EntryHeaders("a", stamp, SIZE)
    ha, hb = Harness.build(a, **settings), Harness.build(b, **settings)
    for h in (ha, hb):
        h.discover()
        h.step()
    deliver_batches(ha, A_LOG, "orders-app")
    deliver_batches(hb, B_LOG, "orders-app")
    for h in (ha, hb):
        h.step()
    carry(ha, hb)
    carry(hb, ha)
    return ha, hb


def test_batch_indexes_acknowledged_in_a_are_acknowledged_in_b() -> None:
    a, b = batched_pair()
    assert b.agent.topics[TOPIC].tail.index.origin_of(B_LOG[1]) is not None
    assert b.agent.topics[TOPIC].tail.size_of(B_LOG[1]) == SIZE
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0]])
    a.region.consumer_acks_indexes(TOPIC, SUB, A_LOG[1], SIZE, 0, 2)
    a.step()
    assert carry(a, b) == 1
    b.step()
    cursor = b.region.cursors[(TOPIC, SUB)]
    assert cursor.mark_delete == B_LOG[0]
    assert cursor.batch(B_LOG[1]) == BatchAcks.of(SIZE, [0, 2])
    assert ("batch_ack", TOPIC, SUB, B_LOG[1], (0, 2)) in b.region.calls
    assert 2 not in [i for p, acks in cursor.batches if p == B_LOG[2] for i in acks.indexes()]


def test_two_regions_partial_acks_complete_an_entry() -> None:
    a, b = batched_pair()
    a.region.consumer_acks_indexes(TOPIC, SUB, A_LOG[0], SIZE, 0, 1)
    a.step()
    carry(a, b)
    b.step()
    b.region.consumer_acks_indexes(TOPIC, SUB, B_LOG[0], SIZE, 2, 3)
    b.step()
    carry(b, a)
    a.step()
    assert a.region.cursors[(TOPIC, SUB)].mark_delete == A_LOG[0]


def test_a_batched_copy_whose_origin_nobody_can_tell_blocks_the_mark_delete() -> None:
    a, b = batched_pair(b_headers=False)
    # b's broker says the entries are local (no replicated-from): b indexes them as its own, so a's claims
    # (about a's entries) do not map onto them and nothing is acknowledged on a guess.
    a.region.consumer_acks(TOPIC, SUB, A_LOG)
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(Position(9, -1))


def test_a_broker_without_batch_index_acks_gets_whole_entries_only() -> None:
    a, b = batched_pair()
    b.region.batch_acks = False
    a.region.consumer_acks_indexes(TOPIC, SUB, A_LOG[0], SIZE, 1)
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[1]])
    a.step()
    carry(a, b)
    b.step()  # written ...
    b.step(0.01)  # ... and its outcome folded before the next observe step: refused (batch_acks_off), learned
    assert b.agent.caps.get(Capability.BATCH_ACKS) is False
    b.step()
    cursor = b.region.cursors[(TOPIC, SUB)]
    assert B_LOG[1] in cursor
    assert not cursor.batches


def test_a_poll_keeps_the_batch_indexes_the_feed_reported() -> None:
    a, _ = batched_pair()
    a.region.consumer_acks_indexes(TOPIC, SUB, A_LOG[0], SIZE, 3)
    a.step()
    assert a.agent.subs[(TOPIC, SUB)].cursor is not None
    for _ in range(40):  # polls and resyncs come round
        a.step(5.0)
    cursor = a.agent.subs[(TOPIC, SUB)].cursor
    assert cursor is not None
    assert cursor.batch(A_LOG[0]) == BatchAcks.of(SIZE, [3])


def test_batch_indexes_a_reload_made_the_broker_forget_are_written_again() -> None:
    """Pulsar 4.0.8 forgets the batch indexes of partly acknowledged entries when a topic is unloaded; b's
    agent sees the topic write to another ledger at its next poll, stops trusting the indexes it wrote, and
    writes them again from the claims it holds."""
    a, b = batched_pair()
    a.region.consumer_acks_indexes(TOPIC, SUB, A_LOG[1], SIZE, 0, 2)
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)].batch(B_LOG[1]) == BatchAcks.of(SIZE, [0, 2])
    b.region.reload(TOPIC)
    assert b.region.cursors[(TOPIC, SUB)].batch(B_LOG[1]) is None
    for _ in range(8):  # polls and a resync come round
        b.step(5.0)
    assert b.agent.stats.counters["topics_reloaded"] == 1
    assert b.region.cursors[(TOPIC, SUB)].batch(B_LOG[1]) == BatchAcks.of(SIZE, [0, 2])


def test_batch_sizes_and_keys_come_from_every_message_of_the_entry() -> None:
    a, _ = batched_pair()
    tail = a.agent.topics[TOPIC].tail
    assert [tail.size_of(p) for p in A_LOG] == [SIZE] * 3
    assert tail.key_of_message(A_LOG[0], 1) == "k1"
    assert tail.key_of_message(A_LOG[0], 2) == "k0"
    assert CONTROL not in a.agent.topics


def claims_before_copies(*, sized: bool) -> tuple[Harness, Harness]:
    """a's consumer acknowledged indexes 0 and 1 of its first batch (2 and 3 not) and b's agent holds that
    claim before its reader has handed over more than the first two messages of b's copy of that batch."""
    a = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    b = FakeRegion("b", {NS: ["a", "b"]}, topics={TOPIC: list(B_LOG)})
    for region in (a, b):
        region.cursors[(TOPIC, SUB)] = AckState.of(Position(region.topics[TOPIC][0].ledger, -1))
    a.origin_runs[TOPIC] = [OriginRun(5, 0, len(A_LOG), "a")]
    for local, origin in zip(B_LOG, A_LOG, strict=True):
        b.headers[(TOPIC, local)] = EntryHeaders("a", {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}, SIZE)
    ha, hb = Harness.build(a), Harness.build(b)
    for h in (ha, hb):
        h.discover()
        h.step()
    deliver_batches(ha, A_LOG, "orders-app")
    ha.step()
    a.consumer_acks_indexes(TOPIC, SUB, A_LOG[0], SIZE, 0, 1)
    ha.step()
    assert carry(ha, hb) >= 1
    deliver_batches(hb, B_LOG[:1], "orders-app", indexes=range(2), sized=sized)
    hb.step()
    hb.step()
    return ha, hb


def test_a_batch_read_in_part_is_not_acknowledged_whole_on_a_claim_naming_the_messages_read() -> None:
    """The loss of CI's sidecar kill test (twice): b's agent took the two messages its reader had handed over
    for the entry's size, and a claim naming both acknowledged the whole entry, messages 2 and 3 (never
    acknowledged in a) with it. The size comes from the client now, with the first message."""
    _, b = claims_before_copies(sized=True)
    cursor = b.region.cursors[(TOPIC, SUB)]
    assert B_LOG[0] not in cursor
    assert cursor.batch(B_LOG[0]) == BatchAcks.of(SIZE, [0, 1])


def test_a_batch_whose_size_the_client_does_not_give_waits_for_the_next_entry() -> None:
    """A client that does not say a batch's size: the size counted so far is not trusted until a later
    entry is read (no acknowledgement of that entry meanwhile, not even in part)."""
    _, b = claims_before_copies(sized=False)
    tail = b.agent.topics[TOPIC].tail
    assert tail.size_of(B_LOG[0]) is None
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(Position(9, -1))
    deliver_batches(b, [B_LOG[0]], "orders-app", indexes=range(2, SIZE), sized=False)
    deliver_batches(b, B_LOG[1:2], "orders-app", indexes=range(1), sized=False)
    b.step()
    b.step()
    assert tail.size_of(B_LOG[0]) == SIZE
    cursor = b.region.cursors[(TOPIC, SUB)]
    assert B_LOG[0] not in cursor
    assert cursor.batch(B_LOG[0]) == BatchAcks.of(SIZE, [0, 1])


def test_acks_reported_before_discovery_sees_the_subscription_are_kept() -> None:
    a, _ = batched_pair()
    fresh = f"persistent://{NS}/fresh"
    log = [Position(6, 0)]
    a.region.topics[fresh] = list(log)
    a.region.cursors[(fresh, SUB)] = AckState.of(Position(6, -1))
    a.region.consumer_acks_indexes(fresh, SUB, log[0], SIZE, 1, 2)
    a.step()  # the feed reports a subscription the agent does not track yet: kept, discovery asked for
    assert a.agent.rediscover.is_set()
    assert (fresh, SUB) in a.agent.unobserved
    a.discover()
    a.step()  # adopted: the reader opens; the report still waits for the batch sizes
    for i in range(SIZE):
        a.messaging.deliver(fresh, message(fresh, log[0], producer="orders-app", batch_index=i))
    a.step()
    a.step()
    cursor = a.agent.subs[(fresh, SUB)].cursor
    assert cursor is not None
    assert cursor.batch(log[0]) == BatchAcks.of(SIZE, [1, 2])
    assert not a.agent.unobserved


def test_states_with_partial_batches_travel_apart_from_the_others() -> None:
    """An agent not upgraded yet refuses version-2 envelopes whole: every state without partial batches
    must still reach it in a version-1 envelope."""
    a, _ = batched_pair()
    other = "audit"
    a.region.cursors[(TOPIC, other)] = AckState.of(Position(5, -1))
    a.discover()
    a.step()
    if CONTROL in a.messaging.producers:
        a.messaging.producers[CONTROL].sent.clear()
    a.region.consumer_acks_indexes(TOPIC, SUB, A_LOG[0], SIZE, 1)
    a.region.consumer_acks(TOPIC, other, [A_LOG[0]])
    a.step()
    opened = [envelopes.open_envelope(KEYRING, data) for data in a.sent_on(CONTROL)]
    versions = sorted(
        (o.payload["version"], sorted(st["subscription"] for st in o.payload["states"]))
        for o in opened
        if isinstance(o, envelopes.Envelope)
    )
    assert versions == [(1, [other]), (2, [SUB])]


def test_a_partial_claim_completed_later_is_applied_whole() -> None:
    """Claims that change while their count of entries plus partial messages does not (a partial entry
    becoming whole: one entry more, one partial message less) are planned again."""
    a, b = batched_pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0]])
    a.region.consumer_acks_indexes(TOPIC, SUB, A_LOG[1], SIZE, 0)
    a.step()
    carry(a, b)
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, SUB)].batch(B_LOG[1]) == BatchAcks.of(SIZE, [0])
    a.region.consumer_acks_indexes(TOPIC, SUB, A_LOG[1], SIZE, 1, 2, 3)
    a.step()
    assert carry(a, b) == 1
    b.step()
    assert b.region.cursors[(TOPIC, SUB)].mark_delete == B_LOG[1]


def test_batch_indexes_acknowledged_before_the_agent_started_are_claimed() -> None:
    """An agent (re)started after a consumer acknowledged only batch indexes: the feed names them once, and
    its first rounds run before discovery knows the namespaces. The report must wait for discovery (a poll
    cannot see batch indexes); dropped, the acknowledgements were never claimed (the lab's
    test_batched_shared_random_acks_fail_over_exactly, one run in about six)."""
    a = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    a.cursors[(TOPIC, SUB)] = AckState.of(Position(5, -1))
    a.origin_runs[TOPIC] = [OriginRun(5, 0, len(A_LOG), "a")]
    a.consumer_acks_indexes(TOPIC, SUB, A_LOG[0], SIZE, 0, 2)
    ha = Harness.build(a)
    ha.step()  # discovery has not answered yet
    ha.discover()
    ha.step()
    deliver_batches(ha, A_LOG, "orders-app")
    for _ in range(3):
        ha.step()
    published = ha.agent.subs[(TOPIC, SUB)].published
    assert published is not None
    assert published.partials == (("a", ((A_LOG[0], BatchAcks.of(SIZE, [0, 2])),)),)


def test_batch_indexes_acknowledged_in_a_namespace_added_later_are_claimed() -> None:
    """A namespace starts replicating while the agent runs: the feed named its acknowledgements before
    discovery brought it in scope, so the agent reads the feed again from the start."""
    a, _ = batched_pair()
    other_ns, topic = "geo/later", "persistent://geo/later/orders"
    a.region.topics[topic] = [Position(7, 0)]
    a.region.cursors[(topic, SUB)] = AckState.of(Position(7, -1))
    a.region.consumer_acks_indexes(topic, SUB, Position(7, 0), SIZE, 1, 3)
    a.step()  # the feed names it; out of scope: dropped
    a.region.namespaces[other_ns] = ["a", "b"]
    a.discover()
    a.step()
    for i in range(SIZE):
        a.messaging.deliver(
            topic, message(topic, Position(7, 0), producer="orders-app", batch_index=i, batch_size=SIZE)
        )
    for _ in range(3):
        a.step()
    published = a.agent.subs[(topic, SUB)].published
    assert published is not None
    assert published.partials == (("a", ((Position(7, 0), BatchAcks.of(SIZE, [1, 3])),)),)
