"""The agent reports Pulsar's replicators out of its region that hold a backlog and sent nothing for
``replicator_stall_s`` (the hour-down run's stuck replicator: b was missing messages, nothing said so)."""

from __future__ import annotations

import logging

import pytest

from geosync_agent import serving
from geosync_core.positions import Position
from tests.agent.test_runtime import CONTROL, TOPIC, pair


def _link(backlog: int, sent: int) -> dict[str, object]:
    return {"replicationBacklog": backlog, "msgOutCount": sent, "msgRateOut": 0.0, "connected": True}


def _stalled_gauge(agent: object) -> float:
    for family in serving._AgentCollector(agent).collect():  # type: ignore[arg-type]
        if family.name == "geosync_replicators_stalled":
            return float(family.samples[0].value)
    raise AssertionError("no geosync_replicators_stalled gauge")


def test_a_replicator_that_sends_nothing_is_reported_until_it_moves(caplog: pytest.LogCaptureFixture) -> None:
    a, _ = pair(replicator_stall_s=60.0)
    a.region.replication[TOPIC] = {"b": _link(10, 50)}
    a.discover()
    a.step()
    assert a.agent.status()["replicators_stalled"] == []
    a.step(30.0)
    a.region.replication[TOPIC] = {"b": _link(25, 50)}  # more to send, nothing sent
    a.discover()
    a.step()
    assert a.agent.status()["replicators_stalled"] == []  # 31 s: not yet
    with caplog.at_level(logging.WARNING, logger="geosync.agent"):
        a.step(30.0)
        a.discover()
        a.step()
    (stalled,) = a.agent.status()["replicators_stalled"]
    assert stalled == {"topic": TOPIC, "to": "b", "backlog": 25, "connected": True, "stalled_for_s": 63.0}
    assert _stalled_gauge(a.agent) == 1.0
    assert a.agent.stats.counters["replicators_stalled"] == 1
    said = [r.getMessage() for r in caplog.records]
    assert any("replicator of" in m and "holds 25 entries" in m for m in said), said
    a.step(30.0)
    a.discover()
    a.step()
    assert a.agent.stats.counters["replicators_stalled"] == 1  # still the same stall: counted once
    a.region.replication[TOPIC] = {"b": _link(25, 51)}  # it moves again
    a.discover()
    a.step()
    assert a.agent.status()["replicators_stalled"] == []
    assert _stalled_gauge(a.agent) == 0.0


def test_a_topic_gone_takes_its_replicators_with_it() -> None:
    a, _ = pair(replicator_stall_s=10.0)
    a.region.replication[TOPIC] = {"b": _link(3, 0)}
    a.discover()
    a.step(20.0)
    a.discover()
    a.step()
    assert len(a.agent.status()["replicators_stalled"]) == 1
    del a.region.topics[TOPIC]
    a.step(20.0)
    a.discover()
    a.step()
    assert a.agent.status()["replicators_stalled"] == []
    assert a.agent.replicators.links == {}


def test_the_control_topics_replicator_is_watched_too() -> None:
    """Its replicator carries the claims: stuck, the other region never applies anything (seen after a
    25-minute cut: the data topics' replicators drained, the control topic's held 1,371 entries)."""
    a, _ = pair(replicator_stall_s=10.0)
    a.region.topics[CONTROL] = [Position(77, 0)]
    a.region.replication[CONTROL] = {"b": _link(1371, 3079)}
    a.discover()
    a.step(20.0)
    a.discover()
    a.step()
    assert [s["topic"] for s in a.agent.status()["replicators_stalled"]] == [CONTROL]
