"""``geoctl status``, ``failover check`` and ``tenants migrate`` against the real lab and its agents."""

from __future__ import annotations

import contextlib
import json
import pathlib
import socket
import uuid

import pulsar
from click.testing import CliRunner

from geoctl.cli import main
from geoctl.errors import EXIT_UNHEALTHY, EXIT_UNKNOWN
from geosync_adapters import admin as adm
from geosync_adapters import adminhttp, messaging
from integration_tests.helpers import Lab, produce, read_all, wait_for


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout


def _consume_some(
    service_url: str, topic: str, sub: str, *, take: int, skip: int
) -> tuple[list[str], list[str]]:
    """Receive ``take`` messages, acknowledge all but every ``skip``-th (holes); return (acked, unacked)."""
    acked, held = [], []
    with messaging.client(service_url) as c:
        consumer = c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared)
        try:
            for i in range(take):
                msg = consumer.receive(timeout_millis=20_000)
                if i % skip == skip - 1:
                    held.append(msg.data().decode())
                else:
                    consumer.acknowledge(msg)
                    acked.append(msg.data().decode())
        finally:
            consumer.close()
    return acked, held


def _drain(
    service_url: str, topic: str, sub: str, *, consumer_type: pulsar.ConsumerType = pulsar.ConsumerType.Shared
) -> list[str]:
    got = []
    with messaging.client(service_url) as c:
        consumer = c.subscribe(topic, sub, consumer_type=consumer_type)
        try:
            while True:
                try:
                    msg = consumer.receive(timeout_millis=4000)
                except pulsar.Timeout:
                    break
                got.append(msg.data().decode())
                consumer.acknowledge(msg)
        finally:
            consumer.close()
    return got


def test_status_and_failover_check_follow_a_subscription_with_holes(lab: Lab, unique: str) -> None:
    topic = f"persistent://geo/ab/ops-{unique}"
    sub = f"ops-{unique}"
    a = lab.admin("a")
    a.create_subscription(topic, sub)
    produce(lab.service_url("a"), topic, [f"m{i}".encode() for i in range(30)])
    assert len(read_all(lab.service_url("b"), topic, expect=30)) == 30
    acked, _held = _consume_some(lab.service_url("a"), topic, sub, take=20, skip=5)

    env_topology = ["--topology", str(lab.dir)]
    code, out = run("status", *env_topology, "--namespace", "geo/ab", "--all", "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert set(data["agents"]) == {"a", "b", "c"}
    assert all(v["alive"] and v["ready"] for v in data["agents"].values())
    row = next(r for r in data["subscriptions"] if r["subscription"] == sub)
    assert row["regions"]["a"]["holes"] == 3  # m4, m9, m14 (m19 is above the highest acknowledged)
    assert row["regions"]["a"]["unapplied"] == 0

    # The agents bring b in step; failover check --wait returns once they have.
    code, out = run(
        "failover", "check", *env_topology, "--from", "a", "--to", "b", "--namespace", "geo/ab",
        "--wait", "--timeout", "60", "--interval", "1", "-o", "json",
    )  # fmt: skip
    verdict = json.loads(out)
    assert [s for s in verdict["subscriptions"] if s["subscription"] == sub and s["duplicates"]] == []
    code, out = run("status", *env_topology, "--namespace", "geo/ab", "--all", "-o", "json")
    row = next(r for r in json.loads(out)["subscriptions"] if r["subscription"] == sub)
    assert row["regions"]["b"]["unapplied"] == 0
    assert row["regions"]["b"]["duplicates_from"] == {"a": 0}
    assert row["regions"]["b"]["holes"] == 3  # the holes travelled too
    assert len(acked) == 16


def test_failover_check_judges_key_shared_with_holes_safe_at_the_per_key_minimum(
    lab: Lab, unique: str
) -> None:
    """Issue 45: ``failover check`` never judged a Key_Shared subscription with holes safe. Keys k0..k3, one
    message each in turn; a acknowledges all but m4 (key k0) of the first 20: k0's m8, m12 and m16 are
    acknowledged after k0's hole, never carried (invariant 6), so the move is safe with exactly those 3
    duplicates, and b delivers k0's messages from m4 on plus the 10 never acknowledged."""
    topic, sub = f"persistent://geo/ab/ks-{unique}", f"ks-{unique}"
    with messaging.client(lab.service_url("a")) as c:
        c.subscribe(
            topic,
            sub,
            consumer_type=pulsar.ConsumerType.KeyShared,
            initial_position=pulsar.InitialPosition.Earliest,
        ).close()
    produce(lab.service_url("a"), topic, [f"m{i}".encode() for i in range(30)], key=lambda i: f"k{i % 4}")
    assert len(read_all(lab.service_url("b"), topic, expect=30)) == 30
    acked: list[str] = []
    with messaging.client(lab.service_url("a")) as c:
        consumer = c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.KeyShared)
        try:
            got = [consumer.receive(timeout_millis=20_000) for _ in range(30)]
            for msg in got:
                i = int(msg.data().decode()[1:])
                if i < 20 and i != 4:
                    consumer.acknowledge(msg)
                    acked.append(msg.data().decode())
        finally:
            consumer.close()
    assert len(acked) == 19
    code, out = run(
        "failover", "check", "--topology", str(lab.dir), "--from", "a", "--to", "b", "--namespace", "geo/ab",
        "--subscription", sub, "--wait", "--timeout", "60", "--interval", "1", "-o", "json",
    )  # fmt: skip
    verdict = json.loads(out)
    assert (code, verdict["verdict"]) == (0, "safe"), out
    assert (verdict["duplicates"], verdict["key_order_duplicates"]) == (3, 3), out
    delivered = sorted(
        _drain(lab.service_url("b"), topic, sub, consumer_type=pulsar.ConsumerType.KeyShared),
        key=lambda m: int(m[1:]),
    )
    assert delivered == ["m4", "m8", "m12", "m16", *(f"m{i}" for i in range(20, 30))]


