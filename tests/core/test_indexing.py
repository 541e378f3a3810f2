from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core.indexing import OriginIndex, Run
from geosync_core.origins import Origin
from geosync_core.positions import Position

from .strategies import REGIONS, fast, local_logs


def P(text: str) -> Position:
    return Position.parse(text)


def O(region: str, text: str) -> Origin:  # noqa: E743
    return Origin(region, P(text))


def breaks(log: list[tuple[Position, Origin]]) -> int:
    """Runs a perfect index needs: one, plus one per discontinuity on either side."""

    def continues(before: tuple[Position, Origin], after: tuple[Position, Origin]) -> bool:
        (l0, o0), (l1, o1) = before, after
        return (l1.ledger, l1.entry - 1, o1.region, o1.position.ledger, o1.position.entry - 1) == (
            l0.ledger,
            l0.entry,
            o0.region,
            o0.position.ledger,
            o0.position.entry,
        )

    return (1 if log else 0) + sum(not continues(a, b) for a, b in itertools.pairwise(log))


def indexed(log: list[tuple[Position, Origin]]) -> OriginIndex:
    index = OriginIndex()
    for local, origin in log:
        index.append(local, origin)
    return index


@settings(fast, max_examples=30)
@given(local_logs())
def test_three_origins_with_colliding_ledgers_round_trip(log: list[tuple[Position, Origin]]) -> None:
    index = indexed(log)
    for local, origin in log:
        assert index.origin_of(local) == origin
        assert index.local_of(origin) == local
    assert len(index) == breaks(log)
    locals_ = {local for local, _ in log}
    origins = {origin for _, origin in log}
    for ledger in range(6):
        for entry in range(-1, 40):
            p = Position(ledger, entry)
            if p not in locals_:
                assert index.origin_of(p) is None
            for region in REGIONS:
                if Origin(region, p) not in origins:
                    assert index.local_of(Origin(region, p)) is None


def test_size_follows_origin_switches_not_messages() -> None:
    index = OriginIndex()
    for entry in range(2_000):
        index.append(Position(7, entry), Origin("a", Position(7, entry)))
    for entry in range(2_000):
        index.append(Position(8, entry), Origin("b", Position(3, 100 + entry)))
    assert len(index) == 2
    assert list(index) == [
        Run(local_ledger=7, local_first=0, region="a", origin_ledger=7, origin_first=0, length=2_000),
        Run(local_ledger=8, local_first=0, region="b", origin_ledger=3, origin_first=100, length=2_000),
    ]
    assert index.local_of(O("b", "3:1099")) == P("8:999")


def test_runs_break_on_each_kind_of_discontinuity() -> None:
    index = OriginIndex()
    for local, origin in [
        ("1:0", O("a", "1:0")),
        ("1:1", O("a", "1:1")),  # extends
        ("1:2", O("b", "1:2")),  # other region, same ledger ids
        ("1:3", O("b", "1:4")),  # gap in origin entries
        ("1:4", O("b", "2:0")),  # origin ledger switch
        ("2:0", O("b", "2:1")),  # local ledger switch
    ]:
        index.append(P(local), origin)
    assert len(index) == 5
    assert index.first == P("1:0")
    assert index.last == P("2:0")


def test_replayed_appends_are_ignored_and_contradictions_refused() -> None:
    index = OriginIndex()
    index.append(P("1:0"), O("a", "1:0"))
    index.append(P("1:1"), O("a", "1:1"))
    index.append(P("1:0"), O("a", "1:0"))
    assert len(index) == 1
    with pytest.raises(ValueError, match="was indexed as"):
        index.append(P("1:0"), O("b", "1:0"))
    with pytest.raises(ValueError, match="was indexed as"):
        index.append(P("0:5"), O("a", "0:5"))
    with pytest.raises(ValueError, match="not an entry"):
        index.append(P("2:-1"), O("a", "2:-1"))


def test_a_second_copy_from_a_replicator_resend_maps_forward_only() -> None:
    index = OriginIndex()
    for local, origin in [("1:0", "4:0"), ("1:1", "4:1"), ("1:2", "4:1"), ("1:3", "4:2")]:
        index.append(P(local), O("b", origin))
    assert index.origin_of(P("1:2")) == O("b", "4:1")
    assert index.local_of(O("b", "4:1")) == P("1:1")
    assert index.local_of(O("b", "4:2")) == P("1:3")


@settings(fast, max_examples=40)
@given(local_logs(), st.integers(0, 200))
def test_truncate_forgets_exactly_what_lies_below(log: list[tuple[Position, Origin]], cut: int) -> None:
    index = indexed(log)
    floor = log[min(cut, len(log) - 1)][0] if log else P("1:0")
    index.truncate_below(floor)
    for local, origin in log:
        kept = local >= floor
        assert index.origin_of(local) == (origin if kept else None)
        assert index.local_of(origin) == (local if kept else None)
        index.append(local, origin)  # replays below the floor and above it change nothing
    assert len(index) <= breaks(log)
    assert index.first == (floor if log else None)


def test_truncating_past_the_reader_ignores_appends_below_the_floor() -> None:
    index = OriginIndex()
    index.append(P("1:0"), O("a", "1:0"))
    index.truncate_below(P("3:0"))
    index.append(P("2:0"), O("a", "1:1"))
    assert len(index) == 0
    assert index.origin_of(P("2:0")) is None
    index.append(P("3:0"), O("a", "1:2"))
    assert index.first == index.last == P("3:0")
