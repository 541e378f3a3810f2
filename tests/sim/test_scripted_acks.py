"""Scripted acknowledgements (``App.script``): a consumer group that acknowledges exactly the messages a
script names, so a trace can run the same in the simulator and on the lab (``integration_tests/
test_sim_vs_lab.py``). The lab test runs only on a lab; these hold the simulator's side in the fast suite."""

from __future__ import annotations

import pytest

from geosync_sim import running
from geosync_sim.schedules import Schedule, Step

SIZES = (3, 1, 4, 1)
BATCHED = (True, False, True, False)


def _run(kind: str, wanted: set[tuple[int, int]]) -> dict[str, set[tuple[int, int]]]:
    steps = tuple(
        Step(1.0 + 0.3 * e, "produce", ("a", 0, n, batched))
        for e, (n, batched) in enumerate(zip(SIZES, BATCHED, strict=True))
    )
    sim = running.Simulation(Schedule(7, ("a", "b"), 1, (kind,), (True, True), 10.0, steps, ("a",)))
    topic = sim.topics[0]
    sim.apps.apps[(topic, "sub")].script = lambda ident: (ident[2], ident[3]) in wanted
    result = sim.run()
    assert not result.violations, "\n".join(map(str, result.violations))
    out = {}
    for region in ("a", "b"):
        r = sim.world.regions[region]
        cursor = r.subs[(topic, "sub")].cursor
        out[region] = {
            (e.source.entry, i)
            for e in r.topics[topic].entries
            for i in range(len(e.msgs))
            if cursor.has(e.eid, i)
        }
    return out


def test_a_shared_group_acknowledges_exactly_what_its_script_names_and_b_follows() -> None:
    wanted = {(0, 0), (0, 2), (1, 0), (2, 1), (2, 2), (2, 3)}
    assert _run("Shared", wanted) == {"a": wanted, "b": wanted}


@pytest.mark.parametrize("kind", ["Exclusive", "Failover"])
def test_a_cumulative_group_acknowledges_up_to_the_last_message_its_script_names(kind: str) -> None:
    everything_to = {(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (2, 1)}
    assert _run(kind, {(2, 1)}) == {"a": everything_to, "b": everything_to}