def test_failover_check_reports_the_cost_of_an_unsynced_subscription(lab: Lab, unique: str) -> None:
    # unsynced-* subscriptions are left alone by the lab's agents: b never applies a's acknowledgements.
    topic = f"persistent://geo/ab/ops-unsynced-{unique}"
    sub = f"unsynced-{unique}"
    for region in ("a", "b"):
        lab.admin(region).create_subscription(topic, sub)
    produce(lab.service_url("a"), topic, [f"u{i}".encode() for i in range(12)])
    assert len(read_all(lab.service_url("b"), topic, expect=12)) == 12
    _consume_some(lab.service_url("a"), topic, sub, take=12, skip=100)
    code, out = run(
        "failover", "check", "--topology", str(lab.dir), "--from", "a", "--to", "b",
        "--namespace", "geo/ab", "-o", "json",
    )  # fmt: skip
    assert code == EXIT_UNHEALTHY
    data = json.loads(out)
    assert data["safe"] is False
    mine = next(s for s in data["subscriptions"] if s["subscription"] == sub)
    assert mine["duplicates"] == 12
    assert any("has not applied 12" in w for w in mine["wait_for"])


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_failover_check_cannot_tell_with_the_source_unreachable(
    lab: Lab, unique: str, tmp_path: pathlib.Path
) -> None:
    """With b in step, a check that cannot read a used to say SAFE from what b alone shows. It must say it
    cannot tell (exit 8), with what b knows for a forced failover. The lab's region a keeps running: the
    check gets a copy of the topology whose admin URL for a nobody listens on."""
    topic = f"persistent://geo/ab/ops-down-{unique}"
    sub = f"ops-down-{unique}"
    lab.admin("a").create_subscription(topic, sub)
    produce(lab.service_url("a"), topic, [f"d{i}".encode() for i in range(10)])
    assert len(read_all(lab.service_url("b"), topic, expect=10)) == 10
    _consume_some(lab.service_url("a"), topic, sub, take=10, skip=1000)
    scope = ["--from", "a", "--to", "b", "--namespace", "geo/ab", "--subscription", sub, "-o", "json"]
    waiting = ["--wait", "--timeout", "60", "--interval", "1"]
    code, out = run("failover", "check", "--topology", str(lab.dir), *scope, *waiting)
    assert (code, json.loads(out)["verdict"]) == (0, "safe"), out  # both regions read: b is in step

    topology = json.loads((lab.dir / "topology.json").read_text())
    topology["regions"]["a"]["admin_url"] = f"http://127.0.0.1:{_unused_port()}"
    dead = tmp_path / "topology.json"
    dead.write_text(json.dumps(topology))
    code, out = run("failover", "check", "--topology", str(dead), *scope)
    data = json.loads(out)
    assert code == EXIT_UNKNOWN, out
    assert (data["verdict"], data["safe"]) == ("unknown", False)
    assert data["unread"]["a"].startswith("unreachable ("), data["unread"]
    [standby] = [s for s in data["standby"] if s["subscription"] == sub]
    assert standby["exists"] is True
    assert standby["received_from_source_at"] is not None  # b's agent heard a's acknowledgements
    assert data["agents"]["b"]["ready"] is True

    code, out = run("failover", "check", "--topology", str(dead), *scope[:-2])
    assert code == EXIT_UNKNOWN
    assert "CANNOT TELL whether consumers can move from a to b: region a unreachable (" in out
    assert "forced failover" in out


