"""Issue 45, case 2: a region wiped and rebuilt under its name while a peer has not read all it had sent.

The schedule: three regions, one Shared topic consumed in a. c publishes an entry every 0.3 s until 10 s;
a's consumers hold one of c's messages unacknowledged from 4 s on (a hole), and acknowledge the rest. At 11 s
c is wiped and rebuilt (3 s): its new topics' ledger ids start over, so the new c's entries have the origin
coordinates of the old c's, and from 14.3 s the new c publishes again; a's consumers acknowledge those. b's
readers of data topics are stalled from 2 s to 27 s (its control topic is read): when b's agent learns the new
incarnation of c (14 s and a little), it has not read most of what the old c had sent it.

The message a's consumers hold is the old c's: no region may acknowledge it. The checker names the two lives
apart (``c`` and ``c~1``); the agents see only the name ``c``.
"""

from __future__ import annotations

import pytest

from geosync_sim import running
from geosync_sim.checking import LOSS
from geosync_sim.schedules import Schedule, Step


def rebuilt_while_behind(*events: Step, stall: bool = True, plugin_b: bool = True) -> running.Result:
    old = [Step(round(0.3 * k, 2), "produce", ("c", 0, 1, False)) for k in range(1, 34)]
    new = [Step(round(15.2 + 0.3 * k, 2), "produce", ("c", 0, 1, False)) for k in range(52)]
    steps = [*old, Step(4.0, "hole", (0, 30.0)), Step(11.0, "rebuild", ("c", 3.0, 1.0)), *new, *events]
    if stall:
        steps.append(Step(2.0, "stall", ("b", 25.0)))
    steps.sort(key=lambda s: s.at)
    schedule = Schedule(
        2, ("a", "b", "c"), 1, ("Shared",), (True, plugin_b, True), 40.0, tuple(steps), ("a",)
    )
    return running.run(schedule, trace=True)


def lost(result: running.Result) -> list[str]:
    return [str(v) for v in result.violations if v.kind in LOSS]


def test_the_rebuilt_regions_messages_reuse_the_old_ones_coordinates() -> None:
    """The model itself: the new c's entries are named apart by the checker only, and both lives' messages
    reached a's consumers."""
    result = rebuilt_while_behind(stall=False)
    assert any("c: wiped" in line for line in result.trace)
    assert any("c: rebuilt (life 1)" in line for line in result.trace)
    assert result.acks > 60


def test_a_peer_that_read_the_old_life_before_learning_of_the_new_one_loses_nothing() -> None:
    """b has read everything the old c sent when the new c announces itself: the index retires all of it
    (what the agent did before the fix already)."""
    result = rebuilt_while_behind(stall=False)
    assert not lost(result), "\n".join(lost(result))


@pytest.mark.parametrize("plugin_b", [True, False], ids=["plugin", "admin-api"])
def test_a_peer_behind_on_the_old_life_never_applies_the_new_lifes_claims_to_it(plugin_b: bool) -> None:
    """Case 2 as the issue states it: b learns of the new c while its reader has not read the old c's last
    entries. Before the fix b retired only what it had read, indexed the rest of the old c's entries under the
    plain name ``c`` once its readers caught up, and applied a's claims about the new c's messages to them:
    the old message a's consumers hold was acknowledged in b (``loss``)."""
    result = rebuilt_while_behind(plugin_b=plugin_b)
    assert not lost(result), "\n".join(lost(result))


def test_claims_queued_before_the_news_are_not_sent_as_claims_about_the_new_life() -> None:
    """Found by the ``rebuilds`` profile (seed 10, shrunk). c's agent restarts from a checkpoint taken before
    a was rebuilt; in one round its index step queues c's claims about a's old messages under the name
    ``a`` and its receive step then learns of the new a. The queue was sealed afterwards with the incarnations
    known then, which named the new a: the new a took them as claims about its own messages and acknowledged
    one nobody had consumed (``loss`` in a). The states queued are renamed with the rest."""
    steps = (
        Step(8.81, "produce", ("c", 0, 1, False)),
        Step(9.39, "produce", ("a", 0, 1, False)),
        Step(11.75, "rebuild", ("a", 4.75, 5.0)),
        Step(13.64, "produce", ("c", 0, 1, False)),
        Step(14.79, "crash", ("c", True, 4.82)),
        Step(32.55, "produce", ("a", 0, 1, False)),
    )
    kinds = ("Shared", "Exclusive", "Exclusive")
    schedule = Schedule(10, ("a", "b", "c"), 3, kinds, (True, True, False), 40.0, steps, ("b", "c", "a"))
    result = running.run(schedule)
    assert not lost(result), "\n".join(lost(result))


def test_a_peer_restarted_after_the_news_keeps_the_new_lifes_messages_apart() -> None:
    """b learns of the new c at about 14.3 s and crashes at 17 s; it restarts from its checkpoint at 19 s,
    when the new c's first messages are in its log. Restored from the periodic checkpoint of 10 s, b learned
    of the rebuild again, retired everything up to its logs' ends then, the new c's messages included, and
    applied the old claims (a's consumers had acknowledged the old c's messages at the same coordinates) to
    one a's consumers hold (``loss`` in b). The agent now writes a checkpoint in the round it learns of a
    rebuild."""
    result = rebuilt_while_behind(
        Step(15.0, "hole", (0, 30.0)), Step(17.0, "crash", ("b", True, 2.0)), stall=False
    )
    assert not lost(result), "\n".join(lost(result))


def test_a_peer_restarted_without_its_checkpoint_after_the_news_keeps_the_new_lifes_messages_apart() -> None:
    """The same as above with b's checkpoint lost: b's new agent reads the control topic from its earliest
    message and learns of the old c and then of the new one when its logs hold both lives' messages. It
    retired every entry of c up to its logs' ends, the new c's messages among them, and the old claims
    acknowledged one a's consumers hold (``loss`` in b; the ``rebuilds`` profile's seed 17 too). Learned from
    the control topic's history, the news now has every tail read again, and an entry is the old life's only
    if it was published before the new incarnation was created."""
    result = rebuilt_while_behind(
        Step(15.0, "hole", (0, 30.0)), Step(17.0, "crash", ("b", False, 2.0)), stall=False
    )
    assert not lost(result), "\n".join(lost(result))
