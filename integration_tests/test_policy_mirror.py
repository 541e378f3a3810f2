"""The policy mirror and ``geoctl namespaces`` against the real lab (every check through the admin API).

Each test module run uses its own tenants (``mirror-<id>...``), its own event topic in ``geo/abc`` and its
own ZooKeeper root, and runs one ``Mirror`` per region in this process (a killed leader runs in a child
process), so tenant ``geo`` and the lab's agents are left alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from geoctl import errors
from geoctl.cli import main
from geosync_adapters import adminhttp, signing
from geosync_adapters import zookeeper as zk
from geosync_agent.config import AgentConfig
from geosync_agent.core.mirror import Checkpoint, decode_checkpoint, encode_checkpoint
from geosync_agent.mirroring import Mirror
from geosync_agent.mirrorstate import StateNodes, decode_pointer
from geosync_core import envelopes
from geosync_core.clocks import Hlc
from geosync_core.policies import Record
from integration_tests.helpers import Lab, wait_for

pytestmark = pytest.mark.lab
REGIONS = ("a", "b", "c")
SIGNERS = {r: signing.generate(f"{r}-mirror-test") for r in REGIONS}
RING = envelopes.Keyring.of(
    {r: {s.key_id: signing.parse_public(s.public(), where=r)} for r, s in SIGNERS.items()}
)
KEYS = {r: envelopes.Keys(s, RING) for r, s in SIGNERS.items()}
"""Each region's signing key, and the keyring of them all (what a region's mirror signs and accepts with)."""


class Mirrors:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.run = uuid.uuid4().hex[:8]
        self.prefix = f"mirror-{self.run}"
        self.running: dict[str, Mirror] = {}

    def config(self, region: str) -> AgentConfig:
        r = self.lab.topology.region(region)
        return AgentConfig(
            region=region,
            admin_url=r.admin_url,
            service_url=r.service_url,
            zookeeper=r.zookeeper,
            mirror_events_topic=f"persistent://geo/abc/geosync-policy-events-{self.run}",
            mirror_tenants=(f"{self.prefix}*",),
            mirror_root=f"/geosync/test-{self.run}",
            mirror_session_timeout_s=4.0,
            mirror_recheck_interval_s=1.0,
        )

    def start(self, region: str) -> Mirror:
        mirror = Mirror(self.config(region), KEYS[region])
        mirror.start()
        self.running[region] = mirror
        wait_for(lambda: mirror.snapshot()["leader"], timeout_s=30, what=f"mirror {region} to lead")
        return mirror

    def stop(self, region: str) -> None:
        self.running.pop(region).stop()


@pytest.fixture(scope="module")
def mirrors(lab: Lab) -> Iterator[Mirrors]:
    m = Mirrors(lab)
    for region in REGIONS:
        m.start(region)
    yield m
    for region in list(m.running):
        m.stop(region)


def _policies(lab: Lab, region: str, namespace: str) -> dict[str, Any] | None:
    try:
        return lab.admin(region).namespace_policies(namespace)
    except adminhttp.AdminNotFound:
        return None


def _everywhere(lab: Lab, namespace: str, check: Any, *, timeout_s: float = 30.0, what: str = "") -> None:
    def ok() -> bool:
        return all(check(_policies(lab, r, namespace)) for r in REGIONS)

    wait_for(ok, timeout_s=timeout_s, what=what or f"{namespace} in every region")


def _tenant(lab: Lab, mirrors: Mirrors, name: str) -> str:
    tenant = f"{mirrors.prefix}-{name}"
    lab.admin("a").upsert_tenant(tenant, allowed_clusters=list(REGIONS))
    wait_for(
        lambda: all(tenant in lab.admin(r).tenants() for r in REGIONS), timeout_s=30, what=f"tenant {tenant}"
    )
    return tenant


def _namespace(lab: Lab, tenant: str, region: str = "a", replication: tuple[str, ...] = REGIONS) -> str:
    ns = f"{tenant}/ns"
    lab.admin(region).create_namespace_with_policies(
        ns, {"replication_clusters": list(replication), "allowed_clusters": list(replication)}
    )
    _everywhere(lab, ns, lambda p: p is not None and sorted(p["replication_clusters"]) == sorted(replication))
    return ns


def _ttl(value: int) -> Any:
    return lambda p: p is not None and p.get("message_ttl_in_seconds") == value


def test_an_edit_in_one_region_reaches_every_region(lab: Lab, mirrors: Mirrors) -> None:
    tenant = _tenant(lab, mirrors, "edit")
    ns = _namespace(lab, tenant, region="b")
    for value, region in ((111, "c"), (222, "a")):
        lab.admin(region).set_message_ttl(ns, value)
        _everywhere(lab, ns, _ttl(value), what=f"ttl {value} everywhere")
    assert _diff(lab, tenant) == []


def _diff(lab: Lab, tenant: str) -> list[Any]:
    result = CliRunner().invoke(
        main, ["policies", "diff", "--topology", str(lab.dir), "--tenant", tenant, "-o", "json"]
    )
    assert result.exit_code in (0, errors.EXIT_UNHEALTHY), result.output
    return list(json.loads(result.output)["disagreements"])


def test_conflicting_edits_end_identical_everywhere(lab: Lab, mirrors: Mirrors) -> None:
    tenant = _tenant(lab, mirrors, "conflict")
    ns = _namespace(lab, tenant)
    for round_ in range(5):
        values = {"a": 1000 + round_ * 10 + 1, "b": 1000 + round_ * 10 + 2, "c": 1000 + round_ * 10 + 3}
        go = threading.Barrier(len(values))

        def edit(region: str, value: int, go: threading.Barrier = go) -> None:
            go.wait()
            lab.admin(region).set_message_ttl(ns, value)

        threads = [threading.Thread(target=edit, args=item) for item in values.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        def converged(values: dict[str, int] = values) -> bool:
            seen = {r: (_policies(lab, r, ns) or {}).get("message_ttl_in_seconds") for r in REGIONS}
            return len(set(seen.values())) == 1 and next(iter(seen.values())) in values.values()

        wait_for(converged, timeout_s=30, what=f"round {round_}: one ttl in every region")
        wait_for(lambda: _diff(lab, tenant) == [], timeout_s=15, what="identical stores")


def test_deletes_propagate(lab: Lab, mirrors: Mirrors) -> None:
    tenant = _tenant(lab, mirrors, "delete")
    # Pulsar deletes only a namespace that no other cluster replicates or is allowed
    ns = _namespace(lab, tenant, replication=("a",))
    lab.admin("a").delete_namespace(ns)
    _everywhere(lab, ns, lambda p: p is None, what=f"{ns} deleted everywhere")
    lab.admin("a").delete_tenant(tenant)
    wait_for(
        lambda: not any(tenant in lab.admin(r).tenants() for r in REGIONS),
        timeout_s=30,
        what="tenant deleted",
    )
    assert all(mirrors.running[r].snapshot()["tombstones"] >= 2 for r in REGIONS)


def test_session_expiry_loses_nothing(lab: Lab, mirrors: Mirrors) -> None:
    tenant = _tenant(lab, mirrors, "expiry")
    ns = _namespace(lab, tenant)
    mirror = mirrors.running["a"]
    terms = mirror.snapshot()["terms"]
    store = mirror._store
    assert store is not None
    # The classic trick: a second client on the same session closes it; the mirror's session expires.
    twin = KazooClient(hosts=store.hosts, client_id=store.client.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()
    lab.admin("a").set_message_ttl(ns, 333)  # made while region a's mirror has no session
    wait_for(lambda: mirror.snapshot()["terms"] > terms, timeout_s=30, what="a new leadership term")
    _everywhere(lab, ns, _ttl(333), what="the edit made during the expiry everywhere")
    lab.admin("b").set_message_ttl(ns, 334)
    _everywhere(lab, ns, _ttl(334), what="later edits still flow")


def test_a_stopped_mirror_catches_up_from_its_checkpoint(lab: Lab, mirrors: Mirrors) -> None:
    tenant = _tenant(lab, mirrors, "restart")
    ns = _namespace(lab, tenant)
    mirrors.stop("c")
    lab.admin("a").set_message_ttl(ns, 444)  # remote edit while c is down
    wait_for(lambda: _ttl(444)(_policies(lab, "b", ns)), timeout_s=30, what="b sees it")
    lab.admin("c").set_message_ttl(ns, 0)  # and a local one in c, unwatched
    time.sleep(0.5)
    lab.admin("c").set_message_ttl(ns, 445)
    mirrors.start("c")
    _everywhere(lab, ns, _ttl(445), what="c's unwatched edit wins everywhere")


_CHILD = """
import json, sys, time, logging
from geosync_agent.config import AgentConfig
from geosync_agent.mirroring import Mirror
from geosync_adapters import signing
from geosync_core.envelopes import Keys
cfg = AgentConfig(**json.loads(sys.argv[1]))
m = Mirror(cfg, Keys(signing.load_signer(sys.argv[2], sys.argv[3]), signing.load_keyring(sys.argv[4])))
m.start()
while not m.snapshot()["leader"]:
    time.sleep(0.1)