def test_tenant_migration_keeps_consumers_positions(lab: Lab, tmp_path: pathlib.Path) -> None:
    tenant = f"migrate-{uuid.uuid4().hex[:8]}"
    ns = f"{tenant}/ns"
    topic = f"persistent://{ns}/orders"
    sub = "billing"
    a, b = lab.admin("a"), lab.admin("b")
    a.upsert_tenant(tenant, allowed_clusters=["a"])
    a.create_namespace_with_policies(ns, {"replication_clusters": ["a"], "allowed_clusters": ["a"]})
    a.set_message_ttl(ns, 3600)
    a.create_subscription(topic, sub)
    state = tmp_path / "migration.json"
    common = ["--topology", str(lab.dir), "--from", "a", "--to", "b", "--state-file", str(state)]

    code, out = run("tenants", "migrate", tenant, *common, "--dry-run")
    assert code == 0, out
    assert not state.exists()  # a dry run writes nothing
    assert tenant not in b.tenants() or b.namespace_policies(ns).get("replication_clusters") != ["a", "b"]

    code, out = run("tenants", "migrate", tenant, *common, "--until", "replicate", "-o", "json")
    assert code == 0, out
    assert json.loads(out)["done"] == ["copy-metadata", "replicate"]
    assert sorted(b.replication_clusters(ns)) == ["a", "b"]
    assert b.namespace_policies(ns).get("message_ttl_in_seconds") == 3600

    # Without --resume the half-done migration is refused (no accidental restart).
    refused = CliRunner().invoke(main, ["tenants", "migrate", tenant, *common])
    assert refused.exit_code != 0
    assert "--resume" in refused.output

    # Traffic in a while the migration is under way: consumers acknowledge out of order.
    produce(lab.service_url("a"), topic, [f"o{i}".encode() for i in range(40)])
    assert len(read_all(lab.service_url("b"), topic, expect=40)) == 40
    acked, held = _consume_some(lab.service_url("a"), topic, sub, take=30, skip=4)

    code, out = run("tenants", "migrate", tenant, *common, "--resume", "--timeout", "90", "--interval", "1",
                    "-o", "json")  # fmt: skip
    assert code == 0, out
    data = json.loads(out)
    assert data["done"] == ["copy-metadata", "replicate", "sync", "switch", "cleanup"]
    assert lab.service_url("b") in data["clients"]["consumers"]

    # Consumers moved to b get exactly what a had not acknowledged: holes and the rest, nothing twice.
    got = _drain(lab.service_url("b"), topic, sub)
    expected = set(held) | {f"o{i}" for i in range(30, 40)}
    assert sorted(got) == sorted(expected)
    assert not set(got) & set(acked)
    wait_for(lambda: b.replication_clusters(ns) == ["b"], timeout_s=10, what="cleanup in b")
    try:
        b.delete_namespace(ns, force=True)
        b.delete_tenant(tenant)
    except adminhttp.AdminError:
        pass


