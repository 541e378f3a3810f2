"""Booting, inspecting and stopping a whole lab of regions, and writing its topology file.

``up`` boots every region in parallel (each JVM mostly waits on its own start-up; measured faster than one
after another even on two cores), then wires them: every region registers every other as a peer cluster,
tenant ``geo`` is allowed on all regions, namespaces ``geo/ab`` and ``geo/abc`` are created in each of
their regions with ``allowed_clusters`` and replication clusters set, and ``up`` waits until every
replicator is connected. With ``wan`` replication between regions goes through Toxiproxy (see ``wan``).
With ``brokers`` of 2 or more each region is a real cluster instead of a standalone (see ``clusters``).
``down`` stops exactly the processes recorded in the topology, after checking
that each pid is still ours, and then any other the lab's launch record names (``launches``): what a boot
stopped before it wrote the topology left running.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from geosync_adapters import signing
from geosync_adapters.admin import NO_RETRY, AdminClient, AdminError
from geosync_core import topology as topo
from geosync_lab import clusters, distribution, launches, plugins, regions, wan
from geosync_lab.errors import LabError

TENANT = "geo"
LAB_RETENTION_MINUTES = 120
LAB_RETENTION_MB = 1024
"""Retention of the lab's namespaces (and the benchmarks'): longer than any test or benchmark run."""
PROBE_TOPIC = "lab-probe"
TOPOLOGY_FILE = "topology.json"
Report = Callable[[str], None]


def _silent(_: str) -> None:
    pass


@dataclass
class RegionBoot:
    name: str
    seconds: float
    rss_mb: float
    attempts: int


@dataclass
class UpResult:
    topology: topo.Topology
    path: pathlib.Path
    boots: list[RegionBoot] = field(default_factory=list)
    already_running: bool = False
    total_seconds: float = 0.0


def topology_path(lab_dir: pathlib.Path) -> pathlib.Path:
    return lab_dir / TOPOLOGY_FILE


def load(lab_dir: pathlib.Path) -> topo.Topology:
    path = topology_path(lab_dir)
    if not path.exists():
        left = launches.running(lab_dir)
        raise LabError(
            f"no lab in {lab_dir} (no {TOPOLOGY_FILE})",
            hint=f"an interrupted boot left {len(left)} process(es) running: stop them with "
            f"'geoctl lab down --dir {lab_dir}'"
            if left
            else f"start one with 'geoctl lab up --dir {lab_dir}'",
        )
    return topo.from_json(path.read_text())


def save(lab_dir: pathlib.Path, topology: topo.Topology) -> pathlib.Path:
    path = topology_path(lab_dir)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(topology.to_json())
    os.replace(tmp, path)
    return path


Site = regions.RegionProcess | clusters.ClusterRegion
"""A booted region's processes: a standalone, or a multi-broker cluster."""


def region_process(lab_dir: pathlib.Path, region: topo.Region) -> regions.RegionProcess:
    """The region's directory and (first broker's) ports; its marker names every process of the region."""
    ports = regions.Ports(
        **{k: int(region.lab["ports"][k]) for k in ("web", "broker", "zookeeper", "bookie")}
    )
    return regions.RegionProcess(name=region.name, root=lab_dir / "regions" / region.name, ports=ports)


def cluster_region(lab_dir: pathlib.Path, region: topo.Region) -> clusters.ClusterRegion | None:
    """The region as a multi-broker cluster, or None for a standalone region."""
    if int(region.lab.get("brokers", 1)) < 2:
        return None
    ports = clusters.ClusterPorts.from_dict(region.lab["ports"])
    return clusters.ClusterRegion(name=region.name, root=lab_dir / "regions" / region.name, ports=ports)


def alive_regions(lab_dir: pathlib.Path, topology: topo.Topology) -> dict[str, bool]:
    out = {}
    for name, region in topology.regions.items():
        proc = region_process(lab_dir, region)
        out[name] = any(regions.owns(pid, regions.region_marker(proc)) for pid in region.pids)
    return out


# -- booting ---------------------------------------------------------------------------------------


