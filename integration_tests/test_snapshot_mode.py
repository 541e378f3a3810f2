"""Snapshot mode (PIP-33 from outside the brokers) on the real lab with the broker plugins loaded.

The lab's agents sync ``geo/snap-*`` namespaces in snapshot mode: mark-delete only, at snapshot granularity,
through signed marker messages that the entry filter hides from applications.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pulsar
import pytest
import requests

from geosync_adapters import messaging
from geosync_agent import snapshotting
from geosync_core.positions import Position
from geosync_lab import labs
from integration_tests.helpers import Lab, consume_all, cursor, produce, read_all, wait_for
from integration_tests.test_exact_sync import consume_some, subscribe_first


def agent_state(lab: Lab, region: str) -> dict[str, Any]:
    state: dict[str, Any] = requests.get(labs.agent_metrics_url(lab.dir, region) + "/state", timeout=5).json()
    return state


def completed(lab: Lab, region: str, topic: str) -> int:
    """Snapshots of ``topic`` that ``region``'s agent completed (other tests' topics keep snapshotting)."""
    return int(agent_state(lab, region)["snapshots"]["completed_by_topic"].get(topic, 0))


def mark_delete(lab: Lab, region: str, topic: str, sub: str) -> Position | None:
    raw = cursor(lab.admin(region), topic, sub)
    return None if raw is None else Position.parse(raw[0])


def position_in(lab: Lab, region: str, topic: str, payload: str) -> Position:
    """Where the copy of ``payload`` sits in ``region``'s log (markers make backlogs useless as a measure)."""
    found = read_all(lab.service_url(region), topic, expect=1, match=lambda m: m.data.decode() == payload)
    assert found, f"{payload} not found in {region}"
    return found[0].position


def produce_and_snapshot(lab: Lab, topic: str, payloads: list[bytes]) -> None:
    """Publish in a, then wait until a's agent holds a completed snapshot of ``topic``."""
    produce(lab.service_url("a"), topic, payloads)
    wait_for(
        lambda: bool(agent_state(lab, "a")["snapshots"]["latest"].get(topic)),
        timeout_s=60,
        what=f"a snapshot of {topic} to complete in a",
    )


def test_entry_filter_is_loaded_everywhere(lab: Lab) -> None:
    for region in lab.topology.regions:
        snapshotting.check_entry_filter(lab.admin(region).get("/admin/v2/brokers/configuration/runtime"))
    with pytest.raises(snapshotting.FilterMissing, match="entryFilterNames=geosync"):
        snapshotting.check_entry_filter({"entryFilterNames": "[]"})


