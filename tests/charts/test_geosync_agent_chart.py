"""The Helm chart rendered by Helm itself (helm-python-sdk bundles the Helm v4 SDK; no cluster needed),
linted strictly, and every manifest validated offline against Kubernetes' schemas (kubernetes-validate).

Only the ServiceMonitor and the PrometheusRule (Prometheus Operator CRDs) have no bundled schema; their
shapes are checked here and in ``test_monitoring.py`` (the rules by promtool).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk (bundles the Helm SDK)")
kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")

from geosync_agent import config as cfg

CHART = pathlib.Path(__file__).resolve().parents[2] / "charts" / "geosync-agent"
KUBE = "1.32.0"
CRDS = ("ServiceMonitor", "PrometheusRule")  # Prometheus Operator kinds: no bundled schema


PUBLIC = "ed25519:" + "A" * 43 + "="
SIGNING = {"keyId": "a-1", "keyring": {"a": {"a-1": PUBLIC}, "b": {"b-1": PUBLIC}}}
"""Region a's key and a keyring: required values, added to what a test renders unless it says otherwise."""


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    values = {"signing": SIGNING, **values}
    out = helm.Chart.load(str(CHART)).render(values, name="r1", namespace="pulsar")
    docs = [d for text in out.values() for d in yaml.safe_load_all(text) if d]
    for doc in docs:
        if doc["kind"] not in CRDS:
            kv.validate(doc, KUBE, strict=True)
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def agent_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(yaml.safe_load(by_kind(docs, "ConfigMap")[0]["data"]["agent.yaml"]))


def test_lint_is_clean() -> None:
    result = helm.lint(str(CHART), {"agent": {"region": "a"}, "signing": SIGNING}, strict=True)
    assert not result["errors"], result


def test_deployment_mode_has_probes_metrics_and_secret_files() -> None:
    docs = render({"agent": {"region": "a"}})
    assert {d["kind"] for d in docs} == {"ConfigMap", "Deployment", "Service"}
    container = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9464}]
    config = agent_config(docs)
    assert config["region"] == "a"
    assert config["signing_key_file"] == "/var/run/secrets/geosync/signing/a-1.key"
    assert config["stuck_after_s"] == 120
    assert "token_file" not in config
    assert config["metrics_host"] == "0.0.0.0"
    # Secrets are mounted from Secrets, never written into the ConfigMap or the command line.
    assert "secret" not in str(by_kind(docs, "ConfigMap")[0]["data"]["agent.yaml"]).replace("/secrets/", "")
    assert all("token" not in arg for arg in container["command"])


def test_values_change_what_they_should() -> None:
    docs = render(
        {
            "agent": {"region": "east", "namespaces": ["t/ns"], "exclude": ["*/tmp-*"]},
            "metrics": {"port": 9100},
            "token": {"enabled": True, "secretName": "pulsar-token"},
            "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
            "replicas": 2,
        }
    )
    config = agent_config(docs)
    assert config["region"] == "east"
    assert config["namespaces"] == ["t/ns"]
    assert config["exclude"] == ["*/tmp-*"]
    assert config["metrics_port"] == 9100
    assert config["token_file"] == "/var/run/secrets/geosync/token/token"
    deployment = by_kind(docs, "Deployment")[0]
    assert deployment["spec"]["replicas"] == 2
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["geosync-token"]["secret"]["secretName"] == "pulsar-token"
    monitor = by_kind(docs, "ServiceMonitor")[0]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert by_kind(docs, "Service")[0]["spec"]["ports"][0]["port"] == 9100


def test_sidecar_mode_renders_the_container_for_the_pulsar_chart() -> None:
    docs = render({"mode": "sidecar", "agent": {"region": "a", "adminUrl": "http://localhost:8080"}})
    assert not by_kind(docs, "Deployment")
    data = by_kind(docs, "ConfigMap")[0]["data"]
    container = yaml.safe_load(data["sidecar-container.yaml"])
    volumes = yaml.safe_load(data["sidecar-volumes.yaml"])
    # What goes into the official chart's broker.extraContainers / extraVolumes validates as a pod spec.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "broker-0"},
           "spec": {"containers": [container], "volumes": volumes}}  # fmt: skip
    kv.validate(pod, KUBE, strict=True)
    assert agent_config(docs)["admin_url"] == "http://localhost:8080"
    assert by_kind(docs, "Service")[0]["spec"]["selector"] == {"component": "broker"}
    # Each broker's sidecar syncs the topics its broker owns; the agent reads its broker's id itself.
    assert agent_config(docs)["shard_by_ownership"] is True
    assert "env" not in container


