"""Issue 45's paths to loss as scripted schedules in the simulation of regions, each a regression test.

One schedule shape for all: three regions; region a publishes an entry every 0.3 s and its Shared consumers
acknowledge as they go, except one message they hold unacknowledged from 9 s to 29 s (a hole in a's cursor);
at 12 s something happens in the passive region b. Whatever b's cursor does, a message a's consumers hold
must not be acknowledged in a or c: that is the loss the issue describes. A test marked ``xfail(strict=True)``
reproduces a path that is real on today's code (it fails, so the mark keeps CI green) and flips to a failure
of the mark the day someone closes the path.
"""

from __future__ import annotations

import pytest

from geosync_sim import running
from geosync_sim.checking import LOSS
from geosync_sim.schedules import Schedule, Step
from tests.sim.scripts import one_topic


def scripted(*events: Step, plugin_b: bool = True, claims_from: str = "cursor") -> running.Result:
    steps = [Step(round(0.3 * k, 2), "produce", ("a", 0, 1, False)) for k in range(130)]
    steps += [Step(9.0, "hole", (0, 20.0)), *events]
    schedule = one_topic(45, steps, plugin=(True, plugin_b, True), claims_from=claims_from)
    return running.run(schedule, trace=True)


def assert_nothing_lost(result: running.Result) -> None:
    found = [v for v in result.violations if v.kind in LOSS]
    assert not found, "\n".join(map(str, found))


@pytest.mark.parametrize("plugin_b", [True, False], ids=["plugin", "admin-api"])
def test_case1_a_subscription_deleted_in_a_passive_region_is_not_recreated_at_latest(plugin_b: bool) -> None:
    """Case 1 as the issue states it: b's copy is deleted while a consumes with holes; b plans holes only, the
    plugin answers ``no_subscription`` (or there is no plugin), and the admin fallback's shadow consumer must
    not re-create the subscription at Latest. Closed by a1d4002 (the effector checks the subscription before
    the shadow consumer joins, and the shadow subscribes at Earliest): the simulation holds it closed."""
    result = scripted(Step(12.0, "admin", ("b", 0, "delete", 0)), plugin_b=plugin_b)
    assert_nothing_lost(result)
    assert not any("created at Latest" in line for line in result.trace)


JUMP = "issue 45: a cursor jump no consumer made in b is replicated as acknowledgements to a and c"
LIMIT = "jump-replicated-by-cursor-claims"


def assert_the_documented_limit(result: running.Result) -> None:
    """Claims made of the cursor (``claims_from: cursor``, or b without the plugin's acknowledgement feed)
    replicate a jump no consumer made: the documented limit of that mode (docs/limits.md, decision 0015),
    which the checker records as such; nothing else is lost."""
    assert LIMIT in result.kinds(), JUMP
    assert_nothing_lost(result)
    assert not result.failed


def test_case1_a_subscription_recreated_at_latest_by_an_operator_is_replicated_in_cursor_mode() -> None:
    assert_the_documented_limit(
        scripted(
            Step(12.0, "admin", ("b", 0, "delete", 0)), Step(12.5, "admin", ("b", 0, "create-latest", 0))
        )
    )


@pytest.mark.parametrize(
    "events",
    [
        (Step(12.0, "admin", ("b", 0, "clear-backlog", 0)),),
        (Step(12.0, "admin", ("b", 0, "skip", 3)),),
        (Step(12.0, "admin", ("b", 0, "ttl", 1.0)),),
    ],
    ids=["clear-backlog", "skip", "ttl-expiry"],
)
def test_a_jump_in_a_passive_region_is_replicated_in_cursor_mode(events: tuple[Step, ...]) -> None:
    assert_the_documented_limit(scripted(*events))


def test_a_jump_in_a_passive_region_without_the_plugin_is_replicated_in_cursor_mode() -> None:
    assert_the_documented_limit(scripted(Step(12.0, "admin", ("b", 0, "clear-backlog", 0)), plugin_b=False))


def test_a_reset_in_a_passive_region_moves_no_cursor_elsewhere() -> None:
    """b's cursor goes back to the earliest message: b's agent applies the claims again (b catches up), and
    no other region moves."""
    result = scripted(Step(12.0, "admin", ("b", 0, "reset", 0)))
    assert_nothing_lost(result)
    assert not any(
        line.split("s ", 1)[1].startswith(("a:", "c:")) and "reset" in line for line in result.trace
    )


FOLLOWS = (
    "claims_from: cursor makes the other regions follow a rewind made where the subscription is consumed "
    "(core.generations: a passive region claims its cursor, which would claim back what the rewind undid); "
    "invariant 7 holds with claims_from: acknowledgements only (decision 0015)"
)


