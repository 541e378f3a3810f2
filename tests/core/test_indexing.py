from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core.indexing import OriginIndex, OriginRun, Run
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


# -- the broker's runs (OriginRun) ---------------------------------------------------------------------

origin_runs = st.builds(
    OriginRun,
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**40),
    st.integers(1, 10_000),
    st.sampled_from(REGIONS),
    st.none() | st.builds(Position, st.integers(0, 2**63 - 1), st.integers(0, 2**40)),
)


@settings(fast)
@given(origin_runs)
def test_origin_runs_round_trip_through_the_wire(run: OriginRun) -> None:
    wire = run.to_wire()
    assert len(wire) == (4 if run.source is None else 6)
    assert OriginRun.from_wire(wire) == run


@settings(fast)
@given(origin_runs, st.integers(-3, 3), st.integers(-3, 3))
def test_an_origin_run_answers_for_its_entries_only(run: OriginRun, ledger_delta: int, offset: int) -> None:
    last = run.first + run.count - 1
    for entry in (run.first + offset, last + offset):
        inside = run.first <= entry <= last
        assert run.covers(run.ledger + ledger_delta, entry) == (inside and ledger_delta == 0)
        expected = (
            Position(run.source.ledger, run.source.entry + entry - run.first)
            if inside and run.source is not None
            else None
        )
        assert run.origin_at(entry) == expected


def test_origin_at_counts_from_the_source_of_the_run() -> None:
    run = OriginRun(12, 5, 20, "b", Position(40, 100))
    assert run.origin_at(5) == P("40:100")
    assert run.origin_at(24) == P("40:119")
    assert run.origin_at(25) is None
    assert run.origin_at(4) is None
    assert OriginRun(12, 5, 20, "b").origin_at(5) is None
    assert run.covers(12, 24)
    assert not run.covers(13, 5)
    assert not run.covers(12, 25)


@pytest.mark.parametrize(
    ("wire", "run"),
    [
        ([12, 0, 2, "b"], OriginRun(12, 0, 2, "b")),
        ([12, 0, 2, "b", 40, 7], OriginRun(12, 0, 2, "b", Position(40, 7))),
        ([0, 0, 1, "a", 0, 0], OriginRun(0, 0, 1, "a", Position(0, 0))),
    ],
)
def test_origin_runs_in_both_wire_shapes_are_read(wire: list[object], run: OriginRun) -> None:
    assert OriginRun.from_wire(wire) == run


@pytest.mark.parametrize(
    "wire",
    [
        None,
        "12,0,2,b",
        {"ledger": 12},
        (12, 0, 2, "b"),
        [],
        [12, 0, 2],
        [12, 0, 2, "b", 40],
        [12, 0, 2, "b", 40, 7, 1],
        [12, 0, 0, "b"],
        [12, 0, -1, "b"],
        [-1, 0, 2, "b"],
        [12, -1, 2, "b"],
        [12, 0, 2, ""],
        [12, 0, 2, None],
        [12, 0, 2, 3],
        ["12", 0, 2, "b"],
        [12.0, 0, 2, "b"],
        [True, 0, 2, "b"],
        [12, 0, 2, "b", -1, -1],
        [12, 0, 2, "b", 40, -1],
        [12, 0, 2, "b", "40", 7],
        [12, 0, 2, "b", 40, False],
        [12, 0, 2, "b", None, None],
    ],
)
def test_anything_else_is_not_a_run(wire: object) -> None:
    assert OriginRun.from_wire(wire) is None


@settings(fast, max_examples=40)
@given(local_logs(), st.data())
def test_entries_filled_in_later_answer_as_if_appended_in_order(
    log: list[tuple[Position, Origin]], data: st.DataObject
) -> None:
    # The reader skips entries whose origin it cannot name yet and fills them in when a retry names them.
    skipped = data.draw(st.sets(st.sampled_from(range(len(log))) if log else st.nothing()))
    index = OriginIndex()
    for i, (local, origin) in enumerate(log):
        if i not in skipped:
            index.append(local, origin)
    for i in data.draw(st.permutations(sorted(skipped))):
        index.fill(*log[i])
    whole = indexed(log)
    for local, origin in log:
        assert index.origin_of(local) == origin
        assert index.local_of(origin) == whole.local_of(origin) == local
    for ledger in range(6):
        for entry in range(-1, 40):
            assert index.origin_of(Position(ledger, entry)) == whole.origin_of(Position(ledger, entry))
    assert index.last == whole.last


def test_filling_refuses_a_contradiction_and_ignores_what_lies_below_the_floor() -> None:
    index = OriginIndex()
    index.append(P("5:0"), O("b", "9:0"))
    index.append(P("5:2"), O("b", "9:2"))
    index.fill(P("5:1"), O("b", "9:1"))
    index.fill(P("5:1"), O("b", "9:1"))  # the same again: nothing changes
    with pytest.raises(ValueError, match="now claimed"):
        index.fill(P("5:1"), O("c", "9:1"))
    index.truncate_below(P("5:2"))
    index.fill(P("5:1"), O("b", "9:1"))
    assert index.origin_of(P("5:1")) is None
    assert index.local_of(O("b", "9:2")) == P("5:2")


