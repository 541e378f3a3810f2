"""The broker plugin answering 403 to its region's agent (issue 45: the simulator's model gaps).

Two ways the plugin refuses (``interceptors``): cursor writes are off in the broker
(``geosyncAllowCursorWrites``, ``GeoSyncInterceptor.acks``), or the agent's role may use none of the
endpoints (``PluginAccess.role``). The agent then falls back to the admin API: a refused write is learned as
no plugin writes (``effects._plugin_acks``: ``Learned(PLUGIN_CURSOR_WRITES, False)``, the batch written
again through ``expireMessages`` and the shadow consumer), a refused feed as no feed (``observing``: cursors
polled from ``internalStats``), a refused topic list as none (``discovering.PluginTopics``: every topic's
stats read), refused origins as none (``lookups``: entry headers).

The schedule: three regions, one Shared topic consumed in a, a publishes an entry every 0.3 s; a's
consumers hold one message unacknowledged from 4 s to 34 s; at 20 s they fail over to b, where the plugin
refuses. No region may acknowledge a message no consumer acknowledged, and b's cursor is synced all the same.
"""

from __future__ import annotations

import pytest

from geosync_sim import running
from geosync_sim.checking import LOSS
from geosync_sim.schedules import Step
from tests.sim.scripts import a_publishes, one_topic


def refused(refusing_b: str, *, claims_from: str = "acknowledgements") -> tuple[running.Result, list[str]]:
    steps = [*a_publishes(), Step(4.0, "hole", (0, 30.0)), Step(20.0, "failover", (0, "b", 0.5))]
    schedule = one_topic(4, steps, claims_from=claims_from, refusing=("", refusing_b, ""))
    calls_of_b: list[list[str]] = []  # each life of b's agent's admin calls

    def watch(life: running.Life) -> None:
        if life.region == "b":
            calls_of_b.append(life.admin.calls)

    result = running.run(schedule, trace=True, hook=watch)
    return result, [call for made in calls_of_b for call in made]


def lost(result: running.Result) -> list[str]:
    return [str(v) for v in result.violations if v.kind in LOSS]


@pytest.mark.parametrize("claims_from", ["acknowledgements", "cursor"])
@pytest.mark.parametrize("refusing", ["writes", "all"])
def test_an_agent_refused_by_its_plugin_syncs_through_the_admin_api_and_loses_nothing(
    refusing: str, claims_from: str
) -> None:
    result, calls = refused(refusing, claims_from=claims_from)
    assert not lost(result), "\n".join(lost(result))
    assert not [v for v in result.violations if v.kind == "agent-error"]
    # b's cursor moved by the agent before the failover (a's consumers acknowledged), not through the plugin.
    synced = [line for line in result.trace if "b: t0/sub +" in line and "by agent:" in line]
    assert synced
    assert not any("agent:plugin" in line for line in synced)
    assert "expire_messages" in calls or "skip_by_message_ids" in calls
    if refusing == "writes":
        assert "plugin_write" in calls  # asked once, refused, learned


def test_an_agent_its_plugin_does_not_refuse_writes_through_it() -> None:
    """The control: without the refusal, b's agent writes through the plugin only."""
    result, calls = refused("")
    synced = [line for line in result.trace if "b: t0/sub +" in line and "by agent:" in line]
    assert synced
    assert all("agent:plugin" in line for line in synced)
    assert "expire_messages" not in calls