@pytest.mark.parametrize("shard", [True, False])
def test_a_sidecar_never_makes_its_broker_pod_not_ready(shard: bool) -> None:
    """The kubelet counts a pod Ready only while every container is: the sidecar has no readiness probe
    (the agent's own trouble must not take its broker out of service), and its liveness probe asks /healthz,
    which fails only when the agent itself is stuck or gave up (never because a region is down)."""
    values = {"mode": "sidecar", "agent": {"region": "a"}, "sidecar": {"shardByOwnership": shard}}
    container = yaml.safe_load(by_kind(render(values), "ConfigMap")[0]["data"]["sidecar-container.yaml"])
    assert "readinessProbe" not in container
    assert "startupProbe" not in container
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["livenessProbe"]["timeoutSeconds"] >= 5  # a busy node's slow answer is no stuck agent
    deployment = by_kind(render({"agent": {"region": "a"}}), "Deployment")[0]
    (own,) = deployment["spec"]["template"]["spec"]["containers"]
    assert own["readinessProbe"]["httpGet"]["path"] == "/readyz"  # its own pod: readiness is the agent's


def test_how_long_a_loop_may_get_nowhere_is_a_value() -> None:
    config = agent_config(render({"agent": {"region": "a", "stuckAfterSeconds": 300}}))
    assert config["stuck_after_s"] == 300


def test_sidecars_can_name_their_broker_from_the_pod_or_sync_the_whole_region() -> None:
    broker_id = "$(POD_NAME).pulsar-broker.pulsar.svc.cluster.local:8080"
    docs = render({"mode": "sidecar", "agent": {"region": "a"}, "sidecar": {"brokerId": broker_id}})
    container = yaml.safe_load(by_kind(docs, "ConfigMap")[0]["data"]["sidecar-container.yaml"])
    env = {e["name"]: e for e in container["env"]}
    assert env["GEOSYNC_BROKER_ID"]["value"] == broker_id
    # Kubernetes expands $(POD_NAME) only from variables defined before it in the list.
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_NAME") < names.index("GEOSYNC_BROKER_ID")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "broker-0"},
           "spec": {"containers": [container]}}  # fmt: skip
    kv.validate(pod, KUBE, strict=True)
    whole = render({"mode": "sidecar", "agent": {"region": "a"}, "sidecar": {"shardByOwnership": False}})
    assert "shard_by_ownership" not in agent_config(whole)
    deployment = render({"agent": {"region": "a"}})
    assert "shard_by_ownership" not in agent_config(deployment)  # one agent per region: it syncs everything


def app_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


def plugin_parts(docs: list[dict[str, Any]]) -> dict[str, Any]:
    data = by_kind(docs, "ConfigMap")[0]["data"]
    return {k: yaml.safe_load(v) for k, v in data.items() if k.startswith("plugins-")}


@pytest.mark.parametrize("mode", ["deployment", "sidecar"])
def test_both_images_come_from_one_registry_and_tag(mode: str) -> None:
    def images(values: dict[str, Any]) -> tuple[str, str]:
        docs = render({"mode": mode, "agent": {"region": "a"}, **values})
        data = by_kind(docs, "ConfigMap")[0]["data"]
        agent = yaml.safe_load(data["sidecar-container.yaml"])["image"]
        if mode == "deployment":
            deployed = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
            assert deployed["image"] == agent
        return agent, plugin_parts(docs)["plugins-init-container.yaml"]["image"]

    version = app_version()
    assert images({}) == (f"ghcr.io/geosync/agent:{version}", f"ghcr.io/geosync/broker-plugins:{version}")
    assert images({"image": {"registry": "localhost/geosync/", "tag": "dev"}}) == (
        "localhost/geosync/agent:dev",
        "localhost/geosync/broker-plugins:dev",
    )


