"""Pulsar's replicators watched pass after pass: stalled means a backlog and nothing sent for a while."""

from __future__ import annotations

from typing import Any

import pytest

from geosync_core.replicators import Sample, Watch, samples_of


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
