"""GeoSync's broker plugins (``interceptors/``), loaded in real Pulsar regions.

The entry filter hides genuine snapshot markers (signed by a key of the lab's keyring) from application
consumers and readers but not from the agents' ``geosync-*`` subscriptions, in the region that wrote them
and in the regions they replicate to; it delivers every application message that carries the marker
property (issue 45, case 4), and it survives garbage. The interceptor names the origin region of every
entry exactly, agreeing with the broker's own per-entry ``X-Pulsar-replicated-from`` header that the agent
would otherwise fetch once per entry. And admin POST/PUT with JSON bodies still work with an interceptor
loaded (Pulsar #26185 broke that in 4.0.12; 4.0.8 is not affected).

These run against the session lab once the lab loads the plugins (``geosync_lab.plugins``). To run them
against another lab that loads them, e.g. a two-region one, set ``GEOSYNC_PLUGIN_LAB=DIR``.
"""

from __future__ import annotations

import os
import pathlib
import random
import secrets
import time
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
import requests

from geosync_adapters import messaging, signing
from geosync_adapters.admin import AdminClient
from geosync_core import markers
from geosync_core.envelopes import Rejected
from geosync_core.positions import Position
from geosync_core.resolving import OriginResolver
from integration_tests.helpers import Lab, produce, wait_for

pytestmark = pytest.mark.lab

AGENT_SUB = "geosync-agent"


def lab_signer(lab: Lab, region: str) -> signing.Ed25519Signer:
    """The region's own signing key in the lab: the brokers' entry filter hides only markers a key of the
    lab's keyring signed (``-Dgeosync.keyringFile``)."""
    return signing.load_signer(lab.dir / "agents" / "keys" / f"{region}-1.key", f"{region}-1")


def lab_keyring(lab: Lab) -> Any:
    return signing.load_keyring(lab.dir / "agents" / "keyring.yaml")


@pytest.fixture(scope="module")
def plugin_lab(request: pytest.FixtureRequest) -> Lab:
    given = os.environ.get("GEOSYNC_PLUGIN_LAB")
    handle: Lab = (
        Lab(dir=pathlib.Path(given).resolve(), owned=False) if given else request.getfixturevalue("lab")
    )
    for name, region in handle.topology.regions.items():
        try:
            response = requests.get(f"{region.admin_url}/admin/v2/geosync/status", timeout=10)
        except requests.RequestException as e:
            pytest.fail(f"region {name}: admin API unreachable: {e}")
        if response.status_code != 200 or response.json().get("plugin") != "geosync":
            pytest.fail(
                f"region {name}: the GeoSync broker plugins are not loaded (GET /admin/v2/geosync/status "
                f"answered {response.status_code}); the lab must start regions with "
                "geosync_lab.plugins.plugin_conf(geosync_lab.plugins.ensure_plugins()) as extra conf"
            )
    return handle


def status(lab: Lab, region: str) -> dict[str, Any]:
    url = f"{lab.topology.region(region).admin_url}/admin/v2/geosync/status"
    body: dict[str, Any] = requests.get(url, timeout=10).json()
    return body


def origins(lab: Lab, region: str, topic: str) -> list[tuple[int, int, int, str]]:
    url = f"{lab.topology.region(region).admin_url}/admin/v2/geosync/origins"
    body = requests.get(url, params={"topic": topic}, timeout=10).json()
    assert body["version"] == 2
    assert body["region"] == region
    return [(int(run[0]), int(run[1]), int(run[2]), str(run[3])) for run in body["runs"]]


def origin_of(runs: list[tuple[int, int, int, str]], position: Position) -> str | None:
    for ledger, first, count, origin in runs:
        if ledger == position.ledger and first <= position.entry < first + count:
            return origin
    return None


def publish(service_url: str, topic: str, items: list[tuple[bytes, dict[str, str]]], **producer: Any) -> None:
    with messaging.client(service_url) as c:
        p = c.create_producer(topic, batching_enabled=False, **producer)
        for data, props in items:
            p.send(data, properties=props)
        p.close()


