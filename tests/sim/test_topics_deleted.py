"""A topic deleted and created again while it is synced (issue 45: the simulator's model gaps).

The schedule: three regions, one Shared topic consumed in a, a publishes an entry every 0.3 s; a's consumers
hold one message unacknowledged from 4 s to 34 s. At 10 s an operator deletes the topic by force in b (or in
every region); 2 s later it exists again, empty, with a new ledger, and its subscription is created again at
Earliest. Traffic goes on; at 25 s the consumers fail over to b. The agents must carry no claim of the old
topic onto the new one: no region may acknowledge a message no consumer acknowledged (``loss``).
"""

from __future__ import annotations

import pytest

from geosync_sim import running
from geosync_sim.checking import LOSS
from geosync_sim.schedules import Schedule, Step
from tests.sim.scripts import a_publishes, one_topic


def deleted(
    where: str, *events: Step, plugin_b: bool = True, claims_from: str = "acknowledgements"
) -> running.Result:
    steps = [
        *a_publishes(),
        Step(4.0, "hole", (0, 30.0)),
        Step(10.0, "drop", (where, 0, 2.0)),
        Step(25.0, "failover", (0, "b", 0.5)),
        *events,
    ]
    schedule = one_topic(3, steps, plugin=(True, plugin_b, True), claims_from=claims_from)
    return running.run(schedule, trace=True)


def lost(result: running.Result) -> list[str]:
    return [str(v) for v in result.violations if v.kind in LOSS]


def test_the_model_deletes_the_topic_and_creates_it_with_a_new_ledger() -> None:
    result = deleted("b")
    assert any("b: t0 deleted, created again in 2.00s" in line for line in result.trace)
    assert any("b: t0 created again (ledger 12)" in line for line in result.trace)
    assert not any("a: t0 deleted" in line for line in result.trace)
    assert result.acks > 80


@pytest.mark.parametrize("claims_from", ["acknowledgements", "cursor"])
@pytest.mark.parametrize("plugin_b", [True, False], ids=["plugin", "admin-api"])
@pytest.mark.parametrize("where", ["b", "a", "*"], ids=["passive", "consuming", "everywhere"])
def test_a_topic_deleted_and_created_again_carries_no_old_claim(
    where: str, plugin_b: bool, claims_from: str
) -> None:
    result = deleted(where, plugin_b=plugin_b, claims_from=claims_from)
    assert not lost(result), "\n".join(lost(result))
    assert not [v for v in result.violations if v.kind == "agent-error"]


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpoint", "no-checkpoint"])
def test_an_agent_down_while_the_topic_is_deleted_and_created_again_carries_no_old_claim(
    checkpointed: bool,
) -> None:
    """b's agent is down from 9 s to 15 s: restored from its checkpoint of before the deletion, its tail's
    last entry lies in the old ledger, and its reader is opened on the new one."""
    result = deleted("*", Step(9.0, "crash", ("b", checkpointed, 6.0)))
    assert not lost(result), "\n".join(lost(result))


def failed_over_into_a_deleted_topic(*, plugin_a: bool, claims_from: str) -> running.Result:
    """Found by the ``drops`` profile (seed 51, shrunk to 5 steps, written out here with one topic): b
    publishes every 0.3 s until 6 s, consumed in b, which holds one message from 2 s on; at 8 s the consumers
    fail over to a (1 s later), and at 8.05 s the topic is deleted in a, back 1.5 s later."""
    steps = [Step(round(0.3 * k, 2), "produce", ("b", 0, 1, False)) for k in range(1, 20)]
    steps += [
        Step(2.0, "hole", (0, 30.0)),
        Step(8.0, "failover", (0, "a", 1.0)),
        Step(8.05, "drop", ("a", 0, 1.5)),
    ]
    steps.sort(key=lambda s: s.at)
    schedule = Schedule(
        5,
        ("a", "b", "c"),
        1,
        ("Shared",),
        (plugin_a, True, True),
        40.0,
        tuple(steps),
        ("b",),
        claims_from=claims_from,
    )
    return running.run(schedule)