def _boot_region(
    home: pathlib.Path,
    root: pathlib.Path,
    name: str,
    taken: set[int],
    *,
    deadline_s: float,
    attempts: int = 3,
    extra_conf: dict[str, str] | None = None,
    token: str | None = None,
    wan_layout: dict[str, Any] | None = None,
    on_launch: launches.OnLaunch = lambda _pid, _role: None,
) -> tuple[regions.RegionProcess, int, RegionBoot]:
    last: Exception | None = None
    for attempt in range(1, attempts + 1):
        proc = regions.RegionProcess(name=name, root=root, ports=regions.pick_ports(taken))
        taken.update(proc.ports.as_dict().values())
        started = time.monotonic()
        conf = dict(extra_conf or {})
        if wan_layout:
            conf.update(wan.advertised_listeners(name, proc.ports.broker, wan_layout))
        pid = regions.start(home, proc, extra_conf=conf)
        on_launch(pid, f"region {name}")
        try:
            regions.wait_ready(proc, pid, deadline_s=deadline_s, token=token)
        except regions.RegionDied as e:
            last = e
            regions.stop(pid, regions.region_marker(proc), grace_s=5)
            if e.port_conflict and attempt < attempts:
                # Another program took a port between our choice and the JVM's bind: choose again.
                shutil.rmtree(root / "data", ignore_errors=True)
                (proc.log_dir / "stdout.log").rename(proc.log_dir / f"stdout.attempt{attempt}.log")
                continue
            raise
        except LabError:
            regions.stop(pid, regions.region_marker(proc), grace_s=5)
            raise
        boot = RegionBoot(
            name=name, seconds=time.monotonic() - started, rss_mb=regions.rss_mb(pid), attempts=attempt
        )
        return proc, pid, boot
    raise LabError(f"region {name!r} could not bind its ports after {attempts} attempts: {last}")


def _boot_cluster_region(
    home: pathlib.Path,
    root: pathlib.Path,
    name: str,
    brokers: int,
    taken: set[int],
    *,
    deadline_s: float,
    attempts: int = 3,
    extra_conf: dict[str, str] | None = None,
    on_launch: launches.OnLaunch = lambda _pid, _role: None,
) -> tuple[clusters.ClusterRegion, tuple[int, ...], RegionBoot]:
    last: Exception | None = None
    for attempt in range(1, attempts + 1):
        site = clusters.ClusterRegion(name=name, root=root, ports=clusters.pick_ports(brokers, taken))
        taken.update(p for p in site.ports.as_dict().values() if isinstance(p, int))
        taken.update(p for b in site.ports.brokers for p in (b.broker, b.web))
        started = time.monotonic()
        pids = clusters.start(
            home,
            site,
            extra_conf=extra_conf,
            deadline_s=deadline_s,
            on_launch=lambda pid, role: on_launch(pid, f"region {name} {role}"),
        )
        try:
            clusters.wait_ready(site, pids, deadline_s=max(deadline_s - (time.monotonic() - started), 30.0))
        except regions.RegionDied as e:
            last = e
            clusters.stop(site, pids, grace_s=5)
            if e.port_conflict and attempt < attempts:
                shutil.rmtree(root, ignore_errors=True)
                continue
            raise
        except LabError:
            clusters.stop(site, pids, grace_s=5)
            raise
        rss = sum(regions.rss_mb(p) for p in pids)
        return site, tuple(pids), RegionBoot(name, time.monotonic() - started, rss, attempt)
    raise LabError(f"region {name!r} could not bind its ports after {attempts} attempts: {last}")


def _region_record(
    site: Site, pids: tuple[int, ...], lab: dict[str, Any]
) -> tuple[str, tuple[topo.Broker, ...], dict[str, Any]]:
    """The region's configuration store, its brokers (with their pids, from ``pids`` in start order) and
    its lab-private record."""
    if isinstance(site, clusters.ClusterRegion):
        broker_pids = pids[len(site.roles()) - site.brokers :] if pids else ()
        brokers = tuple(
            topo.Broker(
                service_url=site.broker_service_url(i),
                admin_url=site.broker_admin_url(i),
                pid=broker_pids[i] if broker_pids else None,
            )
            for i in range(site.brokers)
        )
        record = {**lab, "ports": site.ports.as_dict(), "root": str(site.root), "brokers": site.brokers}
        return site.configuration_store, brokers, record
    broker = topo.Broker(
        service_url=site.service_url, admin_url=site.admin_url, pid=pids[0] if pids else None
    )
    return site.zookeeper, (broker,), {**lab, "ports": site.ports.as_dict(), "root": str(site.root)}


