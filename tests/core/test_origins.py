from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core.origins import Origin, OriginAcks, Span
from geosync_core.positions import Position

from .strategies import fast

REGIONS = ("a", "b", "c")
ORIGINS = tuple(
    Origin(r, Position(ledger, e)) for r in REGIONS for ledger in (1, 2, 3) for e in range(-1, 12)
)


@st.composite
def spans(draw: st.DrawFn) -> Span:
    first = draw(st.integers(0, 8))
    return Span(draw(st.sampled_from((1, 2, 3))), first, first + draw(st.integers(0, 3)))


origin_acks = st.builds(
    OriginAcks.of, st.lists(st.tuples(st.sampled_from(REGIONS), st.lists(spans(), max_size=3)))
)


def members(acks: OriginAcks) -> frozenset[Origin]:
    return frozenset(o for o in ORIGINS if o in acks)


def test_span_claims_exactly_its_entries_of_one_ledger() -> None:
    acks = OriginAcks.of({"a": [Span(2, 3, 5)]})
    claimed = [o for o in ORIGINS if o in acks]
    assert claimed == [Origin("a", Position(2, e)) for e in (3, 4, 5)]


@pytest.mark.parametrize(("ledger", "first", "last"), [(1, 3, 2), (1, -1, 2), (-1, 0, 0)])
def test_bad_span_is_refused(ledger: int, first: int, last: int) -> None:
    with pytest.raises(ValueError, match="not a span"):
        Span(ledger, first, last)


def test_adjacent_spans_of_one_ledger_coalesce_but_not_across_ledgers() -> None:
    acks = OriginAcks.of({"a": [Span(1, 0, 2), Span(1, 3, 4), Span(2, 0, 1)], "b": []})
    assert acks == OriginAcks((("a", (Span(1, 0, 4), Span(2, 0, 1))),))
    assert acks.regions == ("a",)
    assert acks.count() == 7


def test_non_canonical_values_are_refused() -> None:
    with pytest.raises(ValueError, match="not canonical"):
        OriginAcks((("b", (Span(1, 0, 0),)), ("a", (Span(1, 0, 0),))))
    with pytest.raises(ValueError, match="not canonical"):
        OriginAcks((("a", (Span(1, 0, 0), Span(1, 1, 1))),))
    with pytest.raises(ValueError, match="not canonical"):
        OriginAcks((("a", ()),))


def test_ledger_ids_collide_between_regions_without_confusion() -> None:
    acks = OriginAcks.of({"a": [Span(1, 0, 0)]})
    assert Origin("a", Position(1, 0)) in acks
    assert Origin("b", Position(1, 0)) not in acks


@fast
@given(st.lists(st.tuples(st.sampled_from(REGIONS), st.lists(spans(), max_size=3))))
def test_of_is_the_union_of_its_spans(items: list[tuple[str, list[Span]]]) -> None:
    acks = OriginAcks.of(items)
    assert members(acks) == {
        o for region, ss in items for s in ss for o in ORIGINS if o.region == region and o.position in s
    }
    assert OriginAcks(acks.by_region) == acks


@settings(fast, max_examples=40)
@given(origin_acks, origin_acks, origin_acks)
def test_merge_is_a_semilattice(a: OriginAcks, b: OriginAcks, c: OriginAcks) -> None:
    assert members(a.merge(b)) == members(a) | members(b)  # union, hence monotone
    assert a.merge(b) == b.merge(a)
    assert a.merge(b).merge(c) == a.merge(b.merge(c)) == a.merge(b, c)
    assert a.merge(a) == a
    assert a.merge(OriginAcks()) == a
