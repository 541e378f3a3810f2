"""A plugin write's mark-delete planned over a cursor an operator has since reset acknowledges again what a
jump had acknowledged (found by the campaign, seed 6293, profile ``jumps``, claims made of what consumers
acknowledged, the plugin in every region).

The path: in a passive region b (its consumers are elsewhere), an operator first moves b's cursor forward
with no consumer (clear-backlog, skip), and b's agent sees that cursor (a write's answer or a poll). The
operator then resets b's cursor back to the earliest message. Nothing tells the agent at once: the plugin's
feed reports a subscription only after a consumer's acknowledgement (``GeoSyncInterceptor.messageAcked``),
not after an admin operation. The next claim from a or c makes b's agent plan over the cursor it last saw
(mark-delete at the end of the log) and send the plugin a cumulative mark-delete one or two entries
further. The plugin (``CursorDesk.acknowledge``, ``PluginApi.markDeleteTarget``: forward only, from the
cursor as it is now) moves the reset cursor there, acknowledging in b every message below it, among them
those the jump had passed over and no consumer acknowledged anywhere (a message a's consumers still hold).
The write's answer shows the cursor after that move, so the agent never sees the reset at all.

In seed 6293 (topic t1): an operator clears b's backlog at 36.45 s; from 36.85 s b's agent holds the cursor
that left (mark-delete 12:41, a write's answer), and the operator resets it to the earliest at 36.85 s. The
agent's view stays 12:41 (no feed report, no poll) until 38.10 s, when new claims from c make it plan
``mark_delete=12:43`` from ``12:41``: the plugin writes +88 in b, among them ``a@12:27#0``, a message a's
consumers held from 28.8 s for 24 s and no region claims. Its merged claims (``received``) never named it.

Nothing is claimed elsewhere from it in acknowledgements mode (b's claims stay what b's consumers
acknowledged), but a failover to b loses those messages: a loss in b. In cursor mode the same write is
also claimed and replicated (the documented limit, ``jump-replicated-by-cursor-claims``).

The fix needs the write to carry the mark-delete it was planned from, and the plugin to skip the
cumulative move (answering the cursor, so the agent sees the reset) when the cursor's mark-delete is below
it: a change of the plugin's write wire, which today refuses unknown fields. docs/limits.md states the
case. The marks flip to failures the day the path is closed.
"""

from __future__ import annotations

import pytest

from geosync_sim import running, schedules
from geosync_sim.checking import LOSS
from geosync_sim.schedules import Step
from tests.sim.test_issue45_cases import assert_nothing_lost, scripted

STALE = "a plugin write planned over a cursor an operator has since reset acknowledges what a jump skipped"


def reset_after(jump: Step) -> running.Result:
    return scripted(jump, Step(12.3, "admin", ("b", 0, "reset", 0)), claims_from="acknowledgements")


def test_a_reset_alone_in_a_passive_region_loses_nothing() -> None:
    """The control: without a jump before it, the stale mark-delete covers only claimed messages."""
    result = scripted(Step(12.0, "admin", ("b", 0, "reset", 0)), claims_from="acknowledgements")
    assert any("b: t0/sub reset to -1 by admin:reset" in line for line in result.trace)
    assert_nothing_lost(result)
    assert not result.failed


@pytest.mark.xfail(strict=True, reason=STALE)
@pytest.mark.parametrize(
    "jump",
    [Step(12.0, "admin", ("b", 0, "clear-backlog", 0)), Step(12.0, "admin", ("b", 0, "skip", 3))],
    ids=["clear-backlog", "skip"],
)
def test_a_jump_then_a_reset_in_a_passive_region_loses_nothing(jump: Step) -> None:
    result = reset_after(jump)
    assert any("b: t0/sub reset to -1 by admin:reset" in line for line in result.trace)
    assert_nothing_lost(result)


@pytest.mark.xfail(strict=True, reason=STALE)
def test_campaign_seed_6293() -> None:
    result = running.run(schedules.draw(6293, profile="jumps"), trace=True)
    assert any("b: t1/sub reset to -1 by admin:reset" in line for line in result.trace)
    found = [str(v) for v in result.violations if v.kind in LOSS]
    assert not found, "\n".join(found)