def _with_pids(lab_dir: pathlib.Path, region: topo.Region, pids: tuple[int, ...]) -> topo.Region:
    """The region's record with its processes (all of them, or none when stopped) and its brokers' pids."""
    site: Site = cluster_region(lab_dir, region) or region_process(lab_dir, region)
    _, brokers, _ = _region_record(site, pids, region.lab)
    return replace(region, pids=pids, brokers=brokers)


def _wire(
    procs: dict[str, Site],
    namespaces: dict[str, tuple[str, ...]],
    report: Report,
    wan_record: dict[str, Any] | None = None,
) -> None:
    names = list(procs)
    admins = {n: AdminClient(p.admin_url) for n, p in procs.items()}
    for name, admin in admins.items():
        for peer in names:
            if peer == name:
                continue
            if wan_record:
                # Replicators from here to the peer go through the proxy name->peer (see wan).
                admin.upsert_cluster(
                    peer,
                    service_url=procs[peer].admin_url,
                    broker_service_url=wan.proxy_service_url(wan_record, name, peer),
                    listener_name=wan.listener_name(name),
                )
            else:
                admin.upsert_cluster(
                    peer, service_url=procs[peer].admin_url, broker_service_url=procs[peer].service_url
                )
        admin.upsert_tenant(TENANT, allowed_clusters=names)
    for ns, members in namespaces.items():
        for name in members:
            admins[name].create_namespace(ns)
            admins[name].set_allowed_clusters(ns, list(members))
            # Messages replicated into a region before GeoSync creates their subscription there are held by
            # no cursor there: without retention, a broker restart or a ledger rollover deletes them
            # (docs/agent.md, "Retention").
            admins[name].set_retention(ns, minutes=LAB_RETENTION_MINUTES, size_mb=LAB_RETENTION_MB)
        for name in members:
            admins[name].set_replication_clusters(ns, list(members))
        report(f"namespace {ns}: replicated between {', '.join(members)}")


def wait_replication(topology: topo.Topology, *, deadline_s: float = 90.0, report: Report = _silent) -> float:
    """Publish a probe in every region of every namespace and wait until all replicators are connected."""
    from geosync_adapters import messaging

    started = time.monotonic()
    for ns, namespace in topology.namespaces.items():
        topic = f"persistent://{ns}/{PROBE_TOPIC}"
        for name in namespace.regions:
            with messaging.client(topology.regions[name].service_url) as c:
                producer = c.create_producer(topic)
                producer.send(f"probe from {name}".encode())
                producer.close()
        for name in namespace.regions:
            admin = AdminClient(topology.regions[name].admin_url)
            peers = {r for r in namespace.regions if r != name}
            while True:
                try:
                    stats = admin.topic_stats(topic)
                    connected = {c for c, s in (stats.get("replication") or {}).items() if s.get("connected")}
                except AdminError:
                    connected = set()
                if peers <= connected:
                    break
                if time.monotonic() - started > deadline_s:
                    raise LabError(
                        f"replication in {ns} from {name} to {', '.join(sorted(peers - connected))} did not "
                        f"connect within {deadline_s:.0f} s",
                        hint=f"check the region logs under {topology.regions[name].log_dir}",
                    )
                time.sleep(0.5)
        report(f"namespace {ns}: replicators connected")
    return time.monotonic() - started


