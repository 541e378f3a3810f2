"""A region down for a long time while the others take traffic, then back: how long until it is exact? (17.8)

    python bench/region_down.py [--lab DIR] [--how freeze|cut] [--down 600] [--rate 200] [--topics 4]
                                [--share 0.9]

Setup: ``--topics`` topics in a new namespace replicated between a and b; a batched producer in a publishes
``--rate`` messages/s in all; on each topic a Shared subscription created as the traffic starts, whose
consumer in a acknowledges ``--share`` of the messages at random (batch indexes; the rest stay holes for
good). After a warm-up, region b is down for ``--down`` seconds while a goes on, one of two ways: ``--how
freeze`` (default) stops b's broker process and its agent (SIGSTOP: nothing answers, the sockets stay open;
after long enough, ZooKeeper sessions expire); ``--how cut`` cuts the link between a and b with Toxiproxy (a
lab booted with ``--wan``): b and its agent keep running, each region's replicator to the other holds a
backlog, as in a network outage between regions. Then b is back and the traffic stops, so what b must end up
acknowledging is fixed. Reported, from b's return: when b holds every message (Pulsar's replicator catching
up), when b's agent has read them all, and when b's cursors acknowledge exactly what a's consumers did
(message by message, batch indexes included, read through the interceptor's cursor endpoint); b's agent CPU
seconds and its rounds meanwhile (the round must not grow with the backlog: the highest median of its last 200
rounds seen), and the backlog's size.

Without ``--lab`` a fresh two-region lab is booted in a temporary directory and stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import random
import signal
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
from geosync_adapters.adminhttp import AdminError
from geosync_core.positions import Position
from geosync_lab import labs, probes, wan

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import failover

console = Console(width=150)
SUB = "s"


class Traffic:
    """A producer in a and one consumer per topic there, acknowledging ``share`` at random."""

    def __init__(self, client: Any, topics: list[str], rate: float, share: float) -> None:
        self.client, self.topics, self.rate, self.share = client, topics, rate, share
        self.stop = threading.Event()
        self.received: dict[str, list[probes.Message]] = {t: [] for t in topics}
        self.acked: dict[str, set[probes.Message]] = {t: set() for t in topics}
        self.sent = 0
        self.lock = threading.Lock()
        self.rng = random.Random(17)
        self.consumers = [
            client.subscribe(
                t,
                SUB,
                consumer_type=pulsar.ConsumerType.Shared,
                batch_index_ack_enabled=True,
                message_listener=self._on_message,
            )
            for t in topics
        ]
        self.thread = threading.Thread(target=self._produce, daemon=True)
        self.thread.start()

    def _on_message(self, consumer: Any, msg: Any) -> None:
        mid = msg.message_id()
        key = (Position(mid.ledger_id(), mid.entry_id()), mid.batch_index())
        topic = msg.topic_name()
        with self.lock:
            self.received[topic].append(key)
            ack = self.rng.random() < self.share
            if ack:
                self.acked[topic].add(key)
        if ack:
            consumer.acknowledge(msg)

    def _produce(self) -> None:
        producers = [
            self.client.create_producer(
                t, batching_enabled=True, batching_max_publish_delay_ms=10, block_if_queue_full=True
            )
            for t in self.topics
        ]
        for n in failover.paced(self.rate, self.stop):
            producers[n % len(producers)].send_async(f"m{n}".encode(), None)
            self.sent = n + 1
        for p in producers:
            p.flush()
            p.close()

    def finish(self) -> None:
        """Stop producing; give the consumers time to receive the rest, then stop them."""
        self.stop.set()
        self.thread.join(timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(len(r) for r in self.received.values()) < self.sent:
            time.sleep(0.2)
        time.sleep(1.0)  # grouped acknowledgements go out
        for c in self.consumers:
            c.close()


def freeze(lab_dir: pathlib.Path, agent_pid: int, *, frozen: bool) -> None:
    labs.freeze_region(lab_dir, "b", frozen=frozen)
    os.kill(agent_pid, signal.SIGSTOP if frozen else signal.SIGCONT)


def take_down(how: str, lab_dir: pathlib.Path, agent_pid: int, *, down: bool) -> None:
    """Region b down (``down``) or back, by ``how``: ``freeze`` or ``cut``."""
    if how == "freeze":
        freeze(lab_dir, agent_pid, frozen=down)
    else:
        wan.partition(labs.load(lab_dir), lab_dir, ("a", "b"), heal=not down)


def agent_state(lab_dir: pathlib.Path, region: str) -> dict[str, Any] | None:
    """``region``'s agent's /state (None: no answer)."""
    with contextlib.suppress(requests.RequestException, ValueError):
        state = requests.get(labs.agent_metrics_url(lab_dir, region) + "/state", timeout=10).json()
        return state if isinstance(state, dict) else None
    return None


def stalled_replicators(lab_dir: pathlib.Path, region: str) -> int | None:
    """How many replicators out of ``region`` its agent reports stalled (None: no answer)."""
    state = agent_state(lab_dir, region)
    return None if state is None else len(state.get("replicators_stalled") or [])


def unloads(lab_dir: pathlib.Path, region: str) -> str:
    """What ``region``'s agent did about stuck replicators: topics unloaded (replicator_unload_after_s)."""
    state = agent_state(lab_dir, region)
    if state is None:
        return "?"
    counters = state.get("counters") or {}
    return (
        f"{counters.get('replicator_unloads', 0)} unload(s), {counters.get('replicator_unload_errors', 0)} "
        f"refused, {len(state.get('replicators_stalled') or [])} stalled now"
    )


