from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_core.positions import Position, positions_in_ledgers

from .strategies import positions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12:-1", Position(12, -1)),
        ("0:0", Position(0, 0)),
        ("-1:-1", Position(-1, -1)),
        (" 3:10 ", Position(3, 10)),
        ("9223372036854775807:5", Position(2**63 - 1, 5)),
    ],
)
def test_parse(text: str, expected: Position) -> None:
    assert Position.parse(text) == expected


@pytest.mark.parametrize(
    "text", ["", "3", "3:", ":4", "3:4:5", "a:b", "3:-2", "-2:0", "3 :4", "+3:4", "3.0:4"]
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a position"):
        Position.parse(text)


def test_minus_one_entry_sorts_before_the_ledger_and_after_earlier_ledgers() -> None:
    assert Position(11, 10**9) < Position(12, -1) < Position(12, 0) < Position(13, -1)


@given(positions, positions)
def test_total_order_is_ledger_then_entry(a: Position, b: Position) -> None:
    ta, tb = (a.ledger, a.entry), (b.ledger, b.entry)
    assert (a < b) == (ta < tb)
    assert (a <= b) == (ta <= tb)
    assert (a > b) == (ta > tb)
    assert (a >= b) == (ta >= tb)
    assert (a == b) == (ta == tb)
    assert (a != b) == (ta != tb)
    assert (hash(a) == hash(b)) if a == b else True
    assert a != ta  # a position is not a tuple (nor ordered against one)
    with pytest.raises(TypeError):
        _ = a < ta  # type: ignore[operator]


@given(st.builds(Position, st.integers(-1, 2**63), st.integers(-1, 2**63)))
def test_format_round_trips(p: Position) -> None:
    assert Position.parse(str(p)) == p
    assert Position.from_wire(p.to_wire()) == p


@pytest.mark.parametrize("wire", [None, "3:4", [3], [3, 4, 5], [3, 4.0], [True, 4], [3, -2], (3, 4)])
def test_anything_but_a_wire_position_is_refused(wire: object) -> None:
    with pytest.raises(ValueError, match="not a position"):
        Position.from_wire(wire)


def test_positions_in_ledgers() -> None:
    assert list(positions_in_ledgers([(4, 2), (7, 0), (9, 1)])) == [
        Position(4, 0),
        Position(4, 1),
        Position(9, 0),
    ]
