"""The lab's regions really replicate: what every later feature of GeoSync stands on."""

from __future__ import annotations

import contextlib
import time

import pytest
import requests

from geosync_adapters.adminhttp import AdminNotFound
from geosync_adapters.messaging import REPL_SOURCE_POSITION
from geosync_lab import labs
from integration_tests.helpers import (
    Lab,
    produce,
    produce_batched,
    read_all,
    read_every,
    replicated,
    wait_for,
)


@pytest.mark.parametrize("namespace", ["geo/ab", "geo/abc"])
def test_message_from_each_region_reaches_every_region_of_its_namespace(
    lab: Lab, unique: str, namespace: str
) -> None:
    members = lab.topology.namespaces[namespace].regions
    topic = f"persistent://{namespace}/fanout-{unique}"
    for origin in members:
        produce(lab.service_url(origin), topic, [f"from {origin}".encode()])
    for region in members:
        got = read_all(lab.service_url(region), topic, expect=len(members))
        assert sorted(m.data.decode() for m in got) == sorted(f"from {o}" for o in members), region


def test_geo_ab_replicates_only_between_a_and_b(lab: Lab) -> None:
    assert lab.topology.namespaces["geo/ab"].regions == ("a", "b")
    # c may hold geo/ab's policies (the agents' policy mirror copies them, as a shared configuration store
    # would), but c is never one of its clusters.
    with contextlib.suppress(AdminNotFound):
        assert "c" not in lab.admin("c").replication_clusters("geo/ab")
    for region in ("a", "b"):
        assert sorted(lab.admin(region).replication_clusters("geo/ab")) == ["a", "b"]
        assert sorted(lab.admin(region).allowed_clusters("geo/ab")) == ["a", "b"]


def test_replicated_copy_carries_its_origin_position(lab: Lab, unique: str) -> None:
    topic = f"persistent://geo/abc/origin-{unique}"
    sent = produce(lab.service_url("a"), topic, [b"m0", b"m1", b"m2"])
    origin = {f"m{i}": pos for i, (_p, pos) in enumerate(sent)}
    local = read_all(lab.service_url("a"), topic, expect=3)
    assert all(REPL_SOURCE_POSITION not in m.properties for m in local)
    for region in ("b", "c"):
        copies = read_all(lab.service_url(region), topic, expect=3)
        assert len(copies) == 3
        for m in copies:
            assert m.source_position == origin[m.data.decode()], (region, m)


def test_partitioned_topic_replicates_per_partition(lab: Lab, unique: str) -> None:
    topic = f"persistent://geo/ab/parts-{unique}"
    lab.admin("a").create_partitioned_topic(topic, 3)
    deadline = time.monotonic() + 30
    while lab.admin("b").partitioned_metadata(topic) != 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert lab.admin("b").partitioned_metadata(topic) == 3
    sent = produce(
        lab.service_url("a"), topic, [f"k{i}".encode() for i in range(30)], key=lambda i: f"key-{i}"
    )
    by_payload = {f"k{i}": (part, pos) for i, (part, pos) in enumerate(sent)}
    assert {part for part, _ in sent} == {0, 1, 2}, "keys should spread over all partitions"
    for partition in range(3):
        expected = [p for p, (part, _) in by_payload.items() if part == partition]
        copies = read_all(lab.service_url("b"), f"{topic}-partition-{partition}", expect=len(expected))
        assert sorted(m.data.decode() for m in copies) == sorted(expected)
        for m in copies:
            part, pos = by_payload[m.data.decode()]
            assert part == partition
            assert m.source_position == pos