def up(
    lab_dir: pathlib.Path,
    region_names: list[str],
    *,
    deadline_s: float = 240.0,
    agents: bool = True,
    batch_index_acks: bool | None = None,
    with_wan: bool = False,
    brokers: int = 1,
    sidecars: bool = False,
    report: Report = _silent,
) -> UpResult:
    """Boot a lab in ``lab_dir``; a no-op when the same lab is already running there.

    ``brokers`` of 2 or more makes every region a cluster of that many brokers with its own ZooKeeper,
    configuration store and bookie (``clusters``); 1 is one standalone JVM per region.

    ``with_wan`` routes replication between regions through a Toxiproxy server of the lab (``wan``), so
    that ``geoctl lab wan`` and ``geoctl lab partition`` can shape it; LabError if Toxiproxy is missing.

    ``sidecars`` starts one agent per broker (``start_agent(..., broker=i)``: each syncs the topics its broker
    owns) instead of one per region.

    ``batch_index_acks`` sets the brokers' ``acknowledgmentAtBatchIndexLevelEnabled`` (None: on, unless
    ``GEOSYNC_BATCH_INDEX_ACKS=0``); the choice is recorded per region in the topology (``lab``
    ``batch_index_acks``) and kept when a region is restarted."""
    topo.validate_region_names(region_names)
    if len(region_names) < 2:
        raise LabError(
            "a lab needs at least two regions to replicate between",
            hint="use e.g. --regions a,b or --regions a,b,c",
        )
    _check_brokers(brokers, with_wan=with_wan)
    lab_dir = lab_dir.resolve()
    if topology_path(lab_dir).exists():
        existing = load(lab_dir)
        alive = alive_regions(lab_dir, existing)
        if any(alive.values()):
            same_brokers = all(int(r.lab.get("brokers", 1)) == brokers for r in existing.regions.values())
            if sorted(existing.regions) == sorted(region_names) and same_brokers and all(alive.values()):
                return UpResult(topology=existing, path=topology_path(lab_dir), already_running=True)
            live = ", ".join(n for n, a in alive.items() if a)
            raise LabError(
                f"{lab_dir} holds another live lab (regions {', '.join(existing.regions)}; running: {live})",
                hint=f"stop it with 'geoctl lab down --dir {lab_dir}' or choose another --dir",
            )
    left = launches.running(lab_dir)
    if left:
        raise LabError(
            f"{lab_dir} still has {len(left)} process(es) of an earlier lab running "
            f"({', '.join(launch.role for launch in left)}), e.g. from an interrupted boot",
            hint=f"stop them with 'geoctl lab down --dir {lab_dir}'",
        )
    distribution.check_java()
    if with_wan and wan.server_binary() is None:
        raise LabError(
            "--wan needs toxiproxy-server, which is not installed",
            hint="run scripts/setup.sh (by default it builds toxiproxy-server with Go) or boot without --wan",
        )
    home = distribution.ensure_pulsar()
    # Built (or taken from the cache) once, before the parallel boots; every region loads the same NAR.
    if batch_index_acks is None:
        batch_index_acks = regions.batch_index_acks_default()
    extra = {**plugins.plugin_conf(plugins.ensure_plugins()), **regions.batch_index_conf(batch_index_acks)}
    shutil.rmtree(lab_dir / "regions", ignore_errors=True)
    lab_dir.mkdir(parents=True, exist_ok=True)
    with launches.recording(lab_dir, report) as ledger:
        started = time.monotonic()
        taken: set[int] = set()
        wan_layout: dict[str, Any] | None = None
        if with_wan:
            # Chosen before the boots: each region advertises its peers' proxy ports as listeners.
            n_proxies = len(region_names) * (len(region_names) - 1)
            ports = regions.free_ports(n_proxies + 1)
            taken.update(ports)
            wan_layout = wan.layout(region_names, ports[0], ports[1:])
        booted: dict[str, tuple[Site, tuple[int, ...], RegionBoot]] = {}
        shape = f", {brokers} brokers each" if brokers > 1 else ""
        report(
            f"booting {len(region_names)} region(s) from Pulsar {distribution.PULSAR_VERSION}{shape}: "
            f"{', '.join(region_names)}"
        )

        def boot(name: str) -> tuple[Site, tuple[int, ...], RegionBoot]:
            root = lab_dir / "regions" / name
            if brokers > 1:
                return _boot_cluster_region(
                    home,
                    root,
                    name,
                    brokers,
                    taken,
                    deadline_s=deadline_s,
                    extra_conf=extra,
                    on_launch=ledger.record,
                )
            proc, pid, booted = _boot_region(
                home,
                root,
                name,
                taken,
                deadline_s=deadline_s,
                extra_conf=extra,
                wan_layout=wan_layout,
                on_launch=ledger.record,
            )
            return proc, (pid,), booted

        # Not a with-block: on an interruption its exit would wait for every boot to end; the threads end by
        # themselves once ``up`` has stopped their processes.
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(region_names))
        errors: list[str] = []
        try:
            futures = {pool.submit(boot, n): n for n in region_names}
            for fut in concurrent.futures.as_completed(futures):
                name = futures[fut]
                try:
                    booted[name] = fut.result()
                    done = booted[name][2]
                    report(f"region {name}: up in {done.seconds:.1f} s, {done.rss_mb:.0f} MiB resident")
                except LabError as e:
                    errors.append(str(e))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        if errors:
            for site, pids, _ in booted.values():
                _stop_site(site, pids, grace_s=5)
            raise LabError("\n".join(errors))
        procs = {n: booted[n][0] for n in region_names}
        wan_record: dict[str, Any] = {}
        if wan_layout:
            wan_record = wan.with_upstreams(
                wan_layout, {n: int(p.ports.as_dict()["broker"]) for n, p in procs.items()}
            )
            try:
                wan_record["pid"] = wan.start_server(lab_dir, wan_record, on_launch=ledger.record)
            except LabError:
                for site, pids, _ in booted.values():
                    _stop_site(site, pids, grace_s=5)
                raise
            report(f"wan: toxiproxy-server at {wan_record['api']}, {len(wan_record['proxies'])} proxies")
        namespaces = topo.lab_namespaces(region_names)
        topology = topo.Topology(
            pulsar_version=distribution.PULSAR_VERSION,
            regions={n: _booted_region(p, booted[n][1], batch_index_acks) for n, p in procs.items()},
            namespaces={ns: topo.Namespace(name=ns, regions=m) for ns, m in namespaces.items()},
            wan=wan_record,
        )
        path = save(lab_dir, topology)
        try:
            _wire(procs, namespaces, report, wan_record)
            wait_replication(topology, report=report)
        except (AdminError, LabError) as e:
            raise LabError(
                f"the regions are up but could not be wired together: {e}",
                hint=f"inspect with 'geoctl lab status --dir {lab_dir}', then 'geoctl lab down'",
            ) from e
        if agents:
            # One agent per region, covering every broker of it (docs/lab.md, "Multi-broker regions"), or one
            # per broker with ``sidecars``. The regions are new: a checkpoint left in the directory by an
            # earlier lab describes topics that are gone.
            started_agents: list[str] = []
            for name in region_names:
                shards: list[int | None] = (
                    list(range(len(topology.region(name).brokers))) if sidecars else [None]
                )
                for shard in shards:
                    agent_name = name if shard is None else sidecar_name(name, shard)
                    shutil.rmtree(lab_dir / "agents" / f"{agent_name}-state", ignore_errors=True)
                    topology = start_agent(lab_dir, name, broker=shard, on_launch=ledger.record)
                    started_agents.append(agent_name)
                    report(f"agent {agent_name}: started (pid {topology.agents[agent_name].pid})")
            for agent_name in started_agents:
                wait_agent_ready(lab_dir, agent_name)
                report(f"agent {agent_name}: ready")
        return UpResult(
            topology=topology,
            path=path,
            boots=[booted[n][2] for n in region_names],
            total_seconds=time.monotonic() - started,
        )


