"""What GeoSync's broker plugins cost the broker (issue 46.3): the same load on brokers with and without them.

    python bench/plugin_overhead.py [--rate 2000] [--duration 60] [--warm-up 15] [--topics 4] [--subs 4]
                                    [--repeat 2] [--record FILE]

Each run boots a fresh two-region lab (``geoctl lab up --no-agents``, and ``--no-plugins`` for the bare
brokers: Pulsar as shipped), one after the other, the order alternating between repeats. On it, one load:
batched producers in both regions (half the messages each, the client's batching with a 10 ms delay), and
in each region ``--subs`` Shared subscriptions per topic created by their consumers as the traffic starts,
acknowledging every message they receive with batch-index acknowledgements. So the brokers publish, replicate
and dispatch, and take every acknowledgement: what the plugins' interceptor (origin index, acknowledgement
feed) and entry filter see. No agent runs in either, so neither lab does the agents' reads: this is the
plugins' own cost, not the sync's.

Measured over ``--duration`` seconds after ``--warm-up``: acknowledgements a second made, the two region
JVMs' CPU (each region is one standalone JVM: broker, bookie and ZooKeeper) per 1,000 acknowledgements,
and publish latency (``send_async`` to its callback) p50, p99 and max. Printed side by side per run, then
the medians of the runs of each kind and the plugins' share above the bare brokers; ``--record`` writes the
row of BENCHMARKS.md (``bench/record.py``).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pulsar
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import monitoring
import record
import scale

from geosync_core import topology as topo
from geosync_lab import labs
from geosync_lab.probes import percentile

console = Console(width=160)
REGIONS = ("a", "b")
KINDS = ("plugins", "bare")


@dataclass
class Run:
    """One load on one lab: what it measured."""

    kind: str
    asked: float
    seconds: float = 0.0
    acked: int = 0
    published: int = 0
    failed_sends: int = 0
    cpu_s: dict[str, float] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)
    """The machine's 1-minute load average as the measurement began and ended (others' work shares it)."""

    @property
    def rate(self) -> float:
        return self.acked / self.seconds if self.seconds else 0.0

    @property
    def cpu_per_1000(self) -> float:
        """The two regions' CPU-seconds per 1,000 acknowledgements."""
        return sum(self.cpu_s.values()) / self.acked * 1000 if self.acked else float("nan")

    def p(self, q: float | None) -> float:
        if not self.latencies_ms:
            return float("nan")
        if q is None:
            return max(self.latencies_ms)
        return percentile(self.latencies_ms, q) or 0.0

    def figures(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "asked_per_s": self.asked,
            "acks_per_s": round(self.rate, 1),
            "published": self.published,
            "failed_sends": self.failed_sends,
            "region_cpu_s": {k: round(v, 2) for k, v in self.cpu_s.items()},
            "region_cpu_s_per_1000_acks": round(self.cpu_per_1000, 4),
            "load_1min": list(self.load),
            "publish_ms": {
                "p50": round(self.p(0.5), 2),
                "p99": round(self.p(0.99), 2),
                "max": round(self.p(None), 2),
            },
        }


class Counter:
    """A count shared by the clients' callback threads."""

    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def add(self, k: int = 1) -> None:
        with self.lock:
            self.n += k


def load(topology: topo.Topology, run: Run, args: argparse.Namespace) -> None:
    """Publish at ``args.rate`` from both regions and acknowledge everything in both; measure after the
    warm-up (see the module)."""
    suffix = uuid.uuid4().hex[:6]
    topics = [f"persistent://geo/ab/overhead-{suffix}-{i}" for i in range(args.topics)]
    clients = {r: pulsar.Client(topology.region(r).service_url, io_threads=2) for r in REGIONS}
    acked, sent, failed = Counter(), Counter(), Counter()
    measuring = threading.Event()
    latencies: list[float] = []
    consumers: list[Any] = []
    try:

        def on_message(consumer: Any, msg: Any) -> None:
            consumer.acknowledge(msg)
            if measuring.is_set():
                acked.add()

        for client in clients.values():
            for t in topics:
                for j in range(args.subs):
                    consumers.append(
                        client.subscribe(
                            t,
                            f"overhead-{j}",
                            consumer_type=pulsar.ConsumerType.Shared,
                            initial_position=pulsar.InitialPosition.Earliest,
                            batch_index_ack_enabled=True,
                            message_listener=on_message,
                        )
                    )
        producers = [
            (clients[r].create_producer(t, batching_enabled=True, batching_max_publish_delay_ms=10))
            for r in REGIONS
            for t in topics
        ]
        # Each message is acknowledged by every subscription in both regions: publish at the rate that
        # gives ``args.rate`` acknowledgements a second.
        per_message = len(REGIONS) * args.subs
        interval = 1.0 / (args.rate / per_message)

        def send(producer: Any) -> None:
            began = time.perf_counter()

            def done(res: Any, _msg_id: Any) -> None:
                if res != pulsar.Result.Ok:
                    failed.add()
                elif measuring.is_set():
                    latencies.append((time.perf_counter() - began) * 1000)
                    sent.add()

            producer.send_async(b"x" * 100, done)

        began = time.monotonic()
        pids = {r: topology.region(r).pids for r in REGIONS}
        cpu0: dict[str, float] = {}
        n = 0
        end = began + args.warm_up + args.duration
        while (now := time.monotonic()) < end:
            if not measuring.is_set() and now >= began + args.warm_up:
                cpu0 = {r: sum(monitoring.cpu_seconds(p) for p in ps) for r, ps in pids.items()}
                measured_at = now
                load0 = os.getloadavg()[0]
                measuring.set()
            send(producers[n % len(producers)])
            n += 1
            time.sleep(max(0.0, began + n * interval - time.monotonic()))
        measuring.clear()
        run.seconds = time.monotonic() - measured_at
        run.load = (round(load0, 1), round(os.getloadavg()[0], 1))
        run.cpu_s = {
            f"region {r}": sum(monitoring.cpu_seconds(p) for p in ps) - cpu0[r] for r, ps in pids.items()
        }
        run.acked, run.published, run.failed_sends = acked.n, sent.n, failed.n
        run.latencies_ms = latencies
        for producer in producers:
            producer.flush()
    finally:
        for c in consumers:
            c.close()
        for client in clients.values():
            client.close()


