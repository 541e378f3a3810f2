"""Issue 45, case 3: without the broker's record of an entry (no interceptor, its capability unknown, or
its index refused with 403), a source-position stamp and a producer name, both chosen by whoever publishes,
must never index a message as another producer's message. The resolver then names a stamped entry as the
broker's own view of it does (``source``: the admin API's headers), or not at all."""

from __future__ import annotations

import pytest

from geosync_core import resolving
from geosync_core.origins import Origin
from geosync_core.positions import Position

TOPIC = "persistent://geo/ab/orders"
STAMP = resolving.REPL_SOURCE_POSITION
OTHERS_LATER = Position(5, 40)
"""The position, in b, of another producer's later message: what a forger predicts and stamps."""


def resolver(broker_view: dict[Position, Origin | None]) -> resolving.OriginResolver:
    """Region a's resolver; ``b-0-5`` (a broker-generated name of b) is verified first, as it is once a
    genuine copy from that producer was named by its header."""
    r = resolving.OriginResolver(
        local="a", lookup=lambda _t, _p: "b", source=lambda _t, p: broker_view.get(p)
    )
    assert r.region_of(TOPIC, Position(9, 0), producer="b-0-5") == "b"
    assert r.verified == {"b-0-5": "b"}
    return r


def test_an_application_here_reusing_a_verified_producer_name_is_indexed_as_its_own_entry() -> None:
    forged = Position(9, 7)
    r = resolver({forged: Origin("a", forged)})  # the broker: published here
    got = r.origin_of(TOPIC, forged, properties={STAMP: str(OTHERS_LATER)}, producer="b-0-5")
    assert got == Origin("a", forged)
    assert r.spoofed == 1


def test_a_copy_whose_application_stamp_hides_the_brokers_is_named_by_the_brokers() -> None:
    """b's application stamped its message; the copy in a carries two stamps and clients keep the first."""
    copy, true_source = Position(9, 8), Position(5, 12)
    r = resolver({copy: Origin("b", true_source)})
    got = r.origin_of(TOPIC, copy, properties={STAMP: str(OTHERS_LATER)}, producer="b-0-5")
    assert got == Origin("b", true_source)
    assert r.spoofed == 1


def test_a_stamp_the_broker_cannot_confirm_names_nothing() -> None:
    r = resolver({})
    got = r.origin_of(TOPIC, Position(9, 9), properties={STAMP: str(OTHERS_LATER)}, producer="b-0-5")
    assert got == resolving.Unresolved(Position(9, 9))


def test_a_genuine_stamp_is_named_as_before() -> None:
    copy = Position(9, 10)
    r = resolver({copy: Origin("b", Position(5, 13))})
    assert r.origin_of(TOPIC, copy, properties={STAMP: "5:13"}, producer="b-0-5") == Origin(
        "b", Position(5, 13)
    )
    assert r.spoofed == 0


@pytest.mark.parametrize("stamp", ["5:40", "0:0", "9223372036854775806:1"])
def test_with_the_brokers_view_no_stamp_names_another_message(stamp: str) -> None:
    local = Position(9, 11)
    for view in (Origin("a", local), Origin("b", Position(5, 14)), None):
        r = resolver({local: view} if view is not None else {})
        got = r.origin_of(TOPIC, local, properties={STAMP: stamp}, producer="b-0-5")
        assert got == (view if view is not None else resolving.Unresolved(local))


@pytest.mark.parametrize("stamp", [f"{2**63}:1", f"1:{2**64}", "-1:0"])
def test_a_stamp_beyond_what_a_broker_writes_is_malformed(stamp: str) -> None:
    """Ledger and entry ids are Java longs: a position beyond them is an application's, and indexed it would
    make the agent's checkpoint unreadable (the simulator's ``huge`` garbage, with a stamp trusted)."""
    assert isinstance(resolving.stamp_of({resolving.REPL_SOURCE_POSITION: stamp}), resolving.Malformed)
    assert resolving.stamp_of({resolving.REPL_SOURCE_POSITION: f"{2**63 - 1}:0"}) == Position(2**63 - 1, 0)
