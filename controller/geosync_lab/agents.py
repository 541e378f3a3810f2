"""The lab's agents: their keys and keyring, configuration, process, readiness and metrics address."""

from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import yaml

from geosync_adapters import signing
from geosync_core import topology as topo
from geosync_lab import launches, regions
from geosync_lab.errors import LabError
from geosync_lab.topologies import load, save

CONTROL_TOPIC = "geosync-control"
UNSYNCED_PATTERNS = ("*/pip33-*", "*/unsynced-*")


def agent_paths(lab_dir: pathlib.Path, name: str) -> tuple[pathlib.Path, pathlib.Path]:
    return lab_dir / "agents" / f"{name}.yaml", lab_dir / "agents" / f"{name}.log"


def agent_log(lab_dir: pathlib.Path, name: str) -> pathlib.Path:
    """The log file of the lab's agent ``name`` (its standard output and error)."""
    return agent_paths(lab_dir.resolve(), name)[1]


def _agent_keys(agents_dir: pathlib.Path, names: list[str]) -> pathlib.Path:
    """One Ed25519 signing key per region (``keys/REGION-1.key``, made once) and the keyring every agent
    loads (``keyring.yaml``, public keys only: each agent holds its own private key and the others' public
    ones); the keyring's path. Tests rotate keys by editing these files (``geoctl keys add``/``drop``)."""
    keys, keyring = agents_dir / "keys", agents_dir / "keyring.yaml"
    ring: dict[str, dict[str, str]] = yaml.safe_load(keyring.read_text()) if keyring.exists() else {}
    missing = [n for n in names if n not in ring]
    for name in missing:
        key_id = f"{name}-1"
        if not (keys / f"{key_id}.key").exists():
            signing.write_key_pair(keys, signing.generate(key_id))
        ring[name] = {key_id: f"keys/{key_id}.pub"}
    if missing:
        keyring.write_text(signing.dump_keyring(ring))
    return keyring


def signing_key_id(lab_dir: pathlib.Path, name: str, *, region: str | None = None) -> str:
    """The key agent ``name`` (of ``region``, default: the region named ``name``) signs with: its config's,
    else the lab's first key for the region."""
    config, _ = agent_paths(lab_dir.resolve(), name)
    settings = yaml.safe_load(config.read_text()) if config.exists() else {}
    return str(settings.get("signing_key_id") or f"{region or name}-1")


def signer(lab_dir: pathlib.Path, name: str) -> signing.Ed25519Signer:
    """Region ``name``'s current signing key, for tests that publish genuine control messages."""
    key_id = signing_key_id(lab_dir, name)
    return signing.load_signer(lab_dir.resolve() / "agents" / "keys" / f"{key_id}.key", key_id)


def all_regions_namespace(topology: topo.Topology) -> str:
    """The lab namespace replicated to every region (``geo/ab`` with two regions, ``geo/abc`` otherwise)."""
    return max(topology.namespaces, key=lambda ns: (len(topology.namespaces[ns].regions), "snap" not in ns))


def sidecar_name(region: str, broker: int) -> str:
    """The lab's name for the sidecar agent of ``region``'s broker number ``broker`` (from 0)."""
    return f"{region}-broker{broker}"


def sidecar_names(topology: topo.Topology, region: str) -> list[str]:
    """The sidecar agents ``region`` has, one per broker (started or not)."""
    return [sidecar_name(region, i) for i in range(len(topology.region(region).brokers))]


