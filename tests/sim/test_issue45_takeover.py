"""Issue 45, case 5: a broker killed, its topics taken over by another broker's sidecar agent.

The lab's case: after a broker kill with sidecars, b once failed to deliver three batch indexes of the entry
produced before the kill. The schedule: three regions, one Shared topic consumed in a; a publishes a batch of
five messages every 0.5 s, and a's consumers hold one message of the batch published at 11.8 s (a hole inside
a partly acknowledged batch). At 12 s the broker owning the topic in one region dies with its sidecar; four
seconds later another broker loads the topic (without the batch indexes of partly acknowledged entries, which
Pulsar 4.0.8 forgets, nor the acknowledgements of the dead broker's last second) and its sidecar takes over.
At 25 s the consumers fail over to b: b must deliver the held message (no region acknowledges it: ``loss``
otherwise) and everything else a's consumers left unacknowledged.

The simulator stands for the sidecars with one agent per region (the killed broker's dies, a new one takes
over with no checkpoint): it has not found the lab's loss, here or in the ``takeovers`` profile's schedules.
"""

from __future__ import annotations

import pytest

from geosync_sim import running
from geosync_sim.checking import LOSS
from geosync_sim.schedules import Schedule, Step


def killed(region: str, *, plugin_b: bool) -> running.Result:
    steps = [Step(round(0.3 + 0.5 * k, 2), "produce", ("a", 0, 5, True)) for k in range(60)]
    steps += [
        Step(11.85, "hole", (0, 25.0)),
        Step(12.0, "kill", (region, 4.0)),
        Step(25.0, "failover", (0, "b", 0.5)),
    ]
    steps.sort(key=lambda s: s.at)
    schedule = Schedule(
        5, ("a", "b", "c"), 1, ("Shared",), (True, plugin_b, True), 40.0, tuple(steps), ("a",)
    )
    return running.run(schedule, trace=True)


@pytest.mark.parametrize("plugin_b", [True, False], ids=["plugin", "admin-api"])
@pytest.mark.parametrize("region", ["a", "b"], ids=["in-the-consuming-region", "in-the-failover-target"])
def test_a_sidecar_takeover_after_a_broker_kill_acknowledges_nothing_unconsumed(
    region: str, plugin_b: bool
) -> None:
    result = killed(region, plugin_b=plugin_b)
    assert any("took the topics over" in line for line in result.trace)
    found = [str(v) for v in result.violations if v.kind in LOSS]
    assert not found, "\n".join(found)
    assert "unexplained" not in result.duplicates
