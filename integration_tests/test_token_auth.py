"""Token authentication and TLS towards a real region: the admin adapter, the Pulsar client, the agent and
geoctl.

Boots one extra region with JWT token authentication (HS256, a random secret) and TLS listeners (a throw-away
CA, ``geosync_lab.certs``) beside the plain ones, and checks that every GeoSync client is refused without the
token and works with it, that the token is never printed, and that over TLS every client verifies the
brokers' certificate against the CA it is given and refuses without it, with a message that says what to set.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

import pulsar
import pytest
import yaml
from click.testing import CliRunner

from geoctl.cli import main
from geoctl.errors import EXIT_REFUSED, EXIT_UNREACHABLE
from geosync_adapters import admin as adm
from geosync_adapters import adminhttp, messaging
from geosync_agent import discovering
from geosync_agent.config import AgentConfig
from geosync_lab import certs, distribution, labs, regions


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256_token(secret: bytes, subject: str) -> str:
    """A Pulsar token: a JWT signed with HS256 whose subject is the role."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = _b64(json.dumps({"sub": subject}).encode())
    signature = hmac.new(secret, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{_b64(signature)}"


@dataclass(frozen=True)
class Secured:
    proc: regions.RegionProcess
    token: str
    tls: certs.TlsFiles
    https_admin_url: str
    ssl_service_url: str


@pytest.fixture(scope="module")
def secured_region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("secured")
    tls = certs.self_signed(root / "tls")
    web_tls, broker_tls = regions.free_ports(2)
    secret = os.urandom(32)
    token = hs256_token(secret, "geosync-admin")
    conf = {
        "authenticationEnabled": "true",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(secret).decode(),
        "superUserRoles": "geosync-admin",
        "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "brokerClientAuthenticationParameters": json.dumps({"token": token}),
        **tls.broker_conf(web_port=web_tls, broker_port=broker_tls),
    }
    proc, pid, _ = labs._boot_region(
        distribution.ensure_pulsar(),
        root / "sec",
        "sec",
        {web_tls, broker_tls},
        deadline_s=240,
        extra_conf=conf,
        token=token,
    )
    try:
        yield Secured(
            proc, token, tls, f"https://localhost:{web_tls}", f"pulsar+ssl://localhost:{broker_tls}"
        )
    finally:
        regions.stop(pid, regions.region_marker(proc), grace_s=10)


@pytest.fixture(scope="module")
def secured(secured_region: Secured) -> tuple[regions.RegionProcess, str]:
    return secured_region.proc, secured_region.token


def test_admin_api_requires_the_token(secured: tuple[regions.RegionProcess, str]) -> None:
    proc, token = secured
    fast = adminhttp.RetryPolicy(attempts=1)
    with pytest.raises(adminhttp.AdminUnauthorized):
        adm.AdminClient(proc.admin_url, retry=fast).clusters()
    with pytest.raises(adminhttp.AdminUnauthorized):
        adm.AdminClient(
            proc.admin_url, token=hs256_token(b"another secret" * 3, "geosync-admin"), retry=fast
        ).clusters()
    assert adm.AdminClient(proc.admin_url, token=token, retry=fast).clusters() == ["sec"]


def test_brokers_require_the_token(secured: tuple[regions.RegionProcess, str]) -> None:
    proc, token = secured
    topic = "persistent://public/default/secured"
    with (
        pytest.raises((pulsar.PulsarException, messaging.MessagingUnavailable)),
        messaging.client(proc.service_url, timeout_s=5) as c,
    ):
        c.create_producer(topic).send(b"x")
    with messaging.client(proc.service_url, token=token) as c:
        reader = c.create_reader(topic, pulsar.MessageId.latest)
        c.create_producer(topic).send(b"with token")
        assert reader.read_next(timeout_millis=10000).data() == b"with token"


def test_agent_reads_its_token_from_a_file_and_never_logs_it(
    secured: tuple[regions.RegionProcess, str], tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc, token = secured
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")

    def config(token_file: str = "") -> AgentConfig:
        return AgentConfig(
            region="sec",
            admin_url=proc.admin_url,
            service_url=proc.service_url,
            token_file=token_file,
        )

    with pytest.raises(adminhttp.AdminUnauthorized):
        discovering.scan(config().admin_client(timeout=10.0), config())
    found = discovering.scan(config(str(token_file)).admin_client(timeout=10.0), config(str(token_file)))
    assert found.namespaces == {}  # one region: nothing replicated, but every call was authorized
    assert token not in caplog.text


def test_agent_picks_up_a_rotated_token_file_without_a_restart(
    secured: tuple[regions.RegionProcess, str], tmp_path: pathlib.Path
) -> None:
    """The token file starts with a token the brokers refuse (signed with another secret, as after the
    cluster's key was rotated first); the operator then writes the new token: the same admin client and the
    same broker client use it from the next call on."""
    proc, token = secured
    token_file = tmp_path / "token"
    token_file.write_text(hs256_token(b"the old secret!!" * 2, "geosync-admin") + "\n")
    config = AgentConfig(
        region="sec",
        admin_url=proc.admin_url,
        service_url=proc.service_url,
        token_file=str(token_file),
    )
    admin = config.admin_client(timeout=10.0)
    admin.retry = adminhttp.RetryPolicy(attempts=1)
    agent_messaging = config.messaging()
    topic = "persistent://public/default/rotated-token"
    try:
        with pytest.raises(adminhttp.AdminUnauthorized):
            admin.clusters()
        sent: list[bool] = []
        with pytest.raises((pulsar.PulsarException, messaging.MessagingUnavailable)):
            agent_messaging.producer(topic).send_async(b"refused", sent.append)
        token_file.write_text(token + "\n")
        assert admin.clusters() == ["sec"]
        producer = agent_messaging.producer(topic)
        producer.send_async(b"with the rotated token", sent.append)
        producer.close()  # flushes
        assert sent[-1:] == [True]
    finally:
        agent_messaging.close()
    assert token not in repr(admin)


def test_geoctl_uses_a_token_file_and_never_prints_it(
    secured: tuple[regions.RegionProcess, str], tmp_path: pathlib.Path
) -> None:
    proc, token = secured
    token_file = tmp_path / "token"
    token_file.write_text(token)
    config = tmp_path / "regions.yaml"
    region = {"admin_url": proc.admin_url, "service_url": proc.service_url, "zookeeper": proc.zookeeper}
    config.write_text(yaml.safe_dump({"regions": {"sec": region}}))
    runner = CliRunner()
    refused = runner.invoke(main, ["status", "--config", str(config), "-o", "json"], env={"GEOCTL_TOKEN": ""})
    assert refused.exit_code == EXIT_REFUSED, refused.output
    assert "refused" in refused.output
    ok = runner.invoke(
        main,
        ["status", "--config", str(config), "--token-file", str(token_file), "-o", "json"],
        env={"GEOCTL_TOKEN": ""},
    )
    assert ok.exit_code == 0, ok.output
    assert token not in ok.output
    assert token not in refused.output


def test_admin_api_over_tls_verifies_the_brokers_certificate(secured_region: Secured) -> None:
    sec = secured_region
    trusted = adm.AdminClient(
        sec.https_admin_url, token=sec.token, retry=adminhttp.NO_RETRY, verify=str(sec.tls.ca)
    )
    assert trusted.clusters() == ["sec"]
    with pytest.raises(adminhttp.AdminTlsError, match="tls_trust_certs_file") as refused:
        adm.AdminClient(sec.https_admin_url, token=sec.token, retry=adminhttp.NO_RETRY).clusters()
    assert sec.token not in str(refused.value)


def test_brokers_over_tls_verify_the_certificate(secured_region: Secured) -> None:
    sec = secured_region
    topic = "persistent://public/default/over-tls"
    with (
        pytest.raises((pulsar.PulsarException, messaging.MessagingUnavailable)),
        messaging.client(sec.ssl_service_url, token=sec.token, timeout_s=5) as c,
    ):
        c.create_producer(topic).send(b"without the CA")
    with messaging.client(sec.ssl_service_url, token=sec.token, tls_trust_certs_file=str(sec.tls.ca)) as c:
        reader = c.create_reader(topic, pulsar.MessageId.latest)
        c.create_producer(topic).send(b"over TLS")
        assert reader.read_next(timeout_millis=10000).data() == b"over TLS"


def test_agent_talks_tls_to_admin_api_and_brokers(secured_region: Secured, tmp_path: pathlib.Path) -> None:
    sec = secured_region
    token_file = tmp_path / "token"
    token_file.write_text(sec.token)

    def config(ca: str) -> AgentConfig:
        return AgentConfig(
            region="sec",
            admin_url=sec.https_admin_url,
            service_url=sec.ssl_service_url,
            token_file=str(token_file),
            tls_trust_certs_file=ca,
        )

    with pytest.raises(adminhttp.AdminTlsError):
        discovering.scan(config("").admin_client(timeout=10.0), config(""))
    trusted = config(str(sec.tls.ca))
    assert discovering.scan(trusted.admin_client(timeout=10.0), trusted).namespaces == {}
    topic = "persistent://public/default/agent-over-tls"
    sent: list[bool] = []
    agent_messaging = trusted.messaging()
    try:
        producer = agent_messaging.producer(topic)
        producer.send_async(b"from the agent", sent.append)
        producer.close()  # flushes
    finally:
        agent_messaging.close()
    assert sent == [True]
    with messaging.client(sec.ssl_service_url, token=sec.token, tls_trust_certs_file=str(sec.tls.ca)) as c:
        reader = c.create_reader(topic, pulsar.MessageId.earliest)
        assert reader.read_next(timeout_millis=10000).data() == b"from the agent"


def test_geoctl_status_over_tls_with_a_ca_file(secured_region: Secured, tmp_path: pathlib.Path) -> None:
    sec = secured_region
    token_file = tmp_path / "token"
    token_file.write_text(sec.token)
    region = {
        "admin_url": sec.https_admin_url,
        "service_url": sec.ssl_service_url,
        "zookeeper": sec.proc.zookeeper,
    }
    config = tmp_path / "regions.yaml"
    config.write_text(yaml.safe_dump({"regions": {"sec": region}, "token_file": str(token_file)}))
    runner = CliRunner()
    refused = runner.invoke(main, ["status", "--config", str(config), "-o", "json"], env={"GEOCTL_TOKEN": ""})
    assert refused.exit_code == EXIT_UNREACHABLE, refused.output
    assert "ca_file" in refused.output
    assert sec.token not in refused.output
    config.write_text(
        yaml.safe_dump(
            {"regions": {"sec": region}, "token_file": str(token_file), "ca_file": str(sec.tls.ca)}
        )
    )
    ok = runner.invoke(main, ["status", "--config", str(config), "-o", "json"], env={"GEOCTL_TOKEN": ""})
    assert ok.exit_code == 0, ok.output
    assert not json.loads(ok.output)["errors"]