def start_agent(
    lab_dir: pathlib.Path,
    name: str,
    *,
    poll_interval_s: float = 0.25,
    plugin_cursors: bool = True,
    plugin_index: bool = True,
    key_id: str | None = None,
    broker: int | None = None,
    settings: Mapping[str, Any] | None = None,
    on_launch: launches.OnLaunch | None = None,
) -> topo.Topology:
    """Start (or restart) the agent of region ``name`` as a process; its config names only its region.
    ``plugin_cursors=False`` makes it read and move cursors through the admin API only (the path for brokers
    without the plugin); ``plugin_index=False`` makes it name origins from entry headers, not the
    interceptor's index.
    ``key_id``: sign with that key of ``agents/keys`` (default: the key it signed with before).
    ``broker``: start instead the sidecar agent of the region's broker number ``broker`` (from 0), named
    ``sidecar_name(name, broker)``: it talks to that broker only and syncs the topics it owns
    (``shard_by_ownership``); stop it, wait for it and read its metrics under that name.
    ``settings``: configuration keys that replace the lab's (a key given None is left out: the agent's
    own default), e.g. ``{"checkpoint_interval_s": None}``: the production interval, not the lab's 2 s.
    ``on_launch``: told of the agent's process (default: the lab's launch record)."""
    lab_dir = lab_dir.resolve()
    topology = load(lab_dir)
    region = topology.region(name)
    agent_name = name if broker is None else sidecar_name(name, broker)
    agents_dir = lab_dir / "agents"
    agents_dir.mkdir(exist_ok=True)
    keyring = _agent_keys(agents_dir, list(topology.regions))
    key_id = key_id or signing_key_id(lab_dir, agent_name, region=name)
    config, logfile = agent_paths(lab_dir, agent_name)
    existing = topology.agents.get(agent_name)
    if existing and existing.pid and regions.owns(existing.pid, str(config)):
        return topology
    metrics_port = regions.free_ports(1)[0]
    if broker is None:
        where: dict[str, Any] = {
            "admin_url": region.admin_url,
            # Every broker, so the agent reaches the admin API while the first is down (it lists the
            # region's active brokers itself once one answers: docs/lab.md, "Multi-broker regions").
            "broker_admin_urls": [b.admin_url for b in region.brokers[1:]],
        }
    else:
        if not 0 <= broker < len(region.brokers):
            raise LabError(
                f"region {name} has {len(region.brokers)} broker(s); there is no broker {broker}",
                hint=f"use a broker number from 0 to {len(region.brokers) - 1}",
            )
        where = {
            "admin_url": region.brokers[broker].admin_url,
            "shard_by_ownership": True,
            "ownership_refresh_s": 1.0,
        }
    values = {
        "region": name,
        **where,
        "service_url": region.service_url,
        "zookeeper": region.zookeeper,
        "signing_key_file": str(agents_dir / "keys" / f"{key_id}.key"),
        "signing_key_id": key_id,
        "keyring_file": str(keyring),
        "metrics_port": metrics_port,
        "poll_interval_s": poll_interval_s,
        "plugin_cursors": plugin_cursors,
        "plugin_index": plugin_index,
        "state_dir": str(agents_dir / f"{agent_name}-state"),
        "checkpoint_interval_s": 2.0,
        "discover_interval_s": 5.0,
        # A replicator cut off shows as stalled within a test's patience (default 300 s).
        "replicator_stall_s": 20.0,
        # ... and one stuck while connected (Pulsar 4.0.8: apache/pulsar#25097) has its topic
        # unloaded a minute on: longer than any test holds a region frozen on purpose.
        "replicator_unload_after_s": 60.0,
        "control_topic": CONTROL_TOPIC,
        # The policy mirror's events travel in the namespace every region of the lab is in.
        "mirror_events_topic": f"persistent://{all_regions_namespace(topology)}/geosync-policy-events",
        # Left alone by the agents: pip33-* (benchmarks and the demo compare GeoSync with Pulsar's
        # own replicated subscriptions there) and unsynced-* (tests that need drift on purpose).
        "exclude": list(UNSYNCED_PATTERNS),
        # Tenants that tests and benchmarks mirror with their own in-process mirrors.
        "mirror_exclude_tenants": ["public", "pulsar", "mirror-*", "bench-*"],
        "snapshot_namespaces": [topo.SNAPSHOT_NAMESPACE_PATTERN],
    }
    config.write_text(yaml.safe_dump(with_settings(values, settings or {}), sort_keys=True))
    with logfile.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "geosync_agent", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (on_launch or launches.Ledger(lab_dir).record)(proc.pid, f"agent {agent_name}")
    agents = {**topology.agents, agent_name: topo.Agent(region=name, pid=proc.pid, config=str(config))}
    topology = replace(
        topology,
        agents=agents,
        namespaces={
            ns: replace(n, control_topic=f"persistent://{ns}/{CONTROL_TOPIC}")
            for ns, n in topology.namespaces.items()
        },
    )
    save(lab_dir, topology)
    return topology


def with_settings(values: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """An agent configuration ``values`` with ``settings`` over it: a setting given None removes the key
    (the agent's own default then applies)."""
    merged = dict(values)
    for key, value in settings.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def stop_agent(lab_dir: pathlib.Path, name: str, *, kill: bool = False) -> topo.Topology:
    lab_dir = lab_dir.resolve()
    topology = load(lab_dir)
    agent = topology.agents.get(name)
    if agent is None or not agent.pid:
        return topology
    if kill:
        regions.signal_region(agent.pid, agent.config, signal.SIGKILL)
    regions.stop(agent.pid, agent.config, grace_s=0 if kill else 15)
    topology = replace(topology, agents={**topology.agents, name: replace(agent, pid=None)})
    save(lab_dir, topology)
    return topology


def wait_agent_ready(lab_dir: pathlib.Path, name: str, *, timeout_s: float = 60.0) -> None:
    """Wait until the agent of region ``name`` answers /readyz (it has finished a round); LabError if it
    does not within ``timeout_s`` or its process ended."""
    url = agent_metrics_url(lab_dir, name) + "/readyz"
    started = time.monotonic()
    while time.monotonic() < started + timeout_s:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        agent = load(lab_dir).agents.get(name)
        # A child between fork and exec does not name its config yet: judge liveness after a grace time.
        gone = agent is None or not agent.pid or not regions.owns(agent.pid, agent.config)
        if gone and time.monotonic() - started > 5.0:
            break
        time.sleep(0.2)
    _, logfile = agent_paths(lab_dir.resolve(), name)
    raise LabError(
        f"the agent of region {name} did not become ready within {timeout_s:.0f} s",
        hint=f"read its log: {logfile}",
    )


def agent_metrics_url(lab_dir: pathlib.Path, name: str) -> str:
    config, _ = agent_paths(lab_dir.resolve(), name)
    port = yaml.safe_load(config.read_text())["metrics_port"]
    return f"http://127.0.0.1:{port}"
