from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core.batches import BatchAcks
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
    merged = a.merge(b)
    assert OriginAcks(merged.by_region, merged.partials) == merged  # canonical (the checks pass)
    assert a.merge(b) == b.merge(a)
    assert a.merge(b).merge(c) == a.merge(b.merge(c)) == a.merge(b, c)
    assert a.merge(a) == a
    assert a.merge(OriginAcks()) == a


# --- partial claims (batched entries) -----------------------------------------------------------------


def size(origin: Origin) -> int:
    return 1 + (ord(origin.region) + origin.position.entry) % 4


@st.composite
def partials(draw: st.DrawFn) -> list[tuple[str, list[tuple[Position, BatchAcks]]]]:
    picked = draw(st.lists(st.sampled_from([o for o in ORIGINS if o.position.entry >= 0]), max_size=5))
    return [
        (o.region, [(o.position, BatchAcks(size(o), draw(st.integers(0, (1 << size(o)) - 1))))])
        for o in picked
    ]


span_items = st.lists(st.tuples(st.sampled_from(REGIONS), st.lists(spans(), max_size=2)), max_size=3)
batched_acks = st.builds(OriginAcks.of, span_items, partials())


def messages(acks: OriginAcks) -> frozenset[tuple[Origin, int]]:
    return frozenset(
        (o, i) for o in ORIGINS if o.position.entry >= 0 for i in range(size(o)) if acks.acks_message(o, i)
    )


def test_partial_claims_are_messages_not_entries() -> None:
    o = Origin("a", Position(2, 7))
    acks = OriginAcks.of({"a": [Span(2, 0, 5)]}, {"a": [(o.position, BatchAcks.of(4, [1, 3]))]})
    assert o not in acks
    assert [acks.acks_message(o, i) for i in range(4)] == [False, True, False, True]
    assert acks.acked_indexes(o, 4) == BatchAcks.of(4, [1, 3])
    assert acks.acked_indexes(Origin("a", Position(2, 5)), 4) == BatchAcks.whole(4)
    assert acks.count() == 6
    assert acks.count_partial() == 2
    assert acks.regions == ("a",)
    assert acks.partials_of("a") == ((o.position, BatchAcks.of(4, [1, 3])),)
    assert OriginAcks.of({}, {"b": [(o.position, BatchAcks.of(2, [0]))]})


def test_a_partial_that_completes_becomes_a_span_and_joins_its_neighbours() -> None:
    p = Position(2, 6)
    acks = OriginAcks.of({"a": [Span(2, 0, 5), Span(2, 7, 7)]}, {"a": [(p, BatchAcks.of(3, [0, 2]))]})
    done = acks.merge(OriginAcks.of({}, {"a": [(p, BatchAcks.of(3, [1]))]}))
    assert done == OriginAcks.of({"a": [Span(2, 0, 7)]})
    # a whole-entry claim swallows a partial of the same entry
    assert acks.merge(OriginAcks.of({"a": [Span(2, 6, 6)]})) == done


def test_non_canonical_partials_are_refused() -> None:
    p = Position(1, 3)
    with pytest.raises(ValueError, match="not canonical"):
        OriginAcks((("a", (Span(1, 0, 3),)),), (("a", ((p, BatchAcks(2, 1)),)),))  # inside a span
    with pytest.raises(ValueError, match="not a partial"):
        OriginAcks((), (("a", ((p, BatchAcks(2, 3)),)),))  # full
    with pytest.raises(ValueError, match="not canonical"):
        OriginAcks((), (("b", ((p, BatchAcks(2, 1)),)), ("a", ((p, BatchAcks(2, 1)),))))
    with pytest.raises(ValueError, match="not canonical"):
        OriginAcks((), (("a", ()),))


@fast
@given(span_items, partials())
def test_of_with_partials_is_the_union_of_messages(
    items: list[tuple[str, list[Span]]], parts: list[tuple[str, list[tuple[Position, BatchAcks]]]]
) -> None:
    acks = OriginAcks.of(items, parts)
    whole = {o for region, ss in items for s in ss for o in ORIGINS if o.region == region and o.position in s}
    assert messages(acks) == {(o, i) for o in whole if o.position.entry >= 0 for i in range(size(o))} | {
        (Origin(region, p), i) for region, pairs in parts for p, b in pairs for i in b.indexes()
    }
    assert OriginAcks(acks.by_region, acks.partials) == acks
    # equal messages, equal values: the same claims one message at a time, in reverse
    singles = [
        (r, [(p, BatchAcks.of(b.size, [i]))])
        for r, pairs in reversed(parts)
        for p, b in pairs
        for i in b.indexes()
    ]
    assert OriginAcks.of(items, singles) == acks


@settings(fast, max_examples=40)
@given(batched_acks, batched_acks, batched_acks)
def test_merge_with_partials_is_a_semilattice(a: OriginAcks, b: OriginAcks, c: OriginAcks) -> None:
    assert messages(a.merge(b)) == messages(a) | messages(b)  # union, hence monotone
    assert members(a.merge(b)) >= members(a) | members(b)
    assert a.merge(b) == b.merge(a)
    assert a.merge(b).merge(c) == a.merge(b.merge(c)) == a.merge(b, c)
    assert a.merge(a) == a
    assert a.merge(OriginAcks()) == a == OriginAcks().merge(a)
    merged = a.merge(b, c)
    assert OriginAcks(merged.by_region, merged.partials) == merged  # built unchecked: the checks accept it


@fast
@given(batched_acks)
def test_split_halves_merge_back_to_the_whole(acks: OriginAcks) -> None:
    items = sum(len(spans) for _, spans in acks.by_region) + sum(len(b) for _, b in acks.partials)
    if items < 2:
        with pytest.raises(ValueError, match="cannot be split"):
            acks.split()
        return
    first, second = acks.split()
    assert first.merge(second) == acks
    assert messages(first) | messages(second) == messages(acks)
    assert first  # both carry something: repeated splits end
    assert second