def test_consumers_failing_over_into_a_topic_created_again_claim_only_what_they_acknowledge() -> None:
    """With the plugin's feed in a and ``claims_from: acknowledgements``, a claims only what its consumers
    acknowledged on the new topic: nothing of the old one."""
    result = failed_over_into_a_deleted_topic(plugin_a=True, claims_from="acknowledgements")
    assert not lost(result), "\n".join(lost(result))


@pytest.mark.parametrize(
    ("plugin_a", "claims_from"),
    [(False, "acknowledgements"), (True, "cursor"), (False, "cursor")],
    ids=["polled", "plugin-cursor", "polled-cursor"],
)
def test_a_topic_created_again_where_the_consumers_go_claims_nothing_of_the_old_one(
    plugin_a: bool, claims_from: str
) -> None:
    """a's subscription exists again at Earliest on an empty topic whose only ledger is new: its
    mark-delete ``12:-1`` lies above every entry of the old ledger ``11``. a is active (its consumers are
    there), so a new generation of claims starts from a's cursor, which a's agent translated over its tail,
    still the old topic's: the old entries, the message b's consumers hold among them, were claimed, and b
    and c acknowledged it (``loss``; strict xfail in 01eb82b). The agent now reads the tail again when the
    topic no longer holds the ledger it read last (``Indexing.tail_gone``), before taking the cursor."""
    result = failed_over_into_a_deleted_topic(plugin_a=plugin_a, claims_from=claims_from)
    assert not lost(result), "\n".join(lost(result))


@pytest.mark.parametrize("kind", ["Exclusive", "Shared"])
@pytest.mark.parametrize(
    ("plugin_a", "claims_from"),
    [(False, "acknowledgements"), (True, "cursor"), (False, "cursor")],
    ids=["polled", "plugin-cursor", "polled-cursor"],
)
def test_a_topic_created_again_in_a_passive_region_claims_nothing_of_the_old_one(
    kind: str, plugin_a: bool, claims_from: str
) -> None:
    """Found by the ``drops`` profile (seed 25, shrunk to 3 steps): consumed in b, which holds the batch b
    publishes at 3.5 s; the topic is deleted in passive a at 6 s and exists again 2 s later. a's new cursor
    claimed the old topic's entries, and b and c acknowledged the held batch (``loss``)."""
    steps = (
        Step(3.0, "hole", (0, 26.5)),
        Step(3.5, "produce", ("b", 0, 5, True)),
        Step(6.0, "drop", ("a", 0, 2.0)),
    )
    schedule = Schedule(
        19, ("a", "b", "c"), 1, (kind,), (plugin_a, True, True), 40.0, steps, ("b",), claims_from=claims_from
    )
    result = running.run(schedule)
    assert not lost(result), "\n".join(lost(result))


def test_a_reader_that_goes_on_into_the_topic_created_again_has_its_tail_read_again() -> None:
    """Found by the ``drops`` profile (seed 22, ``claims_from: cursor``, shrunk to 4 steps; three topics, as
    drawn). c's consumers hold c's first message (c@11:0); the topic is deleted in passive a just after c's
    second message was sent there, which waits for it and lands first in a's new topic. a's reader, opened
    again at the entry it read last, went on into the new ledger, and a's index held the old topic's entries
    (c@11:0 among them) below the new one's: c's claim about its second message moved a's mark-delete over
    all of them, and a's cursor claims then acknowledged c@11:0 in b and c (``loss``). A tail that reads on
    into another ledger now asks whether the topic still holds the one before (``Indexing.tail_gone``)."""
    steps = (
        Step(2.38, "hole", (0, 17.2)),
        Step(9.26, "produce", ("c", 0, 1, False)),
        Step(10.01, "drop", ("a", 0, 0.75)),
        Step(10.01, "produce", ("c", 0, 1, False)),
    )
    schedule = Schedule(
        22,
        ("a", "b", "c"),
        3,
        ("Key_Shared", "Key_Shared", "Shared"),
        (True, True, True),
        40.0,
        steps,
        ("c", "c", "b"),
        claims_from="cursor",
    )
    result = running.run(schedule)
    assert not lost(result), "\n".join(lost(result))
