"""The core's view of a topic partition's log (``core.logview``), fed received messages as values.

No reader and no inbox here (the shell's ``tailing.Tail`` drains those and hands the messages over): each
test feeds ``LogView.take`` messages and asks the view about origins, sizes, keys and unresolved entries.
"""

from __future__ import annotations

from dataclasses import replace

from geosync_agent.core import checkpoint, logview
from geosync_agent.core.logview import LogView
from geosync_core import resolving
from geosync_core.markers import PROPERTY as MARKER_PROPERTY
from geosync_core.markers import SnapshotRequest, encode_marker
from geosync_core.origins import Origin
from geosync_core.positions import Position

from .fakes import KEYRING, KEYS, message

TOPIC = "persistent://geo/ab/t"
STAMP = resolving.REPL_SOURCE_POSITION
HERE = "a-0-1"
"""A producer name claiming region a: a batch shows no stamp, so its producer says where it was published."""


class FlakyHeaders:
    """The brokers' answer for an entry's origin region: none for the first ``failures`` questions."""

    def __init__(self, failures: int, region: str = "b") -> None:
        self.failures = failures
        self.region = region
        self.asked = 0

    def __call__(self, topic: str, local: Position) -> str | None:
        self.asked += 1
        return None if self.asked <= self.failures else self.region


def naming(region: str = "b", failures: int = 0) -> resolving.OriginResolver:
    return resolving.OriginResolver(local="a", lookup=FlakyHeaders(failures, region))


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


def test_fed_messages_give_each_entry_its_origin_size_and_keys() -> None:
    view = LogView(TOPIC, -1)
    fed = [
        message(TOPIC, Position(7, 0), key="k0"),  # published here
        message(TOPIC, Position(7, 1), properties={STAMP: "3:4"}, key="k1"),  # b's copy
        *(
            message(TOPIC, Position(7, 2), key=f"b{i}", batch_index=i, batch_size=3, producer=HERE)
            for i in range(3)
        ),
        message(TOPIC, Position(7, 3)),
    ]
    assert view.take(fed, naming(), now=0.0) == 4
    assert view.last == Position(7, 3)
    assert view.messages_read == 6
    assert [view.origin_region_of(Position(7, e)) for e in range(4)] == ["a", "b", "a", "a"]
    assert view.index.origin_of(Position(7, 1)) == Origin("b", Position(3, 4))
    assert [view.size_of(Position(7, e)) for e in range(4)] == [None, None, 3, None]
    assert [view.key_of(Position(7, e)) for e in range(4)] == ["k0", "k1", "b0", ""]
    assert [view.key_of_message(Position(7, 2), i) for i in range(3)] == ["b0", "b1", "b2"]
    assert view.has_read(Position(7, 3))
    assert not view.has_read(Position(7, 4))
    assert view.positions_above(Position(7, 0)) == [Position(7, e) for e in (1, 2, 3)]


def test_a_batch_without_a_size_is_counted_and_not_answered_for_until_a_later_entry_is_read() -> None:
    view = LogView(TOPIC, -1)
    resolver = naming()
    view.take([message(TOPIC, Position(7, 0), batch_index=0)], resolver)
    assert view.size_of(Position(7, 0)) is None  # still being counted
    version, rewrites = view.version, view.rewrites
    assert view.take([message(TOPIC, Position(7, 0), batch_index=1)], resolver) == 1  # plans are redone
    assert view.rewrites == rewrites + 1
    assert view.version == version + 1
    assert view.size_of(Position(7, 0)) is None
    view.take([message(TOPIC, Position(7, 1))], resolver)
    assert view.size_of(Position(7, 0)) == 2
    assert view.take([message(TOPIC, Position(7, 1))], resolver) == 0  # a redelivery: skipped
    assert view.messages_read == 4


