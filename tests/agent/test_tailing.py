"""The tail: entries whose origin the brokers could not name are asked about again, with backoff."""

from __future__ import annotations

import threading

import pytest

from geosync_agent import tailing
from geosync_agent.tailing import Tail
from geosync_core import resolving
from geosync_core.markers import PROPERTY as MARKER_PROPERTY
from geosync_core.markers import SnapshotRequest, encode_marker
from geosync_core.origins import Origin
from geosync_core.positions import Position

from .fakes import KEYRING, KEYS, message

TOPIC = "persistent://geo/ab/t"
STAMP = resolving.REPL_SOURCE_POSITION


class FlakyHeaders:
    """The brokers' answer for an entry's origin region: none for the first ``failures`` questions."""

    def __init__(self, failures: int, region: str = "b") -> None:
        self.failures = failures
        self.region = region
        self.asked = 0

    def __call__(self, topic: str, local: Position) -> str | None:
        self.asked += 1
        return None if self.asked <= self.failures else self.region


def test_an_entry_whose_origin_could_not_be_read_is_named_on_a_later_round() -> None:
    lookup = FlakyHeaders(failures=2)
    resolver = resolving.OriginResolver(local="a", lookup=lookup)
    tail = Tail(TOPIC, -1)
    tail.inbox.put(message(TOPIC, Position(7, 0)))  # published here
    tail.inbox.put(message(TOPIC, Position(7, 1), properties={STAMP: "3:4"}))  # from b, lookup fails
    tail.inbox.put(message(TOPIC, Position(7, 2)))
    assert tail.drain(resolver, now=100.0) == 2
    assert tail.unresolved == [Position(7, 1)]
    assert Position(7, 1) in tail.positions_above(Position(7, 0))  # mark-delete must stop there
    assert tail.index.origin_of(Position(7, 1)) is None

    assert tail.retry(resolver, now=100.5) == 0  # not due yet: nothing asked
    assert lookup.asked == 1
    assert tail.retry(resolver, now=101.0) == 0  # due; the brokers fail again: backoff doubles
    assert lookup.asked == 2
    assert tail.retry(resolver, now=102.5) == 0
    assert lookup.asked == 2
    version = tail.version
    assert tail.retry(resolver, now=103.0) == 1
    assert tail.index.origin_of(Position(7, 1)) == Origin("b", Position(3, 4))
    assert tail.index.local_of(Origin("b", Position(3, 4))) == Position(7, 1)
    assert tail.unresolved == []
    assert tail.pending == {}
    assert tail.version > version
    assert tail.resolved_late == 1


def test_backoff_is_capped_and_each_round_asks_about_a_bounded_number() -> None:
    lookup = FlakyHeaders(failures=10**6)
    resolver = resolving.OriginResolver(local="a", lookup=lookup)
    tail = Tail(TOPIC, -1)
    for e in range(tailing.RETRIES_PER_ROUND + 10):
        tail.inbox.put(message(TOPIC, Position(7, e), properties={STAMP: f"3:{e}"}))
    tail.drain(resolver, now=0.0)
    asked = lookup.asked
    tail.retry(resolver, now=1.0)
    assert lookup.asked - asked == tailing.RETRIES_PER_ROUND
    now = 1.0
    for _ in range(20):
        now += 1000.0
        tail.retry(resolver, now=now, limit=10**6)
    assert all(item.due - now <= tailing.RETRY_MAX_S for item in tail.pending.values())


def test_malformed_stamps_are_not_retried_and_acknowledged_entries_are_dropped() -> None:
    lookup = FlakyHeaders(failures=10**6)
    resolver = resolving.OriginResolver(local="a", lookup=lookup)
    tail = Tail(TOPIC, -1)
    tail.inbox.put(message(TOPIC, Position(7, 0), properties={STAMP: "not-a-position"}))
    tail.inbox.put(message(TOPIC, Position(7, 1), properties={STAMP: "3:1"}))
    tail.inbox.put(message(TOPIC, Position(7, 2), properties={STAMP: "3:2"}))
    tail.drain(resolver, now=0.0)
    assert tail.malformed == 1
    assert set(tail.pending) == {Position(7, 1), Position(7, 2)}
    # Every tracked subscription acknowledged up to 7:1 here: those no longer need an origin.
    tail.forget_up_to(Position(7, 1))
    assert tail.unresolved == [Position(7, 2)]
    assert set(tail.pending) == {Position(7, 2)}


def test_the_namespace_cluster_list_never_names_an_origin() -> None:
    # Two regions in the namespace's list today, but the copy came from c (added, then removed, or a
    # topic-level replication cluster): only the brokers' record may name it.
    resolver = resolving.OriginResolver(local="a", lookup=lambda _t, _p: "c")
    named = resolver.origin_of(TOPIC, Position(7, 1), properties={STAMP: "3:4"}, producer="orders")
    assert named == Origin("c", Position(3, 4))
    assert resolver.lookups == 1
    unknown = resolving.OriginResolver(local="a", lookup=lambda _t, _p: None)
    named = unknown.origin_of(TOPIC, Position(7, 1), properties={STAMP: "3:4"}, producer="orders")
    assert named == resolving.Unresolved(Position(7, 1))


