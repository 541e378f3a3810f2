"""EntryDetails against a plain dictionary model: the same answers, in a fraction of the memory."""

from __future__ import annotations

import json
import sys
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_core.details import EntryDetails
from geosync_core.positions import Position

# One step: (ledger step, entry step, key, size, message keys)
steps = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.integers(1, 3),
        st.sampled_from(["", "k1", "k2"]),
        st.one_of(st.none(), st.integers(1, 5)),
        st.lists(st.tuples(st.integers(0, 6), st.sampled_from(["", "k1", "k3"])), max_size=3),
    ),
    max_size=40,
)


def build(
    items: list[tuple[int, int, str, int | None, list[tuple[int, str]]]],
) -> tuple[EntryDetails, dict[Position, str], dict[Position, int], dict[tuple[Position, int], str]]:
    details = EntryDetails()
    keys: dict[Position, str] = {}
    sizes: dict[Position, int] = {}
    message_keys: dict[tuple[Position, int], str] = {}
    ledger, entry = 5, -1
    for ledger_step, entry_step, key, size, per_message in items:
        if ledger_step:
            ledger, entry = ledger + ledger_step, entry_step - 1
        else:
            entry += entry_step
        p = Position(ledger, entry)
        details.record(p, key, size)
        keys[p] = key
        if size:
            sizes[p] = size
        for index, message_key in per_message:
            details.set_message_key(p, index, message_key)
            if message_key != key:
                message_keys[(p, index)] = message_key
            else:
                message_keys.pop((p, index), None)
    return details, keys, sizes, message_keys


def answers(
    details: EntryDetails, probes: list[Position]
) -> list[tuple[str | None, int | None, list[str | None]]]:
    return [
        (details.key(p), details.size(p), [details.key_of_message(p, i) for i in range(7)]) for p in probes
    ]


def probes_of(keys: dict[Position, str]) -> list[Position]:
    ledgers = {p.ledger for p in keys} | {4}
    return [Position(lg, e) for lg in sorted(ledgers) for e in range(-1, 45)]


@given(steps)
def test_answers_as_a_dictionary_would(
    items: list[tuple[int, int, str, int | None, list[tuple[int, str]]]],
) -> None:
    details, keys, sizes, message_keys = build(items)
    for p in probes_of(keys):
        assert details.key(p) == keys.get(p)
        assert details.size(p) == sizes.get(p)
        for i in range(7):
            assert details.key_of_message(p, i) == message_keys.get((p, i), keys.get(p))
    assert [p for p, _ in details.items()[0]] == sorted(keys)


@given(steps, st.integers(0, 60), st.integers(0, 8))
def test_forgetting_forgets_exactly_at_or_below_the_floor(
    items: list[tuple[int, int, str, int | None, list[tuple[int, str]]]], entry: int, ledger_step: int
) -> None:
    details, keys, sizes, _ = build(items)
    floor = Position(5 + ledger_step, entry)
    details.forget_up_to(floor)
    for p in probes_of(keys):
        expected_key = keys.get(p) if p > floor else None
        assert details.key(p) == expected_key
        assert details.size(p) == (sizes.get(p) if p > floor else None)
        if expected_key is None:
            assert details.key_of_message(p, 0) is None
    lowest = details.lowest()
    assert lowest is None or lowest > floor


@given(steps)
def test_a_checkpoint_round_trip_answers_the_same(
    items: list[tuple[int, int, str, int | None, list[tuple[int, str]]]],
) -> None:
    details, keys, _, _ = build(items)
    again = EntryDetails.from_items(*details.items())
    probes = probes_of(keys)
    assert answers(again, probes) == answers(details, probes)
    columns = EntryDetails.from_columns(json.loads(json.dumps(details.to_columns())))
    assert answers(columns, probes) == answers(details, probes)
    assert len(columns) == len(details)
    assert columns.to_columns() == json.loads(json.dumps(details.to_columns()))


@pytest.mark.parametrize(
    "value",
    [
        [],
        {"columns": [[5, 0, ["a"], [1, 2]]]},  # lengths differ
        {"columns": [[6, 0, ["a"], [0]], [5, 0, ["b"], [0]]]},  # ledgers out of order
        {"columns": [[5, -1, ["a"], [0]]]},
        {"columns": [[5, 0, [3], [0]]]},  # a key that is not a string
        {"columns": [[5, 0, ["a"], [-1]]]},  # a size an unsigned array cannot hold
        {"columns": [[5, 0]]},
        {"columns": [[5, 0, ["a"], [0]]], "message_keys": [[5, 4, ["x"]]]},  # an entry not held
    ],
)
def test_columns_that_do_not_hold_together_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="entry details"):
        EntryDetails.from_columns(value)


@given(steps, st.integers(1, 30))
def test_forget_oldest_drops_at_least_n_from_the_bottom(
    items: list[tuple[int, int, str, int | None, list[tuple[int, str]]]], n: int
) -> None:
    details, keys, _, _ = build(items)
    held = len(details)
    highest = details.forget_oldest(n)
    assert len(details) <= max(0, held - n)
    if highest is not None:
        assert all(details.key(p) is None for p in keys if p <= highest)
        assert all(details.key(p) == k for p, k in keys.items() if p > highest)


def test_size_grows_and_a_marker_gap_has_no_details() -> None:
    details = EntryDetails()
    details.record(Position(3, 0), "a", 2)
    details.record(Position(3, 2), "a", None)  # 3:1 was a marker, never recorded
    assert details.size(Position(3, 1)) is None
    assert details.key(Position(3, 1)) is None
    assert details.grow(Position(3, 0), 5)
    assert details.size(Position(3, 0)) == 5
    assert not details.grow(Position(3, 0), 4)
    assert not details.grow(Position(3, 1), 4)
    assert len(details) == 3
    with pytest.raises(ValueError, match="out of order"):
        details.record(Position(3, 1), "a", None)
    with pytest.raises(ValueError, match="after a later one"):
        details.record(Position(2, 9), "a", None)


def test_changes_count_what_the_number_of_entries_does_not_show() -> None:
    """The agent skips a checkpoint while its fingerprint is unchanged: a learned size or a message's own
    key changes what a checkpoint holds without adding an entry."""
    details = EntryDetails()
    details.record(Position(3, 0), "a", 2)
    assert details.changes == 0
    assert not details.grow(Position(3, 0), 2)
    assert details.changes == 0
    assert details.grow(Position(3, 0), 5)
    assert details.changes == 1
    details.set_message_key(Position(3, 0), 1, "a")  # the entry's own key: nothing kept
    assert details.changes == 1
    details.set_message_key(Position(3, 0), 1, "b")
    assert details.changes == 2
    assert len(details) == 1


def test_many_entries_cost_a_fraction_of_a_dictionary() -> None:
    # What this replaced: a dict Position -> key and another for sizes, about 250 bytes an entry.
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    details = EntryDetails()
    for e in range(200_000):
        details.record(Position(9 + e // 50_000, e % 50_000), "", 10)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert used / 200_000 < 20, f"{used / 200_000:.1f} bytes per entry"
    assert sys.getsizeof(details) < 100
    assert details.size(Position(12, 1)) == 10
