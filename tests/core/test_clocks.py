"""Properties of the hybrid logical clock: one test per invariant in ``geosync_core.clocks``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core.clocks import Hlc, decode, encode, receive, start, tick

REGIONS = st.sampled_from(["a", "b", "c", "eu-west.1", "us=east:2"])
WALLS = st.integers(min_value=0, max_value=2**45)
STAMPS = st.builds(Hlc, WALLS, st.integers(min_value=0, max_value=2**20), REGIONS)


@settings(deadline=None)
@given(STAMPS, STAMPS)
def test_order_is_total_and_lexicographic_on_wall_logical_region(x: Hlc, y: Hlc) -> None:
    assert (x < y) == ((x.wall_ms, x.logical, x.region) < (y.wall_ms, y.logical, y.region))
    assert (x == y) == ((x.wall_ms, x.logical, x.region) == (y.wall_ms, y.logical, y.region))
    assert (x < y) + (x == y) + (x > y) == 1


@settings(deadline=None)
@given(REGIONS, st.lists(WALLS, max_size=40))
def test_tick_is_strictly_monotone_even_when_wall_time_goes_backwards(region: str, walls: list[int]) -> None:
    clock = start(region)
    for now in walls:
        new_clock, stamp = tick(clock, now_ms=now)
        assert stamp == new_clock
        assert stamp > clock
        assert stamp.region == region
        assert stamp.wall_ms >= now
        clock = new_clock


@settings(deadline=None)
@given(REGIONS, st.lists(st.tuples(STAMPS, WALLS, WALLS), max_size=30))
def test_next_local_tick_is_above_every_received_timestamp(
    region: str, steps: list[tuple[Hlc, int, int]]
) -> None:
    clock = start(region)
    seen: list[Hlc] = []
    for remote, now_receive, now_tick in steps:
        received = receive(clock, remote, now_ms=now_receive)
        assert received.region == region
        assert received >= clock
        assert (received.wall_ms, received.logical) > (remote.wall_ms, remote.logical)
        seen.append(remote)
        clock, stamp = tick(received, now_ms=now_tick)
        assert all(stamp > s for s in seen)


@settings(deadline=None)
@given(STAMPS)
def test_encode_round_trips(stamp: Hlc) -> None:
    assert decode(encode(stamp)) == stamp


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1.2",
        "1.2.",
        "01.2.a",
        "1.02.a",
        "-1.2.a",
        "+1.2.a",
        "1.2.a b",
        "1.2.a/b",
        "1.2.é",
        " 1.2.a",
        "1.2.a\n",
        "1_000.2.a",
        "9223372036854775808.0.a",
        "0.9223372036854775808.a",
        "\u0661.2.a",  # a non-ASCII digit
    ],
)
def test_decode_rejects_non_canonical_text(text: str) -> None:
    assert decode(text) is None


@settings(deadline=None)
@given(st.text(max_size=30))
def test_decode_never_raises(text: str) -> None:
    stamp = decode(text)
    assert stamp is None or encode(stamp) == text


@pytest.mark.parametrize(
    ("wall", "logical", "region"),
    [(-1, 0, "a"), (0, -1, "a"), (2**63, 0, "a"), (0, 0, ""), (0, 0, "a/b"), (0, 0, "a b")],
)
def test_constructor_rejects_invalid_fields(wall: int, logical: int, region: str) -> None:
    with pytest.raises(ValueError, match=r"clock fields|region"):
        Hlc(wall, logical, region)
