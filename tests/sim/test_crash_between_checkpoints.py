"""An agent killed between two checkpoints forgets no acknowledgement (decision 0015; ``checkpointing``).

With claims made of what consumers acknowledged, the plugin hands each ``acked`` block over until the agent's
next read confirms it, and forgets it then. Region a publishes batches of three every 0.5 s; its Shared
consumers acknowledge as they go, but hold one message of the batch of 13 s until 29 s, so that entry is
partly acknowledged. a's readers are stalled from 12 s to 20 s: the agent cannot tell that batch's size yet,
so it keeps the block aside (not in a checkpoint) until its tail reads the entry. a's agent is killed at
15 s and comes back 2 s later from its checkpoint of 10 s. The feed confirmed that block before the kill:
only the journal still holds it. Consumers move to b at 32 s: b must have applied it, so nothing a's
consumers acknowledged is given again in b because of the crash (``agent-down`` duplicates).
"""

from __future__ import annotations

import pytest

from geosync_agent import checkpointing
from geosync_sim import running
from geosync_sim.schedules import Schedule, Step
from tests.sim.test_issue45_cases import assert_nothing_lost


def _run() -> running.Result:
    steps = [Step(round(0.5 * k, 2), "produce", ("a", 0, 3, True)) for k in range(70)]
    steps += [
        Step(12.0, "stall", ("a", 8.0)),
        Step(13.0, "hole", (0, 16.0)),
        Step(15.0, "crash", ("a", True, 2.0)),
        Step(32.0, "failover", (0, "b", 0.5)),
    ]
    steps.sort(key=lambda s: s.at)
    schedule = Schedule(46, ("a", "b"), 1, ("Shared",), (True, True), 40.0, tuple(steps), ("a",))
    return running.run(schedule, trace=True)


def test_acknowledgements_read_after_the_checkpoint_survive_the_agents_crash() -> None:
    result = _run()
    assert result.schedule.claims_from == "acknowledgements"
    assert_nothing_lost(result)
    assert any("a: agent restarted from its checkpoint" in line for line in result.trace)
    assert result.duplicates.get("agent-down", 0) == 0, result.duplicates


def test_without_the_journal_the_crash_costs_duplicates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: a journal that keeps nothing, as before it existed. The same schedule then re-delivers
    in b what a's consumers acknowledged of the batch held aside: the test above can fail."""
    monkeypatch.setattr(checkpointing.Journal, "records", lambda self: [])
    result = _run()
    assert_nothing_lost(result)
    assert result.duplicates.get("agent-down", 0) > 0, result.duplicates