def _check_brokers(brokers: int, *, with_wan: bool) -> None:
    if brokers < 1:
        raise LabError(f"--brokers must be at least 1, got {brokers}", hint="use 1 (standalone) or 2 or more")
    if brokers > 1 and with_wan:
        raise LabError(
            "--wan cannot be combined with --brokers yet: the WAN has one proxy per pair of regions, "
            "forwarding to the peer's only broker; each broker of a multi-broker region would need its own",
            hint="boot either a WAN lab (--wan) or a multi-broker lab (--brokers N)",
        )


def _booted_region(site: Site, pids: tuple[int, ...], batch_index_acks: bool) -> topo.Region:
    zookeeper, brokers, lab = _region_record(site, pids, {"batch_index_acks": batch_index_acks})
    return topo.Region(
        name=site.name,
        service_url=site.service_url,
        admin_url=site.admin_url,
        zookeeper=zookeeper,
        pids=pids,
        log_dir=str(site.log_dir),
        lab=lab,
        brokers=brokers,
    )


def _stop_site(site: Site, pids: tuple[int, ...], *, grace_s: float = 20.0) -> dict[str, str]:
    """Stop every process of a region (thawed first: a frozen process cannot handle SIGTERM)."""
    marker = site.marker if isinstance(site, clusters.ClusterRegion) else regions.region_marker(site)
    for pid in pids:
        regions.signal_region(pid, marker, signal.SIGCONT)
    if isinstance(site, clusters.ClusterRegion):
        return clusters.stop(site, pids, grace_s=grace_s)
    outcome = [regions.stop(pid, marker, grace_s=grace_s) for pid in pids]
    return {"standalone": outcome[-1]} if outcome else {}


