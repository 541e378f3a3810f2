"""The drift definitions (``geosync_core.drift``): naming rules, read ranges, and the audit's invariants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_core import drift
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

T = "persistent://geo/abc/t"


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("persistent://geo/abc/t", ("persistent://geo/abc/t", -1)),
        ("persistent://geo/abc/t-partition-3", ("persistent://geo/abc/t", 3)),
        ("persistent://geo/abc/t-partition-x", ("persistent://geo/abc/t-partition-x", -1)),
    ],
)
def test_split_partition(name: str, split: tuple[str, int]) -> None:
    assert drift.split_partition(name) == split
    assert drift.partition_name(*split) == name


def test_namespace_of() -> None:
    assert drift.namespace_of("persistent://geo/abc/t-partition-1") == "geo/abc"
    with pytest.raises(ValueError, match="not a full topic name"):
        drift.namespace_of("t")


@pytest.mark.parametrize(
    ("producer", "verified", "origin"),
    [
        ("x", {}, None),  # two regions or not: never "the other one" (the cluster list changes)
        ("a-0-1", {}, None),  # a broker-generated name is checked once first
        ("a-0-1", {"a-0-1": "a"}, "a"),
        ("mine", {"a-0-1": "a"}, None),
    ],
)
def test_origin_without_lookup(producer: str, verified: dict[str, str], origin: str | None) -> None:
    assert drift.origin_without_lookup(producer, verified) == origin


def test_producer_cluster() -> None:
    assert drift.producer_cluster("us-east-2-17") == "us-east"
    assert drift.producer_cluster("orders") is None


def test_ledger_sizes_takes_the_open_ledger_from_last_confirmed() -> None:
    ledgers = [{"ledgerId": 3, "entries": 5}, {"ledgerId": 9, "entries": 0}]
    assert drift.ledger_sizes(ledgers, "9:2") == [(3, 5), (9, 3)]
    assert drift.ledger_sizes([{"ledgerId": 9, "entries": 0}], "9:-1") == []


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 30)), max_size=6, unique_by=lambda x: x[0]),
    st.integers(1, 25),
)
def test_read_ranges_cover_every_entry_once_in_order(ledgers: list[tuple[int, int]], most: int) -> None:
    ledgers = sorted(ledgers)
    entries = [Position(lg, e) for lg, n in ledgers for e in range(n)]
    ranges = drift.read_ranges(ledgers, most)
    covered = [p for first, last in ranges for p in entries if first <= p <= last]
    assert covered == entries
    assert all(sum(1 for p in entries if first <= p <= last) <= most for first, last in ranges)


def copy(region: str, e: int, oe: int, *, origin: str = "a") -> drift.Copy:
    return drift.Copy(
        region=region,
        topic=T,
        partition=-1,
        ledger=5,
        entry=e,
        batch_index=-1,
        origin_region=origin,
        origin_ledger=5,
        origin_entry=oe,
        publish_time=1000 + oe,
    )


def cursor(region: str, md: int, *holes: int) -> drift.Cursor:
    state = AckState.of(Position(5, md)).ack(*(Position(5, h) for h in holes))
    return drift.Cursor(region=region, topic=T, partition=-1, subscription="s", state=state)


@given(st.integers(-1, 9), st.sets(st.integers(0, 9)))
def test_equal_cursors_over_equal_logs_have_nothing_unsynced(md: int, holes: set[int]) -> None:
    copies = [copy(r, e, e) for r in ("a", "b") for e in range(10)]
    report = drift.audit(
        copies,
        [cursor("a", md, *holes), cursor("b", md, *holes)],
        expected={"geo/abc": ["a", "b"]},
        as_of_ms=0,
    )
    assert [p.unsynced for p in report.pairs] == [0, 0]


@given(st.integers(-1, 9), st.sets(st.integers(0, 9)), st.sets(st.integers(0, 9)))
def test_lost_never_exceeds_acked(md: int, holes: set[int], delivered: set[int]) -> None:
    copies = [copy("a", e, e) for e in range(10)]
    log = [
        drift.Delivery(
            region="a",
            topic=T,
            partition=-1,
            subscription="s",
            key=None,
            origin_region="a",
            origin_ledger=5,
            origin_entry=e,
            batch_index=None,
            delivered_at=e,
        )
        for e in delivered
    ]
    report = drift.audit(copies, [cursor("a", md, *holes)], expected={}, as_of_ms=0, deliveries=log)
    assert report.loss is not None
    (loss,) = report.loss
    acked = {e for e in range(10) if e <= md or e in holes}
    assert (loss.acked, loss.lost) == (len(acked), len(acked - delivered))


@given(st.sets(st.integers(0, 19)))
def test_trimmed_gaps_and_lag_are_exactly_what_a_region_lacks(held: set[int]) -> None:
    copies = [copy("a", e, e) for e in range(20)] + [copy("b", i, e) for i, e in enumerate(sorted(held))]
    report = drift.audit(copies, [], expected={"geo/abc": ["a", "b"]}, as_of_ms=5000)
    (rep,) = report.replication
    assert rep.trimmed + rep.gaps + rep.lag == 20 - len(held)
    if held:
        assert rep.trimmed == min(held)
        assert rep.lag == 19 - max(held)
    assert rep.lag_ms == (0 if rep.lag == 0 else 5000 - (1000 + (max(held) + 1 if held else 0)))


def test_unresolved_copies_are_counted_and_left_out() -> None:
    lost = drift.Copy(
        region="b", topic=T, partition=-1, ledger=1, entry=0, batch_index=-1,
        origin_region=None, origin_ledger=5, origin_entry=0,
    )  # fmt: skip
    report = drift.audit([copy("a", 0, 0), lost], [], expected={"geo/abc": ["a", "b"]}, as_of_ms=0)
    assert report.unresolved == 1
    assert report.replication[0].lag == 1
