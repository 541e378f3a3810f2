"""Pulsar's replicators watched pass after pass: stalled means a backlog and nothing sent for a while."""

from __future__ import annotations

from typing import Any

import pytest

from geosync_core.replicators import Sample, Stall, Unsticking, Watch, samples_of


def _stats(**links: dict[str, Any]) -> dict[str, Any]:
    return {"replication": links}


def _link(backlog: int, sent: int | None = 0, rate: float = 0.0, connected: bool = True) -> dict[str, Any]:
    raw: dict[str, Any] = {"replicationBacklog": backlog, "msgRateOut": rate, "connected": connected}
    if sent is not None:
        raw["msgOutCount"] = sent
    return raw


def test_samples_come_from_the_replication_section() -> None:
    got = samples_of(_stats(b=_link(12, 40, 1.5), c=_link(0, None, connected=False)))
    assert got == {
        "b": Sample(backlog=12, sent=40, rate_out=1.5, connected=True),
        "c": Sample(backlog=0, sent=None, rate_out=0.0, connected=False),
    }


@pytest.mark.parametrize(
    "stats",
    [
        {},
        {"replication": None},
        {"replication": ["b"]},
        {"replication": {"b": "x"}},
        {"replication": {"b": {"replicationBacklog": -1}}},
        {"replication": {"b": {"replicationBacklog": "12"}}},
        {"replication": {"b": {"replicationBacklog": True}}},
        {"replication": {"b": {"replicationBacklog": 3, "msgRateOut": "fast"}}},
    ],
)
def test_a_section_not_of_the_documented_shape_gives_no_sample(stats: dict[str, Any]) -> None:
    assert samples_of(stats) == {}


def test_a_backlog_that_sent_nothing_for_the_threshold_is_stalled() -> None:
    watch = Watch()
    watch.observe("t", samples_of(_stats(b=_link(5, 100))), at=0.0)  # first seen: counts as progress
    watch.observe("t", samples_of(_stats(b=_link(9, 100))), at=200.0)  # more backlog, nothing sent
    assert watch.stalled(299.0, 300.0) == []
    watch.observe("t", samples_of(_stats(b=_link(9, 100, connected=False))), at=300.0)
    (stall,) = watch.stalled(300.0, 300.0)
    assert (stall.topic, stall.remote, stall.backlog) == ("t", "b", 9)
    assert (stall.connected, stall.since) == (False, 0.0)


@pytest.mark.parametrize(
    ("later", "why"),
    [
        (_link(9, 101), "something went out"),
        (_link(4, 100), "the backlog fell"),
        (_link(0, 100), "the backlog is empty"),
        (_link(9, None, rate=2.0), "no count, but a rate out"),
    ],
)
def test_progress_restarts_the_clock(later: dict[str, Any], why: str) -> None:
    watch = Watch()
    watch.observe("t", samples_of(_stats(b=_link(5, 100))), at=0.0)
    watch.observe("t", samples_of(_stats(b=later)), at=400.0)
    assert watch.stalled(400.0, 300.0) == [], why
    assert len(watch.stalled(700.0, 300.0)) == (1 if later["replicationBacklog"] else 0)


def test_without_a_count_and_without_a_rate_a_backlog_is_stalled() -> None:
    watch = Watch()
    for at in (0.0, 100.0, 400.0):
        watch.observe("t", samples_of(_stats(b=_link(7, None))), at=at)
    assert [s.remote for s in watch.stalled(400.0, 300.0)] == ["b"]


def test_links_of_topics_and_regions_gone_are_forgotten() -> None:
    watch = Watch()
    watch.observe("t", samples_of(_stats(b=_link(5), c=_link(5))), at=0.0)
    watch.observe("u", samples_of(_stats(b=_link(5))), at=0.0)
    watch.observe("t", samples_of(_stats(b=_link(5))), at=400.0)  # t no longer replicates to c
    assert sorted((s.topic, s.remote) for s in watch.stalled(400.0, 300.0)) == [("t", "b"), ("u", "b")]
    watch.retain(["t"])
    assert [(s.topic, s.remote) for s in watch.stalled(400.0, 300.0)] == [("t", "b")]


# -- unsticking: which topics to unload, and when ---------------------------------------------------


def _stall(topic: str, remote: str = "b", since: float = 0.0, connected: bool = True) -> Stall:
    return Stall(topic, remote, backlog=10, connected=connected, since=since)


def test_a_topic_stuck_while_connected_is_unloaded_once_stalled_long_enough() -> None:
    u = Unsticking(after_s=100.0)
    assert u.due([_stall("t")], now=99.0) == []
    assert u.due([_stall("t")], now=100.0) == [_stall("t")]
    assert u.tries == {"t": 1}


def test_a_disconnected_replicator_is_a_region_out_of_reach_and_not_unloaded() -> None:
    u = Unsticking(after_s=100.0)
    assert u.due([_stall("t", connected=False)], now=10_000.0) == []


def test_off_by_default() -> None:
    assert Unsticking(after_s=0.0).due([_stall("t")], now=10_000.0) == []


def test_one_unload_per_topic_whatever_the_number_of_stuck_links() -> None:
    u = Unsticking(after_s=10.0)
    got = u.due([_stall("t", "b", since=5.0), _stall("t", "c", since=1.0), _stall("u")], now=50.0)
    assert got == [_stall("u"), _stall("t", "c", since=1.0)]  # longest stalled first


def test_a_topic_that_gets_stuck_again_waits_twice_as_long_each_time_up_to_the_cap() -> None:
    u = Unsticking(after_s=100.0, max_wait_s=350.0)
    unloads = [t for t in range(0, 2000, 10) if u.due([_stall("t")], now=float(t))]
    assert unloads == [100, 200, 400, 750, 1100, 1450, 1800]


def test_a_topic_whose_links_drained_starts_over_and_a_gone_topic_is_forgotten() -> None:
    u = Unsticking(after_s=100.0)
    watch = Watch()
    for topic in ("t", "u"):
        watch.observe(topic, {"b": Sample(backlog=5, sent=0, rate_out=0.0, connected=True)}, at=0.0)
        u.due([_stall(topic)], now=100.0)
        u.due([_stall(topic)], now=200.0)
    assert u.tries == {"t": 2, "u": 2}
    u.settle(watch)
    assert u.tries == {"t": 2, "u": 2}  # still a backlog: the waits keep doubling
    watch.observe("t", {"b": Sample(backlog=0, sent=9, rate_out=0.0, connected=True)}, at=300.0)
    watch.retain(["t"])
    u.settle(watch)
    assert u.tries == {}
    assert u.next_at == {}
    assert u.due([_stall("t", since=300.0)], now=400.0) == [_stall("t", since=300.0)]