def test_a_reset_in_the_consuming_region_moves_no_cursor_elsewhere() -> None:
    """Invariant 7: an operator's reset in a, where the subscription is consumed, starts a new generation of
    a's claims; b and c drop the old ones and stay where they are (nothing is delivered again there)."""
    result = scripted(Step(12.0, "admin", ("a", 0, "reset", 0)), claims_from="acknowledgements")
    assert_nothing_lost(result)
    assert not result.violations


def test_in_cursor_mode_the_other_regions_follow_a_reset_as_documented() -> None:
    """``claims_from: cursor``: b and c follow a's reset (a passive region claims its cursor, which would
    claim back what the rewind undid): the documented limit of that mode, recorded as such."""
    result = scripted(Step(12.0, "admin", ("a", 0, "reset", 0)), claims_from="cursor")
    assert "rewind-replicated-by-cursor-claims" in result.kinds(), FOLLOWS
    assert_nothing_lost(result)
    assert not result.failed


@pytest.mark.parametrize("claims_from", ["cursor", "acknowledgements"])
def test_following_a_reset_never_takes_back_what_the_new_regions_consumers_acknowledged(
    claims_from: str,
) -> None:
    """Found by the simulator (seed 11 of the jumps profile, shrunk): an operator's reset where an Exclusive
    subscription is consumed (b) starts a new generation; after a failover to c, c's agent followed it and
    reset c's cursor over a message c's own consumers acknowledged after the failover. Not followed, nothing
    is taken back."""
    steps = (
        Step(11.26, "failover", (0, "b", 1.73)),
        Step(12.48, "produce", ("b", 0, 2, True)),
        Step(21.31, "hole", (0, 11.2)),
        Step(24.62, "produce", ("b", 0, 1, False)),
        Step(24.66, "admin", ("b", 0, "reset", 0)),
        Step(29.0, "failover", (0, "c", 0.76)),
    )
    kinds = ("Exclusive", "Exclusive", "Exclusive", "Key_Shared")
    schedule = Schedule(
        11,
        ("a", "b", "c"),
        4,
        kinds,
        (True, True, True),
        60.0,
        steps,
        ("a", "a", "b", "b"),
        claims_from=claims_from,
    )
    result = running.run(schedule)
    found = [v for v in result.violations if v.kind in LOSS]
    assert not found, "\n".join(map(str, found))
    if claims_from == "cursor":  # c follows, as that mode does by design: the documented limit, recorded
        assert "rewind-by-cursor-claims" in result.kinds(), FOLLOWS
    assert not result.failed


def test_key_shared_claims_of_two_origins_do_not_hold_each_other_back() -> None:
    """Found by the simulator (seed 261 of the faults profile, shrunk); the lab's chaos run in CI of e8fe442
    (seed 20261124) failed with Key_Shared duplicates of the same shape. Two messages of key k4, b's and c's,
    sit in opposite orders in b's and a's logs. b's consumers acknowledged c's and held b's; after the move to
    a, a's consumers acknowledged b's and held c's. With one per-key minimum over all origins each region's
    claim was held back by the other origin's message, and c, taking over, delivered again the message b had
    acknowledged 11 s before. Per key and origin (decision 0016) b claims c's message, and nothing is
    redelivered that a consumer acknowledged."""
    steps = (
        Step(18.22, "produce", ("b", 2, 2, True)),
        Step(18.28, "produce", ("a", 0, 1, False)),
        Step(18.32, "produce", ("b", 1, 4, True)),
        Step(18.33, "produce", ("c", 0, 3, True)),
        Step(22.59, "produce", ("a", 2, 2, True)),
        Step(22.62, "produce", ("b", 3, 1, False)),
        Step(23.03, "failover", (3, "b", 1.3)),
        Step(23.73, "produce", ("b", 0, 4, True)),
        Step(23.77, "produce", ("b", 3, 1, False)),
        Step(24.16, "hole", (1, 13.7)),
        Step(24.33, "produce", ("b", 1, 4, True)),
        Step(24.62, "produce", ("b", 1, 1, False)),
        Step(27.76, "produce", ("a", 1, 1, False)),
        Step(28.06, "hole", (2, 23.3)),
        Step(29.41, "produce", ("b", 2, 1, False)),
        Step(29.51, "produce", ("c", 2, 1, False)),
        Step(31.92, "produce", ("c", 2, 1, False)),
        Step(32.06, "failover", (2, "a", 1.34)),
        Step(32.73, "produce", ("a", 1, 3, True)),
        Step(33.03, "hole", (2, 19.5)),
        Step(41.24, "failover", (2, "c", 1.27)),
    )
    kinds = ("Exclusive", "Shared", "Key_Shared", "Shared")
    schedule = Schedule(261, ("a", "b", "c"), 4, kinds, (True, True, True), 60.0, steps, ("a", "c", "b", "b"))
    result = running.run(schedule)
    assert not result.violations, "\n".join(map(str, result.violations))