def test_an_entry_whose_origin_could_not_be_read_is_named_on_a_later_round() -> None:
    lookup = FlakyHeaders(failures=2)
    resolver = resolving.OriginResolver(local="a", lookup=lookup)
    view = LogView(TOPIC, -1)
    fed = [
        message(TOPIC, Position(7, 0)),  # published here
        message(TOPIC, Position(7, 1), properties={STAMP: "3:4"}),  # from b, lookup fails
        message(TOPIC, Position(7, 2)),
    ]
    assert view.take(fed, resolver, now=100.0) == 2
    assert view.unresolved == [Position(7, 1)]
    assert Position(7, 1) in view.positions_above(Position(7, 0))  # mark-delete must stop there
    assert view.index.origin_of(Position(7, 1)) is None

    assert view.retry(resolver, now=100.5) == 0  # not due yet: nothing asked
    assert lookup.asked == 1
    assert view.retry(resolver, now=101.0) == 0  # due; the brokers fail again: backoff doubles
    assert lookup.asked == 2
    assert view.retry(resolver, now=102.5) == 0
    assert lookup.asked == 2
    version, rewrites = view.version, view.rewrites
    assert view.retry(resolver, now=103.0) == 1
    assert view.index.origin_of(Position(7, 1)) == Origin("b", Position(3, 4))
    assert view.index.local_of(Origin("b", Position(3, 4))) == Position(7, 1)
    assert view.unresolved == []
    assert view.pending == {}
    assert (view.version, view.rewrites) == (version + 1, rewrites + 1)
    assert view.resolved_late == 1


def test_backoff_is_capped_and_each_round_asks_about_a_bounded_number() -> None:
    lookup = FlakyHeaders(failures=10**6)
    resolver = resolving.OriginResolver(local="a", lookup=lookup)
    view = LogView(TOPIC, -1)
    n = logview.RETRIES_PER_ROUND + 10
    view.take([message(TOPIC, Position(7, e), properties={STAMP: f"3:{e}"}) for e in range(n)], resolver)
    asked = lookup.asked
    view.retry(resolver, now=1.0)
    assert lookup.asked - asked == logview.RETRIES_PER_ROUND
    now = 1.0
    for _ in range(20):
        now += 1000.0
        view.retry(resolver, now=now, limit=10**6)
    assert all(item.due - now <= logview.RETRY_MAX_S for item in view.pending.values())
    assert view.unresolved == sorted(view.unresolved)
    assert set(view.pending) <= set(view.unresolved)


def test_malformed_stamps_are_not_retried_and_acknowledged_entries_are_dropped() -> None:
    view = LogView(TOPIC, -1)
    fed = [
        message(TOPIC, Position(7, 0), properties={STAMP: "not-a-position"}),
        message(TOPIC, Position(7, 1), properties={STAMP: "3:1"}),
        message(TOPIC, Position(7, 2), properties={STAMP: "3:2"}),
    ]
    view.take(fed, naming(failures=10**6))
    assert view.malformed == 1
    assert view.unresolved == [Position(7, 0), Position(7, 1), Position(7, 2)]
    assert set(view.pending) == {Position(7, 1), Position(7, 2)}
    # Every tracked subscription acknowledged up to 7:1 here: those no longer need an origin.
    view.forget_up_to(Position(7, 1))
    assert view.unresolved == [Position(7, 2)]
    assert set(view.pending) == {Position(7, 2)}


def test_entries_forgotten_over_the_budget_park_subscriptions_below_them() -> None:
    view = LogView(TOPIC, -1)
    view.take([message(TOPIC, Position(7, e), key=f"k{e}") for e in range(10)], naming())
    assert view.forgot_above(Position(-1, -1)) is None
    highest = view.forget_oldest(3)
    assert highest is not None
    assert highest >= Position(7, 2)
    assert view.budget_floor == highest
    assert view.key_of(Position(7, 0)) is None
    assert view.origin_region_of(Position(7, 0)) is None
    assert view.forgot_above(Position(-1, -1)) == highest
    assert view.forgot_above(highest) is None
    assert view.key_of(Position(7, 9)) == "k9"


def test_a_view_restored_from_a_checkpoint_is_stale_when_the_topic_holds_entries_below_it() -> None:
    view = LogView(TOPIC, -1)
    view.take([message(TOPIC, Position(7, e)) for e in range(3)], naming())
    again = checkpoint.view_from_wire(LogView, TOPIC, -1, checkpoint.view_to_wire(view))
    assert again.resume_at == Position(7, 2)
    # The reader resumes at the last entry read: it comes again, then what follows.
    assert again.take([message(TOPIC, Position(7, 2)), message(TOPIC, Position(7, 3))], naming()) == 1
    assert not again.stale
    assert again.take([message(TOPIC, Position(7, 0))], naming()) == 0  # matched once: a redelivery now
    assert not again.stale
    rebuilt = checkpoint.view_from_wire(LogView, TOPIC, -1, checkpoint.view_to_wire(view))
    assert rebuilt.take([message(TOPIC, Position(2, 0)), message(TOPIC, Position(2, 1))], naming()) == 0
    assert rebuilt.stale
    assert rebuilt.messages_read == 0