def one_run(kind: str, args: argparse.Namespace) -> Run:
    run = Run(kind=kind, asked=args.rate)
    with tempfile.TemporaryDirectory(prefix="geosync-overhead-") as tmp:
        lab_dir = pathlib.Path(tmp)
        console.print(f"{kind}: booting a two-region lab{' without the plugins' if kind == 'bare' else ''}…")
        labs.up(lab_dir, list(REGIONS), agents=False, plugins_loaded=kind == "plugins")
        try:
            load(labs.load(lab_dir), run, args)
        finally:
            labs.down(lab_dir)
    console.print(
        f"  {kind}: {run.rate:,.0f} acks/s, region CPU {run.cpu_per_1000:.3f} s per 1,000 acks "
        f"{ {k: round(v, 1) for k, v in run.cpu_s.items()} }, publish p50 {run.p(0.5):.1f} ms p99 "
        f"{run.p(0.99):.1f} ms max {run.p(None):.1f} ms, {run.failed_sends} failed sends, load {run.load}"
    )
    return run


def median(runs: list[Run], value: Any) -> float:
    return statistics.median(value(r) for r in runs) if runs else float("nan")


def summary(runs: list[Run]) -> tuple[Table, dict[str, dict[str, float]]]:
    table = Table("brokers", "acks/s", "region CPU-s / 1,000 acks", "publish p50 ms", "p99 ms", "max ms")
    medians: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        of = [r for r in runs if r.kind == kind]
        for r in of:
            table.add_row(
                kind,
                f"{r.rate:,.0f}",
                f"{r.cpu_per_1000:.3f}",
                f"{r.p(0.5):.1f}",
                f"{r.p(0.99):.1f}",
                f"{r.p(None):.1f}",
            )
        medians[kind] = {
            "acks_per_s": median(of, lambda r: r.rate),
            "cpu_per_1000": median(of, lambda r: r.cpu_per_1000),
            "p99_ms": median(of, lambda r: r.p(0.99)),
            "max_ms": median(of, lambda r: r.p(None)),
        }
    return table, medians


def share(with_: float, without: float) -> str:
    return f"{(with_ / without - 1) * 100:+.0f} %" if without else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000.0, help="acknowledgements a second asked for")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds measured per run")
    parser.add_argument("--warm-up", type=float, default=15.0, help="seconds of load before measuring")
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--subs", type=int, default=4, help="subscriptions per topic in each region")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each kind, alternating")
    record.add_argument(parser)
    args = parser.parse_args()
    if args.rate <= 0 or args.duration <= 0 or args.repeat < 1 or args.topics < 1 or args.subs < 1:
        parser.error("--rate, --duration, --repeat, --topics and --subs must be positive")
    scale.quiet_clients()
    runs: list[Run] = []
    for i in range(args.repeat):
        for kind in KINDS if i % 2 == 0 else tuple(reversed(KINDS)):
            runs.append(one_run(kind, args))
    table, medians = summary(runs)
    console.print(table)
    with_, bare = medians["plugins"], medians["bare"]
    cpu, p99 = share(with_["cpu_per_1000"], bare["cpu_per_1000"]), share(with_["p99_ms"], bare["p99_ms"])
    console.print(
        f"the plugins, medians of {args.repeat} run(s) each: region CPU per acknowledgement {cpu}, "
        f"publish p99 {p99}"
    )
    scenario = (
        f"The broker plugins' own cost on the broker: {args.rate:,.0f} acks/s asked, batched producers in "
        f"both regions, {args.subs} Shared subscriptions per topic on {args.topics} topics in each, no "
        "agents; with the plugins against Pulsar as shipped, fresh two-region labs (issue 46.3)"
    )
    geosync = (
        f"with the plugins: region CPU {with_['cpu_per_1000']:.3f} s per 1,000 acks ({cpu}), publish p99 "
        f"{with_['p99_ms']:.1f} ms ({p99}), max {with_['max_ms']:.1f} ms; medians of {args.repeat}"
    )
    bare_cell = (
        f"bare brokers (no plugins): {bare['cpu_per_1000']:.3f} s per 1,000 acks, p99 {bare['p99_ms']:.1f} "
        f"ms, max {bare['max_ms']:.1f} ms"
    )
    loads = [x for r in runs for x in r.load]
    geosync += f"; machine load {min(loads):.1f}-{max(loads):.1f}"
    figures = {"runs": [r.figures() for r in runs], "medians": medians}
    record.write(args.record, record.make(scenario, geosync, bare_cell, figures))


if __name__ == "__main__":
    main()
