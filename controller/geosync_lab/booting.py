"""Booting a lab (``up``), or one region of it again (``start_region``, ``rebuild_region``).

``up`` boots every region in parallel (each JVM mostly waits on its own start-up; measured faster than one
after another even on two cores), then wires them: every region registers every other as a peer cluster,
tenant ``geo`` is allowed on all regions, namespaces ``geo/ab`` and ``geo/abc`` are created in each of
their regions with ``allowed_clusters`` and replication clusters set, and ``up`` waits until every
replicator is connected. Every process is written to the lab's launch record (``launches``) as it starts,
so an interrupted boot stops what it started and ``down`` finds what it left.
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import shutil
import time
from dataclasses import dataclass, field, replace
from typing import Any

from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminError
from geosync_core import topology as topo
from geosync_lab import clusters, distribution, launches, plugins, regions, wan
from geosync_lab.agents import sidecar_name, start_agent, stop_agent, wait_agent_ready
from geosync_lab.errors import LabError
from geosync_lab.stopping import stop_region, stop_site
from geosync_lab.topologies import (
    LAB_RETENTION_MB,
    LAB_RETENTION_MINUTES,
    PROBE_TOPIC,
    TENANT,
    Report,
    Site,
    alive_regions,
    booted_region,
    cluster_region,
    load,
    region_process,
    save,
    silent,
    site_of,
    topology_path,
    with_pids,
)


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


def boot_region(
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


def boot_cluster_region(
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


def wire(
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


def wait_replication(topology: topo.Topology, *, deadline_s: float = 90.0, report: Report = silent) -> float:
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
    plugins_loaded: bool = True,
    report: Report = silent,
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
    ``batch_index_acks``) and kept when a region is restarted.

    ``plugins_loaded=False`` boots brokers without GeoSync's broker plugins (no entry filter, no interceptor:
    Pulsar as shipped; the agents then take the admin-API path), for measuring what the plugins cost the
    broker; recorded as ``lab`` ``plugins`` and kept when a region is restarted."""
    topo.validate_region_names(region_names)
    if len(region_names) < 2:
        raise LabError(
            "a lab needs at least two regions to replicate between",
            hint="use e.g. --regions a,b or --regions a,b,c",
        )
    check_brokers(brokers, with_wan=with_wan)
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
    extra = {**_plugin_conf(plugins_loaded), **regions.batch_index_conf(batch_index_acks)}
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
                return boot_cluster_region(
                    home,
                    root,
                    name,
                    brokers,
                    taken,
                    deadline_s=deadline_s,
                    extra_conf=extra,
                    on_launch=ledger.record,
                )
            proc, pid, booted = boot_region(
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
                stop_site(site, pids, grace_s=5)
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
                    stop_site(site, pids, grace_s=5)
                raise
            report(f"wan: toxiproxy-server at {wan_record['api']}, {len(wan_record['proxies'])} proxies")
        namespaces = topo.lab_namespaces(region_names)
        topology = topo.Topology(
            pulsar_version=distribution.PULSAR_VERSION,
            regions={
                n: booted_region(p, booted[n][1], batch_index_acks, plugins_loaded=plugins_loaded)
                for n, p in procs.items()
            },
            namespaces={ns: topo.Namespace(name=ns, regions=m) for ns, m in namespaces.items()},
            wan=wan_record,
        )
        path = save(lab_dir, topology)
        try:
            wire(procs, namespaces, report, wan_record)
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


def _plugin_conf(loaded: bool) -> dict[str, str]:
    """The broker keys that load GeoSync's plugins (built, or taken from the cache, first), or none."""
    return plugins.plugin_conf(plugins.ensure_plugins()) if loaded else {}


def check_brokers(brokers: int, *, with_wan: bool) -> None:
    if brokers < 1:
        raise LabError(f"--brokers must be at least 1, got {brokers}", hint="use 1 (standalone) or 2 or more")
    if brokers > 1 and with_wan:
        raise LabError(
            "--wan cannot be combined with --brokers yet: the WAN has one proxy per pair of regions, "
            "forwarding to the peer's only broker; each broker of a multi-broker region would need its own",
            hint="boot either a WAN lab (--wan) or a multi-broker lab (--brokers N)",
        )


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
    extra = {
        **_plugin_conf(bool(region.lab.get("plugins", True))),
        **regions.batch_index_conf(batch_index_acks),
    }
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
    topology = replace(topology, regions={**topology.regions, name: with_pids(lab_dir, region, pids)})
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
    sites = {n: site_of(lab_dir, r) for n, r in topology.regions.items()}
    namespaces = {ns: tuple(n.regions) for ns, n in topology.namespaces.items()}
    wire(sites, namespaces, silent, topology.wan or None)
    # The peers' replicators to the old region stay stuck on producers it closed ("Producer already
    # closed", seen on 4.0.8): unloading their namespaces starts them again.
    for ns, members in namespaces.items():
        for peer in members:
            if name in members and peer != name:
                AdminClient(topology.regions[peer].admin_url).put(f"/admin/v2/namespaces/{ns}/unload")
    wait_replication(topology)
    return topology
