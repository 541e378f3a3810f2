"""Region incarnations (issue 17.2): each invariant of ``geosync_core.incarnations`` as a test."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_core.incarnations import Incarnation, Known, is_retired, retired

from .strategies import fast, incarnations

PULSAR_CLUSTER_NAME = re.compile(r"[-=:.\w]+")
"""What Pulsar accepts as a cluster name (``NamedEntity``)."""


@fast
@given(incarnations)
def test_an_incarnation_round_trips_through_the_wire(i: Incarnation) -> None:
    assert Incarnation.from_wire(i.to_wire()) == i


@pytest.mark.parametrize(
    "wire",
    [None, [], [1], [1, "a", 2], ["1", "a"], [True, "a"], [-1, "a"], [2**63, "a"], [1, ""], [1, "A"],
     [1, "a" * 65], [1, "a b"], [1.0, "a"], {"created_ms": 1, "id": "a"}],
)  # fmt: skip
def test_anything_else_is_not_an_incarnation(wire: object) -> None:
    assert Incarnation.from_wire(wire) is None


@fast
@given(st.lists(st.tuples(st.sampled_from("abc"), incarnations), max_size=12))
def test_learning_only_moves_forward_and_says_what_it_replaced(steps: list[tuple[str, Incarnation]]) -> None:
    known = Known()
    for region, incarnation in steps:
        before = known.get(region)
        known, replaced = known.learn(region, incarnation)
        after = known.get(region)
        assert after is not None
        assert after == (incarnation if before is None else max(before, incarnation))
        assert replaced == (before if before is not None and incarnation > before else None)
    assert Known.from_wire(known.to_wire()) == known


def test_stale_claims_speak_of_an_older_life_or_of_none_from_a_sender_that_speaks_of_any() -> None:
    old, new = Incarnation(1, "old"), Incarnation(2, "new")
    known = Known({"a": new})
    assert known.stale("a", old, tagged=True)
    assert known.stale("a", None, tagged=True)
    assert not known.stale("a", new, tagged=True)
    assert not known.stale("a", Incarnation(3, "newer"), tagged=True)
    assert not known.stale("a", None, tagged=False)  # an agent from before incarnations
    assert not known.stale("b", old, tagged=True)  # nothing known of b


@pytest.mark.parametrize("wire", [[], {"a": [1]}, {"": [1, "a"]}, {"a": [1, "a"], "b": None}])
def test_unreadable_knowledge_is_refused(wire: object) -> None:
    assert Known.from_wire(wire) is None


@fast
@given(st.from_regex(PULSAR_CLUSTER_NAME, fullmatch=True), st.none() | incarnations)
def test_a_retired_name_is_never_a_region_name(region: str, incarnation: Incarnation | None) -> None:
    name = retired(region, incarnation)
    assert is_retired(name)
    assert not is_retired(region)
    assert not PULSAR_CLUSTER_NAME.fullmatch(name)
