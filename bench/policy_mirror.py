"""Policy mirror convergence latency on a running lab: p50/p99 over N edits, seen through the admin API.

One in-process ``Mirror`` per region (own event topic, ZooKeeper root and tenant, so the lab's tenant
``geo`` and its agents are untouched). Each edit sets a namespace's message TTL through one region's
admin API (round robin) and is timed until every other region's admin API answers the new value, so the
figure includes the broker's write, the watch, publishing, geo-replication of the event topic, the
compare-and-set write in the other stores and the brokers' cache refresh.

    python bench/policy_mirror.py --lab /tmp/lab1 [--edits 1000]
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import statistics
import time
import uuid

from geosync_adapters.admin import AdminClient
from geosync_agent.config import AgentConfig
from geosync_agent.mirroring import Mirror
from geosync_lab import labs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="lab", help="lab directory (its topology.json)")
    parser.add_argument("--edits", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds one edit may take to converge")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    topology = labs.load(pathlib.Path(args.lab))
    run = uuid.uuid4().hex[:8]
    names = sorted(topology.regions)
    mirrors = []
    for name in names:
        r = topology.region(name)
        config = AgentConfig(
            region=name,
            admin_url=r.admin_url,
            service_url=r.service_url,
            zookeeper=r.zookeeper,
            mirror_events_topic=f"persistent://geo/abc/geosync-policy-events-bench-{run}",
            mirror_tenants=(f"bench-{run}",),
            mirror_root=f"/geosync/bench-{run}",
        )
        mirror = Mirror(config, b"bench-key-0123456789abcdef")
        mirror.start()
        mirrors.append(mirror)
    admins = {n: AdminClient(topology.region(n).admin_url) for n in names}
    tenant, ns = f"bench-{run}", f"bench-{run}/ns"
    try:
        while not all(m.snapshot()["leader"] for m in mirrors):
            time.sleep(0.1)
        admins[names[0]].upsert_tenant(tenant, allowed_clusters=names)
        admins[names[0]].create_namespace_with_policies(
            ns, {"replication_clusters": names, "allowed_clusters": names}
        )
        _wait(admins, ns, lambda p: p is not None, args.timeout)
        latencies: list[float] = []
        per_hop: dict[str, list[float]] = {n: [] for n in names}
        for i in range(args.edits):
            origin = names[i % len(names)]
            value = 10_000 + i
            started = time.monotonic()
            admins[origin].set_message_ttl(ns, value)
            seen = {origin: 0.0}
            while len(seen) < len(names):
                for n in names:
                    if (
                        n not in seen
                        and admins[n].namespace_policies(ns).get("message_ttl_in_seconds") == value
                    ):
                        seen[n] = time.monotonic() - started
                if time.monotonic() - started > args.timeout:
                    snaps = [m.snapshot() for m in mirrors]
                    raise SystemExit(
                        f"edit {i} did not converge in {args.timeout} s: {seen}; mirrors: {snaps}"
                    )
                time.sleep(0.005)
            for n, t in seen.items():
                if n != origin:
                    per_hop[n].append(t)
            latencies.append(max(seen.values()))
        _table(latencies, per_hop, mirrors)
    finally:
        for mirror in mirrors:
            mirror.stop()


def _wait(admins: dict[str, AdminClient], ns: str, check, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if all(check(a.namespace_policies(ns)) for a in admins.values()):
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{ns} did not reach every region")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def _table(latencies: list[float], per_hop: dict[str, list[float]], mirrors: list[Mirror]) -> None:
    print(f"policy mirror convergence over {len(latencies)} edits (ms, admin API to admin API)")
    print(f"{'':<22}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}{'mean':>8}")
    rows = [("all regions", latencies)] + [(f"region {n} (as remote)", v) for n, v in per_hop.items() if v]
    for label, values in rows:
        print(
            f"{label:<22}{_pct(values, 0.5):>8.1f}{_pct(values, 0.9):>8.1f}{_pct(values, 0.99):>8.1f}"
            f"{max(values) * 1000:>8.1f}{statistics.fmean(values) * 1000:>8.1f}"
        )
    for m in mirrors:
        snap = m.snapshot()
        c = snap["counters"]
        print(
            f"mirror {snap['region']}: published={c.get('published', 0)} applied={c.get('applied', 0)} "
            f"cas_conflicts={c.get('cas_conflicts', 0)} parked={len(snap['parked'])}"
        )


if __name__ == "__main__":
    main()