def test_markers_never_reach_applications(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/snap-ab/hidden-{unique}", f"app-{unique}"
    subscribe_first(lab, "a", topic, sub, pulsar.ConsumerType.Shared)
    produce_and_snapshot(lab, topic, [f"m{i}".encode() for i in range(20)])
    got = consume_all(lab.service_url("a"), topic, sub)
    assert sorted(got) == sorted(f"m{i}" for i in range(20))
    for region in ("a", "b"):
        seen = read_all(lab.service_url(region), topic, expect=21, timeout_s=5)
        assert sorted(m.data.decode() for m in seen) == sorted(f"m{i}" for i in range(20)), region
        assert not any("__geosync_marker" in m.properties for m in seen)


def snapshot_past(lab: Lab, topic: str, floors: dict[str, Position]) -> bool:
    """Whether a's agent holds a snapshot of ``topic`` whose position in every region is past ``floors``."""
    latest = agent_state(lab, "a")["snapshots"]["latest"].get(topic, [])
    return any(all(Position.parse(s["positions"][r]) > f for r, f in floors.items()) for s in latest)


@pytest.mark.parametrize("namespace", ["geo/snap-ab", "geo/snap-abc"])
def test_mark_delete_follows_at_snapshot_granularity(lab: Lab, unique: str, namespace: str) -> None:
    members = lab.topology.namespaces[namespace].regions
    others = members[1:]
    topic, sub = f"persistent://{namespace}/md-{unique}", f"md-{unique}"
    for region in members:
        subscribe_first(lab, region, topic, sub, pulsar.ConsumerType.Exclusive)
    produce(lab.service_url("a"), topic, [f"m{i:03d}".encode() for i in range(50)])
    # Wait for a snapshot taken after m049 everywhere; the next messages then land after it in a.
    floors = {r: position_in(lab, r, topic, "m049") for r in others}
    wait_for(lambda: snapshot_past(lab, topic, floors), timeout_s=60, what="a snapshot after m049")
    produce(lab.service_url("a"), topic, [f"m{i:03d}".encode() for i in range(50, 100)])
    acked = consume_some(
        lab,
        "a",
        topic,
        sub,
        total=60,
        consumer_type=pulsar.ConsumerType.Exclusive,
        choose=lambda _i: False,
        cumulative_upto=59,
    )
    assert len(acked) == 60
    # a's consumption passed that snapshot: every other region moves to where its request landed there,
    # past its copy of m049 and before m050; m050..m059 come again (snapshot granularity).
    for region in others:
        ceiling = position_in(lab, region, topic, "m050")

        def followed(r: str = region, f: Position = floors[region]) -> bool:
            md = mark_delete(lab, r, topic, sub)
            return md is not None and md > f

        wait_for(followed, timeout_s=30, what=f"{region} to follow a's mark-delete to the snapshot")
        md = mark_delete(lab, region, topic, sub)
        assert md is not None
        assert md < ceiling, "moved past an unacknowledged message"
    got = consume_all(lab.service_url(others[0]), topic, sub, consumer_type=pulsar.ConsumerType.Exclusive)
    assert sorted(got) == [f"m{i:03d}" for i in range(50, 100)]


def test_no_snapshot_completes_and_no_cursor_moves_while_a_region_is_down(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/snap-abc/down-{unique}", f"down-{unique}"
    for region in ("a", "b", "c"):
        subscribe_first(lab, region, topic, sub, pulsar.ConsumerType.Shared)
    labs.freeze_region(lab.dir, "c", frozen=True)
    try:
        before = completed(lab, "a", topic)
        produce(lab.service_url("a"), topic, [f"m{i}".encode() for i in range(30)])
        with messaging.client(lab.service_url("a")) as c:
            consumer = c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared)
            for _ in range(30):
                consumer.acknowledge(consumer.receive(timeout_millis=30000))
            time.sleep(0.5)
            consumer.close()
        last = position_in(lab, "b", topic, "m29")
        held = mark_delete(lab, "b", topic, sub)
        time.sleep(6)
        assert completed(lab, "a", topic) == before, "a snapshot completed although c never answered"
        assert mark_delete(lab, "b", topic, sub) == held, "b's cursor moved without a complete snapshot"
    finally:
        labs.freeze_region(lab.dir, "c", frozen=False)

    def past_all() -> bool:
        md = mark_delete(lab, "b", topic, sub)
        return md is not None and md > last

    # Once c answers again, the snapshot completes and b follows a past all 30 messages.
    wait_for(past_all, timeout_s=60, what="b to follow a once c is back")


def rejected(lab: Lab, region: str, reason: str) -> int:
    return int(agent_state(lab, region)["counters"].get(f"control_rejected_{reason}", 0))


def update_markers(lab: Lab, region: str, topic: str, sub: str, *, sender: str) -> list[pulsar.Message]:
    """``sender``'s update markers for ``sub`` in ``region``'s log of ``topic`` (b's own, for the moves it
    followed, are there too), read through a ``geosync-*``
    subscription (the only kind the entry filter shows markers to), as anyone allowed to consume could."""
    with messaging.client(lab.service_url(region)) as c:
        probe = c.subscribe(topic, f"geosync-probe-{sub}", initial_position=pulsar.InitialPosition.Earliest)
        found = []
        try:
            while True:
                msg = probe.receive(timeout_millis=3000)
                if msg.properties().get("__geosync_marker") != "update":
                    continue
                envelope = json.loads(msg.data())
                if envelope["region"] == sender and envelope["payload"]["subscription"] == sub:
                    found.append(msg)
        except pulsar.Timeout:
            pass
        finally:
            probe.unsubscribe()
    return found


def test_a_genuine_update_marker_copied_into_another_topic_or_replayed_changes_nothing(
    lab: Lab, unique: str
) -> None:
    """Someone with produce (and consume) permission on the namespace, but no key, copies a's genuine
    update marker for subscription ``sub`` of ``src`` into ``dst``, where a subscription of the same name
    waits at the start in b, and publishes it into ``src`` again. b must refuse both (misplaced, replayed)
    and its ``dst`` cursor must not move."""
    ns = "geo/snap-ab"
    src, dst, sub = (
        f"persistent://{ns}/copy-src-{unique}",
        f"persistent://{ns}/copy-dst-{unique}",
        f"c-{unique}",
    )
    for region in ("a", "b"):
        for topic in (src, dst):
            subscribe_first(lab, region, topic, sub, pulsar.ConsumerType.Exclusive)
    produce_and_snapshot(lab, src, [f"m{i}".encode() for i in range(20)])
    produce(lab.service_url("a"), dst, [f"d{i}".encode() for i in range(20)])
    assert sorted(
        consume_all(lab.service_url("a"), src, sub, consumer_type=pulsar.ConsumerType.Exclusive)
    ) == sorted(f"m{i}" for i in range(20))

    def b_followed() -> bool:
        md = mark_delete(lab, "b", src, sub)
        return (
            md is not None and md > Position(-1, -1) and bool(update_markers(lab, "a", src, sub, sender="a"))
        )

    wait_for(b_followed, timeout_s=60, what="b to follow a's update marker on the source topic")
    marker = update_markers(lab, "a", src, sub, sender="a")[-1]
    held = mark_delete(lab, "b", dst, sub)
    misplaced, replayed = rejected(lab, "b", "misplaced"), rejected(lab, "b", "replayed")
    with messaging.client(lab.service_url("a")) as c:
        for topic in (dst, src):
            producer = c.create_producer(topic, batching_enabled=False)  # markers travel unbatched
            producer.send(marker.data(), properties=marker.properties())
            producer.close()
    wait_for(
        lambda: rejected(lab, "b", "misplaced") > misplaced and rejected(lab, "b", "replayed") > replayed,
        timeout_s=60,
        what="b to refuse the copy (misplaced) and the replay (replayed)",
    )
    assert mark_delete(lab, "b", dst, sub) == held, "the copied marker moved another topic's subscription"
    got = consume_all(lab.service_url("b"), dst, sub, consumer_type=pulsar.ConsumerType.Exclusive)
    assert sorted(got) == sorted(f"d{i}" for i in range(20))
