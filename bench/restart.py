"""Restart (kill -9) to exact with a long retention, with the agent's checkpoint and without (issue 12.3).

    python bench/restart.py [--lab DIR] [--messages 1000000] [--runs 3] [--acks 2000]

Setup: a topic in a new namespace replicated between a and b with unlimited retention, holding ``--messages``
retained messages (published in a with batching, replicated to b), then a subscription in a and b created at
the end (the consumers are at the tail of a long retention, as in production), and b's agent given time to
read everything and checkpoint. Each run, for each mode: b's agent is killed with SIGKILL (``rebuild``: its
checkpoint file is deleted as well, which is the agent before checkpoints); ``--acks`` new messages are
published in a and a Shared consumer there acknowledges 90 % of them at random while b's agent is down; b's
agent is started, and the bench reads b's
cursor (batch indexes included, through the plugin's cursor endpoint) every 100 ms until exactly what a
acknowledged is acknowledged in b. Reported: seconds from the start to exact, and how many messages b's agent
read after its start (the whole retention when it rebuilds). PIP-33 has no agent to restart: its brokers
keep their snapshots, so it has no row here.

Without ``--lab`` a fresh three-region lab is booted in a temporary directory and stopped at the end.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import time
import uuid
from typing import Any

import pulsar
import requests
from rich.console import Console
from rich.table import Table

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_core import topology as topo
from geosync_lab import labs, probes

console = Console(width=150)
CHECKPOINT = "checkpoint.json.z"


def agent_state(lab_dir: pathlib.Path, region: str) -> dict[str, Any]:
    state: dict[str, Any] = requests.get(labs.agent_metrics_url(lab_dir, region) + "/state", timeout=5).json()
    return state


def settle(lab_dir: pathlib.Path, region: str, *, quiet_s: float = 3.0, topic: str | None = None) -> None:
    """Until the agent tracks ``topic`` (if given), has read everything (messages_read still for
    ``quiet_s``) and checkpointed since. Without the first wait, a topic that discovery had not found yet
    (a pass every 10 s with the agent's own interval) let ``messages_read`` stand still before its reading
    began, and the restart that followed read the whole retention again (41 s, 875,505 messages)."""
    while topic is not None and topic not in agent_state(lab_dir, region).get("tracked_topics", []):
        time.sleep(0.5)
    last, still_since = -1, time.monotonic()
    while True:
        read = int(agent_state(lab_dir, region)["messages_read"])
        if read != last:
            last, still_since = read, time.monotonic()
        elif time.monotonic() - still_since >= quiet_s:
            break
        time.sleep(0.5)
    after = time.time()
    while (agent_state(lab_dir, region).get("checkpoint") or {}).get("at", 0) <= after:
        time.sleep(0.5)


def publish(topology: topo.Topology, topic: str, messages: int, *, quiet: bool = False) -> None:
    """Publish ``messages`` in a (batched) and wait until b holds them all."""
    started = time.monotonic()
    admin_b = AdminClient(topology.region("b").admin_url, timeout=10)
    before = int(admin_b.topic_stats(topic).get("msgInCounter", 0)) if quiet else 0
    with messaging.client(topology.region("a").service_url) as c:
        producer = c.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=500,
            batching_max_publish_delay_ms=20,
            block_if_queue_full=True,
        )
        for i in range(messages):
            producer.send_async(f"m{i}".encode(), None)
            if i and i % 200_000 == 0:
                console.print(f"  published {i:,} in {time.monotonic() - started:.0f} s")
        producer.flush()
        producer.close()
    while int(admin_b.topic_stats(topic).get("msgInCounter", 0)) < before + messages:
        time.sleep(0.2)
    if not quiet:
        console.print(f"  {messages:,} messages in a and b after {time.monotonic() - started:.0f} s")


def one_run(
    lab_dir: pathlib.Path,
    topology: topo.Topology,
    consumer: Any,
    topic: str,
    sub: str,
    *,
    mode: str,
    acks: int,
    seed: int,
    settings: dict[str, Any] | None = None,
) -> tuple[float | None, int]:
    """(seconds from b's agent start to exact or None within 120 s, messages b's agent read meanwhile).
    ``settings``: b's agent configuration over the lab's when it starts again (``labs.start_agent``)."""
    labs.stop_agent(lab_dir, "b", kill=True)
    if mode == "rebuild":
        (lab_dir / "agents" / "b-state" / CHECKPOINT).unlink(missing_ok=True)
    publish(topology, topic, acks, quiet=True)
    received, acked = probes.receive_and_acknowledge(consumer, acks, share=0.9, rng=random.Random(seed))
    time.sleep(0.5)  # grouped acknowledgements go out
    admin_b = AdminClient(topology.region("b").admin_url, timeout=10)
    mapping = probes.copies(admin_b, topic, origin="a")
    in_b = [(mapping[p], i) for p, i in received]
    back = {(p_b, i): (p_a, i) for (p_a, i), (p_b, _) in zip(received, in_b, strict=True)}
    started = time.monotonic()
    labs.start_agent(lab_dir, "b", settings=settings)
    took: float | None = None
    got: set[probes.Message] = set()
    while time.monotonic() - started < 120:
        got = {back[m] for m in probes.acknowledged(admin_b, topic, sub, in_b)}
        if got == acked:
            took = time.monotonic() - started
            break
        time.sleep(0.1)
    if took is None:
        console.print(f"  not exact: {len(acked - got)} acknowledged in a only, {len(got - acked)} in b only")
    labs.wait_agent_ready(lab_dir, "b", timeout_s=300)
    return took, int(agent_state(lab_dir, "b")["messages_read"])


def prepare(lab_dir: pathlib.Path, topology: topo.Topology, messages: int) -> tuple[str, str]:
    """A topic in a new namespace of a and b with unlimited retention holding ``messages`` (in a and b), its
    subscription created in both at the end, and b's agent settled (read everything, checkpointed since):
    (topic, subscription)."""
    suffix = uuid.uuid4().hex[:8]
    namespace = f"geo/restart-bench-{suffix}"
    topic, sub = f"persistent://{namespace}/t", f"restart-{suffix}"
    for region in ("a", "b"):
        admin = AdminClient(topology.region(region).admin_url, timeout=10)
        admin.create_namespace(namespace)
        admin.set_replication_clusters(namespace, ["a", "b"])
        admin.post(
            f"/admin/v2/namespaces/{namespace}/retention",
            {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )
    console.print(f"publishing {messages:,} messages on {topic}")
    publish(topology, topic, messages)
    for region in ("a", "b"):  # at the end: the retained messages are history to these subscriptions
        with messaging.client(topology.region(region).service_url) as c:
            c.subscribe(topic, sub, initial_position=pulsar.InitialPosition.Latest).close()
    settle(lab_dir, "b", topic=topic)
    return topic, sub


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=pathlib.Path, help="use this running lab instead of booting one")
    parser.add_argument("--messages", type=int, default=1_000_000, help="retained messages on the topic")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--acks", type=int, default=2000, help="messages received in a per run (90 %% acked)")
    parser.add_argument("--modes", default="checkpoint,rebuild")
    args = parser.parse_args()
    with labs.given_or_booted(args.lab, ["a", "b", "c"], report=console.print) as lab_dir:
        topology = labs.load(lab_dir)
        topic, sub = prepare(lab_dir, topology, args.messages)
        results: dict[str, list[tuple[float | None, int]]] = {m: [] for m in args.modes.split(",")}
        with messaging.client(topology.region("a").service_url) as c:
            consumer = c.subscribe(
                topic, sub, consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
            )
            for run in range(args.runs):
                for mode, rows in results.items():
                    took, read = one_run(
                        lab_dir, topology, consumer, topic, sub, mode=mode, acks=args.acks, seed=run
                    )
                    rows.append((took, read))
                    console.print(
                        f"{mode}, run {run + 1}: exact after {'-' if took is None else f'{took:.2f} s'}, "
                        f"read {read:,} messages"
                    )
                    settle(lab_dir, "b")
            consumer.close()
        table = Table("agent", "runs", "exact within 120 s", "p50", "max", "messages read after start (max)")
        for mode, rows in results.items():
            times = [t for t, _ in rows if t is not None]
            p50 = probes.percentile(times, 0.5)
            table.add_row(
                "with its checkpoint" if mode == "checkpoint" else "without (rebuilds the index)",
                str(len(rows)),
                str(len(times)),
                "-" if p50 is None else f"{p50:.2f} s",
                f"{max(times):.2f} s" if times else "-",
                f"{max(r for _, r in rows):,}",
            )
        console.print(table)
        console.print(
            f"kill -9 of b's agent, {args.acks} new messages in a, 90 % of them acknowledged meanwhile, then "
            f"the agent started: until b acknowledges exactly what a did ({args.messages:,} retained)"
        )


if __name__ == "__main__":
    main()
