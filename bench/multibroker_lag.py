"""Sync lag of a topic on each broker of a multi-broker region, with the agents of the checkout and, for
comparison, with the agents of another source tree (e.g. the commit before routing, in a git worktree).

    python bench/multibroker_lag.py --dir LAB [--sidecars] [--before-source DIR] [--rounds 5] [--messages 100]

LAB is a running ``geoctl lab up --regions a,b --brokers 2 --dir LAB`` (without agents, or with: they are
restarted). Per round and per broker of a: a topic that broker owns gets ``--messages`` batched messages, a
consumer in a receives them all, waits until b holds them, acknowledges them all, and the lag is the time
from that acknowledgement until b's subscription has no backlog. ``--before-source`` runs the agents from
DIR/controller (its configuration without the settings DIR does not know). ``--sidecars`` measures in the
same run, after the one-agent-per-region figures, with one agent per broker in each region (sharding by
ownership). Wall-clock figures: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable

import pulsar
import yaml

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_lab import labs

NAMESPACE = "geo/ab"
LATEST = (2**63 - 1, 2**63 - 1)
"""Pulsar's MessageId.latest as ledger and entry."""


def until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def one_topic_per_broker(lab: pathlib.Path, tag: str) -> dict[str, str]:
    region = labs.load(lab).region("a")
    admin = AdminClient(region.admin_url)
    found: dict[str, str] = {}
    for i in range(16):
        topic = f"persistent://{NAMESPACE}/lag-{tag}-{i}"
        admin.create_topic(topic)
        url = str(admin.get(f"/lookup/v2/topic/{admin.topic_path(topic)}")["brokerUrl"])
        found.setdefault(url, topic)
        if len(found) == len(region.brokers):
            break
    return found


def lag_once(lab: pathlib.Path, topic: str, sub: str, n: int) -> float:
    topology = labs.load(lab)
    local, remote = AdminClient(topology.region("a").admin_url), AdminClient(topology.region("b").admin_url)
    # At the latest message, as a's consumer subscribes: a subscription created at the latest message does not
    # claim what came before it, so b's at the earliest would keep the earlier rounds' messages.
    remote.create_subscription(topic, sub, at=LATEST)
    with messaging.client(topology.region("a").service_url) as c:
        consumer = c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared)
        producer = c.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=20)
        for i in range(n):
            producer.send_async(f"{i}".encode(), None)
        producer.flush()
        producer.close()
        received = [consumer.receive(timeout_millis=30_000) for _ in range(n)]
        until(lambda: remote.backlog(topic, sub) == local.backlog(topic, sub), "b to hold the messages")
        for msg in received:
            consumer.acknowledge(msg)
        acked_at = time.monotonic()
        consumer.close()
    until(lambda: remote.backlog(topic, sub) == 0, "b's backlog to reach 0")
    return time.monotonic() - acked_at


def start_before(lab: pathlib.Path, source: pathlib.Path) -> list[subprocess.Popen[bytes]]:
    """The agents of ``source``: the lab's agent configuration minus what that tree does not know."""
    procs = []
    for name in ("a", "b"):
        config = yaml.safe_load((lab / "agents" / f"{name}.yaml").read_text())
        config.pop("broker_admin_urls", None)
        config.pop("brokers_refresh_s", None)
        path = lab / "agents" / f"{name}-before.yaml"
        path.write_text(yaml.safe_dump(config))
        env = {**os.environ, "PYTHONPATH": str(source / "controller")}
        log = (lab / "agents" / f"{name}-before.log").open("ab")
        command = [sys.executable, "-m", "geosync_agent", "--config", str(path)]
        procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        until(_ready_at(int(config["metrics_port"])), f"agent {name} from {source}", timeout_s=120)
    return procs


def _ready_at(port: int) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    return ready


def measure(lab: pathlib.Path, label: str, rounds: int, n: int) -> None:
    topics = one_topic_per_broker(lab, uuid.uuid4().hex[:8])
    lags: dict[str, list[float]] = {url: [] for url in topics}
    for r in range(rounds):
        for url, topic in topics.items():
            lags[url].append(lag_once(lab, topic, f"lag-{r}", n))
    order = [b.service_url for b in labs.load(lab).region("a").brokers]  # broker 1 serves admin_url
    for url, values in sorted(lags.items(), key=lambda kv: order.index(kv[0])):
        i = order.index(url) + 1
        print(
            f"{label:>13}  broker {i} ({url}): median {statistics.median(values):.2f} s, "
            f"max {max(values):.2f} s over {len(values)}"
        )


def with_agents(lab: pathlib.Path, *, sidecars: bool) -> list[str]:
    """Stop every agent of the lab, start the region agents (or each broker's sidecar); their names."""
    topology = labs.load(lab)
    for name in topology.agents:
        labs.stop_agent(lab, name)
    started = []
    for region in ("a", "b"):
        shards: list[int | None] = list(range(len(topology.region(region).brokers))) if sidecars else [None]
        for shard in shards:
            labs.start_agent(lab, region, broker=shard)
            started.append(region if shard is None else labs.sidecar_name(region, shard))
    for name in started:
        labs.wait_agent_ready(lab, name, timeout_s=120)
    return started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=pathlib.Path, required=True)
    parser.add_argument("--before-source", type=pathlib.Path)
    parser.add_argument("--sidecars", action="store_true", help="also measure with one agent per broker")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=100)
    args = parser.parse_args()
    lab = args.dir.resolve()
    for label, sidecars in [("region agents", False), *([("sidecars", True)] if args.sidecars else [])]:
        started = with_agents(lab, sidecars=sidecars)
        try:
            measure(lab, label, args.rounds, args.messages)
        finally:
            for name in started:
                labs.stop_agent(lab, name)
    if args.before_source:
        procs = start_before(lab, args.before_source.resolve())
        try:
            measure(lab, "before", args.rounds, args.messages)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)


if __name__ == "__main__":
    main()
