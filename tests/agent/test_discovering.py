"""Discovery reads the broker plugin's topic list instead of every topic's stats: what it learns is the same,
topics the list leaves out are read from their stats, and a broker without the list is not asked again for
a while."""

from __future__ import annotations

from typing import Any

from geosync_adapters import adminhttp
from geosync_agent import discovering
from geosync_agent.config import AgentConfig
from geosync_core.capabilities import REPROBE_S
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import AdminView, FakeRegion

NS = "geo/ab"
TOPICS = [f"persistent://{NS}/t{i}" for i in range(3)]
CONTROL = f"persistent://{NS}/geosync-control"


def region() -> FakeRegion:
    r = FakeRegion("b", {NS: ["a", "b"]}, topics={t: [Position(9, 0)] for t in [*TOPICS, CONTROL]})
    for i, t in enumerate(TOPICS):
        r.cursors[(t, "billing")] = AckState.of(Position(9, -1))
        r.cursors[(t, f"audit-{i}")] = AckState.of(Position(9, -1))
        r.consumers[(t, "billing")] = i
        r.replication[t] = {
            "a": {"replicationBacklog": i, "msgOutCount": 7, "msgRateOut": 1, "connected": True}
        }
    r.replication[CONTROL] = {
        "a": {"replicationBacklog": 3, "msgOutCount": 2, "msgRateOut": 0, "connected": False}
    }
    return r


def config() -> AgentConfig:
    return AgentConfig(region="b", admin_url="http://fake", service_url="pulsar://fake")


def scan(r: FakeRegion, views: discovering.TopicViews | None) -> discovering.Discovered:
    return discovering.scan(AdminView(r), config(), now=1.0, views=views)


def test_the_plugins_list_gives_what_the_stats_give_without_reading_them() -> None:
    by_stats, by_list = region(), region()
    expected = scan(by_stats, None)
    found = scan(by_list, discovering.PluginTopics(AdminView(by_list), clock=lambda: 1.0))
    assert (found.subscriptions, found.replicators, found.topics) == (
        expected.subscriptions,
        expected.replicators,
        expected.topics,
    )
    assert found.subscriptions[TOPICS[2]] == {"billing": (2, "Shared"), "audit-2": (0, "Shared")}
    assert found.replicators[CONTROL]["a"].backlog == 3
    assert by_list.stats_reads == []
    assert by_stats.stats_reads == [CONTROL, *TOPICS]
    assert by_list.calls.count(("plugin_topics", NS)) == 1


def test_topics_the_list_leaves_out_are_read_from_their_stats() -> None:
    r = region()
    r.not_loaded = {TOPICS[1]}  # another broker has it
    found = scan(r, discovering.PluginTopics(AdminView(r), clock=lambda: 1.0))
    assert r.stats_reads == [TOPICS[1]]
    assert set(found.subscriptions) == set(TOPICS)
    assert found.subscriptions[TOPICS[1]] == {"billing": (1, "Shared"), "audit-1": (0, "Shared")}


class Counting:
    """An admin whose plugin list answers ``error`` (when set) and counts the asks."""

    def __init__(self, r: FakeRegion, error: adminhttp.AdminError | None) -> None:
        self.view = AdminView(r)
        self.error = error
        self.asked = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view, name)

    def plugin_topics(self, namespace: str) -> dict[str, dict[str, Any]]:
        self.asked += 1
        if self.error is not None:
            raise self.error
        return dict(self.view.plugin_topics(namespace))


def test_a_broker_without_the_list_is_asked_again_only_after_the_reprobe_interval() -> None:
    r = region()
    admin = Counting(r, adminhttp.AdminNotFound("404 unknown GeoSync path"))
    now = [100.0]
    views = discovering.PluginTopics(admin, clock=lambda: now[0])
    first = discovering.scan(admin, config(), now=now[0], views=views)
    assert set(first.subscriptions) == set(TOPICS)  # every topic from its stats
    now[0] += REPROBE_S - 1
    discovering.scan(admin, config(), now=now[0], views=views)
    assert admin.asked == 1
    admin.error = None  # the plugin was upgraded
    now[0] += 2
    r.stats_reads.clear()
    discovering.scan(admin, config(), now=now[0], views=views)
    assert (admin.asked, r.stats_reads) == (2, [])


def test_a_transient_failure_falls_back_for_one_pass_only() -> None:
    r = region()
    admin = Counting(r, adminhttp.AdminTemporary("503 broker busy"))
    views = discovering.PluginTopics(admin, clock=lambda: 5.0)
    found = discovering.scan(admin, config(), now=5.0, views=views)
    assert set(found.subscriptions) == set(TOPICS)
    admin.error = None
    r.stats_reads.clear()
    discovering.scan(admin, config(), now=5.0, views=views)
    assert (admin.asked, r.stats_reads) == (2, [])