def _backlog(admin: adm.AdminClient, topic: str, sub: str) -> int | None:
    try:
        subs = admin.topic_stats(topic).get("subscriptions") or {}
    except adminhttp.AdminError:
        return None
    found = subs.get(sub, {}).get("msgBacklog")
    return None if found is None else int(found)


def test_migration_replaces_the_source_and_keeps_every_other_region(lab: Lab, tmp_path: pathlib.Path) -> None:
    """A tenant of a namespace replicated to a and c moves from a to b: b replaces a, and c, with its
    consumers, stays: replicated to and from throughout, its subscription where its consumers left it."""
    tenant = f"migrate3-{uuid.uuid4().hex[:8]}"
    ns = f"{tenant}/ns"
    topic = f"persistent://{ns}/orders"
    sub = "c-app"  # consumed in c only
    a, b, c = lab.admin("a"), lab.admin("b"), lab.admin("c")
    for region in (a, c):  # each region's store holds its own copy (the policy mirror may copy it too)
        region.upsert_tenant(tenant, allowed_clusters=["a", "c"])
        with contextlib.suppress(adminhttp.AdminConflict):
            region.create_namespace_with_policies(
                ns, {"replication_clusters": ["a", "c"], "allowed_clusters": ["a", "c"]}
            )
    wait_for(lambda: sorted(c.replication_clusters(ns)) == ["a", "c"], timeout_s=20, what="namespace in c")
    c.create_subscription(topic, sub)
    produce(lab.service_url("a"), topic, [f"o{i}".encode() for i in range(20)])
    wait_for(lambda: _backlog(c, topic, sub) == 20, timeout_s=45, what="20 messages replicated to c")
    acked, _ = _consume_some(lab.service_url("c"), topic, sub, take=10, skip=1000)
    assert len(acked) == 10
    wait_for(lambda: _backlog(c, topic, sub) == 10, timeout_s=20, what="c's acknowledgements")

    state = tmp_path / "migration.json"
    common = ["--topology", str(lab.dir), "--from", "a", "--to", "b", "--state-file", str(state)]
    code, out = run("tenants", "migrate", tenant, *common, "--dry-run", "-o", "json")
    assert code == 0, out
    steps = json.loads(out)["steps"]
    assert f"namespace {ns}: replication clusters [a, c] -> [a, b, c], written in a, b, c" in steps
    assert f"namespace {ns}: replication clusters [a, b, c] -> [b, c], written in b, c, a" in steps
    assert sorted(c.replication_clusters(ns)) == ["a", "c"]  # a dry run writes nothing

    code, out = run("tenants", "migrate", tenant, *common, "--timeout", "90", "--interval", "1", "-o", "json")
    assert code == 0, out
    assert json.loads(out)["done"] == ["copy-metadata", "replicate", "sync", "switch", "cleanup"]
    for region in (b, c):
        assert sorted(region.replication_clusters(ns)) == ["b", "c"]
    # c's consumers were not touched: their subscription is where they left it
    assert _backlog(c, topic, sub) == 10
    # and c keeps replicating with the new region, both ways
    produce(lab.service_url("b"), topic, [f"n{i}".encode() for i in range(5)])
    wait_for(lambda: _backlog(c, topic, sub) == 15, timeout_s=45, what="b's messages in c")
    produce(lab.service_url("c"), topic, [b"from-c"])
    from_c = read_all(lab.service_url("b"), topic, expect=1, match=lambda m: m.data == b"from-c")
    assert len(from_c) == 1
    got = _drain(lab.service_url("c"), topic, sub)
    assert sorted(got) == sorted([f"o{i}" for i in range(10, 20)] + [f"n{i}" for i in range(5)] + ["from-c"])
    for region in (b, c):
        try:
            region.delete_namespace(ns, force=True)
            region.delete_tenant(tenant)
        except adminhttp.AdminError:
            pass
