"""Issue 45's cursor jumps with the agents' ``claims_from: acknowledgements`` (decision 0015): the claims are
what consumers acknowledged (the plugin feed's ``acked``), so a jump no consumer made in b (re-created at
Latest, clear-backlog, skip, TTL expiry) acknowledges nothing in a or c. The same schedules in cursor mode
(the default) are the strict-xfail tests of ``test_issue45_cases``; without the plugin in b the claims stay
the cursor's (no ``acked`` to tell a jump from an acknowledgement), and the jump is still replicated.
"""

from __future__ import annotations

import pytest

from geosync_sim.checking import Checker
from geosync_sim.schedules import Step
from tests.sim.test_issue45_cases import LIMIT, assert_nothing_lost, assert_the_documented_limit, scripted

IDENT = ("b", 12, 1, -1)

ACKS = "acknowledgements"


@pytest.mark.parametrize(
    "events",
    [
        (Step(12.0, "admin", ("b", 0, "delete", 0)), Step(12.5, "admin", ("b", 0, "create-latest", 0))),
        (Step(12.0, "admin", ("b", 0, "clear-backlog", 0)),),
        (Step(12.0, "admin", ("b", 0, "skip", 3)),),
        (Step(12.0, "admin", ("b", 0, "ttl", 1.0)),),
    ],
    ids=["recreated-at-latest", "clear-backlog", "skip", "ttl-expiry"],
)
def test_a_jump_in_a_passive_region_acknowledges_nothing_elsewhere(events: tuple[Step, ...]) -> None:
    assert_nothing_lost(scripted(*events, claims_from=ACKS))


def test_without_the_plugin_a_jump_is_still_replicated() -> None:
    """b without the plugin has no acknowledgement feed: its claims are its cursor, whatever the setting."""
    assert_the_documented_limit(
        scripted(Step(12.0, "admin", ("b", 0, "clear-backlog", 0)), plugin_b=False, claims_from=ACKS)
    )


def test_a_jump_in_a_region_with_the_plugin_is_a_violation_not_a_limit() -> None:
    """The checker calls a replicated jump a limit only where the claims are cursors: the same jump with b's
    claims made of acknowledgements, had the agent replicated it, fails the run."""
    result = scripted(Step(12.0, "admin", ("b", 0, "clear-backlog", 0)), plugin_b=False, claims_from=ACKS)
    limits = [v for v in result.violations if v.kind == LIMIT]
    assert limits
    checker = Checker(cursor_claims=set())
    checker.jumped[(limits[0].topic, limits[0].subscription, IDENT)] = "b"
    checker.acked(40.0, "a", limits[0].topic, limits[0].subscription, idents=[IDENT], cause="agent:plugin")
    assert [v.kind for v in checker.violations] == ["jump-replicated"]
    checker.cursor_claims.add("b")
    checker.acked(41.0, "c", limits[0].topic, limits[0].subscription, idents=[IDENT], cause="agent:plugin")
    assert [v.kind for v in checker.violations] == ["jump-replicated", LIMIT]


def test_a_reset_in_a_passive_region_moves_no_cursor_elsewhere() -> None:
    result = scripted(Step(12.0, "admin", ("b", 0, "reset", 0)), claims_from=ACKS)
    assert_nothing_lost(result)