def drain(
    service_url: str, topic: str, *, subscription: str | None, quiet_s: float = 3.0, limit_s: float = 60.0
) -> list[messaging.Received]:
    """Everything a consumer on ``subscription`` (or a reader, if None) gets until ``quiet_s`` of silence."""
    got: list[messaging.Received] = []
    with messaging.client(service_url) as c:
        if subscription is None:
            source: Any = c.create_reader(topic, pulsar.MessageId.earliest)
            receive: Callable[[int], Any] = lambda ms: source.read_next(timeout_millis=ms)  # noqa: E731
        else:
            source = c.subscribe(
                topic,
                subscription,
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            receive = lambda ms: source.receive(timeout_millis=ms)  # noqa: E731
        deadline = time.monotonic() + limit_s
        try:
            while time.monotonic() < deadline:
                try:
                    msg = receive(int(quiet_s * 1000))
                except pulsar.Timeout:
                    break
                got.append(messaging.received(msg))
                if subscription is not None:
                    source.acknowledge(msg)
        finally:
            source.close()
    return got


def marker_messages(lab: Lab, region: str, topic: str, n: int) -> list[tuple[bytes, dict[str, str]]]:
    out = []
    for i in range(n):
        marker = markers.SnapshotRequest(snapshot_id=f"snap-{i}", source_region=region, round=1 + i % 2)
        props, data = markers.encode_marker(
            lab_signer(lab, region), marker, topic=topic, seq=i + 1, sent_at_ms=int(time.time() * 1000)
        )
        out.append((data, props))
    return out


def wait_for_copies(service_url: str, topic: str, count: int, timeout_s: float = 45.0) -> None:
    """Wait until ``count`` entries reached a region (counted on a fresh geosync-* subscription)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = drain(service_url, topic, subscription=f"{AGENT_SUB}-probe-{secrets.token_hex(3)}", quiet_s=1)
        if len(got) >= count:
            return
    raise AssertionError(f"{count} entries did not replicate to {service_url} within {timeout_s:.0f} s")


# --- the entry filter ---------------------------------------------------------------------------------


def test_plugins_are_loaded_in_every_region(plugin_lab: Lab) -> None:
    for name in plugin_lab.topology.regions:
        s = status(plugin_lab, name)
        assert s["region"] == name
        assert "geosync" in s["configuration"]["entryFilterNames"].split(",")
        assert s["errors"] == 0


def test_markers_reach_only_geosync_subscriptions_in_every_region(plugin_lab: Lab, unique: str) -> None:
    ns = "geo/ab"
    topic = f"persistent://{ns}/markers-{unique}"
    data = [(f"m{i}".encode(), {"app": "yes"}) for i in range(5)]
    marks = marker_messages(plugin_lab, "a", topic, 3)
    interleaved = [data[0], marks[0], data[1], data[2], marks[1], data[3], marks[2], data[4]]
    # Create the subscriptions first, so they exist before anything is written. The application's is named
    # unsynced-*: the lab's agents leave it alone, so each region's copy is drained independently.
    admin_a = plugin_lab.admin("a")
    for sub in (f"unsynced-app-{unique}", f"{AGENT_SUB}-{unique}"):
        admin_a.create_subscription(topic, sub)
    publish(plugin_lab.service_url("a"), topic, interleaved)
    wait_for_copies(plugin_lab.service_url("b"), topic, len(interleaved))

    for region in plugin_lab.topology.namespaces[ns].regions:
        url = plugin_lab.service_url(region)
        app = drain(url, topic, subscription=f"unsynced-app-{unique}")
        reader = drain(url, topic, subscription=None)
        agent = drain(url, topic, subscription=f"{AGENT_SUB}-{unique}")
        assert [m.data for m in app] == [d for d, _ in data], region
        assert [m.data for m in reader] == [d for d, _ in data], region
        assert not any(markers.is_marker(m.properties) for m in app + reader)
        assert len(agent) == len(interleaved), region
        decoded = [
            markers.decode_marker(lab_keyring(plugin_lab), m.properties, m.data, topic=topic)
            for m in agent
            if markers.is_marker(m.properties)
        ]
        assert [d.snapshot_id for d in decoded if isinstance(d, markers.SnapshotRequest)] == [
            "snap-0",
            "snap-1",
            "snap-2",
        ], region
    # Hidden markers are acknowledged for the application: nothing is left in its backlog.
    stats = admin_a.topic_stats(topic)
    assert stats["subscriptions"][f"unsynced-app-{unique}"]["msgBacklog"] == 0


def test_filter_survives_garbage(plugin_lab: Lab, unique: str) -> None:
    """Garbage, odd properties and application messages that carry the marker property (with garbage, or
    with a real marker's bytes under another kind or signed by a key no keyring lists) are all delivered:
    the filter hides genuine markers only."""
    topic = f"persistent://geo/ab/garbage-{unique}"
    rnd = random.Random(unique)
    plain: list[tuple[bytes, dict[str, str]]] = [
        (rnd.randbytes(rnd.randrange(0, 300)), {}) for _ in range(10)
    ]
    weird_props = [(rnd.randbytes(50), {"x": rnd.randbytes(20).decode("latin-1")}) for _ in range(5)]
    fake_markers = [
        (
            rnd.randbytes(rnd.randrange(0, 300)),
            {markers.PROPERTY: rnd.randbytes(rnd.randrange(0, 40)).decode("latin-1")},
        )
        for _ in range(10)
    ] + [(b"", {markers.PROPERTY: ""}), (b"{}", {markers.PROPERTY: "snapshot", "other": "\x00"})]
    request = markers.SnapshotRequest(snapshot_id="forged", source_region="a")
    _, stranger = markers.encode_marker(
        signing.generate("a-1"), request, topic=topic, seq=1, sent_at_ms=int(time.time() * 1000)
    )
    [(genuine, _)] = marker_messages(plugin_lab, "a", topic, 1)
    forged = [
        (stranger, {markers.PROPERTY: markers.SNAPSHOT_REQUEST}),
        (genuine, {markers.PROPERTY: markers.UPDATE}),
    ]
    items = plain + fake_markers + forged + weird_props
    rnd.shuffle(items)
    publish(plugin_lab.service_url("a"), topic, items)
    app = drain(plugin_lab.service_url("a"), topic, subscription=f"unsynced-app-{unique}")
    assert sorted(m.data for m in app) == sorted(d for d, _ in items)
    agent = drain(plugin_lab.service_url("a"), topic, subscription=f"{AGENT_SUB}-{unique}")
    assert sorted(m.data for m in agent) == sorted(d for d, _ in items)
    ring = lab_keyring(plugin_lab)
    decoded = [markers.decode_marker(ring, m.properties, m.data, topic=topic) for m in agent]
    assert all(isinstance(d, Rejected) for d in decoded)
    assert status(plugin_lab, "a")["errors"] == 0
    assert plugin_lab.admin("a").clusters()


def test_an_unbatched_application_message_carrying_the_marker_property_is_delivered(
    plugin_lab: Lab, unique: str
) -> None:
    """Issue 45, case 4: the property is application data. Before the filter verified markers, 4 of 4 such
    messages never reached the application's subscription (the broker acknowledged them for it); they must
    be delivered in the region that wrote them and in the one they replicate to, in order."""
    ns = "geo/ab"
    topic = f"persistent://{ns}/app-marker-{unique}"
    kinds = ["snapshot-request", "update", "", "anything"]
    items = [(f"order-{i}".encode(), {markers.PROPERTY: kind, "n": str(i)}) for i, kind in enumerate(kinds)]
    items.insert(2, (b"plain", {}))
    for region in plugin_lab.topology.namespaces[ns].regions:
        plugin_lab.admin(region).create_subscription(topic, f"unsynced-app-{unique}")
    publish(plugin_lab.service_url("a"), topic, items)
    wait_for_copies(plugin_lab.service_url("b"), topic, len(items))
    for region in plugin_lab.topology.namespaces[ns].regions:
        url = plugin_lab.service_url(region)
        app = drain(url, topic, subscription=f"unsynced-app-{unique}")
        assert [m.data for m in app] == [d for d, _ in items], region
        reader = drain(url, topic, subscription=None)
        assert [m.data for m in reader] == [d for d, _ in items], region


# --- admin JSON bodies with an interceptor loaded (#26185) ------------------------------------------


def test_admin_post_and_put_with_json_bodies_work_with_the_interceptor_loaded(
    plugin_lab: Lab, unique: str
) -> None:
    admin = plugin_lab.admin("a")
    topic = f"persistent://geo/ab/json-{unique}"
    path = f"/admin/v2/persistent/geo/ab/json-{unique}"
    admin.put(path, {"owner": "geosync-test"})  # PUT: create a topic with properties (JSON object body)
    assert admin.get(f"{path}/properties") == {"owner": "geosync-test"}
    publish(plugin_lab.service_url("a"), topic, [(b"x", {}), (b"y", {})])
    assert admin.create_subscription(topic, f"s-{unique}")  # PUT with a message-id body
    admin.expire_messages(topic, f"s-{unique}", ledger=-1, entry=-1)  # POST with a message-id body
    admin.post(f"{path}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1})
    deadline = time.monotonic() + 20
    while admin.get(f"{path}/retention") != {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}:
        assert time.monotonic() < deadline, "topic retention set by POST never showed up"
        time.sleep(0.5)
    key = f"geosync-check-{unique}"
    admin.put("/admin/v2/namespaces/geo/ab/properties", {key: "1"})  # PUT on a namespace
    try:
        assert admin.get("/admin/v2/namespaces/geo/ab/properties").get(key) == "1"
    finally:
        admin.delete(f"/admin/v2/namespaces/geo/ab/property/{key}")


# --- the origin index ----------------------------------------------------------------------------------


def header_lookup(admin: AdminClient) -> Callable[[str, Position], str | None]:
    def lookup(topic: str, position: Position) -> str | None:
        return admin.replicated_from(topic, ledger=position.ledger, entry=position.entry)

    return lookup


def test_origin_index_names_every_entrys_origin_region(plugin_lab: Lab, unique: str) -> None:
    topology = plugin_lab.topology
    ns = "geo/abc" if "geo/abc" in topology.namespaces else "geo/ab"
    members = topology.namespaces[ns].regions
    topic = f"persistent://{ns}/origins-{unique}"
    per_producer = 6
    for region in members:
        # One broker-named producer and one named by the application (the resolver cannot trust its name).
        publish(
            plugin_lab.service_url(region),
            topic,
            [(f"{region}-gen-{i}".encode(), {}) for i in range(per_producer)],
        )
        publish(
            plugin_lab.service_url(region),
            topic,
            [(f"{region}-app-{i}".encode(), {}) for i in range(per_producer)],
            producer_name=f"orders-{region}-{unique}",
        )
    total = 2 * per_producer * len(members)
    for region in members:
        wait_for_copies(plugin_lab.service_url(region), topic, total)
    lookups_fallback = 0
    for region in members:
        got = drain(plugin_lab.service_url(region), topic, subscription=None)
        assert len(got) == total, region
        runs = origins(plugin_lab, region, topic)  # one HTTP call for the whole topic
        admin = plugin_lab.admin(region)
        # The fallback the agent uses without the plugin: the entry's headers, once per verified producer.
        resolver = OriginResolver(local=region, lookup=header_lookup(admin))
        for m in got:
            produced_in = m.data.decode().split("-")[0]
            assert origin_of(runs, m.position) == produced_in, (region, m.position, m.data)
            if m.source_position is not None:
                header = resolver.region_of(
                    topic,
                    m.position,
                    producer=f"{produced_in}-0-0" if b"-gen-" in m.data else "orders",
                )
                assert header == produced_in, (region, m.position)
        lookups_fallback += resolver.lookups
        print(f"region {region}: {len(runs)} runs for {total} entries; fallback: {resolver.lookups} calls")
    replicated = total * (len(members) - 1)
    print(f"origin lookups avoided: {lookups_fallback} admin calls for {replicated} replicated entries")
    assert lookups_fallback >= per_producer * (len(members) - 1) * len(members)


# --- the acknowledgement feed and cursor writes ---------------------------------------------------------


def test_ack_feed_and_cursor_writes_agree_with_the_broker(plugin_lab: Lab, unique: str) -> None:
    """The feed reports a consumer's acknowledgements as internalStats shows them; writes move the mark-delete
    and ack holes like a consumer would, never backwards; bad calls are refused with reasons."""
    region = plugin_lab.topology.region("a")
    admin = AdminClient(region.admin_url)
    topic, sub = f"persistent://geo/ab/desk-{unique}", f"unsynced-desk-{unique}"  # the agents leave it alone
    with messaging.client(region.service_url) as c:
        consumer = c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared)
        produce(region.service_url, topic, [f"m{i}".encode() for i in range(10)])
        _epoch, seen, _ = admin.plugin_cursors(since=2**62)
        positions: dict[str, Position] = {}
        for _ in range(10):
            msg = consumer.receive(timeout_millis=20000)
            payload = msg.data().decode()
            positions[payload] = Position(msg.message_id().ledger_id(), msg.message_id().entry_id())
            if payload in ("m0", "m1", "m2", "m3", "m4", "m7"):
                consumer.acknowledge(msg)
        pos = [positions[f"m{i}"] for i in range(10)]

        def fed() -> dict[str, str] | None:
            _e, _s, cursors = admin.plugin_cursors(since=seen)
            mine = [x for x in cursors if x["topic"] == topic and x["subscription"] == sub]
            if mine and mine[-1]["mark_delete"] == str(pos[4]):
                return mine[-1]
            return None

        wait_for(lambda: fed() is not None, timeout_s=20, what="the feed to report the acknowledgements")
        reported = fed()
        assert reported is not None
        internal = admin.internal_stats(topic)["cursors"][sub]
        assert reported["mark_delete"] == internal["markDeletePosition"]
        assert reported["individually_deleted"] == internal["individuallyDeletedMessages"]
        assert str(pos[7]) in reported["individually_deleted"]
        consumer.close()

    # Mark-delete to m5 and ack m8 (and m2, already below the mark-delete: nothing to do for it).
    [moved] = admin.plugin_acks(
        [
            {
                "topic": topic,
                "subscription": sub,
                "mark_delete": str(pos[5]),
                "positions": [str(pos[8]), str(pos[2])],
            }
        ]
    )
    assert moved["status"] == "ok", moved
    internal = admin.internal_stats(topic)["cursors"][sub]
    assert moved["mark_delete"] == internal["markDeletePosition"] == str(pos[5])
    assert moved["individually_deleted"] == internal["individuallyDeletedMessages"]
    assert int(moved["acknowledged"]) == 2
    # Never backwards.
    [back] = admin.plugin_acks(
        [{"topic": topic, "subscription": sub, "mark_delete": str(pos[1]), "positions": []}]
    )
    assert (back["status"], back["mark_delete"], int(back["acknowledged"])) == ("ok", str(pos[5]), 0)
    # The feed says writes may carry the mark-delete they were planned from; one planned above the cursor
    # (as over a cursor reset since) applies nothing and answers the cursor as it is; one planned from the
    # cursor as it is is written as always.
    feed_url = f"{region.admin_url}/admin/v2/geosync/cursors"
    assert requests.get(feed_url, params={"since": 2**62}, timeout=10).json()["write_version"] == 2
    ahead = {"topic": topic, "subscription": sub, "mark_delete": str(pos[9]), "positions": []}
    [stale] = admin.plugin_acks([{**ahead, "planned_from": str(pos[7])}])
    assert (stale["status"], stale["mark_delete"], int(stale["acknowledged"]), stale["stale"]) == (
        "ok",
        str(pos[5]),
        0,
        True,
    )
    assert admin.internal_stats(topic)["cursors"][sub]["markDeletePosition"] == str(pos[5])
    [same] = admin.plugin_acks([{"topic": topic, "subscription": sub, "planned_from": str(pos[5])}])
    assert (same["status"], same["mark_delete"], "stale" in same) == ("ok", str(pos[5]), False)
    # What is refused, with reasons.
    missing, nosub, bad = admin.plugin_acks(
        [
            {"topic": f"{topic}-absent", "subscription": sub, "mark_delete": str(pos[9])},
            {"topic": topic, "subscription": f"{sub}-absent", "mark_delete": str(pos[9])},
            {"topic": topic, "subscription": sub, "mark_delete": "x:y"},
        ]
    )
    assert (missing["status"], nosub["status"], bad["status"]) == (
        "not_loaded",
        "no_subscription",
        "bad_request",
    )
    assert "L:E" in bad["error"]
    url = f"{region.admin_url}/admin/v2/geosync/acks"
    assert requests.post(url, data=b"{not json", timeout=10).status_code == 400
    assert requests.post(url, json={"acks": 5}, timeout=10).status_code == 400
    assert requests.get(url, timeout=10).status_code == 405
    assert requests.get(f"{region.admin_url}/admin/v2/geosync/cursors?since=x", timeout=10).status_code == 400
    # One cursor, as the agent reads the pages of a truncated report: refusals and bad parameters.
    one = f"{region.admin_url}/admin/v2/geosync/cursor"
    page = requests.get(one, params={"topic": topic, "subscription": sub, "after": "0:0"}, timeout=10).json()
    assert (page["status"], page["subscription"], page["batches"]) == ("ok", sub, [])
    gone = requests.get(one, params={"topic": topic, "subscription": "nobody"}, timeout=10).json()
    assert gone["status"] == "no_subscription"
    assert requests.get(one, params={"topic": topic}, timeout=10).status_code == 400
    bad_after = requests.get(one, params={"topic": topic, "subscription": sub, "after": "x"}, timeout=10)
    assert bad_after.status_code == 400
    assert "L:E" in bad_after.json()["error"]
    # The application sees exactly what nobody acknowledged: m6 and m9.
    assert sorted(m.data.decode() for m in drain(region.service_url, topic, subscription=sub)) == ["m6", "m9"]
    assert int(status(plugin_lab, "a")["cursor_writes"]) >= 5


# --- the topic list discovery reads ---------------------------------------------------------------------


def test_the_topic_list_shows_what_the_stats_show_of_subscriptions_and_replicators(
    plugin_lab: Lab, unique: str
) -> None:
    """One call lists every loaded topic of a namespace with its subscriptions (durable or not, type, consumer
    names) and replicators, as the topic's stats show them; a bad namespace is refused with the shape."""
    region = plugin_lab.topology.region("a")
    admin = AdminClient(region.admin_url)
    topic = f"persistent://geo/ab/list-{unique}"
    with messaging.client(region.service_url) as c:
        shared = c.subscribe(
            topic, f"unsynced-s-{unique}", consumer_type=pulsar.ConsumerType.Shared, consumer_name="app-1"
        )
        own = c.subscribe(topic, f"unsynced-x-{unique}", consumer_name="geosync-x")
        reader = c.create_reader(topic, pulsar.MessageId.earliest)
        produce(region.service_url, topic, [b"m0", b"m1", b"m2"])

        def both() -> tuple[dict[str, Any], dict[str, Any]] | None:
            # The stats first, once the replicator to b is connected (it stays so): the list, read after,
            # must show it connected too. Read the other way round, a replicator connecting between the two
            # reads made them differ (seen once on a loaded machine).
            stats = admin.topic_stats(topic)
            if not (stats.get("replication") or {}).get("b", {}).get("connected"):
                return None
            listed = admin.plugin_topics("geo/ab").get(topic)
            if listed is None or set(listed["replication"]) != set(stats.get("replication") or {}):
                return None
            return listed, stats

        wait_for(
            lambda: both() is not None,
            timeout_s=30,
            what="the stats to show the replicator connected and the list to show the same replicators",
        )
        found = both()
        assert found is not None
        listed, stats = found
        view = {
            name: (s["isDurable"], s["type"], sorted(c["consumerName"] for c in s["consumers"]))
            for name, s in listed["subscriptions"].items()
        }
        expected = {
            name: (
                s.get("isDurable", True),
                s["type"],
                sorted(c["consumerName"] for c in s.get("consumers", [])),
            )
            for name, s in stats["subscriptions"].items()
        }
        assert view == expected
        assert view[f"unsynced-s-{unique}"] == (True, "Shared", ["app-1"])
        assert view[f"unsynced-x-{unique}"] == (True, "Exclusive", ["geosync-x"])
        assert [d for d, _, _ in view.values()].count(False) == 1  # the reader's
        assert set(listed["replication"]) == {"b"}
        assert listed["replication"]["b"]["connected"] is stats["replication"]["b"]["connected"]
        assert int(listed["replication"]["b"]["msgOutCount"]) >= 0
        for closing in (shared, own, reader):
            closing.close()
    listed = admin.plugin_topics("geo/ab")[topic]
    assert all(s["consumers"] == [] for s in listed["subscriptions"].values())
    url = f"{region.admin_url}/admin/v2/geosync/subscriptions"
    for bad in ({}, {"namespace": "geo"}, {"namespace": "geo/ab/x"}, {"namespace": "/ab"}):
        refused = requests.get(url, params=bad, timeout=10)
        assert refused.status_code == 400, bad
        assert "tenant/namespace" in refused.json()["error"], bad