def test_the_log_planned_from_is_a_window_that_keeps_unresolved_entries_in_order() -> None:
    """Issue 17.8: a region back from an outage has its backlog above its cursors; each round plans from
    the first ``limit`` entries above the mark-delete only, a prefix of the whole log (unresolved in it)."""
    view = LogView(TOPIC, -1)
    fed = [
        message(TOPIC, Position(ledger, e), properties={STAMP: "3:4"} if (ledger, e) == (7, 5) else {})
        for ledger in (7, 8)
        for e in range(10)
    ]
    view.take(fed, naming(failures=10**6))
    whole = view.positions_above(Position(7, 1), limit=10**6)
    assert len(whole) == 18
    assert Position(7, 5) in whole
    for limit in (1, 3, 4, 8, 12, 30):
        assert view.positions_above(Position(7, 1), limit=limit) == whole[:limit]


def test_positions_and_stretches_above_a_floor_are_every_position_above_it() -> None:
    """The log a plan walks starts right above the floor, found by bisection (not by walking every run
    below it), across ledgers and origins; ``stretches_above`` lists what ``positions_above`` does,
    unresolved entries included, without a window."""
    view = LogView(TOPIC, -1)
    entries = [Position(ledger, e) for ledger in (3, 5, 8) for e in range(7)]
    for i, p in enumerate(entries):
        view.index.append(p, Origin("a" if i % 3 else "b", Position(40 + p.ledger, p.entry)))
    floors = [Position(-1, -1), Position(3, 2), Position(4, 0), Position(5, 6), Position(8, 5), entries[-1]]
    for floor in floors:
        expected = [p for p in entries if p > floor]
        assert view.positions_above(floor) == expected
        assert view.positions_above(floor, limit=4) == expected[:4]
        assert list(view.stretches_above(floor)) == expected
    view.unresolved += [Position(9, 0), Position(5, 3)]  # one the index holds after all: listed once
    for floor in floors:
        assert list(view.stretches_above(floor)) == sorted(
            {p for p in [*entries, Position(9, 0)] if p > floor}
        )


def test_a_checkpoint_taken_now_and_encoded_later_holds_the_view_as_it_was_when_taken() -> None:
    # The loop takes the checkpoint; the checkpoint thread encodes it while the loop reads on and forgets.
    resolver = naming(failures=1)
    view = LogView(TOPIC, -1)
    fed = [
        *(message(TOPIC, Position(7, 0), key="k1", batch_index=i, producer=HERE) for i in range(3)),
        message(TOPIC, Position(7, 1), properties={STAMP: "3:4"}),  # unresolved for now
        message(TOPIC, Position(7, 2), key="k2"),
    ]
    view.take(fed, resolver, now=100.0)
    expected = checkpoint.view_to_wire(view)
    encode = checkpoint.view_to_wire_later(view)
    later = [
        message(TOPIC, Position(7, 3), key="k3"),
        *(message(TOPIC, Position(8, 0), key=f"k4-{i}", batch_index=i, producer=HERE) for i in range(2)),
    ]
    view.take(later, resolver, now=100.1)
    view.retry(resolver, now=200.0)  # names 7:1 (b's 3:4)
    view.forget_up_to(Position(7, 1))
    assert checkpoint.view_to_wire(view) != expected
    assert encode() == expected
    again = checkpoint.view_from_wire(LogView, TOPIC, -1, encode())
    assert checkpoint.view_to_wire(again) == expected
    assert again.unresolved == [Position(7, 1)]  # as it was when taken: not named yet
    assert set(again.pending) == {Position(7, 1)}
    assert again.retry(resolver, now=0.0) == 1  # asked about again (the brokers answer by now)
    assert again.origin_region_of(Position(7, 1)) == "b"


