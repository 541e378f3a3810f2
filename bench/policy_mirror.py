"""Policy convergence on a running lab: GeoSync's mirror and Pulsar's own PIP-136 synchronizer, side by side.

Each edit sets a namespace's message TTL through one region's admin API (round robin) and is timed until
every other region's admin API answers the new value, so a figure includes the broker's write, the
mechanism's transport (geo-replication of its event topic) and the write in the other stores.

* ``geosync``: one ``Mirror`` per region, each in its own process as in an agent (own event topic,
  ZooKeeper root and tenant, so the lab's tenant ``geo`` and its agents are untouched).
* ``pip136``: Pulsar's ``configurationMetadataSyncEventTopic`` synchronizer, switched on in every region
  (a dynamic broker setting) for its rounds only, on a topic of the namespace every region replicates.
  Pulsar only runs it where the configuration store is not the metadata store: a lab of
  ``geoctl lab up --brokers 2`` (a standalone region shares one ZooKeeper for both). As Pulsar's docs ask,
  each round's tenant and namespace are created in every region before the synchronizer is on.
* ``pip136-created``: the same synchronizer, but the tenant and namespace are created in the first region
  only, with the synchronizer on, and copied to the others by it before the edits start (what a user of a
  mechanism that syncs "tenants, namespaces and their policies" would do; GeoSync's rounds are made so).

Each round runs every mechanism on the same regions (every other round in reverse order); an edit
that a mechanism does not converge within ``--timeout`` is counted, and a round stops after
``--max-misses`` of them (the rest would wait too).

    python bench/policy_mirror.py --lab /tmp/lab1 [--edits 1000]
    python bench/policy_mirror.py --lab /tmp/mb --mechanisms geosync,pip136 --rounds 3 --edits 200
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import record

from geosync_adapters import signing
from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminError, AdminNotFound
from geosync_agent.config import AgentConfig
from geosync_agent.mirroring import Mirror
from geosync_core import envelopes
from geosync_core.topology import Topology
from geosync_lab import labs

SYNC_SETTING = "configurationMetadataSyncEventTopic"
# Pulsar's synchronizer consumes as subscription "metadata-syncer"; "unsynced-*" topics are left alone by
# the lab's agents (an agent syncing that subscription's acknowledgements would skip events a region has
# not applied yet).
SYNC_TOPIC_NAME = "unsynced-pulsar-config-sync"
SYNC_SUBSCRIPTION = "metadata-syncer"
MECHANISMS = ("geosync", "pip136", "pip136-created")


def _config(topology: Topology, name: str, run: str) -> AgentConfig:
    r = topology.region(name)
    return AgentConfig(
        region=name,
        admin_url=r.admin_url,
        service_url=r.service_url,
        zookeeper=r.zookeeper,
        mirror_events_topic=f"persistent://{labs.all_regions_namespace(topology)}/geosync-policy-events-bench-{run}",
        mirror_tenants=(f"bench-{run}",),
        mirror_root=f"/geosync/bench-{run}",
    )


def child(args: argparse.Namespace) -> None:
    """One region's mirror in its own process (as in an agent), its snapshot written to ``--state``."""
    lab = pathlib.Path(args.lab)
    # The lab agents' keys (each region's own, and the keyring listing them all): what its agents sign with.
    keys = envelopes.Keys(
        labs.signer(lab, args.region), signing.load_keyring(lab / "agents" / "keyring.yaml")
    )
    mirror = Mirror(_config(labs.load(lab), args.region, args.run), keys)
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


