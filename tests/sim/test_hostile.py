"""Hostile producers in the simulator (issue 45, cases 3 and 4; the ``hostile`` profile).

Applications publish unbatched messages carrying a forged ``__MSG_PROP_REPL_SOURCE_POSITION`` (the predicted
position of another region's later message, under that region's producer name or not, or of their own
region's later message), the GeoSync marker property (garbage, an unsigned envelope, one signed by a key no
keyring lists) or garbage properties. Brokers keep what applications set; a replicated copy carries the
replicator's stamp after the application's, a client shows the first and the admin API's entry headers the
last (``integration_tests/test_forged_stamps.py`` shows both on the lab); the plugin's origin index records
the entry's true origin. Consumers acknowledge those messages like any other.

The checker judges them as every message: no region acknowledges what no consumer acknowledged, and each
hostile message reaches a consumer. Regions with the plugin, without it, and refusing (403) appear among the
seeds below. An agent that trusts the stamp (and the producer name) as agents before issue 45 did is caught.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from geosync_core import resolving
from geosync_core.positions import Position
from geosync_sim import running, schedules
from geosync_sim.checking import LOSS, Checker
from geosync_sim.logs import Msg
from geosync_sim.ports import SimAdmin, received
from geosync_sim.schedules import Schedule, Step
from geosync_sim.world import STAMP, World
from tests.sim.scripts import a_publishes, one_topic

SMALL: dict[str, Any] = {"regions": 3, "topics": 3, "duration": 40.0, "profile": "hostile"}
SEEDS = (6, 9)
"""Seed 6: every region has the plugin, b's refuses writes, c's every call; seed 9: a refuses every call, b
has no plugin, c's answers. Both have forged stamps of both kinds that a trusting agent turns into loss."""


def test_the_hostile_profile_keeps_the_earlier_profiles_in_place() -> None:
    assert schedules.PROFILES[:8] == (
        "clean",
        "faults",
        "jumps",
        "rebuilds",
        "takeovers",
        "drops",
        "refusals",
        "partitions",
    )
    assert schedules.PROFILES[-1] == "hostile"
    faults = schedules.draw(9, profile="faults", **{k: v for k, v in SMALL.items() if k != "profile"})
    hostile = schedules.draw(9, **SMALL)
    assert set(faults.steps) <= set(hostile.steps), "the faults profile's steps, and hostile ones"


def test_a_copy_shows_the_applications_stamp_and_the_headers_the_brokers() -> None:
    """What the model follows: clients keep the first of two properties of a name, the admin API's headers
    (a JSON object) the last, and the plugin's index the entry's true origin."""
    world = World(random.Random(1), ["a", "b"], namespace="geo/sim")
    topic = "persistent://geo/sim/t0"
    world.add_topic(topic)
    forged = Msg("k1", "a-0-0", 1, ((STAMP, "11:5"),))
    world.publish("b", topic, (forged,), batched=False)
    world.advance(5.0)
    t = world.regions["a"].topics[topic]
    [copy] = received(t, t.entries[0])
    assert copy.properties[STAMP] == "11:5", "clients keep the application's stamp"
    headers = SimAdmin(world, "a").entry_headers(topic, ledger=t.ledger, entry=0)
    assert headers.replicated_from == "b"
    assert headers.properties[STAMP] == str(world.regions["b"].topics[topic].position(0))
    [run] = SimAdmin(world, "a").plugin_origins(topic)
    assert run.origin == "b"
    local = world.regions["b"].topics[topic]
    [original] = received(local, local.entries[0])
    assert original.properties[STAMP] == "11:5", "brokers keep what the application set"
    assert SimAdmin(world, "b").entry_headers(topic, ledger=local.ledger, entry=0).replicated_from is None


@pytest.mark.parametrize("seed", SEEDS)
def test_hostile_producers_lose_nothing(seed: int) -> None:
    schedule = schedules.draw(seed, **SMALL)
    result = running.run(schedule, trace=True)
    shown = "\n".join(
        line for line in result.trace if "stamped" in line or "marker" in line or "garbage" in line
    )
    for variant in ("forge-other", "forge-own"):
        assert f" {variant} at " in shown, f"seed {seed} forges stamps ({variant})"
    hostile = [s for s in schedule.steps if s.kind == "hostile"]
    assert len(hostile) >= 4
    assert not result.failed, [str(v) for v in result.violations]
    assert result.failovers >= 3


