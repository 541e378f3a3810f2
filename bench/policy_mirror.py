"""Policy mirror convergence latency on a running lab: p50/p99 over N edits, seen through the admin API.

One ``Mirror`` per region, each in its own process as in an agent (own event topic, ZooKeeper root and
tenant, so the lab's tenant ``geo`` and its agents are untouched). Each edit sets a namespace's message
TTL through one region's admin API (round robin) and is timed until every other region's admin API
answers the new value, so the figure includes the broker's write, the watch, publishing, geo-replication
of the event topic, the compare-and-set write in the other stores and the brokers' cache refresh.

    python bench/policy_mirror.py --lab /tmp/lab1 [--edits 1000]
"""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from geosync_adapters.admin import AdminClient
from geosync_agent.config import AgentConfig
from geosync_agent.mirroring import Mirror
from geosync_core import envelopes
from geosync_lab import labs

KEY = b"bench-key-0123456789abcdef"


def _config(topology: Any, name: str, run: str) -> AgentConfig:
    r = topology.region(name)
    return AgentConfig(
        region=name,
        admin_url=r.admin_url,
        service_url=r.service_url,
        zookeeper=r.zookeeper,
        mirror_events_topic=f"persistent://geo/abc/geosync-policy-events-bench-{run}",
        mirror_tenants=(f"bench-{run}",),
        mirror_root=f"/geosync/bench-{run}",
    )


def child(args: argparse.Namespace) -> None:
    """One region's mirror in its own process (as in an agent), its snapshot written to ``--state``."""
    mirror = Mirror(
        _config(labs.load(pathlib.Path(args.lab)), args.region, args.run), envelopes.Keys.shared(KEY)
    )
    mirror.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    state = pathlib.Path(args.state)

    def write() -> None:
        tmp = state.with_suffix(".tmp")
        tmp.write_text(json.dumps(mirror.snapshot()))
        tmp.replace(state)

    while not stop.wait(0.5):
        write()
    mirror.stop()
    write()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="lab", help="lab directory (its topology.json)")
    parser.add_argument("--edits", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds one edit may take to converge")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--region", help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.child:
        child(args)
        return
    topology = labs.load(pathlib.Path(args.lab))
    run = uuid.uuid4().hex[:8]
    names = sorted(topology.regions)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-mirror-"))
    states = {n: workdir / f"mirror-{n}.json" for n in names}
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                "--lab",
                args.lab,
                "--region",
                n,
                "--run",
                run,
                "--state",
                str(states[n]),
            ]
        )
        for n in names
    ]

    def snapshots() -> list[dict[str, Any]]:
        return [json.loads(states[n].read_text()) if states[n].exists() else {} for n in names]

    admins = {n: AdminClient(topology.region(n).admin_url) for n in names}
    tenant, ns = f"bench-{run}", f"bench-{run}/ns"
    try:
        deadline = time.monotonic() + 120
        while not all(s.get("leader") for s in snapshots()):
            if time.monotonic() > deadline:
                raise SystemExit(f"the mirrors did not all lead within 120 s: {snapshots()}")
            time.sleep(0.2)
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
                    raise SystemExit(
                        f"edit {i} did not converge in {args.timeout} s: {seen}; mirrors: {snapshots()}"
                    )
                time.sleep(0.01)
            for n, t in seen.items():
                if n != origin:
                    per_hop[n].append(t)
            latencies.append(max(seen.values()))
    finally:
        for c in children:
            c.terminate()
        for c in children:
            c.wait(timeout=30)
    _table(latencies, per_hop, snapshots())


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


def _table(latencies: list[float], per_hop: dict[str, list[float]], mirrors: list[dict[str, Any]]) -> None:
    print(f"policy mirror convergence over {len(latencies)} edits (ms, admin API to admin API)")
    print(f"{'':<22}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}{'mean':>8}")
    rows = [("all regions", latencies)] + [(f"region {n} (as remote)", v) for n, v in per_hop.items() if v]
    for label, values in rows:
        print(
            f"{label:<22}{_pct(values, 0.5):>8.1f}{_pct(values, 0.9):>8.1f}{_pct(values, 0.99):>8.1f}"
            f"{max(values) * 1000:>8.1f}{statistics.fmean(values) * 1000:>8.1f}"
        )
    for snap in mirrors:
        c = snap["counters"]
        print(
            f"mirror {snap['region']}: published={c.get('published', 0)} applied={c.get('applied', 0)} "
            f"cas_conflicts={c.get('cas_conflicts', 0)} parked={len(snap['parked'])} "
            f"ms: event transit {snap['timings']['transit_ms']} queued {snap['timings']['queued_ms']} "
            f"apply {snap['timings']['apply_ms']}"
        )


if __name__ == "__main__":
    main()
