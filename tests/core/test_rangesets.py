from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range, RangeSet

from .strategies import UNIVERSE, ack_states, entries, fast, positions, ranges


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
    assert members(RangeSet.of(rs).above(floor)) == {p for p in model(rs) if p > floor}


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
