"""What the agent says of itself (fake ports): /state, the timeline, readiness; and the composition root's
supervisor."""

from __future__ import annotations

import threading
import time

import pytest

from geosync_adapters import adminhttp
from geosync_agent import supervising
from geosync_agent.recent import Timeline
from geosync_agent.runtime import Now
from tests.agent.fakes import FakeRegion, Harness
from tests.agent.pairs import (
    A_LOG,
    NS,
    SUB,
    TOPIC,
    pair,
)


def test_status_reports_capabilities_and_subscriptions() -> None:
    a, _b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:1])
    a.step()
    status = a.agent.status()
    assert status["capabilities"]["plugin_feed"] is True
    assert status["capabilities"]["skip_by_ids"] is None
    assert [s["subscription"] for s in status["synced"]] == [SUB]
    (synced,) = status["synced"]
    assert synced["claim_spans"]["published"] >= 1
    assert synced["waiting"] is None
    assert status["ready"] is True
    # every step of the round is timed, in the order the round takes them
    assert list(status["round_phases"]) == [
        "own",
        "adopt",
        "reopen",
        "revive",
        "index",
        "receive",
        "writes",
        "feed",
        "polls",
        "receive again",
        "apply",
        "bound",
        "snapshots",
    ]
    a.agent.subs[(TOPIC, SUB)].cursor = None  # as after a restart, before the cursor is read again
    a.agent.apply(Now(0.0, 0.0))
    assert a.agent.status()["synced"][0]["waiting"] == "its cursor has not been read here yet"


def test_status_says_what_the_claims_are_made_of() -> None:
    a, _b = pair(claims_from="cursor")
    claims = a.agent.status()["claims"]
    assert (claims["setting"], claims["exact"]) == ("cursor", False)
    assert "a jump no consumer made is claimed too" in claims["from"]
    a, _b = pair()  # the default; the fake plugin's feed carries no ``acked``
    claims = a.agent.status()["claims"]
    assert (claims["setting"], claims["exact"]) == ("acknowledgements", False)
    assert "reports no acknowledgements" in claims["from"]
    a.agent.feed.acked = True  # as once a feed answer carried them (tests/sim runs that path end to end)
    claims = a.agent.status()["claims"]
    assert (claims["exact"], claims["from"]) == (
        True,
        "what consumers acknowledged (the broker plugin's feed)",
    )


def test_the_timeline_shows_long_rounds_with_their_steps_and_discovery_passes() -> None:
    a, _b = pair()
    a.agent.timeline = Timeline(at_least_s=0.0)  # every event, however short
    a.discover()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:1])
    a.step()
    events = a.agent.status()["timeline"]
    assert [e["kind"] for e in events] == ["discovery", "round"]
    assert events[0]["began"] == a.clock - 1.0  # the pass's start, as the scan gave it
    assert events[1]["began"] == a.clock  # the round's start (the fake's clock, not the machine's)
    assert 0 <= events[1]["seconds"] < 5  # measured on the machine's clock
    assert 0 <= events[1]["cpu_s"] <= events[1]["seconds"] + 0.01
    assert events[1]["process_cpu_s"] >= events[1]["cpu_s"] - 0.002  # read a moment apart, rounded
    assert all(0 <= cpu <= wall + 0.01 for wall, cpu in events[1]["steps"].values())
    a.agent.timeline = Timeline(at_least_s=60.0)  # the agent's keeps only what is long
    a.step()
    assert a.agent.status()["timeline"] == []


def test_supervisor_restarts_a_failing_task_then_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervising, "FIRST_BACKOFF_S", 0.001)
    monkeypatch.setattr(supervising, "MAX_RESTARTS", 3)
    stop = threading.Event()
    supervisor = supervising.Supervisor(stop)
    runs: list[int] = []

    def flaky() -> None:
        runs.append(1)
        raise RuntimeError("boom")

    supervisor.spawn("flaky", flaky)
    assert stop.wait(5.0)
    supervisor.join("flaky")
    assert len(runs) == 4  # the first run and three restarts
    assert supervisor.given_up == ["flaky"]
    assert not supervisor.alive()


def test_supervisor_leaves_a_task_that_ends_cleanly() -> None:
    stop = threading.Event()
    supervisor = supervising.Supervisor(stop)
    done = threading.Event()
    supervisor.spawn("once", done.set)
    assert done.wait(2.0)
    time.sleep(0.01)
    supervisor.join("once")
    assert supervisor.restarts["once"] == 0
    assert not stop.is_set()


def test_readiness_reflects_a_stalled_or_failing_loop() -> None:
    a, _ = pair()
    now = a.clock
    assert a.agent.readiness(now) == (True, "ready")
    ok, why = a.agent.readiness(now + 61)
    assert not ok
    assert why.startswith("stalled")
    a.agent.failing_since, a.agent.last_error = now - 5, "401 Unauthorized"
    assert a.agent.readiness(now)[0]  # failing for 5 s: not yet
    ok, why = a.agent.readiness(now + 11)
    assert not ok
    assert why.startswith("failing")
    assert "401 Unauthorized" in why
    a.agent.failing_since = None
    a.step()
    assert a.agent.readiness(a.clock)[0]


def test_readiness_reflects_failing_discovery_and_feed() -> None:
    """A region unreachable from the start: the rounds have nothing to fail on (no topic to poll), but
    discovery and the acknowledgement feed fail; the agent is not ready after FAILING_S."""
    a, _ = pair()
    start = a.clock
    a.agent.part_outcome("discovery", OSError("connection refused"), start)
    a.region.feed_error = adminhttp.AdminError("503 Service Unavailable")
    a.step()
    assert a.agent.readiness(a.clock)[0]  # for a second: not yet
    a.step(15)
    ok, why = a.agent.readiness(a.clock)
    assert not ok
    assert why.startswith("failing: acknowledgement feed")
    assert "503" in why
    a.region.feed_error = None
    a.step()
    ok, why = a.agent.readiness(a.clock)
    assert not ok
    assert why.startswith("failing: discovery")
    a.agent.part_outcome("discovery", None, a.clock)
    assert a.agent.readiness(a.clock) == (True, "ready")


def test_readiness_before_the_first_round() -> None:
    region = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    h = Harness.build(region)
    ok, why = h.agent.readiness(h.clock)
    assert not ok
    assert why.startswith("starting")


def test_readiness_reflects_failing_publishes() -> None:
    a, _ = pair()
    started = time.monotonic()
    a.agent.round_done_at = started
    a.agent.on_sent(False, started)
    assert a.agent.readiness(started + 1)[0]
    ok, why = a.agent.readiness(started + 16)
    assert not ok
    assert "control message" in why
    a.agent.on_sent(True, started + 16)
    assert a.agent.readiness(started + 16)[0]


def test_status_shows_how_long_since_the_last_round_ended() -> None:
    """A round still running shows nowhere else until it ends (its time, its timeline event): /state says how
    long ago the last one ended, on the machine's clock (``round_done_at`` is the round's start)."""
    a, _b = pair()
    assert a.agent.status()["since_round_ended_s"] is None  # no round yet
    a.agent.round_done_at = time.monotonic() - 10.0  # a round began 10 s ago and took 4 s
    a.agent.round_seconds.append(4.0)
    assert 6.0 <= a.agent.status()["since_round_ended_s"] < 7.0
