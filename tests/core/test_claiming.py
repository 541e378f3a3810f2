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


def _a_log() -> OriginIndex:
    """a's log: a's own 5:0, copies of b's 9:0 and 9:2 (b's 9:1 is a copy of a's 5:0); b's 9:3 not read."""
    index = OriginIndex()
    index.append(Position(5, 0), Origin("a", Position(5, 0)))
    index.append(Position(5, 1), Origin("b", Position(9, 0)))
    index.append(Position(5, 2), Origin("b", Position(9, 2)))
    return index


def test_a_span_joined_across_positions_that_are_no_message_here_tells_nothing_new() -> None:
    known = OriginAcks.of({"a": [Span(5, 0, 0)], "b": [Span(9, 0, 0), Span(9, 2, 2)]})
    joined = OriginAcks.of({"a": [Span(5, 0, 0)], "b": [Span(9, 0, 2)]})
    assert known.merge(joined) != known  # by their form, the joined span adds 9:1
    assert not claiming.tells_news(_a_log(), joined, known)


def test_a_message_held_here_and_not_known_is_news() -> None:
    known = OriginAcks.of({"b": [Span(9, 0, 0)]})
    assert claiming.tells_news(_a_log(), OriginAcks.of({"b": [Span(9, 0, 2)]}), known)  # 9:2 is a copy here
    assert claiming.tells_news(_a_log(), OriginAcks.of({"a": [Span(5, 0, 0)]}), known)
    assert not claiming.tells_news(_a_log(), known, known)


def _b_log(upto: int = 2) -> OriginIndex:
    """b's log: b's own 9:0, a copy of a's 5:0 at 9:1, b's own 9:2 (and 9:3 with ``upto`` 3)."""
    index = OriginIndex()
    index.append(Position(9, 0), Origin("b", Position(9, 0)))
    index.append(Position(9, 1), Origin("a", Position(5, 0)))
    for e in range(2, upto + 1):
        index.append(Position(9, e), Origin("b", Position(9, e)))
    return index


def test_a_cursor_moved_by_the_claims_is_not_sent_back_for_its_joined_form() -> None:
    # a claimed b's messages run by run; b's cursor shows them all, and b's own translation joins its spans.
    from_a = OriginAcks.of({"a": [Span(5, 0, 0)], "b": [Span(9, 0, 0), Span(9, 2, 2)]})
    cursor = AckState.of(Position(9, 2))
    claim = claiming.decide(
        _b_log(), cursor, received=from_a, published=NOTHING, last_translated=None, force=False, local="b"
    )
    assert claim is not None
    assert claim.claims != from_a  # the joined form
    assert not claim.send
    assert not claim.news
    # A message of b's that a did not claim (b's consumers acknowledged it first) is sent.
    more = AckState.of(Position(9, 3))
    news = claiming.decide(
        _b_log(3), more, received=from_a, published=NOTHING, last_translated=cursor, force=False, local="b"
    )
    assert news is not None
    assert news.send
    assert news.news  # what makes b the region where the subscription is consumed
    assert news.news == claiming.tells_news(_b_log(3), news.claims, from_a)
    # A resync sends the claims whatever they say, and they are news only if they name news.
    forced = claiming.decide(
        _b_log(), cursor, received=from_a, published=NOTHING, last_translated=None, force=True, local="b"
    )
    assert forced is not None
    assert forced.send
    assert not forced.news
    first = claiming.decide(
        _b_log(3), more, received=from_a, published=None, last_translated=None, force=False, local="b"
    )
    assert first is not None
    assert first.send
    assert first.news


def test_messages_not_read_here_are_no_news() -> None:
    known = OriginAcks.of({"b": [Span(9, 0, 0), Span(9, 2, 2)]})
    later = OriginAcks.of({"b": [Span(9, 3, 7)], "c": [Span(1, 0, 4)]})
    assert not claiming.tells_news(_a_log(), later, known)


def test_more_of_a_batch_is_news_and_the_same_part_is_not() -> None:
    part = OriginAcks.of({}, {"b": [(Position(9, 2), BatchAcks.of(4, [0, 1]))]})
    more = OriginAcks.of({}, {"b": [(Position(9, 2), BatchAcks.of(4, [0, 1, 3]))]})
    whole = OriginAcks.of({"b": [Span(9, 2, 2)]})
    assert not claiming.tells_news(_a_log(), part, part)
    assert claiming.tells_news(_a_log(), more, part)
    assert claiming.tells_news(_a_log(), whole, part)
    assert not claiming.tells_news(_a_log(), part, whole)
    other = OriginAcks.of({}, {"b": [(Position(9, 5), BatchAcks.of(4, [0]))]})  # not read here
    assert not claiming.tells_news(_a_log(), other, part)


def test_gaps_are_what_no_span_covers() -> None:
    spans = (Span(9, 2, 3), Span(9, 6, 6), Span(10, 0, 5))
    assert claiming._gaps(spans, Span(9, 0, 8)) == [(0, 1), (4, 5), (7, 8)]
    assert claiming._gaps(spans, Span(9, 2, 3)) == []
    assert claiming._gaps(spans, Span(10, 3, 9)) == [(6, 9)]
    assert claiming._gaps((), Span(4, 1, 2)) == [(1, 2)]


def test_news_far_below_the_newest_entries_is_found() -> None:
    """Scanning from the newest entries, a region's older copies are still reached while their origins can
    hold a gap (replication keeps each region's order)."""
    index = OriginIndex()
    index.append(Position(5, 0), Origin("b", Position(9, 0)))
    index.append(Position(5, 1), Origin("b", Position(9, 2)))  # b's 9:1 is no message of b's (a copy there)
    for e in range(2, 50):
        index.append(Position(5, e), Origin("a", Position(5, e)))
    index.append(Position(5, 50), Origin("b", Position(9, 5)))
    known = OriginAcks.of({"b": [Span(9, 0, 0), Span(9, 2, 2), Span(9, 5, 5)]})
    assert claiming.tells_news(index, OriginAcks.of({"b": [Span(9, 1, 1)]}), known) is False  # no 9:1 here
    assert claiming.tells_news(index, OriginAcks.of({"b": [Span(9, 0, 2)]}), OriginAcks.of({})) is True
    assert claiming.tells_news(index, OriginAcks.of({"a": [Span(5, 3, 3)]}), known) is True
    assert claiming.tells_news(index, OriginAcks.of({"b": [Span(9, 0, 0), Span(9, 6, 9)]}), known) is False
