"""A lab's health: every region's processes, admin API and replication, and the WAN's server."""

from __future__ import annotations

import pathlib
from typing import Any

from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import NO_RETRY, AdminError
from geosync_core import topology as topo
from geosync_lab import regions, wan
from geosync_lab.topologies import PROBE_TOPIC, alive_regions, load, region_process


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