@dataclass
class Round:
    """One mechanism's edits of one round: convergence times (s) and the edits that did not converge."""

    mechanism: str
    latencies: list[float] = field(default_factory=list)
    per_hop: dict[str, list[float]] = field(default_factory=dict)
    misses: list[int] = field(default_factory=list)
    asked: int = 0
    notes: list[str] = field(default_factory=list)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="lab", help="lab directory (its topology.json)")
    parser.add_argument("--edits", type=int, default=1000, help="edits per mechanism and round")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; each runs every mechanism once")
    parser.add_argument(
        "--mechanisms",
        default="geosync",
        help="comma-separated, in the order each round runs them: geosync, pip136, pip136-created "
        "(the pip136 ones need a --brokers lab)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds one edit may take to converge")
    parser.add_argument("--max-misses", type=int, default=3, help="edits not converged before a round stops")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--region", help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    record.add_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.child:
        child(args)
        return
    mechanisms = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    unknown = sorted(set(mechanisms) - set(MECHANISMS))
    if unknown or not mechanisms:
        parser.error(f"--mechanisms: unknown {unknown or 'none given'}; choose from {', '.join(MECHANISMS)}")
    lab = pathlib.Path(args.lab)
    topology = labs.load(lab)
    names = sorted(topology.regions)
    run = uuid.uuid4().hex[:8]
    admins = {n: AdminClient(topology.region(n).admin_url) for n in names}
    pip136 = any(m.startswith("pip136") for m in mechanisms)
    shared = [n for n, admin in admins.items() if pip136 and not _separate_stores(admin)]
    if shared:
        parser.error(
            f"pip136: region(s) {', '.join(shared)} keep configuration and metadata in one store (a "
            "standalone region does). Pulsar 4.0.8 accepts the synchronizer there and then refuses every "
            "metadata write, switching it off included ('producer is not started yet'). Boot the lab with "
            "'geoctl lab up --brokers 2', or drop pip136 from --mechanisms"
        )
    results: list[Round] = []
    mirrors_or_none = _Mirrors(args.lab, names, run) if "geosync" in mechanisms else None
    with mirrors_or_none or contextlib.nullcontext() as mirrors:
        if mirrors is not None:
            mirrors.wait_leading(120)
            admins[names[0]].upsert_tenant(f"bench-{run}", allowed_clusters=names)
        for r in range(args.rounds):
            # Every other round in reverse order, so no mechanism always runs on a lab just warmed up.
            for mechanism in mechanisms if r % 2 == 0 else mechanisms[::-1]:
                print(f"round {r + 1}/{args.rounds}: {mechanism}, {args.edits} edits", flush=True)
                if mechanism == "geosync":
                    ns = f"bench-{run}/ns{r}"
                    admins[names[0]].create_namespace_with_policies(
                        ns, {"replication_clusters": names, "allowed_clusters": names}
                    )
                    _wait(admins, ns, lambda p: p is not None, args.timeout)
                    results.append(_edits("geosync", admins, names, ns, args))
                else:
                    results.append(
                        _pip136_round(
                            lab, topology, admins, mechanism, tenant=f"bench-{run}-{mechanism}-{r}", args=args
                        )
                    )
                _print_round(results[-1])
        snapshots = mirrors.snapshots() if mirrors is not None else []
    _summary(results, snapshots)
    record.write(args.record, _record(results, args))


def _record(results: list[Round], args: argparse.Namespace) -> dict[str, Any]:
    """This run's row: GeoSync's mirror against Pulsar's synchronizer where it ran too."""

    def cell(mechanisms: tuple[str, ...]) -> str:
        mine = [r for r in results if r.mechanism in mechanisms]
        if not mine:
            return "-"
        times = sorted(t for r in mine for t in r.latencies)
        asked = sum(r.asked for r in mine)
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))] if times else None
        spread = f", p99 {p99 * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms" if p99 is not None else ""
        return f"{len(times):,} of {asked:,} converged{spread}"

    figures = {
        "rounds": [
            {"mechanism": r.mechanism, "asked": r.asked, "latencies_s": r.latencies, "misses": r.misses}
            for r in results
        ]
    }
    row: dict[str, Any] = record.make(
        f"Policy mirror, {args.edits:,} edits a round, {args.rounds} round(s), mechanisms {args.mechanisms}",
        cell(("geosync",)),
        # the column of Pulsar's own mechanism: here PIP-136's synchronizer
        "PIP-136: " + cell(("pip136", "pip136-created")) if "pip136" in args.mechanisms else "-",
        figures=figures,
    )
    return row