def test_the_log_planned_from_is_a_window_that_keeps_unresolved_entries_in_order() -> None:
    """Issue 17.8: a region back from an outage has its backlog above its cursors; each round plans from
    the first ``limit`` entries above the mark-delete only, a prefix of the whole log (unresolved in it)."""
    lookup = FlakyHeaders(failures=10**6)
    resolver = resolving.OriginResolver(local="a", lookup=lookup)
    tail = Tail(TOPIC, -1)
    for ledger in (7, 8):
        for e in range(10):
            stamp = {STAMP: "3:4"} if (ledger, e) == (7, 5) else {}
            tail.inbox.put(message(TOPIC, Position(ledger, e), properties=stamp))
    tail.drain(resolver, now=0.0)
    whole = tail.positions_above(Position(7, 1), limit=10**6)
    assert len(whole) == 18
    assert Position(7, 5) in whole
    for limit in (1, 3, 4, 8, 12, 30):
        assert tail.positions_above(Position(7, 1), limit=limit) == whole[:limit]


def test_a_full_inbox_holds_the_listener_back_until_the_runtime_drains_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Backpressure, not memory growing with the lag: the listener waits while the inbox is full (the
    reader's receive queue then fills and the broker stops dispatching); a tail closed meanwhile drops."""
    monkeypatch.setattr(tailing, "INBOX_MAX", 2)
    monkeypatch.setattr(tailing, "PUT_WAIT_S", 0.02)
    tail = Tail(TOPIC, -1)
    tail.reader = object()  # type: ignore[assignment]  # open
    tail.listener(message(TOPIC, Position(7, 0)))
    tail.listener(message(TOPIC, Position(7, 1)))
    third = threading.Thread(target=tail.listener, args=(message(TOPIC, Position(7, 2)),))
    third.start()
    third.join(0.2)
    assert third.is_alive()  # waiting for room
    resolver = resolving.OriginResolver(local="a", lookup=lambda topic, local: None)
    assert tail.drain(resolver, limit=1) == 1
    third.join(1.0)
    assert not third.is_alive()
    assert tail.drain(resolver) == 2
    assert tail.last == Position(7, 2)
    tail.listener(message(TOPIC, Position(7, 3)))
    tail.listener(message(TOPIC, Position(7, 4)))
    tail.reader = None  # closed: a listener still waiting gives up instead of blocking the client's thread
    fourth = threading.Thread(target=tail.listener, args=(message(TOPIC, Position(7, 5)),))
    fourth.start()
    fourth.join(1.0)
    assert not fourth.is_alive()
    assert tail.inbox.qsize() == 2


def test_a_data_topics_payloads_are_not_held_but_counted_control_and_marker_payloads_are() -> None:
    data = Tail(TOPIC, -1)
    data.listener(message(TOPIC, Position(7, 0), data=b"x" * 1000))
    data.listener(message(TOPIC, Position(7, 1), data=b"m", properties={MARKER_PROPERTY: "snapshot"}))
    assert [m.data for m in (data.inbox.get_nowait(), data.inbox.get_nowait())] == [b"", b"m"]
    assert data.bytes_read == 1001
    control = Tail("persistent://geo/ab/geosync-control", -1, wake=threading.Event())
    control.listener(message(TOPIC, Position(8, 0), data=b"envelope"))
    assert control.inbox.get_nowait().data == b"envelope"


def test_positions_above_a_floor_start_there_whatever_lies_below() -> None:
    """The log a plan walks starts right above the floor, found by bisection (not by walking every run
    below it: a subscription nobody consumes holds many back), across ledgers and origins."""
    tail = Tail(TOPIC, -1)
    entries = [Position(ledger, e) for ledger in (3, 5, 8) for e in range(7)]
    for i, p in enumerate(entries):
        tail.index.append(p, Origin("a" if i % 3 else "b", Position(40 + p.ledger, p.entry)))
    for floor in [
        Position(-1, -1),
        Position(3, 2),
        Position(4, 0),
        Position(5, 6),
        Position(8, 5),
        entries[-1],
    ]:
        expected = [p for p in entries if p > floor]
        assert tail.positions_above(floor) == expected
        assert tail.positions_above(floor, limit=4) == expected[:4]


def test_a_checkpoint_taken_now_and_encoded_later_holds_the_tail_as_it_was_when_taken() -> None:
    # The loop takes the checkpoint; the checkpoint thread encodes it while the loop reads on and forgets.
    resolver = resolving.OriginResolver(local="a", lookup=FlakyHeaders(failures=1))
    tail = Tail(TOPIC, -1)
    for i in range(3):  # a batch of three
        tail.inbox.put(message(TOPIC, Position(7, 0), key="k1", batch_index=i))
    tail.inbox.put(message(TOPIC, Position(7, 1), properties={STAMP: "3:4"}))  # unresolved for now
    tail.inbox.put(message(TOPIC, Position(7, 2), key="k2"))
    tail.drain(resolver, now=100.0)
    expected = tail.to_wire()
    encode = tail.to_wire_later()
    tail.inbox.put(message(TOPIC, Position(7, 3), key="k3"))
    for i in range(2):
        tail.inbox.put(message(TOPIC, Position(8, 0), key=f"k4-{i}", batch_index=i))
    tail.drain(resolver, now=100.1)
    tail.retry(resolver, now=200.0)  # names 7:1 (b's 3:4)
    tail.forget_up_to(Position(7, 1))
    assert tail.to_wire() != expected
    assert encode() == expected
    assert Tail.from_wire(TOPIC, -1, encode()).to_wire() == expected


def test_a_checkpoint_of_an_agent_before_the_columns_is_read() -> None:
    """Entry details as agents before 2026-11-25 wrote them, one value per entry: read the same."""
    resolver = resolving.OriginResolver(local="a", lookup=FlakyHeaders(failures=0))
    tail = Tail(TOPIC, -1)
    for i in range(3):
        key = "k9" if i == 1 else "k1"
        tail.inbox.put(message(TOPIC, Position(7, 0), key=key, batch_index=i, batch_size=3))
    tail.inbox.put(message(TOPIC, Position(7, 2), key="k2"))
    tail.drain(resolver, now=100.0)
    wire = tail.to_wire()
    assert "details" in wire
    assert "keys" not in wire
    old = {k: v for k, v in wire.items() if k != "details"}
    old |= {
        "keys": [[7, 0, "k1"], [7, 2, "k2"]],
        "sizes": [[7, 0, 3]],
        "message_keys": [[7, 0, 1, "k9"]],
    }
    again = Tail.from_wire(TOPIC, -1, old)
    for p in (Position(7, 0), Position(7, 1), Position(7, 2)):
        assert (again.size_of(p), again.key_of(p)) == (tail.size_of(p), tail.key_of(p))
    for index in range(3):
        assert again.key_of_message(Position(7, 0), index) == tail.key_of_message(Position(7, 0), index)
    assert again.key_of_message(Position(7, 0), 1) == "k9"


def test_the_stretches_above_a_floor_are_every_position_above_it() -> None:
    """``stretches_above`` (what a plan walks) lists every entry ``positions_above`` does, unresolved entries
    included, without a window (a plan's budget bounds its walk) and without making a position of each."""
    tail = Tail(TOPIC, -1)
    entries = [Position(ledger, e) for ledger in (3, 5, 8) for e in range(7)]
    for i, p in enumerate(entries):
        tail.index.append(p, Origin("a" if i % 3 else "b", Position(40 + p.ledger, p.entry)))
    floors = [Position(-1, -1), Position(3, 2), Position(4, 0), Position(5, 6), Position(8, 5), entries[-1]]
    for floor in floors:
        assert list(tail.stretches_above(floor)) == [p for p in entries if p > floor]
    tail.unresolved += [Position(9, 0), Position(5, 3)]  # one the index holds after all: listed once
    for floor in floors:
        assert list(tail.stretches_above(floor)) == sorted(
            {p for p in [*entries, Position(9, 0)] if p > floor}
        )
    assert Position(9, 0) in list(tail.stretches_above(Position(8, 6)))


def test_only_a_marker_an_agent_signed_and_did_not_batch_is_held_out_of_the_log() -> None:
    """The entry filter hides (acknowledges) a message carrying the marker property only if an agent of the
    keyring signed it and it is not in a batch; every other such message reaches applications, so the tail
    indexes it like any message. Left out of the log, a cursor move planned over the log passed it: a region
    acknowledged an application's message nobody consumed (issue 45, case 4)."""
    request = SnapshotRequest(snapshot_id="s1", source_region="a", round=1)
    properties, payload = encode_marker(KEYS["a"].signer, request, topic=TOPIC, seq=1, sent_at_ms=0)
    resolver = resolving.OriginResolver(local="a", lookup=FlakyHeaders(failures=0, region="a"))
    tail = Tail(TOPIC, -1)
    tail.inbox.put(message(TOPIC, Position(7, 0), data=payload, properties=properties))  # genuine
    tail.inbox.put(message(TOPIC, Position(7, 1), data=b"app", properties={MARKER_PROPERTY: "snapshot"}))
    forged = {MARKER_PROPERTY: "update"}  # a genuine envelope, but of another kind than the property says
    tail.inbox.put(message(TOPIC, Position(7, 2), data=payload, properties=forged))
    for i in range(2):  # a genuine marker inside a batch: the filter delivers whole batches
        tail.inbox.put(message(TOPIC, Position(7, 3), data=payload, properties=properties, batch_index=i))
    tail.drain(resolver, now=0.0, keyring=KEYRING)
    assert [p for p, _, _ in tail.markers] == [Position(7, 0)]
    assert tail.positions_above(Position(-1, -1)) == [Position(7, 1), Position(7, 2), Position(7, 3)]

    without = Tail(TOPIC, -1)  # no keyring: the filter hides nothing, so nothing is a marker
    without.inbox.put(message(TOPIC, Position(7, 0), data=payload, properties=properties))
    without.drain(resolver, now=0.0)
    assert without.markers == []
    assert without.positions_above(Position(-1, -1)) == [Position(7, 0)]