def test_brokers_get_the_plugins_from_an_init_container_into_the_directory_they_load() -> None:
    docs = render({"mode": "sidecar", "agent": {"region": "a"}, "plugins": {"directory": "/pulsar/gs"}})
    parts = plugin_parts(docs)
    init, volume, mount = (
        parts["plugins-init-container.yaml"],
        parts["plugins-volume.yaml"],
        parts["plugins-volume-mount.yaml"],
    )
    assert init["args"] == ["/pulsar/gs"]
    assert init["volumeMounts"] == [{"name": volume["name"], "mountPath": "/pulsar/gs"}]
    assert mount == {"name": volume["name"], "mountPath": "/pulsar/gs", "readOnly": True}
    config = parts["plugins-broker-config.yaml"]
    assert config["brokerInterceptorsDirectory"] == config["entryFiltersDirectory"] == "/pulsar/gs"
    assert config["brokerInterceptors"] == config["entryFilterNames"] == "geosync"
    assert config["PULSAR_PREFIX_geosyncAllowCursorWrites"] == "true"  # the sidecar is on loopback
    data = by_kind(docs, "ConfigMap")[0]["data"]
    broker = {"name": "broker", "image": "apachepulsar/pulsar:4.0.8", "volumeMounts": [mount]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "broker-0"},
           "spec": {"initContainers": [init],
                    "containers": [broker, yaml.safe_load(data["sidecar-container.yaml"])],
                    "volumes": [*yaml.safe_load(data["sidecar-volumes.yaml"]), volume]}}  # fmt: skip
    kv.validate(pod, KUBE, strict=True)
    for container in (init, yaml.safe_load(data["sidecar-container.yaml"])):
        assert container["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_plugins_can_be_left_out_and_deployment_mode_does_not_allow_cursor_writes() -> None:
    deployment = plugin_parts(render({"agent": {"region": "a"}}))["plugins-broker-config.yaml"]
    assert "PULSAR_PREFIX_geosyncAllowCursorWrites" not in deployment
    assert not plugin_parts(render({"agent": {"region": "a"}, "plugins": {"enabled": False}}))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"agent": {"region": ""}}, "agent.region is required"),
        ({"agent": {"region": "a"}, "mode": "x"}, "mode"),
        ({"agent": {"region": "a"}, "image": {"repository": "ghcr.io/x/agent"}}, "image.registry"),
    ],
)
def test_bad_values_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        helm.Chart.load(str(CHART)).render({"signing": SIGNING, **values}, name="r1", namespace="pulsar")


def mounts(docs: list[dict[str, Any]]) -> dict[str, str]:
    pod = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    return {
        m["mountPath"]: secrets[m["name"]]
        for m in pod["containers"][0]["volumeMounts"]
        if m["name"] in secrets
    }


def test_per_region_signing_key_and_keyring() -> None:
    keyring = {"a": {"a-2": PUBLIC}, "b": {"b-1": PUBLIC}}
    docs = render({"agent": {"region": "a"}, "signing": {"keyId": "a-2", "keyring": keyring}})
    config = agent_config(docs)
    assert config["signing_key_id"] == "a-2"
    assert config["signing_key_file"] == "/var/run/secrets/geosync/signing/a-2.key"
    assert config["keyring_file"] == "/etc/geosync/keyring.yaml"
    assert "key_file" not in config
    assert yaml.safe_load(by_kind(docs, "ConfigMap")[0]["data"]["keyring.yaml"]) == keyring
    assert mounts(docs) == {"/var/run/secrets/geosync/signing": "geosync-signing"}


@pytest.mark.parametrize(
    "values",
    [
        {"signing": {**SIGNING, "acceptLegacy": True}},
        {"signing": {"keyring": SIGNING["keyring"], "acceptLegacy": True}},
        {"signing": SIGNING, "hmacKey": {"secretName": "geosync-hmac", "key": "hmac.key"}},
    ],
)
def test_the_shared_hmac_key_is_refused_with_the_step_to_per_region_keys(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmError, match=r"no longer supported.*geoctl keys init --region A"):
        helm.Chart.load(str(CHART)).render({"agent": {"region": "a"}, **values}, name="r1", namespace="x")


def test_a_region_without_its_own_key_is_refused_with_the_step_to_make_one() -> None:
    with pytest.raises(helm.HelmError, match=r"signing\.keyId is required.*geoctl keys init --region A"):
        helm.Chart.load(str(CHART)).render({"agent": {"region": "a"}}, name="r1", namespace="pulsar")


def test_a_signing_key_without_a_keyring_is_refused() -> None:
    with pytest.raises(Exception, match=r"signing\.keyId needs signing\.keyring"):
        render({"agent": {"region": "a"}, "signing": {"keyId": "a-1"}})


def test_metrics_bind_address_is_a_value() -> None:
    assert (
        agent_config(render({"agent": {"region": "a"}, "metrics": {"host": "127.0.0.1"}}))["metrics_host"]
        == "127.0.0.1"
    )


@pytest.mark.parametrize(
    ("state", "volume"),
    [
        ({}, {"emptyDir": {"sizeLimit": "256Mi"}}),
        ({"existingClaim": "geosync-a"}, {"persistentVolumeClaim": {"claimName": "geosync-a"}}),
    ],
)
def test_the_checkpoint_lives_on_a_writable_volume(state: dict[str, Any], volume: dict[str, Any]) -> None:
    docs = render({"agent": {"region": "a", "state": state}})
    config = agent_config(docs)
    assert config["state_dir"] == "/var/lib/geosync"
    assert config["checkpoint_interval_s"] == 10
    pod = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
    assert {"name": "geosync-state", **volume} in pod["volumes"]
    assert {"name": "geosync-state", "mountPath": "/var/lib/geosync"} in pod["containers"][0]["volumeMounts"]


