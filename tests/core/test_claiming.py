"""What a region claims for a subscription, and when it decides again (``geosync_core.claiming``)."""

from __future__ import annotations

from geosync_core import claiming
from geosync_core.batches import BatchAcks
from geosync_core.indexing import OriginIndex
from geosync_core.origins import Origin, OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

NOTHING = OriginAcks.of({})


def indexed(upto: int) -> OriginIndex:
    """Local entries 7:0..7:upto, published in region b at 3:100.."""
    index = OriginIndex()
    for e in range(upto + 1):
        index.append(Position(7, e), Origin("b", Position(3, 100 + e)))
    return index


def test_a_cursor_past_the_index_is_claimed_in_part_then_whole_once_the_index_grows() -> None:
    cursor = AckState.of(Position(7, 5))  # a burst acknowledged before the tail read it all
    first = claiming.decide(
        indexed(2), cursor, received=NOTHING, published=None, last_translated=None, force=False
    )
    assert first is not None
    assert first.send
    assert not first.complete
    assert first.claims == OriginAcks.of({"b": [Span(3, 100, 102)]})
    # Same cursor, same index: nothing to decide.
    again = {"received": NOTHING, "published": first.claims, "last_translated": cursor, "force": False}
    assert claiming.decide(indexed(2), cursor, **again) is None  # type: ignore[arg-type]
    # The tail read the rest: decided again, and now whole.
    later = claiming.decide(indexed(9), cursor, index_grew=True, **again)  # type: ignore[arg-type]
    assert later is not None
    assert later.send
    assert later.complete
    assert later.claims == OriginAcks.of({"b": [Span(3, 100, 105)]})


def test_a_cursor_within_the_index_is_complete() -> None:
    cursor = AckState.of(Position(7, 1)).ack(Position(7, 3))
    claim = claiming.decide(
        indexed(4), cursor, received=NOTHING, published=None, last_translated=None, force=False
    )
    assert claim is not None
    assert claim.complete


def test_nothing_indexed_is_incomplete() -> None:
    claim = claiming.decide(
        OriginIndex(),
        AckState.of(Position(7, 0)),
        received=NOTHING,
        published=None,
        last_translated=None,
        force=False,
    )
    assert claim is not None
    assert not claim.complete
    assert claim.claims == NOTHING


def test_reach_is_the_highest_position_acknowledged_at_all() -> None:
    assert AckState.of(Position(7, 2)).reach == Position(7, 2)
    assert AckState.of(Position(7, 2)).ack(Position(7, 6)).reach == Position(7, 6)
    partial = AckState.of(Position(7, 2), batches=[(Position(8, 1), BatchAcks.of(4, [1]))])
    assert partial.reach == Position(8, 1)