print("leading", flush=True)
time.sleep(3600)
"""


def test_a_killed_leader_is_replaced_by_a_standby(lab: Lab, mirrors: Mirrors, tmp_path: pathlib.Path) -> None:
    tenant = _tenant(lab, mirrors, "kill")
    ns = _namespace(lab, tenant)
    mirrors.stop("b")
    cfg = mirrors.config("b")
    raw = {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.__dict__.items() if k != "extra"}
    private, _ = signing.write_key_pair(tmp_path, SIGNERS["b"])
    keyring = tmp_path / "keyring.yaml"
    keyring.write_text(signing.dump_keyring({r: {s.key_id: s.public()} for r, s in SIGNERS.items()}))
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, json.dumps(raw), str(private), SIGNERS["b"].key_id, str(keyring)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "leading"
        standby = Mirror(cfg, KEYS["b"])
        standby.start()
        mirrors.running["b"] = standby
        lab.admin("a").set_message_ttl(ns, 555)
        _everywhere(lab, ns, _ttl(555), what="the child leader applies")
        assert not standby.snapshot()["leader"]
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        lab.admin("c").set_message_ttl(ns, 556)
        took = wait_for(lambda: standby.snapshot()["leader"], timeout_s=20, what="the standby takes over")
        assert took < 15
        _everywhere(lab, ns, _ttl(556), what="edits reach b after the take-over")
    finally:
        if child.poll() is None:
            child.kill()


def _geoctl(lab: Lab, *args: str) -> Any:
    return CliRunner().invoke(main, [*args, "--topology", str(lab.dir)])


@pytest.mark.parametrize("no_check", [False, True], ids=["geoctl-check", "broker"])
def test_geoctl_namespaces_pip321_errors(lab: Lab, mirrors: Mirrors, no_check: bool) -> None:
    tenant = f"{mirrors.prefix}-cli{int(no_check)}"
    lab.admin("a").upsert_tenant(tenant, allowed_clusters=["a", "b"])
    wait_for(lambda: all(tenant in lab.admin(r).tenants() for r in REGIONS), timeout_s=30, what="tenant")
    ns = f"{tenant}/ns"
    flag = ["--no-check"] if no_check else []
    made = _geoctl(
        lab, "namespaces", "create", ns, "--region", "a", "--clusters", "a,b", "--allowed-clusters", "a,b"
    )
    assert made.exit_code == 0, made.output
    _everywhere(lab, ns, lambda p: p is not None and sorted(p["allowed_clusters"]) == ["a", "b"])
    cases = [
        (["namespaces", "set-allowed-clusters", ns, "--clusters", "a"], errors.EXIT_BAD_REQUEST),
        (["namespaces", "set-allowed-clusters", ns, "--clusters", "a,b,x"], errors.EXIT_FORBIDDEN),
        (["namespaces", "set-allowed-clusters", ns, "--clusters", "a,b,c"], errors.EXIT_FORBIDDEN),
        # geoctl's own check and the broker (4.0.8) agree: 400, c is not in the namespace's allowed clusters
        (["namespaces", "set-clusters", ns, "--clusters", "a,c"], errors.EXIT_BAD_REQUEST),
        (["namespaces", "set-clusters", ns, "--clusters", ""], errors.EXIT_PRECONDITION),
        (["namespaces", "create", f"{mirrors.prefix}-nosuch/ns", "--clusters", "a"], errors.EXIT_NOT_FOUND),
        (["namespaces", "create", ns, "--clusters", "a,b"], errors.EXIT_CONFLICT),
    ]
    for args, code in cases:
        result = _geoctl(lab, *args, "--region", "a", *flag)
        assert result.exit_code == code, (args, result.output)
    ok = _geoctl(lab, "namespaces", "set-clusters", ns, "--region", "b", "--clusters", "b", *flag)
    assert ok.exit_code == 0, ok.output
    _everywhere(lab, ns, lambda p: p is not None and p["replication_clusters"] == ["b"])
    shown = _geoctl(lab, "namespaces", "get-allowed-clusters", ns, "-o", "json")
    assert json.loads(shown.output)["regions"] == {r: ["a", "b"] for r in REGIONS}


def test_reading_a_watched_path_again_does_not_multiply_its_notifications(lab: Lab) -> None:
    """Each read with a watch re-arms the same watch: one change, one notification, however many reads."""
    fired: list[zk.Fired] = []
    store = zk.Store(lab.topology.region("a").zookeeper, notify=fired.append)
    store.start()
    path = f"/geosync/watch-{uuid.uuid4().hex[:8]}"
    try:
        store.ensure_path(path)
        for _ in range(5):
            node = store.read(path, watch=True)
        assert node is not None
        store.write(path, b"changed", expected=node)
        wait_for(lambda: bool(fired), timeout_s=10, what="the watch to fire")
        time.sleep(1.0)  # any further notifications would have arrived by now
        assert [f.path for f in fired] == [path]
    finally:
        store.client.delete(path, recursive=True)
        store.stop()


def test_a_checkpoint_over_one_nodes_budget_is_written_in_parts_and_read_back(lab: Lab) -> None:
    """40,000 policy records compress to over 1 MB, over what a default ZooKeeper takes in one node: written
    as parts behind a pointer, read back whole, and the parts of a replaced generation are gone."""
    store = zk.Store(lab.topology.region("a").zookeeper)
    store.start()
    root = f"/geosync/checkpoint-{uuid.uuid4().hex[:8]}"
    try:
        store.ensure_path(root)
        cp = Checkpoint(
            replica={
                f"/admin/policies/t{i % 100}/ns{i}": Record(
                    f"/admin/policies/t{i % 100}/ns{i}",
                    None if i % 4 == 0 else json.dumps({"i": i, "pad": os.urandom(24).hex()}).encode(),
                    Hlc(1_700_000_000_000 + i, 0, "a"),
                )
                for i in range(40_000)
            }
        )
        data = encode_checkpoint(cp)
        # Over ZooKeeper's default jute.maxbuffer (1 MB; the lab's Pulsar raises it to 10 MB, as Pulsar's
        # scripts do, so the lab itself would take it in one node).
        assert len(data) > 1024 * 1024
        nodes = StateNodes(store, root)
        first = nodes.write(data, expected=None)
        pointer = decode_pointer(first.value)
        assert pointer is not None
        assert pointer.parts == -(-len(data) // nodes.budget)
        node, back = StateNodes(store, root).read()
        assert node == first
        assert back is not None
        assert decode_checkpoint(back) == cp
        nodes.write(b"small", expected=first)  # back to one node: the parts go
        assert store.children(f"{root}/parts") == []
        assert StateNodes(store, root).read()[1] == b"small"
    finally:
        store.client.delete(root, recursive=True)
        store.stop()


def test_a_mirror_whose_checkpoint_is_in_parts_resumes_from_it(lab: Lab) -> None:
    """A mirror with a tiny part budget saves its checkpoint in parts; the next leader loads it (so it does
    not drain the event topic from the beginning again)."""
    config = dataclasses.replace(Mirrors(lab).config("a"), mirror_checkpoint_part_bytes=64)
    r = lab.topology.region("a")
    first = Mirror(config, KEYS["a"])
    first.start()
    try:
        wait_for(lambda: first.snapshot()["leader"], timeout_s=60, what="the first mirror to lead")
        wait_for(
            lambda: first.snapshot()["counters"].get("checkpoints", 0) > 0, timeout_s=60, what="a checkpoint"
        )
    finally:
        first.stop()
    kazoo = KazooClient(hosts=r.zookeeper)
    kazoo.start(timeout=15)
    try:
        state, _ = kazoo.get(f"{config.mirror_root}/state")
        pointer = decode_pointer(state)
        assert pointer is not None
        assert pointer.parts > 1
        assert kazoo.get_children(f"{config.mirror_root}/parts") == [pointer.generation]
        second = Mirror(config, KEYS["a"])
        second.start()
        try:
            wait_for(lambda: second.snapshot()["leader"], timeout_s=60, what="the second mirror to lead")
            assert "drained" not in second.snapshot()["counters"]  # it found the checkpoint
        finally:
            second.stop()
    finally:
        kazoo.delete(config.mirror_root, recursive=True)
        kazoo.stop()