def test_a_checkpoint_of_an_agent_before_the_columns_is_read() -> None:
    """Entry details as agents before 2026-11-25 wrote them, one value per entry: read the same."""
    view = LogView(TOPIC, -1)
    fed = [
        *(
            message(TOPIC, Position(7, 0), key="k9" if i == 1 else "k1", batch_index=i, batch_size=3)
            for i in range(3)
        ),
        message(TOPIC, Position(7, 2), key="k2"),
    ]
    view.take(fed, naming(), now=100.0)
    wire = checkpoint.view_to_wire(view)
    assert "details" in wire
    assert "keys" not in wire
    old = {k: v for k, v in wire.items() if k != "details"}
    old |= {
        "keys": [[7, 0, "k1"], [7, 2, "k2"]],
        "sizes": [[7, 0, 3]],
        "message_keys": [[7, 0, 1, "k9"]],
    }
    again = checkpoint.view_from_wire(LogView, TOPIC, -1, old)
    for p in (Position(7, 0), Position(7, 1), Position(7, 2)):
        assert (again.size_of(p), again.key_of(p)) == (view.size_of(p), view.key_of(p))
    for index in range(3):
        assert again.key_of_message(Position(7, 0), index) == view.key_of_message(Position(7, 0), index)
    assert again.key_of_message(Position(7, 0), 1) == "k9"


def test_only_a_marker_an_agent_signed_and_did_not_batch_is_held_out_of_the_log() -> None:
    """The entry filter hides (acknowledges) a message carrying the marker property only if an agent of the
    keyring signed it and it is not in a batch; every other such message reaches applications, so the view
    indexes it like any message. Left out of the log, a cursor move planned over the log passed it: a region
    acknowledged an application's message nobody consumed (issue 45, case 4)."""
    request = SnapshotRequest(snapshot_id="s1", source_region="a", round=1)
    properties, payload = encode_marker(KEYS["a"].signer, request, topic=TOPIC, seq=1, sent_at_ms=0)
    resolver = naming(region="a")
    forged = {MARKER_PROPERTY: "update"}  # a genuine envelope, but of another kind than the property says
    fed = [
        message(TOPIC, Position(7, 0), data=payload, properties=properties),  # genuine
        message(TOPIC, Position(7, 1), data=b"app", properties={MARKER_PROPERTY: "snapshot"}),
        message(TOPIC, Position(7, 2), data=payload, properties=forged),
        # A genuine marker inside a batch: the filter delivers whole batches.
        *(
            message(TOPIC, Position(7, 3), data=payload, properties=properties, batch_index=i)
            for i in range(2)
        ),
    ]
    view = LogView(TOPIC, -1)
    view.take(fed, resolver, keyring=KEYRING)
    assert [p for p, _, _ in view.markers] == [Position(7, 0)]
    assert view.positions_above(Position(-1, -1)) == [Position(7, 1), Position(7, 2), Position(7, 3)]

    without = LogView(TOPIC, -1)  # no keyring: the filter hides nothing, so nothing is a marker
    without.take(fed[:1], resolver)
    assert without.markers == []


def test_an_entry_named_late_is_told_apart_by_its_publish_time_across_a_checkpoint() -> None:
    """A rebuilt region's lives are told apart by publish time in a log read again (``OriginIndex.retire
    (before_ms=)``): an entry whose origin is named on a retry, after a checkpoint, is judged by its own."""
    view = LogView(TOPIC, -1)
    view.take([message(TOPIC, Position(6, 0))], naming())
    view.index.retire("b", "b#old", upto=Position(7, 9), before_ms=1000)
    fed = [
        replace(message(TOPIC, Position(7, e), properties={STAMP: f"3:{e}"}), publish_ms=500 + 600 * e)
        for e in range(3)
    ]
    view.take(fed, naming(failures=3), now=0.0)
    assert view.unresolved == [Position(7, e) for e in range(3)]
    again = checkpoint.view_from_wire(LogView, TOPIC, -1, checkpoint.view_to_wire(view))
    assert again.retry(naming(), now=10.0) == 3
    assert [again.index.origin_of(Position(7, e)) for e in range(3)] == [
        Origin("b#old", Position(3, 0)),
        Origin("b", Position(3, 1)),
        Origin("b", Position(3, 2)),
    ]