def _site(lab_dir: pathlib.Path, region: topo.Region) -> Site:
    return cluster_region(lab_dir, region) or region_process(lab_dir, region)


# -- agents ----------------------------------------------------------------------------------------

CONTROL_TOPIC = "geosync-control"
UNSYNCED_PATTERNS = ("*/pip33-*", "*/unsynced-*")


def _agent_paths(lab_dir: pathlib.Path, name: str) -> tuple[pathlib.Path, pathlib.Path]:
    return lab_dir / "agents" / f"{name}.yaml", lab_dir / "agents" / f"{name}.log"


def agent_log(lab_dir: pathlib.Path, name: str) -> pathlib.Path:
    """The log file of the lab's agent ``name`` (its standard output and error)."""
    return _agent_paths(lab_dir.resolve(), name)[1]


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
    config, _ = _agent_paths(lab_dir.resolve(), name)
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
    config, logfile = _agent_paths(lab_dir, agent_name)
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
    _, logfile = _agent_paths(lab_dir.resolve(), name)
    raise LabError(
        f"the agent of region {name} did not become ready within {timeout_s:.0f} s",
        hint=f"read its log: {logfile}",
    )


def agent_metrics_url(lab_dir: pathlib.Path, name: str) -> str:
    config, _ = _agent_paths(lab_dir.resolve(), name)
    port = yaml.safe_load(config.read_text())["metrics_port"]
    return f"http://127.0.0.1:{port}"


# -- stopping and restarting -----------------------------------------------------------------------


def down(lab_dir: pathlib.Path, *, report: Report = _silent) -> dict[str, str]:
    """Stop every process the lab started (agents first, then regions, then any other its launch record
    names, such as an interrupted boot's); return what happened to each."""
    lab_dir = lab_dir.resolve()
    if not topology_path(lab_dir).exists() and launches.read(lab_dir):
        leftovers = launches.sweep(lab_dir)
        for what, happened in leftovers.items():
            report(f"{what}: {happened}")
        return leftovers
    outcome = _down_topology(lab_dir, report)
    for what, happened in launches.sweep(lab_dir).items():
        outcome[what] = happened
        report(f"{what}: {happened}")
    return outcome


def _down_topology(lab_dir: pathlib.Path, report: Report) -> dict[str, str]:
    topology = load(lab_dir)
    outcome: dict[str, str] = {}
    for name, agent in topology.agents.items():
        if agent.pid:
            outcome[f"agent {name}"] = regions.stop(agent.pid, agent.config, grace_s=10)
            report(f"agent {name}: {outcome[f'agent {name}']}")
    for name, region in topology.regions.items():
        for role, happened in _stop_site(_site(lab_dir, region), region.pids).items():
            what = f"region {name}" if role == "standalone" else f"region {name} {role}"
            outcome[what] = happened
            report(f"{what}: {happened}")
    if topology.wan:
        outcome["wan"] = wan.stop_server(lab_dir, topology.wan)
        report(f"wan: {outcome['wan']}")
    stopped = replace(
        topology,
        regions={n: _with_pids(lab_dir, r, ()) for n, r in topology.regions.items()},
        agents={n: replace(a, pid=None) for n, a in topology.agents.items()},
        wan={**topology.wan, "pid": None} if topology.wan else {},
    )
    save(lab_dir, stopped)
    return outcome


