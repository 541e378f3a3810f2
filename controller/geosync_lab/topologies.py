"""The lab's topology file (``DIR/topology.json``) and what it records of each region: where its
processes are, which of them are still ours. Every other part of the lab reads and writes it through here."""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from geosync_core import topology as topo
from geosync_lab import clusters, launches, regions
from geosync_lab.errors import LabError

TENANT = "geo"
LAB_RETENTION_MINUTES = 120
LAB_RETENTION_MB = 1024
"""Retention of the lab's namespaces (and the benchmarks'): longer than any test or benchmark run."""
PROBE_TOPIC = "lab-probe"
TOPOLOGY_FILE = "topology.json"
Report = Callable[[str], None]


def silent(_: str) -> None:
    pass


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


def region_record(
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


def with_pids(lab_dir: pathlib.Path, region: topo.Region, pids: tuple[int, ...]) -> topo.Region:
    """The region's record with its processes (all of them, or none when stopped) and its brokers' pids."""
    site: Site = cluster_region(lab_dir, region) or region_process(lab_dir, region)
    _, brokers, _ = region_record(site, pids, region.lab)
    return replace(region, pids=pids, brokers=brokers)


def booted_region(
    site: Site, pids: tuple[int, ...], batch_index_acks: bool, *, plugins_loaded: bool = True
) -> topo.Region:
    zookeeper, brokers, lab = region_record(
        site, pids, {"batch_index_acks": batch_index_acks, "plugins": plugins_loaded}
    )
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


def site_of(lab_dir: pathlib.Path, region: topo.Region) -> Site:
    return cluster_region(lab_dir, region) or region_process(lab_dir, region)


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True)