def test_killed_region_catches_up_after_restart(lab: Lab, unique: str) -> None:
    topic = f"persistent://geo/ab/catchup-{unique}"
    # A durable subscription in b keeps "before" there: without one, b's only cursor is its replicator's,
    # which has passed it, and the ledger holding it is trimmed once b reopens the topic after the restart
    # (geo/ab has no retention). A clean-clone CI run saw b come back without "before" that way.
    lab.admin("b").create_subscription(topic, f"keep-{unique}")
    produce(lab.service_url("a"), topic, [b"before"])
    assert len(read_all(lab.service_url("b"), topic, expect=1)) == 1
    labs.stop_region(lab.dir, "b", kill=True)
    try:
        assert not labs.alive_regions(lab.dir, lab.topology)["b"]
        produce(lab.service_url("a"), topic, [f"during-{i}".encode() for i in range(20)])
    finally:
        labs.start_region(lab.dir, "b")
    got = read_all(lab.service_url("b"), topic, expect=21, timeout_s=90)
    assert sorted(m.data.decode() for m in got) == sorted(["before"] + [f"during-{i}" for i in range(20)])
    labs.wait_replication(lab.topology)


def test_an_agent_reports_not_ready_while_its_region_is_down(lab: Lab) -> None:
    """b's agent can do nothing while its region is down: its readiness probe says so, and why; once b is
    back the agent is ready again without a restart."""
    assert readyz(lab, "b")[0] == 200
    labs.stop_region(lab.dir, "b")
    try:
        wait_for(lambda: readyz(lab, "b")[0] == 503, timeout_s=90, what="b's agent to report not ready")
        _, reason = readyz(lab, "b")
        assert reason.startswith(("failing", "stalled")), reason
    finally:
        labs.start_region(lab.dir, "b")
    labs.wait_replication(lab.topology)
    wait_for(lambda: readyz(lab, "b")[0] == 200, timeout_s=90, what="b's agent ready again")


def readyz(lab: Lab, region: str) -> tuple[int, str]:
    """The agent's /readyz status and reason."""
    response = requests.get(labs.agent_metrics_url(lab.dir, region) + "/readyz", timeout=5)
    return response.status_code, response.text.strip()


def test_unloading_a_topic_starts_a_new_replicator_and_replication_goes_on(lab: Lab, unique: str) -> None:
    """What an agent does to a replicator stuck while connected (``replicator_unload_after_s``; a stuck one
    cannot be made on demand, so the unload itself is checked here): the admin adapter's unload closes the
    topic in a, Pulsar starts a new replicator to b (its count of entries sent starts over), and nothing is
    lost. Replication is at least once: the new replicator starts from its cursor's last stored position,
    so b may get again some of what it had (a clean-clone CI run saw all 30 first messages twice)."""
    topic = f"persistent://geo/ab/unload-{unique}"
    first = [f"m{i}" for i in range(30)]
    produce(lab.service_url("a"), topic, [p.encode() for p in first])  # 30 entries
    assert len(read_all(lab.service_url("b"), topic, expect=30)) == 30
    replicated(lab, "a", "b", [topic])

    def sent_to_b() -> int:
        link = (lab.admin("a").topic_stats(topic).get("replication") or {}).get("b") or {}
        return int(link["msgOutCount"])  # entries

    before = sent_to_b()
    assert before >= 30
    lab.admin("a").unload_topic(topic)
    second = [f"n{i}" for i in range(30)]
    produce_batched(lab.service_url("a"), topic, second)  # a few entries
    got = read_every(lab.service_url("b"), topic, set(first + second))
    assert set(got) == set(first + second)
    assert sent_to_b() < before, "the replicator's count went on: the topic was not unloaded"


def test_the_admin_adapter_gets_the_brokers_answers_uncompressed(lab: Lab, unique: str) -> None:
    """The broker gzips an answer when asked (as requests asks by default); the adapter's are not, so
    neither side spends CPU on it (a region's own network)."""
    produce(lab.service_url("a"), f"persistent://geo/ab/plain-{unique}", [b"x"])
    admin = lab.admin("a")
    path = f"/admin/v2/persistent/geo/ab/plain-{unique}/stats"
    encodings: list[str | None] = []
    admin.session.hooks["response"].append(
        lambda r, *_a, **_k: encodings.append(r.headers.get("Content-Encoding"))
    )
    assert "subscriptions" in admin.get(path)
    assert encodings == [None]
    asked = requests.get(admin.base_url + path, headers={"Accept-Encoding": "gzip"}, timeout=10)
    assert asked.headers.get("Content-Encoding") == "gzip"  # what it would have cost
