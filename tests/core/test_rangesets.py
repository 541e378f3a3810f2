from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_core import rangesets
from geosync_core.batches import BatchAcks, gather
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range, RangeSet

from .strategies import (
    UNIVERSE,
    ack_states,
    batched_ack_states,
    entries,
    fast,
    messages,
    partial_batches,
    positions,
    ranges,
    size_of,
)


def P(text: str) -> Position:
    return Position.parse(text)


def members(acked: RangeSet | AckState) -> frozenset[Position]:
    return frozenset(p for p in UNIVERSE if p in acked)


def model(ranges_: list[Range]) -> frozenset[Position]:
    return frozenset(p for p in UNIVERSE for r in ranges_ if r.lower < p <= r.upper)


# --- Range and RangeSet -------------------------------------------------------------------------------


def test_range_is_open_closed() -> None:
    r = Range(P("3:4"), P("3:7"))
    assert [e for e in range(2, 10) if P(f"3:{e}") in r] == [5, 6, 7]


def test_empty_range_is_refused() -> None:
    with pytest.raises(ValueError, match="empty range"):
        Range(P("3:4"), P("3:4"))


def test_single_entry_range_is_pulsars_individual_ack() -> None:
    assert str(Range.single(P("3:0"))) == "(3:-1..3:0]"
    assert [p for p in UNIVERSE if p in Range.single(P("3:0"))] == [P("3:0")]


@pytest.mark.parametrize(
    "text",
    ["[]", "[(3:4..3:5]]", "[(3:4..3:5],(3:7..3:10]]", "[(0:0..0:1],(1:0..1:1]]", "[(2:9..3:-1],(3:0..3:2]]"],
)
def test_pulsar_form_round_trips_exactly(text: str) -> None:
    assert str(RangeSet.parse(text)) == text


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("[(3:4..3:5], (3:7..3:10]]", "[(3:4..3:5],(3:7..3:10]]"),
        (" [ ] ", "[]"),
        ("[(3:7..3:10],(3:4..3:5]]", "[(3:4..3:5],(3:7..3:10]]"),
        ("[(3:4..3:5],(3:5..3:6]]", "[(3:4..3:6]]"),
        ("[(3:4..3:9],(3:5..3:6]]", "[(3:4..3:9]]"),
    ],
)
def test_parse_accepts_guava_spacing_and_canonicalizes(text: str, canonical: str) -> None:
    assert str(RangeSet.parse(text)) == canonical


