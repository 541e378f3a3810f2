"""A region with token authentication and GeoSync's broker plugins: who may call the plugin's endpoints, and
an agent given every kind of secret that shows none of them.

Boots one extra region (JWT tokens, HS256, a random secret; ``geosyncAdminRoles=geosync-agent``) with the
plugins loaded. Three tokens: ``geosync-admin`` (a superuser), ``geosync-agent`` (the GeoSync role) and
``app`` (neither). The plugin's ``/admin/v2/geosync/*`` endpoints must answer 401 without valid credentials
and 403 to ``app``, reads and writes alike (loopback proves nothing: any container of a broker's pod is on
it). Then an agent runs against the region with a token file, its own Ed25519 signing key and ZooKeeper
digest credentials, at DEBUG, and its log file, ``/state`` and ``/metrics`` are searched for each secret.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
import yaml
from cryptography.hazmat.primitives import serialization

from geosync_adapters import admin as adm
from geosync_adapters import adminhttp, signing
from geosync_lab import distribution, labs, plugins, regions
from integration_tests.helpers import wait_for
from integration_tests.test_token_auth import hs256_token

PLUGIN = "/admin/v2/geosync"
READS = ("status", "cursors?since=0", "origins?topic=persistent://public/default/x")


@dataclass(frozen=True)
class Region:
    proc: regions.RegionProcess
    admin: str
    agent: str
    app: str
    forged: str


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Region]:
    root = tmp_path_factory.mktemp("secured-plugins")
    secret = os.urandom(32)
    admin = hs256_token(secret, "geosync-admin")
    conf = {
        **plugins.plugin_conf(plugins.ensure_plugins()),
        "authenticationEnabled": "true",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(secret).decode(),
        "superUserRoles": "geosync-admin",
        "geosyncAdminRoles": "geosync-agent",
        "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "brokerClientAuthenticationParameters": json.dumps({"token": admin}),
    }
    proc, pid, _ = labs._boot_region(
        distribution.ensure_pulsar(), root / "sec", "sec", set(), deadline_s=240, extra_conf=conf, token=admin
    )
    try:
        yield Region(
            proc,
            admin=admin,
            agent=hs256_token(secret, "geosync-agent"),
            app=hs256_token(secret, "app"),
            forged=hs256_token(b"not the region's secret, forged!", "geosync-admin"),
        )
    finally:
        regions.stop(pid, regions.region_marker(proc), grace_s=10)


def _call(region: Region, path: str, token: str | None, *, write: bool = False) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{region.proc.admin_url}{PLUGIN}/{path}"
    if write:
        return requests.post(url, json={"acks": []}, headers=headers, timeout=10)
    return requests.get(url, headers=headers, timeout=10)


# --- who may call the plugin's endpoints ------------------------------------------------------------------


@pytest.mark.parametrize("path", [*READS, "acks"])
def test_plugin_endpoints_answer_401_without_valid_credentials(region: Region, path: str) -> None:
    write = path == "acks"
    for token in (None, region.forged):
        answer = _call(region, path, token, write=write)
        assert answer.status_code == 401, (path, token is None, answer.text)
        assert "authentication required" in answer.json()["error"]


@pytest.mark.parametrize("path", [*READS, "acks"])
def test_plugin_endpoints_answer_403_to_a_role_without_the_geosync_role(region: Region, path: str) -> None:
    answer = _call(region, path, region.app, write=path == "acks")
    assert answer.status_code == 403, (path, answer.text)
    assert "geosyncAdminRoles" in answer.json()["error"]


@pytest.mark.parametrize("token", ["admin", "agent"])
def test_superusers_and_the_geosync_role_may_read_and_write(region: Region, token: str) -> None:
    given = getattr(region, token)
    for path in READS:
        assert _call(region, path, given).status_code == 200, path
    written = _call(region, "acks", given, write=True)
    assert written.status_code == 200, written.text
    assert written.json() == {"results": []}
    status = _call(region, "status", given).json()
    assert status["configuration"]["authenticationEnabled"] is True
    assert status["configuration"]["geosyncAdminRoles"] == "geosync-agent"
    assert status["requests_refused"] > 0  # the refusals above were counted


def test_the_agents_admin_adapter_sends_its_token_to_the_plugin(region: Region) -> None:
    with_token = adm.AdminClient(region.proc.admin_url, token=region.agent, retry=adminhttp.NO_RETRY)
    feed = with_token.plugin_feed(since=0)
    assert feed.epoch
    assert with_token.plugin_write([]) == []
    without = adm.AdminClient(region.proc.admin_url, retry=adminhttp.NO_RETRY)
    with pytest.raises(adminhttp.AdminUnauthorized):
        without.plugin_feed(since=0)
    with pytest.raises(adminhttp.AdminForbidden):
        adm.AdminClient(region.proc.admin_url, token=region.app, retry=adminhttp.NO_RETRY).plugin_feed(
            since=0
        )


# --- secrets never in the agent's log, /state or /metrics ----------------------------------------------


def _secrets_of(key_file: pathlib.Path, token: str, zk_password: str) -> dict[str, str]:
    """Every form a secret could take in text: the token and its signature, the private key's PEM body
    lines and its raw seed (hex, base64), the ZooKeeper password."""
    pem = key_file.read_text()
    body = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    seed = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    out = {"token": token, "token signature": token.rsplit(".", 1)[1], "zookeeper password": zk_password}
    out |= {f"private key PEM line {i}": line for i, line in enumerate(body)}
    out |= {"seed hex": seed.hex(), "seed base64": base64.b64encode(seed).decode().rstrip("=")}
    return out


def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_an_agent_with_a_token_a_signing_key_and_zookeeper_credentials_shows_none_of_them(
    region: Region, tmp_path: pathlib.Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(region.agent + "\n")
    signer = signing.generate("sec-1")
    key_file, _ = signing.write_key_pair(tmp_path / "keys", signer)
    keyring = tmp_path / "keyring.yaml"
    keyring.write_text(signing.dump_keyring({"sec": {"sec-1": str(tmp_path / "keys" / "sec-1.pub")}}))
    zk_password = base64.urlsafe_b64encode(os.urandom(18)).decode()
    zk_auth = tmp_path / "zookeeper.auth"
    zk_auth.write_text(f"geosync-agent:{zk_password}\n")
    port = regions.free_ports(1)[0]
    config = tmp_path / "agent.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "region": "sec",
                "admin_url": region.proc.admin_url,
                "service_url": region.proc.service_url,
                "zookeeper": region.proc.zookeeper,
                "token_file": str(token_file),
                "signing_key_file": str(key_file),
                "signing_key_id": "sec-1",
                "keyring_file": str(keyring),
                "zookeeper_auth_file": str(zk_auth),
                "metrics_port": port,
                "state_dir": str(tmp_path / "state"),
                "checkpoint_interval_s": 1.0,
                "discover_interval_s": 2.0,
                "mirror_events_topic": "persistent://public/default/geosync-policy-events",
                "mirror_root": "/geosync/secrets-test",
            }
        )
    )
    log_file = tmp_path / "agent.log"
    with log_file.open("wb") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "geosync_agent", "--config", str(config), "--log-level", "DEBUG"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        # Exercise it: a tenant created here is a local policy change the mirror (ZooKeeper credentials)
        # signs (the key) and publishes (the token); discovery and the plugin feed use the token too.
        requests.put(
            f"{region.proc.admin_url}/admin/v2/tenants/sec-tenant",
            json={"allowedClusters": ["sec"], "adminRoles": []},
            headers={"Authorization": f"Bearer {region.admin}"},
            timeout=10,
        ).raise_for_status()

        def published() -> bool:
            try:
                with urllib.request.urlopen(base + "/metrics", timeout=2) as answer:
                    text = answer.read().decode()
            except OSError:
                return False
            return _metric(text, "geosync_policy_events_total", event="published") >= 1 and (
                _metric(text, "geosync_policy_events_total", event="checkpoints") >= 1
            )

        wait_for(published, timeout_s=90, what="the agent's mirror to publish a signed policy event")
        time.sleep(3)  # a few more rounds, checkpoints and plugin-feed calls
        state = requests.get(base + "/state", timeout=5).text
        metrics = requests.get(base + "/metrics", timeout=5).text
        assert json.loads(state)["signing"]["key_id"] == "sec-1"
    finally:
        agent.terminate()
        agent.wait(timeout=30)
    log = log_file.read_text(errors="replace")
    assert "Auth(" in log, "kazoo's authentication request should be in the DEBUG log (redacted)"
    assert "<redacted>" in log
    for what, secret in _secrets_of(key_file, region.agent, zk_password).items():
        for where, text in (("log", log), ("/state", state), ("/metrics", metrics)):
            assert secret not in text, f"the {what} appears in the agent's {where}"