def stop_region(lab_dir: pathlib.Path, name: str, *, kill: bool = False) -> topo.Topology:
    """Stop one region (SIGKILL with ``kill``), keeping its data so it can be started again."""
    lab_dir = lab_dir.resolve()
    topology = load(lab_dir)
    region = topology.region(name)
    proc = region_process(lab_dir, region)
    if kill:
        for pid in region.pids:
            regions.signal_region(pid, regions.region_marker(proc), signal.SIGCONT)
            regions.signal_region(pid, regions.region_marker(proc), signal.SIGKILL)
    _stop_site(_site(lab_dir, region), region.pids, grace_s=0 if kill else 20)
    topology = replace(topology, regions={**topology.regions, name: _with_pids(lab_dir, region, ())})
    save(lab_dir, topology)
    return topology


def start_region(lab_dir: pathlib.Path, name: str, *, deadline_s: float = 240.0) -> topo.Topology:
    """Start a stopped region again on its old ports and data (it rejoins replication by itself)."""
    lab_dir = lab_dir.resolve()
    topology = load(lab_dir)
    region = topology.region(name)
    proc = region_process(lab_dir, region)
    if any(regions.owns(pid, regions.region_marker(proc)) for pid in region.pids):
        return topology
    # Labs written before the setting was recorded ran with Pulsar 4.0's default (off).
    batch_index_acks = bool(region.lab.get("batch_index_acks", False))
    extra = {**plugins.plugin_conf(plugins.ensure_plugins()), **regions.batch_index_conf(batch_index_acks)}
    if topology.wan:
        extra.update(wan.advertised_listeners(name, proc.ports.broker, topology.wan))
    home = distribution.ensure_pulsar(topology.pulsar_version)
    cluster = cluster_region(lab_dir, region)
    ledger = launches.Ledger(lab_dir)
    if cluster is not None:
        pids = tuple(
            clusters.start(
                home,
                cluster,
                extra_conf=extra,
                deadline_s=deadline_s,
                on_launch=lambda pid, role: ledger.record(pid, f"region {name} {role}"),
            )
        )
    else:
        pids = (regions.start(home, proc, extra_conf=extra),)
        ledger.record(pids[0], f"region {name}")
    topology = replace(topology, regions={**topology.regions, name: _with_pids(lab_dir, region, pids)})
    save(lab_dir, topology)
    if cluster is not None:
        clusters.wait_ready(cluster, list(pids), deadline_s=deadline_s)
    else:
        regions.wait_ready(proc, pids[0], deadline_s=deadline_s)
    return topology


def rebuild_region(lab_dir: pathlib.Path, name: str, *, deadline_s: float = 240.0) -> topo.Topology:
    """Wipe region ``name`` and boot it again under the same name and ports, as an operator who rebuilds a
    region does (issue 17.2): its ZooKeeper and BookKeeper data go, so its ledger ids start again from 0, and
    its peers, tenant and namespaces are registered again as ``up`` does. Its agent is stopped and its state
    directory wiped too (a rebuilt host); start it again with ``start_agent``. Standalone regions only."""
    lab_dir = lab_dir.resolve()
    topology = load(lab_dir)
    region = topology.region(name)
    if cluster_region(lab_dir, region) is not None:
        raise LabError(f"region {name!r} has several brokers: only a standalone region can be rebuilt")
    stop_agent(lab_dir, name)
    stop_region(lab_dir, name)
    shutil.rmtree(region_process(lab_dir, region).root / "data", ignore_errors=True)
    shutil.rmtree(lab_dir / "agents" / f"{name}-state", ignore_errors=True)
    topology = start_region(lab_dir, name, deadline_s=deadline_s)
    sites = {n: _site(lab_dir, r) for n, r in topology.regions.items()}
    namespaces = {ns: tuple(n.regions) for ns, n in topology.namespaces.items()}
    _wire(sites, namespaces, _silent, topology.wan or None)
    # The peers' replicators to the old region stay stuck on producers it closed ("Producer already
    # closed", seen on 4.0.8): unloading their namespaces starts them again.
    for ns, members in namespaces.items():
        for peer in members:
            if name in members and peer != name:
                AdminClient(topology.regions[peer].admin_url).put(f"/admin/v2/namespaces/{ns}/unload")
    wait_replication(topology)
    return topology


