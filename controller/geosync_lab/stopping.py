"""Stopping what a lab started: all of it (``down``, with what an interrupted boot left), one region
(``stop_region``), or freezing one (``freeze_region``)."""

from __future__ import annotations

import pathlib
import signal
from dataclasses import replace

from geosync_core import topology as topo
from geosync_lab import clusters, launches, regions, wan
from geosync_lab.errors import LabError
from geosync_lab.topologies import (
    Report,
    Site,
    load,
    region_process,
    save,
    silent,
    site_of,
    topology_path,
    with_pids,
)


def stop_site(site: Site, pids: tuple[int, ...], *, grace_s: float = 20.0) -> dict[str, str]:
    """Stop every process of a region (thawed first: a frozen process cannot handle SIGTERM)."""
    marker = site.marker if isinstance(site, clusters.ClusterRegion) else regions.region_marker(site)
    for pid in pids:
        regions.signal_region(pid, marker, signal.SIGCONT)
    if isinstance(site, clusters.ClusterRegion):
        return clusters.stop(site, pids, grace_s=grace_s)
    outcome = [regions.stop(pid, marker, grace_s=grace_s) for pid in pids]
    return {"standalone": outcome[-1]} if outcome else {}


def down(lab_dir: pathlib.Path, *, report: Report = silent) -> dict[str, str]:
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
        for role, happened in stop_site(site_of(lab_dir, region), region.pids).items():
            what = f"region {name}" if role == "standalone" else f"region {name} {role}"
            outcome[what] = happened
            report(f"{what}: {happened}")
    if topology.wan:
        outcome["wan"] = wan.stop_server(lab_dir, topology.wan)
        report(f"wan: {outcome['wan']}")
    stopped = replace(
        topology,
        regions={n: with_pids(lab_dir, r, ()) for n, r in topology.regions.items()},
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
    stop_site(site_of(lab_dir, region), region.pids, grace_s=0 if kill else 20)
    topology = replace(topology, regions={**topology.regions, name: with_pids(lab_dir, region, ())})
    save(lab_dir, topology)
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