@settings(fast, max_examples=40)
@given(local_logs(), st.integers(0, 30))
def test_an_index_read_back_from_its_wire_form_answers_alike(
    log: list[tuple[Position, Origin]], cut: int
) -> None:
    index = indexed(log)
    if log:
        index.truncate_below(log[min(cut, len(log) - 1)][0])
    back = OriginIndex.from_wire(json.loads(json.dumps(index.to_wire())))
    assert back.to_wire() == index.to_wire()
    for ledger in range(6):
        for entry in range(-1, 40):
            p = Position(ledger, entry)
            assert back.origin_of(p) == index.origin_of(p)
            for region in REGIONS:
                assert back.local_of(Origin(region, p)) == index.local_of(Origin(region, p))
    assert (back.first, back.last) == (index.first, index.last)


@pytest.mark.parametrize(
    "wire",
    [
        None,
        {},
        {"runs": [], "by_origin": {}, "last": None},
        {"runs": [[1, 0, "a", 1, 0, 0]], "by_origin": {}, "last": [1, 0], "floor": None},
        {"runs": [[1, 0, "", 1, 0, 1]], "by_origin": {}, "last": [1, 0], "floor": None},
        {
            "runs": [[1, 5, "a", 1, 0, 1], [1, 0, "a", 1, 9, 1]],
            "by_origin": {},
            "last": [1, 5],
            "floor": None,
        },
        {"runs": [[1, 0, "a", 1, 0, 3]], "by_origin": {}, "last": [1, 1], "floor": None},
        {"runs": [[1, 0, "a", True, 0, 1]], "by_origin": {}, "last": [1, 0], "floor": None},
    ],
)
def test_anything_but_an_index_is_refused(wire: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        OriginIndex.from_wire(wire)


@settings(fast, max_examples=30)
@given(local_logs(), st.sampled_from(REGIONS), st.integers(0, 200))
def test_a_retired_region_names_nothing_indexed_before_and_is_kept_apart_after(
    log: list[tuple[Position, Origin]], region: str, cut: int
) -> None:
    before, after = log[:cut], log[cut:]
    index = indexed(before)
    index.retire(region, f"{region}#old")
    for local, origin in before:  # replayed by a reader: still the retired name
        index.append(local, origin)
    for local, origin in after:
        index.append(local, origin)
    for local, origin in before:
        expected = Origin(f"{region}#old", origin.position) if origin.region == region else origin
        assert index.origin_of(local) == expected
    for local, origin in after:
        assert index.origin_of(local) == origin
    again = OriginIndex.from_wire(json.loads(json.dumps(index.to_wire())))
    assert [again.origin_of(p) for p, _ in log] == [index.origin_of(p) for p, _ in log]
    reread = OriginIndex()
    reread.keep_retirements(index.retirements())
    for local, origin in log:
        reread.append(local, origin)
    assert [reread.origin_of(p) for p, _ in log] == [index.origin_of(p) for p, _ in log]


@settings(fast, max_examples=30)
@given(local_logs(), st.sampled_from(REGIONS), st.integers(0, 200), st.integers(0, 200))
def test_a_retirement_up_to_the_logs_end_names_what_the_reader_had_not_reached_yet(
    log: list[tuple[Position, Origin]], region: str, read: int, end: int
) -> None:
    """Issue 45, case 2: the rebuild is learned when the reader has read ``read`` entries and the log holds
    ``read + end``; every entry up to that end is the old life's, read or not."""
    end = min(read + end, len(log))
    index = indexed(log[:read])
    upto = log[end - 1][0] if end else None
    index.retire(region, f"{region}#old", upto=upto)
    for local, origin in log[read:]:
        index.append(local, origin)
    for n, (local, origin) in enumerate(log):
        old = n < max(end, read) and origin.region == region
        assert index.origin_of(local) == (Origin(f"{region}#old", origin.position) if old else origin)
    again = OriginIndex.from_wire(json.loads(json.dumps(index.to_wire())))
    assert [again.origin_of(p) for p, _ in log] == [index.origin_of(p) for p, _ in log]


@settings(fast, max_examples=30)
@given(local_logs(), st.sampled_from(REGIONS), st.integers(0, 200), st.integers(0, 200))
def test_a_retirement_with_the_new_lifes_birth_keeps_its_messages_below_the_end_apart(
    log: list[tuple[Position, Origin]], region: str, born: int, end: int
) -> None:
    """Issue 45, case 2, learned from the control topic's history: the log is read again after the news,
    and its end then lies past the new life's first messages. Entry ``n`` is published at ``n`` ms and the
    new life was born at ``born`` ms: only what was published before is the old life's."""
    index = OriginIndex()
    upto = log[min(end, len(log)) - 1][0] if end and log else None
    index.retire(region, f"{region}#old", upto=upto, before_ms=born)
    again = OriginIndex.from_wire(json.loads(json.dumps(index.to_wire())))
    reread = OriginIndex()
    reread.keep_retirements(again.retirements())
    for n, (local, origin) in enumerate(log):
        index.append(local, origin, published_ms=n)
        reread.append(local, origin, published_ms=n)
    for n, (local, origin) in enumerate(log):
        old = n < min(born, end) and origin.region == region
        assert index.origin_of(local) == (Origin(f"{region}#old", origin.position) if old else origin)
        assert reread.origin_of(local) == index.origin_of(local)


@pytest.mark.parametrize(
    "item", [["a", [1, 2], "a#old", "5"], ["a", [1, 2], "a#old", True], ["a", [1, 2], "a#old", 5, 6]]
)
def test_anything_but_a_retirement_is_refused(item: object) -> None:
    wire = {"runs": [], "last": None, "floor": None, "retired": [item]}
    with pytest.raises(ValueError, match="not a retirement"):
        OriginIndex.from_wire(wire)