@given(batched_acks, st.sets(st.sampled_from(REGIONS)))
def test_without_keeps_exactly_the_claims_about_other_regions(acks: OriginAcks, dropped: set[str]) -> None:
    kept = acks.without(dropped)
    assert kept == OriginAcks.of(kept.by_region, kept.partials)  # canonical
    assert messages(kept) == {(origin, i) for origin, i in messages(acks) if origin.region not in dropped}
    assert acks.without(()) is acks


@given(batched_acks, st.sampled_from(REGIONS))
def test_renamed_claims_the_same_messages_under_the_new_name(acks: OriginAcks, region: str) -> None:
    renamed = acks.renamed(region, "x#1")
    assert renamed == OriginAcks.of(renamed.by_region, renamed.partials)  # canonical
    assert renamed.without(["x#1"]) == acks.without([region])  # the others untouched
    assert renamed.renamed("x#1", region) == acks  # nothing lost or added on the way


from .strategies import partial_batches  # noqa: E402

claims_with_partials = st.builds(
    OriginAcks.of,
    st.lists(st.tuples(st.sampled_from(REGIONS), st.lists(spans(), max_size=3))),
    st.lists(st.tuples(st.sampled_from(REGIONS), partial_batches())),
)


@fast
@given(claims_with_partials, claims_with_partials)
def test_news_since_is_all_a_receiver_holding_the_old_claims_needs(old: OriginAcks, more: OriginAcks) -> None:
    grown = old.merge(more)  # claims only grow
    news = grown.news_since(old)
    assert old.merge(news) == grown
    assert grown.merge(news) == grown  # nothing that was not claimed


def test_news_since_sends_only_the_spans_that_changed() -> None:
    many = [Span(1, e, e) for e in range(0, 2000, 2)]  # 1,000 holes for good
    before = OriginAcks.of({"a": many})
    after = before.merge(OriginAcks.of({"a": [Span(1, 2001, 2001)], "b": [Span(4, 0, 3)]}))
    assert after.news_since(before) == OriginAcks.of({"a": [Span(1, 2001, 2001)], "b": [Span(4, 0, 3)]})
    filled = before.merge(OriginAcks.of({"a": [Span(1, 1, 1)]}))  # a hole filled: one span grows
    assert filled.news_since(before) == OriginAcks.of({"a": [Span(1, 0, 2)]})
    assert before.news_since(OriginAcks.of({})) == before


@fast
@given(span_items, partials())
def test_decoded_is_what_of_builds(
    items: list[tuple[str, list[Span]]], parts: list[tuple[str, list[tuple[Position, BatchAcks]]]]
) -> None:
    """What a receiver decodes (``OriginAcks.decoded``: any spans, in any order; partials as a canonical
    value has them, in any order) is what ``of`` builds from the same spans and partials."""
    spans_by: dict[str, list[Span]] = {}
    for region, ss in items:
        spans_by.setdefault(region, []).extend(ss)
    whole = OriginAcks.of(spans_by)
    parts_by: dict[str, list[tuple[Position, BatchAcks]]] = {}
    for region, pairs in parts:
        for p, b in pairs:
            kept = parts_by.setdefault(region, [])
            if b.is_partial and Origin(region, p) not in whole and all(q != p for q, _ in kept):
                kept.append((p, b))
    decoded = OriginAcks.decoded(spans_by, parts_by)
    assert decoded == OriginAcks.of(spans_by, parts_by)
    assert OriginAcks(decoded.by_region, decoded.partials) == decoded  # canonical, by its own checks


def test_decoded_refuses_partials_a_canonical_value_cannot_have() -> None:
    spans = {"a": [Span(1, 0, 3)]}
    p, q = Position(1, 5), Position(1, 2)
    for partials in (
        {"a": [(q, BatchAcks(2, 1))]},  # inside a span
        {"a": [(p, BatchAcks(2, 1)), (p, BatchAcks(2, 2))]},  # repeated
        {"a": [(p, BatchAcks(2, 3))]},  # full
        {"a": [(p, BatchAcks(2, 0))]},  # empty
    ):
        with pytest.raises(ValueError, match="not a canonical partial"):
            OriginAcks.decoded(spans, partials)
    assert OriginAcks.decoded(spans, {"b": [(q, BatchAcks(2, 1))]}).partials_of("b")  # another region's


@fast
@given(batched_acks, batched_acks)
def test_merge_with_partials_builds_what_of_builds_from_both(a: OriginAcks, b: OriginAcks) -> None:
    """A merge where either side holds partials (``_merged_with_partials``) is ``of`` of both sides' spans
    and partials: partials united entry by entry, a full one a span, one a span covers gone."""
    merged = a.merge(b)
    assert merged == OriginAcks.of((*a.by_region, *b.by_region), (*a.partials, *b.partials))
    assert OriginAcks(merged.by_region, merged.partials) == merged  # canonical, by its own checks


def test_a_partial_completed_by_the_other_side_joins_its_spans() -> None:
    p = Position(2, 6)
    one = OriginAcks.of(
        {"a": [Span(2, 0, 5)]}, {"a": [(p, BatchAcks.of(3, [0]))], "b": [(p, BatchAcks.of(2, [1]))]}
    )
    other = OriginAcks.of({"b": [Span(2, 6, 6)]}, {"a": [(p, BatchAcks.of(3, [1, 2]))]})
    assert one.merge(other) == OriginAcks.of({"a": [Span(2, 0, 6)], "b": [Span(2, 6, 6)]})
