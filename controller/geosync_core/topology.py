"""The topology contract: what a lab (or an operator's config) says about the regions.

``geoctl lab up`` writes ``DIR/topology.json``; tests, benchmarks, agents, the Spark audit and users read
it. The keys below are a stable, documented contract (docs/lab.md, "Topology contract"); new keys may be
added, existing ones keep their meaning. Lab-private details (ports, data directories) live under each
region's ``lab`` key so that the public keys stay small.

Invariants: ``from_json(to_json(t)) == t``; every namespace names only known regions; region names are
unique, non-empty and made of ``[a-z0-9-]``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from geosync_core.errors import PermanentError

REGION_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


class TopologyError(PermanentError):
    """The topology document is not what the contract says."""


@dataclass(frozen=True)
class Broker:
    """One broker of a region: its own binary and web service, and its process (None when stopped)."""

    service_url: str
    admin_url: str
    pid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"service_url": self.service_url, "admin_url": self.admin_url, "pid": self.pid}


@dataclass(frozen=True)
class Region:
    """A region. ``service_url`` may name several brokers (``pulsar://h:p1,h:p2``); ``admin_url`` is one
    broker's web service; ``zookeeper`` is the configuration store (where tenant and namespace policies
    live; a standalone region's only store). ``brokers`` lists each broker (empty in topologies written
    before it existed)."""

    name: str
    service_url: str
    admin_url: str
    zookeeper: str
    pids: tuple[int, ...] = ()
    log_dir: str = ""
    lab: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    brokers: tuple[Broker, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "service_url": self.service_url,
            "admin_url": self.admin_url,
            "zookeeper": self.zookeeper,
            "pids": list(self.pids),
            "log_dir": self.log_dir,
        }
        if self.brokers:
            out["brokers"] = [b.to_dict() for b in self.brokers]
        if self.lab:
            out["lab"] = self.lab
        return out


@dataclass(frozen=True)
class Namespace:
    name: str
    regions: tuple[str, ...]
    control_topic: str | None = None


@dataclass(frozen=True)
class Agent:
    region: str
    pid: int | None
    config: str


@dataclass(frozen=True)
class Topology:
    pulsar_version: str
    regions: dict[str, Region]
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=dict)
    # A lab's WAN (its Toxiproxy server and one proxy per ordered pair of regions); empty without one.
    wan: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def region(self, name: str) -> Region:
        try:
            return self.regions[name]
        except KeyError:
            known = ", ".join(sorted(self.regions)) or "none"
            raise TopologyError(f"unknown region {name!r}; this topology has: {known}") from None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pulsar_version": self.pulsar_version,
            "regions": {name: r.to_dict() for name, r in self.regions.items()},
            "namespaces": {
                name: {"regions": list(ns.regions), "control_topic": ns.control_topic}
                for name, ns in self.namespaces.items()
            },
            "agents": {name: {"pid": a.pid, "config": a.config} for name, a in self.agents.items()},
        }
        if self.wan:
            out["wan"] = self.wan
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


def validate_region_names(names: list[str]) -> list[str]:
    """Check a user's region list; return it, or raise with what is wrong and what to do."""
    if not names:
        raise TopologyError("no regions given; name at least one, e.g. --regions a,b,c")
    bad = [n for n in names if not REGION_NAME.match(n)]
    if bad:
        raise TopologyError(
            f"invalid region name(s) {', '.join(repr(b) for b in bad)}: use lower-case letters, digits "
            "and '-', starting with a letter (at most 31 characters)"
        )
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise TopologyError(f"duplicate region name(s): {', '.join(dupes)}; each region needs its own name")
    return names


def _require(obj: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise TopologyError(f"{where}: missing key {key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        raise TopologyError(f"{where}.{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _broker(raw: Any, where: str) -> Broker:
    pid = raw.get("pid") if isinstance(raw, dict) else None
    return Broker(
        service_url=_require(raw, "service_url", str, where),
        admin_url=_require(raw, "admin_url", str, where),
        pid=int(pid) if pid is not None else None,
    )


def from_dict(data: Any) -> Topology:
    version = _require(data, "pulsar_version", str, "topology")
    regions: dict[str, Region] = {}
    for name, raw in _require(data, "regions", dict, "topology").items():
        where = f"regions.{name}"
        regions[name] = Region(
            name=name,
            service_url=_require(raw, "service_url", str, where),
            admin_url=_require(raw, "admin_url", str, where),
            zookeeper=_require(raw, "zookeeper", str, where),
            pids=tuple(int(p) for p in raw.get("pids", [])),
            log_dir=str(raw.get("log_dir", "")),
            lab=dict(raw.get("lab", {})),
            brokers=tuple(_broker(b, f"{where}.brokers") for b in raw.get("brokers", [])),
        )
    namespaces: dict[str, Namespace] = {}
    for name, raw in (data.get("namespaces") or {}).items():
        members = tuple(_require(raw, "regions", list, f"namespaces.{name}"))
        unknown = [r for r in members if r not in regions]
        if unknown:
            raise TopologyError(f"namespaces.{name}: unknown region(s) {', '.join(unknown)}")
        namespaces[name] = Namespace(name=name, regions=members, control_topic=raw.get("control_topic"))
    agents = {
        name: Agent(region=name, pid=raw.get("pid"), config=str(raw.get("config", "")))
        for name, raw in (data.get("agents") or {}).items()
    }
    wan = dict(data.get("wan") or {})
    return Topology(pulsar_version=version, regions=regions, namespaces=namespaces, agents=agents, wan=wan)


def from_json(text: str) -> Topology:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise TopologyError(f"topology is not valid JSON: {e}") from e
    return from_dict(data)


SNAPSHOT_NAMESPACE_PATTERN = "geo/snap-*"
"""Lab namespaces the agents sync in snapshot mode (PIP-33 markers) instead of exact mode."""


def lab_namespaces(region_names: list[str]) -> dict[str, tuple[str, ...]]:
    """The lab's namespaces: ``geo/ab`` over the first two regions, ``geo/abc`` over all (3+ regions), and
    their snapshot-mode twins ``geo/snap-ab`` and ``geo/snap-abc``."""
    out: dict[str, tuple[str, ...]] = {}
    if len(region_names) >= 2:
        out["geo/ab"] = tuple(region_names[:2])
    if len(region_names) >= 3:
        out["geo/abc"] = tuple(region_names)
    for name, members in list(out.items()):
        out[name.replace("geo/", "geo/snap-")] = members
    return out
