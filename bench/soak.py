"""Memory over a long run: is every agent's memory flat, or does something only grow? (issues 12 and 17.7)

    python bench/soak.py [--lab DIR] [--duration 3600] [--topics 20] [--subs 2] [--rate 100] [-o FILE]

Workload, on a namespace of its own replicated between a and b with retention (so nothing is trimmed for the
agents): ``--topics`` topics created as the traffic starts; in each region one batched producer per topic,
``--rate`` messages/s per region in all (both regions produce); per topic ``--subs`` Shared subscriptions,
consumed alternately in a and b, whose consumers acknowledge batch indexes and negatively acknowledge 3 %
(redelivered a second later and acknowledged then: holes that come and go); and per topic one subscription
nobody ever consumes (its mark-delete never moves: before issue 17.7 the agents kept ~250 B per message above
it, for the whole retention). Every ``--policy-every`` seconds a namespace policy of the soak's own tenant is
edited in a and b alternately (the policy mirror's records and tombstones).

``--trace-memory`` restarts the agents with ``PYTHONTRACEMALLOC=1`` and prints their ``/debug/memory``
(largest allocation sites) at the end.

Every ``--sample`` seconds, per agent: RSS, CPU seconds, and from ``/state`` what the agent holds (topics,
subscriptions, origin-index runs, entry details, claim spans, messages read but not yet indexed (the
inbox), mirror records and tombstones). At the end: the samples, and per agent RSS after the warm-up, at
the end, its maximum and its slope over the second half (least squares, MiB per hour), with the same for the
state counters; ``-o FILE`` writes all of it as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import random
import sys
import threading
import time
import uuid
from typing import Any

import psutil
import pulsar
import requests
from rich.console import Console
from rich.table import Table

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_core import topology as topo
from geosync_lab import labs

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import failover
import record

console = Console(width=170)
MIB = 1024 * 1024
STATE_FIELDS = ("topics", "subscriptions", "index_runs", "entry_details", "claim_spans", "inbox")


def sample(lab_dir: pathlib.Path, topology: topo.Topology, started: float) -> dict[str, Any]:
    row: dict[str, Any] = {"t": round(time.monotonic() - started, 1)}
    for name, agent in sorted(topology.agents.items()):
        proc = psutil.Process(agent.pid)
        cpu = proc.cpu_times()
        state = requests.get(labs.agent_metrics_url(lab_dir, name) + "/state", timeout=10).json()
        mirror = state.get("mirror") or {}
        row[name] = {
            "rss_mib": round(proc.memory_info().rss / MIB, 1),
            "cpu_s": round(cpu.user + cpu.system, 1),
            **{f: state.get(f) for f in STATE_FIELDS},
            "mirror_records": mirror.get("records"),
            "mirror_tombstones": mirror.get("tombstones"),
            "details_dropped": state.get("counters", {}).get("entries_over_budget", 0),
            "round_max_s": state.get("round_seconds_max"),
        }
    return row


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return 0.0 if var == 0 else 3600 * sum((t - mx) * (v - my) for t, v in points) / var


class Workload:
    def __init__(self, clients: dict[str, Any], namespace: str, args: argparse.Namespace) -> None:
        self.clients, self.args = clients, args
        self.topics = [f"persistent://{namespace}/t{i}" for i in range(args.topics)]
        self.stop = threading.Event()
        self.sent = self.acked = self.nacked = 0
        self.errors: list[str] = []
        self.consumers: list[Any] = []
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        rng = random.Random(7)
        for topic in self.topics:
            for i in range(self.args.subs):
                region = "ab"[i % 2]

                def listener(consumer: Any, msg: Any) -> None:
                    if rng.random() < 0.03 and msg.redelivery_count() == 0:
                        consumer.negative_acknowledge(msg)
                        self.nacked += 1
                    else:
                        consumer.acknowledge(msg)
                        self.acked += 1

                self.consumers.append(
                    self.clients[region].subscribe(
                        topic,
                        f"soak-{i}",
                        consumer_type=pulsar.ConsumerType.Shared,
                        batch_index_ack_enabled=True,
                        negative_ack_redelivery_delay_ms=1000,
                        message_listener=listener,
                    )
                )
            self.clients["a"].subscribe(topic, "nobody", consumer_type=pulsar.ConsumerType.Shared).close()
        for region in ("a", "b"):
            thread = threading.Thread(target=self._produce, args=(region,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _produce(self, region: str) -> None:
        producers = [
            self.clients[region].create_producer(
                t, batching_enabled=True, batching_max_publish_delay_ms=10, block_if_queue_full=True
            )
            for t in self.topics
        ]
        for n in failover.paced(self.args.rate, self.stop):
            producers[n % len(producers)].send_async(
                f"{region}-{n}".encode(), self._sent, partition_key=f"k{n % 50}"
            )
        for p in producers:
            p.flush()
            p.close()

    def _sent(self, result: Any, _msg_id: Any) -> None:
        if result == pulsar.Result.Ok:
            self.sent += 1
        elif len(self.errors) < 20:
            self.errors.append(str(result))

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
        for consumer in self.consumers:
            consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=pathlib.Path, help="use this running lab instead of booting one")
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds of load")
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--subs", type=int, default=2, help="consumed subscriptions per topic")
    parser.add_argument("--rate", type=float, default=100.0, help="messages/s published per region")
    parser.add_argument("--sample", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--policy-every", type=float, default=10.0, help="seconds between policy edits")
    parser.add_argument(
        "--warmup", type=float, default=300.0, help="seconds before the first reference sample"
    )
    parser.add_argument(
        "--trace-memory",
        action="store_true",
        help="restart the agents with PYTHONTRACEMALLOC=1 first and print their /debug/memory at the end "
        "(tracing costs the agents CPU: rounds and lag are not comparable with a run without it)",
    )
    parser.add_argument("-o", "--output", type=pathlib.Path, help="write samples and summary as JSON")
    record.add_argument(parser)
    args = parser.parse_args()
    with labs.given_or_booted(args.lab, ["a", "b"], report=console.print) as lab_dir:
        topology = labs.load(lab_dir)
        if args.trace_memory:
            os.environ["PYTHONTRACEMALLOC"] = "1"  # inherited by the agents started below
            for name in sorted(topology.agents):
                labs.stop_agent(lab_dir, name)
                labs.start_agent(lab_dir, name)
                labs.wait_agent_ready(lab_dir, name)
            topology = labs.load(lab_dir)
        run = uuid.uuid4().hex[:6]
        namespace, tenant = f"geo/soak-{run}", f"soak-{run}"
        admins = {r: AdminClient(topology.region(r).admin_url, timeout=10) for r in ("a", "b")}
        for admin in admins.values():
            admin.create_namespace(namespace)
            admin.set_replication_clusters(namespace, ["a", "b"])
            admin.post(
                f"/admin/v2/namespaces/{namespace}/retention",
                {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
            )
        admins["a"].upsert_tenant(tenant, allowed_clusters=["a", "b"])
        admins["a"].create_namespace_with_policies(f"{tenant}/ns", {"replication_clusters": ["a", "b"]})
        stack = contextlib.ExitStack()
        clients = {
            r: stack.enter_context(messaging.client(topology.region(r).service_url)) for r in ("a", "b")
        }
        workload = Workload(clients, namespace, args)
        workload.start()
        started = time.monotonic()
        samples: list[dict[str, Any]] = []
        edits = policy_errors = 0
        next_sample = next_edit = started
        try:
            while time.monotonic() - started < args.duration:
                now = time.monotonic()
                if now >= next_edit:
                    next_edit += args.policy_every
                    try:
                        admins["ab"[edits % 2]].set_message_ttl(f"{tenant}/ns", 1000 + edits)
                        edits += 1
                    except Exception as exc:  # a region busy for a moment: counted, the soak goes on
                        policy_errors += 1
                        console.print(f"policy edit failed: {exc}")
                if now >= next_sample:
                    next_sample += args.sample
                    row = sample(lab_dir, topology, started)
                    row.update(sent=workload.sent, acked=workload.acked, nacked=workload.nacked)
                    samples.append(row)
                    console.print(
                        f"{row['t']:>7.0f} s  sent {workload.sent:,} acked {workload.acked:,}  "
                        + "  ".join(
                            f"{n}: {row[n]['rss_mib']} MiB, runs {row[n]['index_runs']}, details "
                            f"{row[n]['entry_details']}, spans {row[n]['claim_spans']}, "
                            f"inbox {row[n]['inbox']}, longest round {row[n]['round_max_s']:.1f} s, "
                            f"mirror {row[n]['mirror_records']}/{row[n]['mirror_tombstones']}"
                            for n in sorted(topology.agents)
                        )
                    )
                time.sleep(0.2)
        finally:
            workload.close()
            stack.close()
        if args.trace_memory:
            memory = {
                n: requests.get(labs.agent_metrics_url(lab_dir, n) + "/debug/memory", timeout=120).json()
                for n in sorted(topology.agents)
            }
            for n, report in memory.items():
                console.print(
                    f"{n}: traced {report['traced_mib']} MiB (peak {report['peak_mib']}), "
                    f"RSS {report['rss_mib']} MiB, {report['allocated_blocks']:,} blocks; largest sites:"
                )
                for site in report["top"][:12]:
                    console.print(f"    {site['kib']:>10,.0f} KiB  {site['blocks']:>9,}  {site['site']}")
        summary = summarize(samples, sorted(topology.agents), args.warmup)
        summary.update(
            sent=workload.sent,
            acked=workload.acked,
            nacked=workload.nacked,
            policy_edits=edits,
            policy_errors=policy_errors,
            send_errors=workload.errors,
            duration_s=args.duration,
            topics=args.topics,
            subs_per_topic=args.subs + 1,
            rate_per_region=args.rate,
        )
        if args.trace_memory:
            summary["memory"] = memory
        show(summary)
        if args.output:
            args.output.write_text(json.dumps({"summary": summary, "samples": samples}, indent=1))
            console.print(f"wrote {args.output}")
        rss = [per["rss_mib"]["max"] for per in summary["agents"].values() if "rss_mib" in per]
        subs = args.topics * (args.subs + 1)
        record.write(
            args.record,
            record.make(
                f"Memory over {args.duration / 60:.0f} min, {subs:,} subscriptions",
                "RSS max **"
                + " / ".join(f"{v:.0f}" for v in rss)
                + " MiB** (agents "
                + ", ".join(summary["agents"])
                + ")",
                figures={k: v for k, v in summary.items() if k != "memory"},
            ),
        )


def summarize(samples: list[dict[str, Any]], agents: list[str], warmup: float) -> dict[str, Any]:
    out: dict[str, Any] = {"agents": {}}
    if not samples:
        return out
    end = samples[-1]["t"]
    second_half = [s for s in samples if s["t"] >= end / 2]
    after_warmup = [s for s in samples if s["t"] >= warmup] or samples
    for name in agents:
        fields = ["rss_mib", *STATE_FIELDS, "mirror_records", "mirror_tombstones"]
        per: dict[str, Any] = {}
        for f in fields:
            values = [s[name][f] for s in samples if isinstance(s[name].get(f), int | float)]
            if not values:
                continue
            ref = next((s[name][f] for s in after_warmup if isinstance(s[name].get(f), int | float)), None)
            per[f] = {
                "after_warmup": ref,
                "end": values[-1],
                "max": max(values),
                "slope_per_hour_second_half": round(
                    slope_per_hour(
                        [(s["t"], s[name][f]) for s in second_half if isinstance(s[name].get(f), int | float)]
                    ),
                    2,
                ),
            }
        per["cpu_s"] = samples[-1][name]["cpu_s"] - samples[0][name]["cpu_s"]
        per["details_dropped"] = samples[-1][name]["details_dropped"]
        per["round_max_s"] = max(s[name]["round_max_s"] or 0 for s in samples)
        out["agents"][name] = per
    return out


def show(summary: dict[str, Any]) -> None:
    table = Table("agent", "what", "after warm-up", "end", "max", "slope, 2nd half (/h)")
    for name, per in summary.get("agents", {}).items():
        for f, v in per.items():
            if isinstance(v, dict):
                table.add_row(
                    name,
                    f,
                    str(v["after_warmup"]),
                    str(v["end"]),
                    str(v["max"]),
                    str(v["slope_per_hour_second_half"]),
                )
        table.add_row(
            name,
            "cpu seconds / details dropped / longest round",
            str(per["cpu_s"]),
            str(per["details_dropped"]),
            f"{per['round_max_s']} s",
            "",
        )
    console.print(table)
    console.print(
        f"sent {summary.get('sent', 0):,}, acknowledged {summary.get('acked', 0):,}, negatively acknowledged "
        f"{summary.get('nacked', 0):,}, policy edits {summary.get('policy_edits', 0)} "
        f"({summary.get('policy_errors', 0)} failed), send errors {len(summary.get('send_errors', []))}"
    )


if __name__ == "__main__":
    main()
