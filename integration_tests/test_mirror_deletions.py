"""A namespace deleted in one region never destroys another region's topics (design invariant 8).

Pulsar's broker refuses to delete a namespace that holds topics; the policy mirror writes a peer's deletion
straight into the other region's ZooKeeper, where that check does not run. Here region a deletes a namespace
the way Pulsar asks (replication narrowed to a, a's topics deleted, the namespace deleted) while b still holds
a topic with a backlog: b's mirror holds the deletion, ``geoctl status`` shows it, b's consumers still read
every message, and only the operator's ``geoctl policies release`` (or b draining) lets the deletion through.
The lab's own agents mirror these tenants (``held-*``), as they would in production.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
import uuid

import pulsar
import pytest
from click.testing import CliRunner

from geoctl.cli import main
from geosync_adapters import adminhttp
from geosync_adapters import zookeeper as zk
from integration_tests.helpers import Lab, produce_batched, wait_for

pytestmark = pytest.mark.lab
REGIONS = ("a", "b", "c")


def _in_zookeeper(lab: Lab, region: str, namespace: str) -> bool:
    """The namespace document in the region's ZooKeeper (its admin API answers 404 for one marked deleted)."""
    store = zk.Store(lab.topology.region(region).zookeeper, session_timeout_s=10.0)
    store.start(timeout_s=10.0)
    try:
        return store.read(f"/admin/policies/{namespace}") is not None
    finally:
        store.stop()


def _managed_ledgers(lab: Lab, region: str, namespace: str) -> set[str]:
    store = zk.Store(lab.topology.region(region).zookeeper, session_timeout_s=10.0)
    store.start(timeout_s=10.0)
    try:
        names = store.children(f"/managed-ledgers/{namespace}/persistent")
    finally:
        store.stop()
    return {f"persistent://{namespace}/{urllib.parse.unquote(n)}" for n in names}


def _geoctl(lab: Lab, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*args, "--topology", str(lab.dir)])
    return result.exit_code, result.output


def _held_in(lab: Lab, region: str, namespace: str) -> str:
    """What ``geoctl status`` says holds the deletion of ``namespace`` in ``region`` ('' when none)."""
    code, out = _geoctl(lab, "status", "--namespace", namespace, "-o", "json")
    assert code in (0, 6), out
    held = json.loads(out)["agents"][region]["held_deletions"]
    return str(held.get(f"/admin/policies/{namespace}", ""))


def _exists(lab: Lab, region: str, namespace: str) -> bool:
    try:
        lab.admin(region).namespace_policies(namespace)
    except adminhttp.AdminNotFound:
        return False
    return True


def _delete_as_pulsar_asks(lab: Lab, region: str, namespace: str) -> None:
    """Replication and allowed clusters narrowed to the region, its topics deleted, then the namespace. A 409
    is retried: b's replicators make topics in a again until a's deletion marks the namespace, and a refused
    deletion leaves that mark, after which the brokers no longer list the namespace's topics (404), so the
    names seen before are deleted again."""
    admin = lab.admin(region)
    admin.set_replication_clusters(namespace, [region])
    admin.set_allowed_clusters(namespace, [region])  # 4.0 refuses with more than one allowed, too
    wait_for(lambda: admin.allowed_clusters(namespace) == [region], timeout_s=30, what="narrowed")
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(adminhttp.AdminNotFound):
            seen.update(admin.every_topic(namespace))
        seen.update(_managed_ledgers(lab, region, namespace))  # what a marked namespace no longer lists
        for topic in sorted(seen):
            with contextlib.suppress(adminhttp.AdminNotFound):
                admin.delete_topic(topic, partitioned=admin.partitioned_metadata(topic) > 0, force=True)
        try:
            admin.delete_namespace(namespace)
            return
        except (
            adminhttp.AdminConflict,
            adminhttp.AdminPreconditionFailed,
        ):  # 412: a broker's cache not yet narrowed
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _receive_all(service_url: str, topic: str, subscription: str, want: int) -> set[str]:
    client = pulsar.Client(service_url, operation_timeout_seconds=15)
    try:
        consumer = client.subscribe(topic, subscription)
        got: set[str] = set()
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            with contextlib.suppress(pulsar.Timeout):
                got.add(consumer.receive(timeout_millis=1000).data().decode())
        consumer.close()
        return got
    finally:
        client.close()


def test_a_namespace_deleted_in_a_keeps_bs_topic_and_backlog_until_the_operator_releases_it(lab: Lab) -> None:
    tenant = f"held-{uuid.uuid4().hex[:8]}"
    lab.admin("a").upsert_tenant(tenant, allowed_clusters=list(REGIONS))
    wait_for(lambda: all(tenant in lab.admin(r).tenants() for r in REGIONS), timeout_s=30, what="tenant")
    namespace = f"{tenant}/ns"
    lab.admin("a").create_namespace_with_policies(
        namespace, {"replication_clusters": ["a", "b"], "allowed_clusters": ["a", "b"]}
    )
    wait_for(lambda: all(_exists(lab, r, namespace) for r in REGIONS), timeout_s=30, what="namespace")

    # b's application: its subscription made when traffic starts, 50 batched messages nobody consumed yet.
    topic = f"persistent://{namespace}/orders"
    client = pulsar.Client(lab.service_url("b"), operation_timeout_seconds=15)
    client.subscribe(topic, "keep").close()
    client.close()
    sent = [f"order-{i}" for i in range(50)]
    produce_batched(lab.service_url("b"), topic, sent)

    _delete_as_pulsar_asks(lab, "a", namespace)
    wait_for(lambda: "orders" in _held_in(lab, "b", namespace), timeout_s=90, what="b to hold the deletion")
    wait_for(
        lambda: not _exists(lab, "c", namespace), timeout_s=60, what="c (which holds nothing) to delete it"
    )
    time.sleep(10)  # several of the mirror's rechecks (every 2 s): still held
    assert _exists(lab, "b", namespace)
    assert _in_zookeeper(lab, "b", namespace)
    assert "orders" in _held_in(lab, "b", namespace)
    assert _receive_all(lab.service_url("b"), topic, "keep", len(sent)) == set(sent)

    code, out = _geoctl(lab, "policies", "release", "--region", "b", namespace, "--yes", "-o", "json")
    assert code == 0, out
    released = json.loads(out)
    assert released["applied"] is True
    assert topic in [d["topic"] for d in released["deleted"]]
    assert not _in_zookeeper(lab, "b", namespace)
    wait_for(lambda: not _held_in(lab, "b", namespace), timeout_s=30, what="the hold to end")


def test_release_refuses_a_namespace_that_other_regions_still_have(lab: Lab) -> None:
    tenant = f"held-{uuid.uuid4().hex[:8]}"
    lab.admin("a").upsert_tenant(tenant, allowed_clusters=list(REGIONS))
    namespace = f"{tenant}/ns"
    wait_for(lambda: all(tenant in lab.admin(r).tenants() for r in REGIONS), timeout_s=30, what="tenant")
    lab.admin("a").create_namespace_with_policies(namespace, {"replication_clusters": ["a"]})
    wait_for(lambda: _exists(lab, "b", namespace), timeout_s=30, what="namespace in b")
    code, out = _geoctl(lab, "policies", "release", "--region", "b", namespace, "--yes")
    assert code == 14, out
    assert "still exists in a, c" in out
    assert _exists(lab, "b", namespace)