def test_without_a_state_volume_there_is_no_checkpoint() -> None:
    docs = render({"agent": {"region": "a", "state": {"enabled": False}}})
    assert "state_dir" not in agent_config(docs)
    pod = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
    assert all(v["name"] != "geosync-state" for v in pod["volumes"])


def test_zookeeper_credentials_come_from_a_mounted_secret() -> None:
    docs = render(
        {
            "agent": {"region": "east", "zookeeper": "zk:2181"},
            "zookeeperAuth": {"enabled": True, "secretName": "zk-digest", "worldRead": True},
        }
    )
    config = agent_config(docs)
    assert config["zookeeper_auth_scheme"] == "digest"
    assert config["zookeeper_auth_file"] == "/var/run/secrets/geosync/zookeeper/zookeeper.auth"
    assert config["zookeeper_world_read"] is True
    spec = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["geosync-zookeeper"]["secret"] == {"secretName": "zk-digest", "defaultMode": 0o400}
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["geosync-zookeeper"]["mountPath"] == "/var/run/secrets/geosync/zookeeper"
    assert "zookeeper_auth_file" not in agent_config(render({"agent": {"region": "east"}}))


def test_the_plugins_admin_roles_reach_the_brokers_config() -> None:
    roles = render({"agent": {"region": "a"}, "plugins": {"adminRoles": "geosync-agent"}})
    assert (
        plugin_parts(roles)["plugins-broker-config.yaml"]["PULSAR_PREFIX_geosyncAdminRoles"]
        == "geosync-agent"
    )
    default = plugin_parts(render({"agent": {"region": "a"}}))["plugins-broker-config.yaml"]
    assert "PULSAR_PREFIX_geosyncAdminRoles" not in default


def test_the_replicators_backoff_is_bounded_unless_left_to_pulsar() -> None:
    default = plugin_parts(render({"agent": {"region": "a"}}))["plugins-broker-config.yaml"]
    assert default["PULSAR_PREFIX_brokerClient_maxBackoffIntervalNanos"] == "5000000000"
    longer = render({"agent": {"region": "a"}, "plugins": {"replicatorMaxBackoffSeconds": 30}})
    assert (
        plugin_parts(longer)["plugins-broker-config.yaml"][
            "PULSAR_PREFIX_brokerClient_maxBackoffIntervalNanos"
        ]
        == "30000000000"
    )
    pulsars = render({"agent": {"region": "a"}, "plugins": {"replicatorMaxBackoffSeconds": 0}})
    assert (
        "PULSAR_PREFIX_brokerClient_maxBackoffIntervalNanos"
        not in plugin_parts(pulsars)["plugins-broker-config.yaml"]
    )


def test_unloading_stuck_replicators_is_opt_in(tmp_path: pathlib.Path) -> None:
    default = agent_config(render({"agent": {"region": "a"}}))
    assert default["replicator_stall_s"] == 300
    assert "replicator_unload_after_s" not in default
    chosen = agent_config(render({"agent": {"region": "a", "replicators": {"unloadStuckAfterSeconds": 900}}}))
    assert chosen["replicator_unload_after_s"] == 900
    # What the chart renders is a config the agent takes.
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({**chosen, "admin_url": "http://b:8080", "service_url": "pulsar://b:6650"}))
    assert cfg.load(path).replicator_unload_after_s == 900.0


@pytest.mark.parametrize("mode", ["deployment", "sidecar"])
def test_brokers_get_the_keyring_the_entry_filter_verifies_markers_against(mode: str) -> None:
    """Without the keyring the entry filter hides no snapshot marker (an application's message carrying the
    marker property must be delivered): the chart renders the volume, its mount and the JVM option."""
    docs = render({"mode": mode, "agent": {"region": "a"}})
    parts = plugin_parts(docs)
    volume, mount = parts["plugins-keyring-volume.yaml"], parts["plugins-keyring-mount.yaml"]
    assert mount == {"name": volume["name"], "mountPath": "/pulsar/geosync-keyring", "readOnly": True}
    config_map = by_kind(docs, "ConfigMap")[0]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert volume["configMap"]["items"] == [{"key": "keyring.yaml", "path": "keyring.yaml"}]
    assert yaml.safe_load(config_map["data"]["keyring.yaml"]) == SIGNING["keyring"]
    opts = parts["plugins-broker-config.yaml"]["PULSAR_EXTRA_OPTS"]
    assert opts == "-Dgeosync.keyringFile=/pulsar/geosync-keyring/keyring.yaml"
    broker = {"name": "broker", "image": "apachepulsar/pulsar:4.0.8", "volumeMounts": [mount]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "broker-0"},
           "spec": {"containers": [broker], "volumes": [volume]}}  # fmt: skip
    kv.validate(pod, KUBE, strict=True)