def freeze_region(lab_dir: pathlib.Path, name: str, *, frozen: bool) -> None:
    """SIGSTOP (or SIGCONT) a region: it keeps its sockets open but answers nothing, like a hung host."""
    lab_dir = lab_dir.resolve()
    topology = load(lab_dir)
    region = topology.region(name)
    proc = region_process(lab_dir, region)
    sig = signal.SIGSTOP if frozen else signal.SIGCONT
    for pid in region.pids:
        if not regions.signal_region(pid, regions.region_marker(proc), sig):
            raise LabError(
                f"region {name!r} is not running", hint=f"start it with 'geoctl lab start-region {name}'"
            )


# -- health ----------------------------------------------------------------------------------------


def status(lab_dir: pathlib.Path) -> dict[str, Any]:
    """Health of every region: process, admin API, replication of the probe topics, memory."""
    lab_dir = lab_dir.resolve()
    topology = load(lab_dir)
    alive = alive_regions(lab_dir, topology)
    out: dict[str, Any] = {"dir": str(lab_dir), "pulsar_version": topology.pulsar_version, "regions": {}}
    for name, region in topology.regions.items():
        entry: dict[str, Any] = {
            "process": "running" if alive[name] else "stopped",
            "admin_url": region.admin_url,
            "service_url": region.service_url,
            "rss_mb": round(sum(regions.rss_mb(p) for p in region.pids), 1),
            "brokers": [_broker_status(lab_dir, region, b) for b in region.brokers],
        }
        if alive[name]:
            admin = AdminClient(region.admin_url, timeout=3)
            try:
                entry["clusters"] = admin.clusters(retry=NO_RETRY)
                entry["admin"] = "ok"
            except AdminError as e:
                entry["admin"] = f"error: {e}"
            replication: dict[str, Any] = {}
            for ns, namespace in topology.namespaces.items():
                if name not in namespace.regions:
                    continue
                try:
                    stats = admin.get(f"/admin/v2/persistent/{ns}/{PROBE_TOPIC}/stats", retry=NO_RETRY)
                    replication[ns] = {
                        c: bool(s.get("connected")) for c, s in (stats.get("replication") or {}).items()
                    }
                except AdminError as e:
                    replication[ns] = f"error: {e}"
            entry["replication"] = replication
        out["regions"][name] = entry
    out["healthy"] = all(
        r["process"] == "running"
        and all(b["process"] == "running" for b in r["brokers"])
        and r.get("admin") == "ok"
        and all(isinstance(v, dict) and all(v.values()) for v in r.get("replication", {}).values())
        for r in out["regions"].values()
    )
    if topology.wan:
        # Replication crosses the WAN: without its server no replicator can connect.
        running = wan.owns_server(lab_dir, topology.wan)
        out["wan"] = {"api": topology.wan["api"], "process": "running" if running else "stopped"}
        out["healthy"] = out["healthy"] and running
    return out


def _broker_status(lab_dir: pathlib.Path, region: topo.Region, broker: topo.Broker) -> dict[str, Any]:
    marker = regions.region_marker(region_process(lab_dir, region))
    running = broker.pid is not None and regions.owns(broker.pid, marker)
    return {
        **broker.to_dict(),
        "process": "running" if running else "stopped",
        "rss_mb": round(regions.rss_mb(broker.pid), 1) if running and broker.pid else 0.0,
    }


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


@contextlib.contextmanager
def given_or_booted(
    lab_dir: pathlib.Path | None, names: list[str], *, with_wan: bool = False, report: Report = _silent
) -> Iterator[pathlib.Path]:
    """``lab_dir`` if given (left running), else a lab booted in a temporary directory for the block and
    stopped after it (benchmarks' ``--lab``)."""
    if lab_dir is not None:
        yield lab_dir
        return
    with tempfile.TemporaryDirectory(prefix="geosync-bench-") as tmp:
        booted = pathlib.Path(tmp)
        report("booting a lab of regions " + ", ".join(names) + "…")
        up(booted, names, with_wan=with_wan)
        try:
            yield booted
        finally:
            down(booted)
