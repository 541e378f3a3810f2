"""The chaos run's fault kinds and its schedule: ``plan`` turns a seed into steps (pure: the same seed,
duration, regions and fault kinds give the same schedule)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from geosync_core import topology as topo

NAMESPACE = "geo/abc"
POLICY_NAMESPACE = "geo/chaos-policies"
"""Concurrent policy edits go to a namespace of their own, without data, so no edit can drop messages."""
SUBSCRIPTIONS = {
    "shared": "Shared",
    "key-shared": "Key_Shared",
    "exclusive": "Exclusive",
    "failover": "Failover",
}
KINDS = (
    "agent-kill",
    "broker-kill",
    "freeze",
    "partition",
    "latency",
    "zk-expiry",
    "control",
    "policy-edit",
)
WAN_KINDS = frozenset({"partition", "latency"})
KEYS = 8
HOLE_RATIO = 0.1
ZK_SESSION_TIMEOUT_S = 10.0
"""The agent's ZooKeeper session timeout (``geosync_adapters.zookeeper.Store``'s default)."""


def _retention(minutes: int) -> Any:
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": 64}


def _plain(value: int) -> Any:
    return value


POLICY_FIELDS: dict[str, Callable[[int], Any]] = {
    "retention": _retention,
    "maxConsumersPerTopic": _plain,
    "maxProducersPerTopic": _plain,
    "messageTTL": _plain,
}
Report = Callable[[str], None]
Settle = Callable[[str, str, str, float], tuple[str, dict[str, Any]]]
"""(source, target, subscription, timeout_s) -> (verdict, details): ``safe`` when the move was judged
exact; the details (what it waited for, duplicates predicted) go into the history."""


def silent(_: str) -> None:
    pass


# -- the schedule (pure) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    at: float
    action: str
    """``failover`` or a fault kind."""
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    seed: int
    duration_s: float
    homes: dict[str, str]
    """Each subscription's region when the run starts."""
    failovers: list[Step]
    faults: list[Step]
    final: dict[str, str]
    """Each subscription's region for the final drain (always another than the one it is in)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "duration_s": self.duration_s,
            "homes": self.homes,
            "failovers": [s.__dict__ for s in self.failovers],
            "faults": [s.__dict__ for s in self.faults],
            "final": self.final,
        }


def available_kinds(
    topology: topo.Topology, wanted: tuple[str, ...] = KINDS
) -> tuple[list[str], dict[str, str]]:
    """The fault kinds a lab supports among ``wanted``, and why each other one is not."""
    unavailable = {}
    for kind in wanted:
        if kind in WAN_KINDS and not topology.wan:
            unavailable[kind] = "the lab was booted without --wan (no Toxiproxy between regions)"
        elif kind == "broker-kill" and any(
            int(r.lab.get("brokers", 1)) > 1 for r in topology.regions.values()
        ):
            unavailable[kind] = "multi-broker regions: the run kills standalone regions only"
        elif kind in {"agent-kill", "zk-expiry"} and not topology.agents:
            unavailable[kind] = "the lab runs no agents"
    return [k for k in wanted if k not in unavailable], unavailable


def _fault(rng: random.Random, kind: str, names: list[str], round_: int) -> dict[str, Any]:
    region = rng.choice(names)
    pair = sorted(rng.sample(names, 2))
    if kind == "agent-kill":
        return {"region": region, "down_s": round(rng.uniform(1.0, 8.0), 1)}
    if kind == "broker-kill":
        return {"region": region, "down_s": round(rng.uniform(0.0, 5.0), 1)}
    if kind == "freeze":
        return {"region": region, "hold_s": round(rng.uniform(3.0, 10.0), 1)}
    if kind == "partition":
        return {"pair": pair, "hold_s": round(rng.uniform(5.0, 15.0), 1)}
    if kind == "latency":
        return {
            "pair": pair,
            "latency_ms": rng.choice([50, 100, 200, 400]),
            "jitter_ms": rng.choice([0, 10, 50]),
            "hold_s": round(rng.uniform(10.0, 25.0), 1),
        }
    if kind == "zk-expiry":
        return {"region": region, "hold_s": round(ZK_SESSION_TIMEOUT_S + rng.uniform(4.0, 8.0), 1)}
    if kind == "control":
        return {"region": region, "garbage": rng.randint(1, 4), "tampered": rng.randint(1, 3), "replayed": 2}
    if kind == "policy-edit":
        editors = sorted(rng.sample(names, rng.randint(2, len(names))))
        name = rng.choice(sorted(POLICY_FIELDS))
        values = rng.sample(range(100, 10_000), len(editors))
        return {"round_no": round_, "field": name, "edits": dict(zip(editors, values, strict=True))}
    raise ValueError(f"unknown fault kind {kind!r}")


def plan(
    seed: int,
    duration_s: float,
    region_names: list[str],
    kinds: list[str],
    *,
    failover_every_s: float = 20.0,
    fault_every_s: float = 15.0,
    warmup_s: float = 5.0,
) -> Plan:
    """The schedule of a run: the same arguments always give the same plan."""
    rng = random.Random(seed)
    names = sorted(region_names)
    homes = {sub: rng.choice(names) for sub in SUBSCRIPTIONS}
    where = dict(homes)
    failovers: list[Step] = []
    t = warmup_s + rng.expovariate(1 / failover_every_s)
    while t < duration_s:
        sub = rng.choice(sorted(SUBSCRIPTIONS))
        to = rng.choice([n for n in names if n != where[sub]])
        failovers.append(
            Step(
                round(t, 2),
                "failover",
                {"sub": sub, "from": where[sub], "to": to, "quiescent": rng.random() < 0.5},
            )
        )
        where[sub] = to
        t += rng.expovariate(1 / failover_every_s)
    faults: list[Step] = []
    order = list(kinds)
    rng.shuffle(order)  # every kind once before any repeats
    t = warmup_s + rng.uniform(0.0, fault_every_s)
    while t < duration_s and kinds:
        kind = order[len(faults)] if len(faults) < len(order) else rng.choice(kinds)
        args = _fault(rng, kind, names, len(faults))
        faults.append(Step(round(t, 2), kind, args))
        t += float(args.get("hold_s", args.get("down_s", 1.0))) + rng.expovariate(1 / fault_every_s)
    final = {sub: rng.choice([n for n in names if n != where[sub]]) for sub in SUBSCRIPTIONS}
    return Plan(seed, duration_s, homes, failovers, faults, final)