def test_plugin_modes_appear() -> None:
    modes = set()
    for seed in SEEDS:
        s = schedules.draw(seed, **SMALL)
        modes |= {
            ("plugin" if has else "none") + (f"-{r}" if r else "")
            for has, r in zip(s.plugin, s.refusing, strict=True)
        }
    assert {"plugin", "none", "plugin-all", "plugin-writes"} <= modes


def _trusting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents that trust a stamp with the producer name (or the broker's lookup of the region) alone, as
    before issue 45's case 3: the broker's record and view of the entry are not asked."""
    original = resolving.OriginResolver.origin_of

    def origin_of(self: resolving.OriginResolver, topic: str, local: Position, **kw: Any) -> Any:
        saved = self.recorded, self.source
        self.recorded = self.source = None
        try:
            return original(self, topic, local, **kw)
        finally:
            self.recorded, self.source = saved

    monkeypatch.setattr(resolving.OriginResolver, "origin_of", origin_of)


@pytest.mark.parametrize("seed", SEEDS)
def test_an_agent_trusting_forged_stamps_is_caught(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    _trusting(monkeypatch)
    result = running.run(schedules.draw(seed, **SMALL))
    assert any(v.kind in LOSS for v in result.violations), "a forged stamp acknowledged another message"


def test_a_hostile_message_no_consumer_was_given_is_a_violation() -> None:
    """Case 4: a filter hiding every message carrying the marker property acknowledged them unseen."""
    checker = Checker()
    topic = "persistent://geo/sim/t0"
    checker.hostile(topic, ("a", 11, 4, 0), "marker")
    checker.hostile(topic, ("b", 11, 2, 0), "forge-own")
    checker.delivered(1.0, "a", topic, "sub", ident=("b", 11, 2, 0), msg=Msg("k1", "b-0-0", 1), kind="Shared")
    checker.finish()
    assert [(v.kind, v.detail) for v in checker.violations] == [("hostile-undelivered", "a@11:4#0 (marker)")]
    assert "hostile-undelivered" in LOSS


MODES: dict[str, dict[str, Any]] = {
    "plugin": {"plugin": (True, True, True)},
    "no-plugin": {"plugin": (False, False, False)},
    "refusing": {"plugin": (True, True, True), "refusing": ("all", "all", "all")},
}


def forged_in_b(mode: str) -> Schedule:
    """a publishes every 0.3 s, its consumers in a; at 5 s an application in b publishes a message stamped
    with the position of b's next message (b's producer name), and b's producers publish twice after it;
    the consumers fail over to b at 25 s. Its copy in a shows the forged stamp."""
    steps = [
        *a_publishes(),
        Step(5.0, "hostile", ("b", 0, "forge-own", "b", 1, True)),
        Step(5.5, "produce", ("b", 0, 1, False)),
        Step(5.6, "produce", ("b", 0, 1, False)),
        Step(25.0, "failover", (0, "b", 0.5)),
    ]
    return one_topic(4, steps, **MODES[mode])


@pytest.mark.parametrize("mode", MODES)
def test_a_stamp_forged_in_another_region_acknowledges_nothing_else(mode: str) -> None:
    result = running.run(forged_in_b(mode), trace=True)
    assert any("forge-own at 11:" in line and "stamped b@11:" in line for line in result.trace)
    assert not [v for v in result.violations if v.kind in LOSS], [str(v) for v in result.violations]


@pytest.mark.parametrize("mode", MODES)
def test_the_same_with_agents_trusting_the_stamp_loses_bs_next_message(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    _trusting(monkeypatch)
    result = running.run(forged_in_b(mode))
    lost = [v for v in result.violations if v.kind == "loss"]
    assert lost, "acknowledging the forged copy in a acknowledged b's next message in b"
    assert all("e.g. b@11:" in v.detail for v in lost), [str(v) for v in lost]  # b's message, in b and c


def test_a_message_with_a_malformed_stamp_is_synced_where_the_broker_names_it() -> None:
    """A local message whose application set a stamp that is no position, acknowledged in a at 5.4 s. The
    agent left it unindexed (``resolving.Malformed``) even where the plugin's index recorded it as a's own,
    so b's cursor never got that acknowledgement and b gave it again after the failover at 25 s
    (``unexplained-duplicate``; nothing lost: the mark-delete stopped before it). Found by this profile; now
    the resolver names such an entry as the broker's record or view does (``OriginResolver._malformed``)."""
    steps = [
        *a_publishes(),
        Step(5.0, "hostile", ("a", 0, "garbage", "not-a-position", 1, False)),
        Step(25.0, "failover", (0, "b", 0.5)),
    ]
    result = running.run(one_topic(4, steps))
    assert not result.failed, [str(v) for v in result.violations]