class _Mirrors:
    """GeoSync's mirrors, one child process per region, stopped on exit."""

    def __init__(self, lab: str, names: list[str], run: str) -> None:
        workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-mirror-"))
        self.states = {n: workdir / f"mirror-{n}.json" for n in names}
        args = [sys.executable, __file__, "--child", "--lab", lab, "--run", run]
        self.children = [
            subprocess.Popen([*args, "--region", n, "--state", str(self.states[n])]) for n in names
        ]

    def __enter__(self) -> _Mirrors:
        return self

    def __exit__(self, *exc: object) -> None:
        for c in self.children:
            c.terminate()
        for c in self.children:
            c.wait(timeout=30)

    def snapshots(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) if p.exists() else {} for p in self.states.values()]

    def wait_leading(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all(s.get("leader") for s in self.snapshots()):
            if time.monotonic() > deadline:
                raise SystemExit(f"the mirrors did not all lead within {timeout:.0f} s: {self.snapshots()}")
            time.sleep(0.2)


def _pip136_round(
    lab: pathlib.Path,
    topology: Topology,
    admins: dict[str, AdminClient],
    mechanism: str,
    *,
    tenant: str,
    args: argparse.Namespace,
) -> Round:
    """Pulsar's synchronizer on for one round: the tenant and namespace created in every region first
    (PIP-136 copies no existing state; ``pip136-created``: in the first region, copied by the
    synchronizer), then the edits; the synchronizer is off again afterwards."""
    names = sorted(admins)
    topic = f"persistent://{labs.all_regions_namespace(topology)}/{SYNC_TOPIC_NAME}"
    ns = f"{tenant}/ns"
    policies = {"replication_clusters": names, "allowed_clusters": names}
    creators = [admins[names[0]]] if mechanism == "pip136-created" else list(admins.values())
    _synchronizer(admins, None)
    bad_versions = _bad_versions(lab, names)
    try:
        if mechanism == "pip136-created":
            _synchronizer(admins, topic)
            _wait_synchronizers(admins, topic, args.timeout)
        for admin in creators:
            admin.upsert_tenant(tenant, allowed_clusters=names)
            admin.create_namespace_with_policies(ns, policies)
        _wait(admins, ns, lambda p: p is not None, args.timeout)
        if mechanism == "pip136":
            _synchronizer(admins, topic)
            _wait_synchronizers(admins, topic, args.timeout)
        result = _edits(mechanism, admins, names, ns, args)
    finally:
        _synchronizer(admins, None)
    dropped = _bad_versions(lab, names) - bad_versions
    if dropped:
        result.notes.append(
            f"brokers failed {dropped} metadata writes with BadVersionException "
            "(events dropped, echoes among them)"
        )
    return result


def _separate_stores(admin: AdminClient) -> bool:
    """Whether the region's brokers keep their configuration store apart from their metadata store (where
    Pulsar's synchronizer may run), from their runtime configuration."""
    runtime = admin.runtime_configuration()
    configuration = runtime.get("configurationMetadataStoreUrl") or runtime.get("configurationStoreServers")
    return bool(configuration) and configuration != runtime.get("metadataStoreUrl")


def _synchronizer(admins: dict[str, AdminClient], topic: str | None) -> None:
    for name, admin in admins.items():
        try:
            admin.set_dynamic_configuration(SYNC_SETTING, topic)
        except AdminNotFound:
            pass  # deleting a setting that is not set
        except AdminError as e:
            raise SystemExit(
                f"region {name} refused to switch Pulsar's synchronizer ({SYNC_SETTING}): {e}"
            ) from e


def _wait_synchronizers(admins: dict[str, AdminClient], topic: str, timeout: float) -> None:
    """Until every region's brokers consume the sync topic and its replicators are connected."""
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        for name, admin in admins.items():
            try:
                stats = admin.topic_stats(topic)
            except AdminError as e:
                state[name] = str(e)
                continue
            consumers = stats.get("subscriptions", {}).get(SYNC_SUBSCRIPTION, {}).get("consumers", [])
            connected = all(r.get("connected") for r in stats.get("replication", {}).values())
            state[name] = {
                "consumers": len(consumers),
                "publishers": len(stats.get("publishers", [])),
                "replicators_connected": connected and bool(stats.get("replication")),
            }
        if all(isinstance(s, dict) and s["consumers"] and s["replicators_connected"] for s in state.values()):
            return
        time.sleep(0.2)
    raise SystemExit(f"Pulsar's synchronizer did not start in every region within {timeout:.0f} s: {state}")


_BAD_VERSION = re.compile(rb"Failed to update metadata [^\n]*\n[^\n]*BadVersionException")


def _bad_versions(lab: pathlib.Path, names: list[str]) -> int:
    """How many metadata writes the regions' brokers logged as failed with a BadVersionException (Pulsar's
    synchronizer logs one for each event it cannot apply, and drops the event; echoes of a region's own
    edits among them)."""
    total = 0
    for name in names:
        for log in (lab / "regions" / name / "logs").glob("broker-*.log"):
            total += len(_BAD_VERSION.findall(log.read_bytes()))
    return total


def _edits(
    mechanism: str, admins: dict[str, AdminClient], names: list[str], ns: str, args: argparse.Namespace
) -> Round:
    result = Round(mechanism, per_hop={n: [] for n in names})
    for i in range(args.edits):
        origin = names[i % len(names)]
        value = 10_000 + i
        result.asked += 1
        started = time.monotonic()
        admins[origin].set_message_ttl(ns, value)
        seen = {origin: 0.0}
        while len(seen) < len(names) and time.monotonic() - started <= args.timeout:
            for n in names:
                if n not in seen and admins[n].namespace_policies(ns).get("message_ttl_in_seconds") == value:
                    seen[n] = time.monotonic() - started
            time.sleep(0.01)
        if len(seen) < len(names):
            result.misses.append(i)
            result.notes.append(
                f"edit {i} (made in {origin}) not seen within {args.timeout:.0f} s by "
                f"{', '.join(n for n in names if n not in seen)}"
            )
            if len(result.misses) >= args.max_misses:
                result.notes.append(f"round stopped after {len(result.misses)} edits not converged")
                break
            continue
        for n, t in seen.items():
            if n != origin:
                result.per_hop[n].append(t)
        result.latencies.append(max(seen.values()))
    return result


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


HEADER = f"{'':<30}{'edits':>7}{'conv.':>7}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}{'mean':>8}"


def _row(label: str, asked: int, values: list[float]) -> str:
    if not values:
        return f"{label:<30}{asked:>7}{0:>7}{'-':>8}{'-':>8}{'-':>8}{'-':>8}{'-':>8}"
    return (
        f"{label:<30}{asked:>7}{len(values):>7}{_pct(values, 0.5):>8.1f}{_pct(values, 0.9):>8.1f}"
        f"{_pct(values, 0.99):>8.1f}{max(values) * 1000:>8.1f}{statistics.fmean(values) * 1000:>8.1f}"
    )


def _print_round(result: Round) -> None:
    print(HEADER)
    print(_row(f"{result.mechanism}: all regions", result.asked, result.latencies))
    for n, values in result.per_hop.items():
        if values:
            print(_row(f"  region {n} (as remote)", len(values), values))
    for note in result.notes[-5:]:
        print(f"  {note}")
    print(flush=True)


def _summary(results: list[Round], mirrors: list[dict[str, Any]]) -> None:
    print("convergence over all rounds (ms, admin API to admin API; conv. = edits every region showed)")
    print(HEADER)
    for mechanism in dict.fromkeys(r.mechanism for r in results):
        mine = [r for r in results if r.mechanism == mechanism]
        print(_row(mechanism, sum(r.asked for r in mine), [t for r in mine for t in r.latencies]))
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