def explain_stalls(lab_dir: pathlib.Path, admin: AdminClient) -> None:
    """For each replicator a's agent still reports stalled: its cursor in a (``pulsar.repl.b``) as internal
    stats show it, to tell a cursor that stopped reading from one waiting on the remote."""
    state = agent_state(lab_dir, "a") or {}
    for stall in state.get("replicators_stalled") or []:
        topic, remote = stall["topic"], stall["to"]
        console.print(f"still stalled: {topic} -> {remote}: {stall}")
        with contextlib.suppress(AdminError):
            cursor = admin.internal_stats(topic).get("cursors", {}).get(f"pulsar.repl.{remote}", {})
            keys = ("markDeletePosition", "readPosition", "waitingReadOp", "pendingReadOps", "state")
            console.print("  its cursor in a: " + ", ".join(f"{k}={cursor.get(k)}" for k in keys))
            link = (admin.topic_stats(topic).get("replication") or {}).get(remote, {})
            console.print(f"  its replicator: {link}")
    # Pulsar's replicator logs a failed send to the remote broker (the failure that leaks its read permits).
    process = labs.region_process(lab_dir, labs.load(lab_dir).region("a"))
    failed = [
        line
        for path in (process.log_file, process.stdout_file)
        if path.exists()
        for line in path.read_text(errors="replace").splitlines()
        if "Error producing on remote broker" in line
    ]
    console.print(f"a's broker logged {len(failed)} failed replicator send(s)")
    for line in failed[-3:]:
        console.print("  " + line[:400])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=pathlib.Path, help="use this running lab instead of booting one")
    parser.add_argument("--down", type=float, default=600.0, help="seconds region b stays down")
    parser.add_argument(
        "--how",
        choices=("freeze", "cut"),
        default="freeze",
        help="freeze: b's broker and agent stopped (SIGSTOP); cut: the a-b link cut with Toxiproxy (needs a "
        "lab with --wan; booted with it when --lab is not given)",
    )
    parser.add_argument("--rate", type=float, default=200.0, help="messages/s published in a")
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--share", type=float, default=0.9, help="share of messages acknowledged in a")
    parser.add_argument("--warmup", type=float, default=30.0)
    parser.add_argument(
        "--limit", type=float, default=1800.0, help="seconds to wait for exact after b is back"
    )
    args = parser.parse_args()
    wanted = args.how == "cut"
    with labs.given_or_booted(args.lab, ["a", "b"], with_wan=wanted, report=console.print) as lab_dir:
        topology = labs.load(lab_dir)
        if args.how == "cut" and not topology.wan:
            raise SystemExit(f"--how cut needs a lab with a WAN (geoctl lab up --wan); {lab_dir} has none")
        run = uuid.uuid4().hex[:6]
        namespace = f"geo/down-{run}"
        admins = {r: AdminClient(topology.region(r).admin_url, timeout=30) for r in ("a", "b")}
        for admin in admins.values():
            admin.create_namespace(namespace)
            admin.set_retention(namespace, minutes=labs.LAB_RETENTION_MINUTES, size_mb=labs.LAB_RETENTION_MB)
            admin.set_replication_clusters(namespace, ["a", "b"])
        topics = [f"persistent://{namespace}/t{i}" for i in range(args.topics)]
        agent_b = topology.agents["b"]
        assert agent_b.pid is not None
        state_url = labs.agent_metrics_url(lab_dir, "b") + "/state"
        with contextlib.ExitStack() as stack:
            client = stack.enter_context(messaging.client(topology.region("a").service_url))
            traffic = Traffic(client, topics, args.rate, args.share)
            console.print(f"warm-up {args.warmup:.0f} s on {namespace}")
            time.sleep(args.warmup)
            before = traffic.sent
            take_down(args.how, lab_dir, agent_b.pid, down=True)
            down_at = time.monotonic()
            stalled_seen = 0
            console.print(f"region b down ({args.how}) at {before:,} messages sent")
            try:
                while time.monotonic() - down_at < args.down:
                    time.sleep(min(60.0, args.down - (time.monotonic() - down_at)))
                    stalled = stalled_replicators(lab_dir, "a")
                    stalled_seen = max(stalled_seen, stalled or 0)
                    console.print(
                        f"  down {time.monotonic() - down_at:.0f} s, {traffic.sent:,} sent; a's agent "
                        f"reports {'?' if stalled is None else stalled} stalled replicator(s)"
                    )
            finally:
                take_down(args.how, lab_dir, agent_b.pid, down=False)
            thawed = time.monotonic()
            traffic.finish()
            total = traffic.sent
            console.print(f"back; {total - before:,} messages sent while b was down, {total:,} in all")
            proc = psutil.Process(agent_b.pid)
            cpu0 = sum(proc.cpu_times()[:2])
            times: dict[str, float | None] = {"replicated": None, "read": None, "exact": None}
            longest_round, checked_at, said_at = 0.0, 0.0, 0.0
            while time.monotonic() - thawed < args.limit and times["exact"] is None:
                now = time.monotonic() - thawed
                if now - said_at >= 60.0:
                    said_at = now
                    console.print(f"  back {now:.0f} s; a's agent: {unloads(lab_dir, 'a')}")
                with contextlib.suppress(requests.RequestException, ValueError):
                    state = requests.get(state_url, timeout=10).json()
                    # The median of the agent's last 200 rounds: their maximum holds the round the freeze
                    # stopped for as long as the catch-up takes fewer rounds than that.
                    longest_round = max(longest_round, float(state.get("round_seconds_p50") or 0))
                    if times["read"] is None and int(state.get("messages_read", 0)) >= total:
                        times["read"] = now
                if times["replicated"] is None:
                    with contextlib.suppress(AdminError):  # b owns its topics again soon after the thaw
                        held = sum(int(admins["b"].topic_stats(t).get("msgInCounter", 0)) for t in topics)
                        if held >= total:
                            times["replicated"] = now
                elif now - checked_at >= 2.0:
                    checked_at = now
                    if all(exact(admins["b"], t, traffic) for t in topics):
                        times["exact"] = now
                time.sleep(0.5)
            try:
                cpu: float | None = sum(proc.cpu_times()[:2]) - cpu0
            except psutil.NoSuchProcess:  # b's agent was restarted meanwhile (by hand): its CPU is unknown
                cpu = None
        table = Table(
            "how",
            "down",
            "sent while down",
            "acknowledged in a",
            "b holds all",
            "b's agent read all",
            "b exact",
            "b agent CPU",
            "slowest median round",
        )
        acked = sum(len(a) for a in traffic.acked.values())
        table.add_row(
            args.how,
            f"{args.down:.0f} s",
            f"{total - before:,}",
            f"{acked:,} of {total:,}",
            *(f"{v:.1f} s" if v is not None else f"> {args.limit:.0f} s" for v in times.values()),
            "agent restarted" if cpu is None else f"{cpu:.1f} s",
            f"{longest_round:.2f} s",
        )
        console.print(table)
        console.print(f"a's agent reported up to {stalled_seen} stalled replicator(s) while b was down")
        console.print(f"at the end, a's agent: {unloads(lab_dir, 'a')}; b's agent: {unloads(lab_dir, 'b')}")
        explain_stalls(lab_dir, admins["a"])
        if times["exact"] is None:
            explain_mismatch(admins, topics, traffic, lab_dir / f"region_down-{run}.json")
            raise SystemExit("b was not exact within the limit")


