"""ZooKeeper digest authentication and ACLs for the policy mirror, against the lab's real ZooKeepers.

Mirrors in regions a and b run with credentials from a file (``zookeeper_auth_file``) under their own root and
tenants (``mirror-<id>``, which the lab's agents leave alone). Their own nodes (lock, checkpoint) must refuse
every write and delete of a client without the credentials, nodes left world-open by an earlier,
unauthenticated mirror are locked down at the next term, policy nodes they create stay world-open (the
brokers manage them), mirroring keeps working, and the password reaches no log even at DEBUG.
"""

from __future__ import annotations

import logging
import pathlib
import secrets
import uuid
from collections.abc import Callable, Iterator
from functools import partial

import pytest
from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from geosync_adapters import adminhttp, signing
from geosync_agent.config import AgentConfig
from geosync_agent.mirroring import Mirror
from integration_tests.helpers import Lab, wait_for

pytestmark = pytest.mark.lab
KEYS = signing.in_memory(("a", "b", "c"))
REGIONS = ("a", "b")


class Setup:
    def __init__(self, lab: Lab, tmp: pathlib.Path) -> None:
        self.lab = lab
        self.run = uuid.uuid4().hex[:8]
        self.prefix = f"mirror-{self.run}"
        self.root = f"/geosync/zk-auth-{self.run}"
        self.user, self.password = "geosync-agent", secrets.token_urlsafe(24)
        self.auth_file = tmp / "zookeeper.auth"
        self.auth_file.write_text(f"{self.user}:{self.password}\n")

    def config(self, region: str) -> AgentConfig:
        r = self.lab.topology.region(region)
        return AgentConfig(
            region=region,
            admin_url=r.admin_url,
            service_url=r.service_url,
            zookeeper=r.zookeeper,
            zookeeper_auth_file=str(self.auth_file),
            mirror_events_topic=f"persistent://geo/abc/geosync-policy-events-{self.run}",
            mirror_tenants=(f"{self.prefix}*",),
            mirror_root=self.root,
            mirror_session_timeout_s=4.0,
            mirror_recheck_interval_s=1.0,
        )

    def client(self, region: str, *, authenticated: bool) -> KazooClient:
        auth = [("digest", f"{self.user}:{self.password}")] if authenticated else None
        client = KazooClient(hosts=self.lab.topology.region(region).zookeeper, auth_data=auth)
        client.start(timeout=15)
        return client


