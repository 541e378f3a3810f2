"""Time to exact after a burst on a fresh topic (issue 12's first shape), GeoSync against PIP-33.

    python bench/fresh_topic.py [--lab DIR] [--runs 5] [--messages 2000] [--modes builtin,geosync]

Each run: a new topic in ``geo/ab`` and a subscription created in a as the traffic starts (as applications
do), ``--messages`` published at once with the client's default batching, a Shared consumer in a with
batch-index acknowledgements acknowledges 90 % of them at random and stops. From that moment the bench reads
b's cursor (through the plugin's cursor endpoint, batch indexes included) every 100 ms until every message a
acknowledged is acknowledged in b, and nothing else: the time a consumer failing over would have to wait to
get exactly the rest. Runs that are not exact within ``--limit`` seconds count as timeouts.

Without ``--lab`` a fresh three-region lab is booted in a temporary directory and stopped at the end.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import time
import uuid

import pulsar
from rich.console import Console
from rich.table import Table

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_core import topology as topo
from geosync_lab import failover, labs, probes

console = Console(width=150)
Message = probes.Message


def one_run(topology: topo.Topology, *, mode: str, messages: int, limit_s: float, seed: int) -> float | None:
    """Seconds from the consumer stopping in a until b's cursor is exact; None if not within ``limit_s``."""
    suffix = uuid.uuid4().hex[:8]
    topic = f"persistent://geo/ab/fresh-{mode}-{suffix}"
    builtin = mode == "builtin"
    sub = f"{failover.BUILTIN_PREFIX if builtin else 'fresh-'}{suffix}"
    a, b = topology.region("a"), topology.region("b")
    with messaging.client(a.service_url) as c:
        consumer = c.subscribe(
            topic,
            sub,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
            replicate_subscription_state_enabled=builtin,
            batch_index_ack_enabled=True,
        )
        # Batching on, as Java clients do by default (the Python client's default is off: before 2026-11-24
        # this bench relied on it and published one message per entry).
        producer = c.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
        for i in range(messages):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        producer.close()
        received, acked = probes.receive_and_acknowledge(
            consumer, messages, share=0.9, rng=random.Random(seed)
        )
        time.sleep(0.2)  # the client's grouped acknowledgements go out
        consumer.close()
    stopped = time.monotonic()
    admin_b = AdminClient(b.admin_url, timeout=5)
    while time.monotonic() - stopped < limit_s:
        mapping = probes.copies(admin_b, topic, origin="a")
        if all(p in mapping for p, _ in received):
            in_b = [(mapping[p], i) for p, i in received]
            back = {(p_b, i): (p_a, i) for (p_a, i), (p_b, _) in zip(received, in_b, strict=True)}
            got = {back[m] for m in probes.acknowledged(admin_b, topic, sub, in_b)}
            if got == acked:
                return time.monotonic() - stopped
        time.sleep(0.1)
    return None


def pct(values: list[float], q: float) -> str:
    value = probes.percentile(values, q)
    return "-" if value is None else f"{value:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=pathlib.Path, help="use this running lab instead of booting one")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--limit", type=float, default=30.0, help="seconds before a run counts as a timeout")
    parser.add_argument("--modes", default="builtin,geosync")
    args = parser.parse_args()
    with labs.given_or_booted(args.lab, ["a", "b", "c"], report=console.print) as lab_dir:
        topology = labs.load(lab_dir)
        table = Table("mechanism", "runs", "exact within limit", "p50", "p99", "max")
        for mode in args.modes.split(","):
            times: list[float] = []
            for run in range(args.runs):
                took = one_run(topology, mode=mode, messages=args.messages, limit_s=args.limit, seed=run)
                console.print(f"[{mode}] run {run + 1}: {'-' if took is None else f'{took:.2f} s'}")
                if took is not None:
                    times.append(took)
            table.add_row(
                "PIP-33" if mode == "builtin" else "GeoSync exact",
                str(args.runs),
                str(len(times)),
                pct(times, 0.5),
                pct(times, 0.99),
                f"{max(times):.2f} s" if times else "-",
            )
        console.print(table)
        console.print(
            f"time from the consumer in a stopping until b's cursor acknowledges exactly what a did "
            f"({args.messages} messages, batched, 90 % acknowledged at random, limit {args.limit:.0f} s)"
        )


if __name__ == "__main__":
    main()