def explain_mismatch(
    admins: dict[str, AdminClient], topics: list[str], traffic: Traffic, saved: pathlib.Path
) -> None:
    """Where b differs: per topic, what a's consumer acknowledged, what a's cursor holds of it, and what b's
    cursor holds (in a's positions); every set is saved to ``saved`` for a closer look."""
    table = Table(
        "topic",
        "received",
        "acked by a's consumer",
        "a's cursor",
        "a's cursor ≠ consumer",
        "b's cursor",
        "b ≠ a's cursor",
        "b lacks copies",
    )
    dump: dict[str, Any] = {}
    for topic in topics:
        received = traffic.received[topic]
        in_a = probes.acknowledged(admins["a"], topic, SUB, received)
        mapping = probes.copies(admins["b"], topic, origin="a")
        back = {(mapping[p], i): (p, i) for p, i in received if p in mapping}
        in_b = {back[m] for m in probes.acknowledged(admins["b"], topic, SUB, list(back))}
        consumer = traffic.acked[topic]
        table.add_row(
            topic.rsplit("/", 1)[-1],
            f"{len(received):,}",
            f"{len(consumer):,}",
            f"{len(in_a):,}",
            f"{len(in_a ^ consumer):,}",
            f"{len(in_b):,}",
            f"{len(in_b ^ in_a):,}",
            f"{sum(p not in mapping for p, _ in received):,}",
        )

        def listed(keys: set[probes.Message]) -> list[str]:
            return sorted(f"{p}:{i}" for p, i in keys)

        dump[topic] = {
            "a_not_consumer": listed(in_a - consumer),
            "consumer_not_a": listed(consumer - in_a),
            "b_not_a": listed(in_b - in_a),
            "a_not_b": listed(in_a - in_b),
            "no_copy": sorted({str(p) for p, _ in received if p not in mapping}),
        }
    console.print(table)
    saved.write_text(json.dumps(dump, indent=1))
    console.print(f"the differing messages, per topic: {saved}")


def exact(admin_b: AdminClient, topic: str, traffic: Traffic) -> bool:
    mapping = probes.copies(admin_b, topic, origin="a")
    received = traffic.received[topic]
    if any(p not in mapping for p, _ in received):
        return False
    in_b = [(mapping[p], i) for p, i in received]
    back = {(mapping[p], i): (p, i) for p, i in received}
    got = {back[m] for m in probes.acknowledged(admin_b, topic, SUB, in_b)}
    return got == traffic.acked[topic]


if __name__ == "__main__":
    main()
