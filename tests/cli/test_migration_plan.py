"""Tenant migration's replication plan: moving from one region to another replaces that region and
leaves every other region of the namespace where it was (``geoctl.tenants.plan_replicate/plan_cleanup``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geoctl.tenants import plan_cleanup, plan_replicate

REGIONS = st.sampled_from("abcdefg")


@pytest.mark.parametrize(
    ("current", "during", "after"),
    [
        ("a", "ab", "b"),
        ("ab", "ab", "b"),
        ("abc", "abc", "bc"),
        ("ac", "abc", "bc"),
        ("acd", "abcd", "bcd"),
    ],
)
def test_a_to_b_replaces_a_by_b_and_keeps_the_others(current: str, during: str, after: str) -> None:
    step2 = plan_replicate("t/ns", current, "a", "b")
    assert "".join(step2.after) == during
    cleanup = plan_cleanup("t/ns", step2.after, "a", "b")
    assert "".join(cleanup.after) == after


def test_every_region_of_the_set_gets_the_write_and_the_source_last_at_cleanup() -> None:
    step2 = plan_replicate("t/ns", ["a", "c"], "a", "b")
    assert step2.write_in == ("a", "b", "c")
    cleanup = plan_cleanup("t/ns", step2.after, "a", "b")
    assert cleanup.write_in == ("b", "c", "a")
    assert cleanup.before == ("a", "b", "c")


@given(st.sets(REGIONS, min_size=1), REGIONS, REGIONS)
def test_nobody_but_the_source_ever_leaves(others: set[str], source: str, target: str) -> None:
    if source == target:
        return
    current = others | {source}
    step2 = plan_replicate("t/ns", current, source, target)
    cleanup = plan_cleanup("t/ns", step2.after, source, target)
    assert set(step2.after) == current | {target}
    assert set(cleanup.after) == (current - {source}) | {target}
    assert set(step2.write_in) == set(step2.after)
    assert set(cleanup.write_in) == set(step2.after)
    assert cleanup.write_in[-1] == source
