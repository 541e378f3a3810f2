"""The agent reports Pulsar's replicators out of its region that hold a backlog and sent nothing for
``replicator_stall_s`` (the hour-down run's stuck replicator: b was missing messages, nothing said so)."""

from __future__ import annotations

import logging

import pytest

from geosync_adapters import adminhttp
from geosync_agent import serving
from geosync_core.positions import Position
from tests.agent.fakes import Harness
from tests.agent.pairs import CONTROL, TOPIC, pair


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


# -- stuck replicators unloaded (opt-in: replicator_unload_after_s) ---------------------------------


def _stuck_for(h: Harness, seconds: float, *, backlog: int = 25, sent: int = 50, step: float = 10.0) -> None:
    """Discovery passes every ``step`` seconds for ``seconds``, the replicator never sending."""
    for _ in range(int(seconds / step)):
        h.region.replication[TOPIC] = {"b": _link(backlog, sent)}
        h.discover()
        h.step(step)


def _unloads(h: Harness) -> list[str]:
    return [c[1] for c in h.region.calls if c[0] == "unload"]


def test_off_by_default_a_stuck_replicator_is_only_reported() -> None:
    a, _ = pair(replicator_stall_s=20.0)
    _stuck_for(a, 600.0)
    assert len(a.agent.status()["replicators_stalled"]) == 1
    assert _unloads(a) == []


def test_a_replicator_stuck_while_connected_has_its_topic_unloaded_then_again_after_a_longer_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, _ = pair(replicator_stall_s=20.0, replicator_unload_after_s=60.0)
    start = a.clock
    unloaded_at: list[float] = []
    with caplog.at_level(logging.WARNING, logger="geosync.agent"):
        for _ in range(40):  # 400 s, a pass every 10 s
            # Each new replicator sends a message or two (its count starts over), then nothing.
            before = len(_unloads(a))
            _stuck_for(a, 10.0, sent=50 if not unloaded_at else len(unloaded_at))
            if len(_unloads(a)) > before:
                unloaded_at.append(a.clock - start)
    # Stalled from the first pass: unloaded 60 s on. Each new replicator moved once, then stalled again: the
    # next unload waits 60 s, the one after 120 s, then 240 s (past the end).
    assert unloaded_at == [60.0, 120.0, 240.0]
    assert _unloads(a) == [TOPIC] * 3
    assert a.agent.stats.counters["replicator_unloads"] == 3
    assert a.agent.status()["replicator_unloads"] == {TOPIC: 3}
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"unloading {TOPIC} here: its replicator to b is connected") for m in said), said
    # Drained: the count starts over.
    _stuck_for(a, 10.0, backlog=0, sent=30)
    assert a.agent.status()["replicator_unloads"] == {}


def test_a_replicator_out_of_reach_is_not_unloaded() -> None:
    a, _ = pair(replicator_stall_s=20.0, replicator_unload_after_s=30.0)
    for _ in range(30):
        a.region.replication[TOPIC] = {"b": {**_link(25, 50), "connected": False}}
        a.discover()
        a.step(10.0)
    assert a.agent.status()["replicators_stalled"][0]["connected"] is False
    assert _unloads(a) == []


def test_an_unload_the_broker_refuses_is_counted_and_tried_again_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, _ = pair(replicator_stall_s=20.0, replicator_unload_after_s=30.0)
    refused = adminhttp.AdminError("500 Internal Server Error: topic busy")

    def refuse(topic: str) -> None:
        a.region.calls.append(("unload", topic))
        raise refused

    a.region.unload_topic = refuse  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="geosync.agent"):
        _stuck_for(a, 40.0)
    assert _unloads(a) == [TOPIC]
    assert a.agent.stats.counters["replicator_unload_errors"] == 1
    said = [r.getMessage() for r in caplog.records]
    assert any("could not unload" in m and "topic busy" in m for m in said), said
    _stuck_for(a, 60.0)  # the doubled wait
    assert _unloads(a) == [TOPIC, TOPIC]