@pytest.fixture(scope="module")
def setup(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Setup:
    s = Setup(lab, tmp_path_factory.mktemp("zk-auth"))
    # What an unauthenticated mirror of an earlier release left: world-open nodes under the root.
    plain = s.client("a", authenticated=False)
    try:
        plain.create(f"{s.root}/left-open", b"x", makepath=True)
    finally:
        plain.stop()
        plain.close()
    return s


@pytest.fixture(scope="module")
def mirrors(setup: Setup) -> Iterator[dict[str, Mirror]]:
    logging.getLogger("geosync.zookeeper").setLevel(logging.DEBUG)  # kazoo's requests, the auth one too
    running: dict[str, Mirror] = {}
    try:
        for region in REGIONS:
            mirror = running[region] = Mirror(setup.config(region), KEYS[region])
            mirror.start()
        for region, mirror in running.items():
            wait_for(partial(_leads, mirror), timeout_s=30, what=f"mirror {region} to lead")
        yield running
    finally:
        for mirror in running.values():
            mirror.stop()
        logging.getLogger("geosync.zookeeper").setLevel(logging.NOTSET)


def test_the_mirror_works_with_credentials_and_creates_world_open_policy_nodes(
    lab: Lab, setup: Setup, mirrors: dict[str, Mirror]
) -> None:
    tenant = f"{setup.prefix}-t"
    lab.admin("a").upsert_tenant(tenant, allowed_clusters=list(REGIONS))
    wait_for(lambda: tenant in lab.admin("b").tenants(), timeout_s=30, what=f"tenant {tenant} in b")
    ns = f"{tenant}/ns"
    lab.admin("a").create_namespace_with_policies(
        ns, {"replication_clusters": list(REGIONS), "allowed_clusters": list(REGIONS)}
    )

    def in_b() -> bool:
        try:
            return sorted(lab.admin("b").namespace_policies(ns)["replication_clusters"]) == list(REGIONS)
        except adminhttp.AdminNotFound:
            return False

    wait_for(in_b, timeout_s=30, what=f"{ns} in b")
    plain = setup.client("b", authenticated=False)
    try:
        # Written by b's mirror (authenticated), yet world-open: b's brokers keep managing it.
        acl, _ = plain.get_acls(f"/admin/policies/{ns}")
        assert list(acl) == list(OPEN_ACL_UNSAFE)
    finally:
        plain.stop()
        plain.close()
    lab.admin("b").set_message_ttl(ns, 321)
    wait_for(
        lambda: lab.admin("a").namespace_policies(ns).get("message_ttl_in_seconds") == 321,
        timeout_s=30,
        what="b's edit in a",
    )


@pytest.mark.parametrize("region", REGIONS)
def test_the_mirrors_nodes_refuse_a_client_without_credentials(
    setup: Setup, mirrors: dict[str, Mirror], region: str
) -> None:
    wait_for(lambda: _exists(setup, region, f"{setup.root}/state"), timeout_s=30, what="a checkpoint")
    plain = setup.client(region, authenticated=False)
    try:
        lock = f"{setup.root}/leader"
        holder = sorted(_children(setup, region, lock))[0]
        attempts: list[Callable[[], object]] = [
            lambda: plain.set(f"{setup.root}/state", b"forged"),
            lambda: plain.delete(f"{setup.root}/state"),
            lambda: plain.delete(f"{lock}/{holder}"),  # would fence the leader off
            lambda: plain.create(f"{lock}/forged-lock-", b"", sequence=True),
            lambda: plain.create(f"{setup.root}/new", b"x"),
            lambda: plain.get(f"{setup.root}/state"),  # zookeeper_world_read is off
            lambda: plain.get_acls(setup.root),
        ]
        for attempt in attempts:
            with pytest.raises(kx.NoAuthError):
                attempt()
    finally:
        plain.stop()
        plain.close()
    agent = setup.client(region, authenticated=True)
    try:
        for path in (setup.root, f"{setup.root}/state", f"{setup.root}/leader/{holder}"):
            acl, _ = agent.get_acls(path)
            assert list(acl) == [make_digest_acl(setup.user, setup.password, all=True)], path
    finally:
        agent.stop()
        agent.close()
    assert mirrors[region].snapshot()["leader"]


def test_nodes_an_unauthenticated_mirror_left_open_are_locked_down(
    setup: Setup, mirrors: dict[str, Mirror]
) -> None:
    plain = setup.client("a", authenticated=False)
    try:
        with pytest.raises(kx.NoAuthError):
            plain.set(f"{setup.root}/left-open", b"changed")
    finally:
        plain.stop()
        plain.close()
    agent = setup.client("a", authenticated=True)
    try:
        agent.set(f"{setup.root}/left-open", b"the agent's identity still may")
    finally:
        agent.stop()
        agent.close()


def test_the_password_reaches_no_log(
    setup: Setup, mirrors: dict[str, Mirror], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    mirrors["a"].stop()  # a new term: a new session authenticates again, logged by kazoo at DEBUG
    mirror = mirrors["a"] = Mirror(setup.config("a"), KEYS["a"])
    mirror.start()
    wait_for(lambda: mirror.snapshot()["leader"], timeout_s=30, what="mirror a to lead again")
    assert any("Auth(" in r.getMessage() for r in caplog.records), "kazoo's auth request was not logged"
    assert setup.password not in caplog.text
    assert setup.password not in repr(setup.config("a").zookeeper_auth())


def _leads(mirror: Mirror) -> bool:
    return bool(mirror.snapshot()["leader"])


def _exists(setup: Setup, region: str, path: str) -> bool:
    agent = setup.client(region, authenticated=True)
    try:
        return agent.exists(path) is not None
    finally:
        agent.stop()
        agent.close()


def _children(setup: Setup, region: str, path: str) -> list[str]:
    agent = setup.client(region, authenticated=True)
    try:
        return list(agent.get_children(path))
    finally:
        agent.stop()
        agent.close()
