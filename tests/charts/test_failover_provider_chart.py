"""The chart's optional PIP-121 provider (``failoverProvider``): rendered by Helm, validated against
Kubernetes' schemas, and the command line it renders parsed by geoctl itself."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from geoctl.cli import main
from tests.charts.test_geosync_agent_chart import CHART, by_kind, helm, render

REGIONS = {
    "a": {
        "admin_url": "http://pulsar-a:8080",
        "service_url": "pulsar://pulsar-a:6650",
        "agent_url": "http://a:9464",
    },
    "b": {
        "admin_url": "http://pulsar-b:8080",
        "service_url": "pulsar://pulsar-b:6650",
        "clients": {
            "service_url": "pulsar+ssl://b.example:6651",
            "tls_trust_certs_file": "/etc/pulsar/ca.pem",
        },
    },
}


def provider_values(**overrides: Any) -> dict[str, Any]:
    provider = {
        "enabled": True,
        "namespaces": ["shop/orders"],
        "subscriptions": ["billing"],
        "initialRegion": "a",
        "regions": REGIONS,
    }
    return {"agent": {"region": "a"}, "failoverProvider": provider | overrides}


def mine(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in by_kind(docs, kind) if d["metadata"]["name"] == "r1-failover-provider"]
    return doc


def test_off_by_default() -> None:
    docs = render({"agent": {"region": "a"}})
    assert not [d for d in docs if "failover" in d["metadata"]["name"]]


def test_lint_is_clean_with_the_provider() -> None:
    result = helm.lint(str(CHART), provider_values(), strict=True)
    assert not result["errors"], result


def test_provider_renders_a_deployment_service_config_and_volume() -> None:
    docs = render(provider_values())
    deployment = mine(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"][:3] == ["geoctl", "failover", "serve"]
    assert "--namespace=shop/orders" in container["command"]
    assert "--subscription=billing" in container["command"]
    assert "--initial-region=a" in container["command"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == "r1-failover-provider"
    assert mine(docs, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert mine(docs, "Service")["spec"]["ports"] == [{"name": "http", "port": 8089, "targetPort": "http"}]
    regions = yaml.safe_load(mine(docs, "ConfigMap")["data"]["regions.yaml"])
    assert regions == {"regions": REGIONS}
    # The agent's Deployment and metrics Service never select the provider's pods, nor it theirs.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    agent = next(d for d in by_kind(docs, "Deployment") if d is not deployment)
    assert not set(agent["spec"]["selector"]["matchLabels"].items()) <= set(labels.items())


def test_rendered_command_is_one_geoctl_accepts() -> None:
    [container] = mine(render(provider_values()), "Deployment")["spec"]["template"]["spec"]["containers"]
    result = CliRunner().invoke(main, [*container["command"][1:], "--help"])
    assert result.exit_code == 0, result.output


def test_tokens_are_mounted_from_secrets_never_inlined() -> None:
    values = provider_values(token={"enabled": True, "secretName": "provider-token", "key": "t"})
    values["token"] = {"enabled": True, "secretName": "pulsar-token"}
    deployment = mine(render(values), "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert "--provider-token-file=/var/run/secrets/geosync/failover-token/t" in container["command"]
    assert "--token-file=/var/run/secrets/geosync/token/token" in container["command"]
    secrets = {
        v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v
    }
    assert secrets == {"provider-token", "pulsar-token"}


def test_existing_claim_or_no_persistence() -> None:
    docs = render(provider_values(persistence={"enabled": True, "existingClaim": "kept"}))
    assert not by_kind(docs, "PersistentVolumeClaim")
    volumes = mine(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "state", "persistentVolumeClaim": {"claimName": "kept"}} in volumes
    docs = render(provider_values(persistence={"enabled": False}))
    assert {"name": "state", "emptyDir": {}} in mine(docs, "Deployment")["spec"]["template"]["spec"][
        "volumes"
    ]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"namespaces": []}, "failoverProvider.namespaces is required"),
        ({"regions": {"a": REGIONS["a"]}}, "at least two regions"),
        ({"initialRegion": ""}, "failoverProvider.initialRegion is required"),
    ],
)
def test_bad_provider_values_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        helm.Chart.load(str(CHART)).render(provider_values(**overrides), name="r1", namespace="pulsar")
