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

Closed for plugins whose feed says ``write_version`` 2: each write carries the mark-delete it was planned
from (``planned_from``), and the plugin applies nothing of it on a cursor whose mark-delete is below that
(``PluginApi.stale``, the simulator's ``ports.SimAdmin.plugin_write``), answering the cursor as it is
(``stale``): the agent takes the reset cursor and plans again from it. An older plugin refuses the field,
so the agent sends it only where the feed advertises it: with older plugins the path is still open (the
last test, docs/limits.md).
"""

from __future__ import annotations

import pytest

from geosync_sim import ports, running, schedules
from geosync_sim.checking import LOSS
from geosync_sim.schedules import Step
from tests.sim.test_issue45_cases import assert_nothing_lost, scripted

STALE = "a plugin write planned over a cursor an operator has since reset acknowledges what a jump skipped"
JUMPS = [Step(12.0, "admin", ("b", 0, "clear-backlog", 0)), Step(12.0, "admin", ("b", 0, "skip", 3))]


def reset_after(jump: Step) -> running.Result:
    return scripted(jump, Step(12.3, "admin", ("b", 0, "reset", 0)), claims_from="acknowledgements")


def test_a_reset_alone_in_a_passive_region_loses_nothing() -> None:
    """The control: without a jump before it, the stale mark-delete covers only claimed messages."""
    result = scripted(Step(12.0, "admin", ("b", 0, "reset", 0)), claims_from="acknowledgements")
    assert any("b: t0/sub reset to -1 by admin:reset" in line for line in result.trace)
    assert_nothing_lost(result)
    assert not result.failed


def stale_writes(result: running.Result, region: str) -> list[str]:
    return [line for line in result.trace if f"{region}: " in line and "is stale at" in line]


@pytest.mark.parametrize("jump", JUMPS, ids=["clear-backlog", "skip"])
def test_a_jump_then_a_reset_in_a_passive_region_loses_nothing(jump: Step) -> None:
    result = reset_after(jump)
    assert any("b: t0/sub reset to -1 by admin:reset" in line for line in result.trace)
    assert stale_writes(result, "b"), "the write planned over the jumped cursor must be the one refused"
    assert_nothing_lost(result)


def test_campaign_seed_6293() -> None:
    result = running.run(schedules.draw(6293, profile="jumps"), trace=True)
    assert any("b: t1/sub reset to -1 by admin:reset" in line for line in result.trace)
    assert stale_writes(result, "b")
    found = [str(v) for v in result.violations if v.kind in LOSS]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("jump", JUMPS, ids=["clear-backlog", "skip"])
def test_with_older_plugins_the_path_is_still_open(jump: Step, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plugins whose feed has no ``write_version`` (older ones) refuse ``planned_from``: the agent does not
    send it and the write moves the reset cursor as before (docs/limits.md keeps the row for them). Also
    what these tests find without the fix."""
    monkeypatch.setattr(ports, "PLUGIN_WRITE_VERSION", 1)
    result = reset_after(jump)
    assert not stale_writes(result, "b")
    assert not any("unknown field" in line for line in result.trace)
    assert any(v.kind in LOSS for v in result.violations), STALE


def test_a_broker_older_than_the_feed_says_is_sent_planned_from_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """During an upgrade the feed may come from a newer broker than a write reaches: the older one refuses
    ``planned_from`` (bad_request), and the agent sends writes without it for capabilities.REPROBE_S after,
    as to an older plugin (the writes go on; the path of this file is open meanwhile)."""
    monkeypatch.setattr(ports, "PLUGIN_WRITE_VERSION", 1)
    monkeypatch.setattr(ports, "FEED_WRITE_VERSION", 2)
    result = reset_after(JUMPS[0])
    refused = [line.split()[1] for line in result.trace if "unknown field 'planned_from'" in line]
    assert refused
    assert len(refused) == len(set(refused)), refused  # once per region's agent
    assert not stale_writes(result, "b")