@pytest.mark.parametrize(
    "text", ["", "(3:4..3:5]", "[(3:4..3:5)]", "[(3:4..3:4]]", "[(3:5..3:4]]", "[(3:4..3:5],]", "[3:4..3:5]"]
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a|empty range"):
        RangeSet.parse(text)


def test_ranges_touching_across_a_ledger_boundary_stay_apart() -> None:
    # Whether 2:9 was ledger 2's last entry is unknown here, so (2:8..2:9] and (3:-1..3:0] do not merge.
    assert len(RangeSet.of([Range.single(P("2:9")), Range.single(P("3:0"))])) == 2


@fast
@given(st.lists(ranges(), max_size=6))
def test_of_is_the_union_and_canonical(rs: list[Range]) -> None:
    s = RangeSet.of(rs)
    assert members(s) == model(rs)
    assert RangeSet.parse(str(s)) == s
    assert RangeSet(s.ranges) == s  # the constructor's canonical check accepts it
    assert RangeSet.of(reversed(rs)) == s


def test_non_canonical_tuple_is_refused() -> None:
    with pytest.raises(ValueError, match="not canonical"):
        RangeSet((Range(P("3:4"), P("3:5")), Range(P("3:5"), P("3:6"))))


@fast
@given(st.lists(ranges(), max_size=6), positions)
def test_above_keeps_exactly_what_lies_above(rs: list[Range], floor: Position) -> None:
    above = RangeSet.of(rs).above(floor)
    assert members(above) == {p for p in model(rs) if p > floor}
    assert RangeSet(above.ranges) == above  # built without the check (speed): the check accepts it


@fast
@given(batched_ack_states, st.lists(entries, max_size=4), positions)
def test_states_built_without_checks_pass_them(state: AckState, acked: list[Position], at: Position) -> None:
    """``of`` (and so every operation) skips ``__post_init__``'s checks for speed: they accept its values."""
    for made in (state, state.ack(*acked), state.ack_cumulative(at)):
        assert AckState(made.mark_delete, RangeSet(made.ranges.ranges), made.batches) == made


# --- AckState -----------------------------------------------------------------------------------------


def test_pip_379_vector() -> None:
    def step(state: AckState, first: int, last: int) -> AckState:
        return state.ack(*(P(f"3:{e}") for e in range(first, last + 1)))

    state = AckState(P("3:0"))
    expected = [
        ((1, 3), "3:3", "[]"),
        ((5, 5), "3:3", "[(3:4..3:5]]"),
        ((8, 10), "3:3", "[(3:4..3:5],(3:7..3:10]]"),
        ((7, 7), "3:3", "[(3:4..3:5],(3:6..3:10]]"),
        ((6, 6), "3:3", "[(3:4..3:10]]"),
        ((4, 4), "3:10", "[]"),
    ]
    for (first, last), mark_delete, ranges_ in expected:
        state = step(state, first, last)
        assert (str(state.mark_delete), str(state.ranges)) == (mark_delete, ranges_)
    assert state == AckState(P("3:10"))


def test_parse_from_internal_stats_normalizes() -> None:
    state = AckState.parse("3:3", "[(3:3..3:5],(3:7..3:10]]")
    assert state == AckState(P("3:5"), RangeSet.parse("[(3:7..3:10]]"))


def test_unnormalized_state_is_refused() -> None:
    with pytest.raises(ValueError, match="not normalized"):
        AckState(P("3:3"), RangeSet.parse("[(3:3..3:5]]"))


@fast
@given(ack_states)
def test_normalized_ranges_lie_strictly_above_mark_delete(state: AckState) -> None:
    assert all(r.lower > state.mark_delete for r in state.ranges)
    assert AckState(state.mark_delete, state.ranges) == state


@fast
@given(positions, st.lists(ranges(), max_size=5))
def test_of_holds_mark_delete_prefix_and_ranges(md: Position, rs: list[Range]) -> None:
    state = AckState.of(md, rs)
    assert members(state) == {p for p in UNIVERSE if p <= md} | model(rs)
    assert state.mark_delete >= md


@fast
@given(ack_states, st.lists(entries, max_size=6))
def test_ack_adds_exactly_the_entries(state: AckState, acked: list[Position]) -> None:
    after = state.ack(*acked)
    assert members(after) == members(state) | set(acked)


@fast
@given(ack_states, positions)
def test_cumulative_ack_is_monotone(state: AckState, position: Position) -> None:
    after = state.ack_cumulative(position)
    assert after.mark_delete >= state.mark_delete
    assert members(after) == members(state) | {p for p in UNIVERSE if p <= position}


@fast
@given(ack_states, ack_states, ack_states)
def test_merge_is_union_commutative_associative_idempotent(a: AckState, b: AckState, c: AckState) -> None:
    assert members(a.merge(b)) == members(a) | members(b)
    assert a.merge(b) == b.merge(a)
    assert a.merge(b).merge(c) == a.merge(b.merge(c))
    assert a.merge(a) == a


@given(ack_states, ack_states, batched_ack_states)
def test_covers_whole_is_a_merge_that_adds_nothing(a: AckState, b: AckState, batched: AckState) -> None:
    """The rewind check's shortcut: exactly when the union would equal ``a``; batch indexes play no part."""
    assert a.covers_whole(b) == (a.merge(b) == a)
    assert a.covers_whole(a)
    assert a.merge(b).covers_whole(b)
    whole = AckState.of(batched.mark_delete, batched.ranges)
    assert batched.covers_whole(a) == whole.covers_whole(a) == (whole.merge(a) == whole)


@fast
@given(ack_states)
def test_holes_are_the_unacked_existing_entries_below_highest(state: AckState) -> None:
    existing = [p for p in UNIVERSE if p.entry >= 0]
    assert state.holes(existing) == [
        p for p in existing if state.mark_delete < p < state.highest and p not in state
    ]
    assert all(p not in state for p in state.holes(existing))


def test_holes_table() -> None:
    state = AckState.parse("3:3", "[(3:4..3:5],(3:7..3:10]]")
    log = [P(f"3:{e}") for e in range(12)]
    assert state.holes(log) == [P("3:4"), P("3:6"), P("3:7")]
    assert state.highest == P("3:10")


# --- AckState with partly acknowledged batches --------------------------------------------------------


def B(size: int, *indexes: int) -> BatchAcks:
    return BatchAcks.of(size, indexes)


def test_partial_batch_is_kept_and_is_a_hole() -> None:
    state = AckState.parse("3:3", "[(3:5..3:6]]", batches=[(P("3:4"), B(3, 0, 2))])
    assert state.batches == ((P("3:4"), B(3, 0, 2)),)
    assert P("3:4") not in state
    assert [state.acks_message(P("3:4"), i) for i in range(4)] == [True, False, True, False]
    assert state.acked_indexes(P("3:4"), 3) == B(3, 0, 2)
    assert state.acked_indexes(P("3:3"), 3) == BatchAcks.whole(3)
    assert state.acked_indexes(P("3:9"), 3) == B(3)
    assert state.holes([P(f"3:{e}") for e in range(8)]) == [P("3:4"), P("3:5")]


def test_completing_a_batch_makes_it_whole_and_advances_the_mark_delete() -> None:
    state = AckState.parse("3:3", "[(3:4..3:6]]", batches=[(P("3:4"), B(3, 0, 2))])
    assert state.ack_indexes(P("3:4"), 3, [1]) == AckState.parse("3:6")
    # A whole-entry ack drops the partial; so does a cumulative ack past it.
    assert state.ack(P("3:4")) == AckState.parse("3:6")
    assert state.ack_cumulative(P("3:5")) == AckState.parse("3:6")


def test_partials_covered_by_ranges_or_mark_delete_are_dropped_and_empty_ones_ignored() -> None:
    state = AckState.of(
        P("3:3"),
        RangeSet.parse("[(3:5..3:7]]"),
        [(P("3:2"), B(2, 0)), (P("3:6"), B(2, 1)), (P("3:9"), B(2)), (P("3:8"), B(2, 1))],
    )
    assert state == AckState(P("3:3"), RangeSet.parse("[(3:5..3:7]]"), ((P("3:8"), B(2, 1)),))


@pytest.mark.parametrize(
    "batches",
    [
        ((P("3:3"), BatchAcks(2, 1)),),  # at the mark-delete
        ((P("3:6"), BatchAcks(2, 1)),),  # inside a range
        ((P("3:9"), BatchAcks(2, 3)),),  # full
        ((P("3:9"), BatchAcks(2, 0)),),  # empty
        ((P("3:9"), BatchAcks(2, 1)), (P("3:8"), BatchAcks(2, 1))),  # unsorted
    ],
)
def test_unnormalized_partials_are_refused(batches: tuple[tuple[Position, BatchAcks], ...]) -> None:
    with pytest.raises(ValueError, match=r"not normalized|not canonical|not a partial"):
        AckState(P("3:3"), RangeSet.parse("[(3:5..3:7]]"), batches)


@fast
@given(batched_ack_states)
def test_batched_states_are_normalized(state: AckState) -> None:
    assert AckState(state.mark_delete, state.ranges, state.batches) == state
    assert all(p > state.mark_delete and p not in state and b.is_partial for p, b in state.batches)


@fast
@given(positions, st.lists(ranges(), max_size=4), partial_batches())
def test_equal_messages_are_equal_values(
    md: Position, rs: list[Range], batches: list[tuple[Position, BatchAcks]]
) -> None:
    state = AckState.of(md, rs, batches)
    # the same messages one at a time, in another order
    singles = [(p, BatchAcks.of(b.size, [i])) for p, b in reversed(batches) for i in b.indexes()]
    assert AckState.of(md, rs, singles) == state
    # full batches given as whole entries instead
    full = {p for p, b in gather(batches).items() if b.is_full}
    assert (
        AckState.of(md, [*rs, *map(Range.single, full)], [(p, b) for p, b in batches if p not in full])
        == state
    )
    # acknowledged one message at a time
    stepped = AckState.of(md, rs)
    for p, b in singles:
        stepped = stepped.ack_indexes(p, b.size, b.indexes())
    assert stepped == state


@fast
@given(positions, st.lists(ranges(), max_size=4), partial_batches())
def test_of_holds_exactly_the_messages_given(
    md: Position, rs: list[Range], batches: list[tuple[Position, BatchAcks]]
) -> None:
    state = AckState.of(md, rs, batches)
    whole = {p for p in UNIVERSE if p.entry >= 0 and (p <= md or p in RangeSet.of(rs))}
    given_ = {(p, i) for p, b in batches for i in b.indexes()}
    expected = {(p, i) for p in whole for i in range(size_of(p))} | given_
    assert messages(state) == expected
    assert AckState.of(md, rs, reversed(batches)) == state


@fast
@given(batched_ack_states, batched_ack_states, batched_ack_states)
def test_merge_with_batches_is_a_semilattice(a: AckState, b: AckState, c: AckState) -> None:
    assert messages(a.merge(b)) == messages(a) | messages(b)
    assert a.merge(b) == b.merge(a)
    assert a.merge(b).merge(c) == a.merge(b.merge(c))
    assert a.merge(a) == a


@fast
@given(batched_ack_states, partial_batches(), st.lists(entries, max_size=3), positions)
def test_every_ack_is_monotone_at_message_level(
    state: AckState, batches: list[tuple[Position, BatchAcks]], acked: list[Position], position: Position
) -> None:
    before = messages(state)
    after_batches = state.ack_batches(batches)
    assert messages(after_batches) == before | {(p, i) for p, b in batches for i in b.indexes()}
    assert messages(state.ack(*acked)) >= before
    assert messages(state.ack_cumulative(position)) >= before


@fast
@given(st.lists(ranges(), max_size=6), st.sampled_from([",", ", ", " , "]))
def test_parse_reads_the_brokers_printing_in_one_pass_as_range_by_range(rs: list[Range], comma: str) -> None:
    """Brokers' ``(L:E..L:E]`` lists take a one-regex path; any spacing the range-by-range path accepts
    reads the same set, in any order."""
    shuffled = list(reversed(rs))
    plain = "[" + comma.join(map(str, shuffled)) + "]"
    spaced = "[" + comma.join(f"( {r.lower} .. {r.upper} ]" for r in shuffled) + "]"
    assert RangeSet.parse(plain) == RangeSet.parse(spaced) == RangeSet.of(rs)


def test_ranges_seen_before_are_reused_and_their_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rangesets, "SEEN_MAX", 3)
    rangesets._SEEN.clear()
    first = RangeSet.parse("[(3:4..3:5],(3:7..3:10]]")
    again = RangeSet.parse("[(3:7..3:10], (3:12..3:13]]")
    assert again.ranges[0] is first.ranges[1]  # parsed once
    for n in range(10):
        RangeSet.parse(f"[(4:{2 * n}..4:{2 * n + 1}]]")
        assert len(rangesets._SEEN) <= 4
    with pytest.raises(ValueError, match="empty range"):
        RangeSet.parse("[(3:7..3:10],(3:12..3:12]]")  # a bad range among known ones
