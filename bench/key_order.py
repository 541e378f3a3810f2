"""Key_Shared order in a live failover (issue 45, case 6): GeoSync against PIP-33 and against no sync at all.

    python bench/key_order.py [--lab DIR] [--runs 3] [--modes geosync,builtin,none] [--partitions 4]
                              [--keys 50] [--rate 50] [--before 20] [--after 15] [--hole-ratio 0.02]
                              [--key-based-batching] [--json FILE] [--record FILE]

One run, on the lab's ``geo/ab``: a partitioned topic; in a and in b a batching producer publishes keyed
messages (``--keys`` keys, each message naming its producer and its sequence number); two Key_Shared
consumers in a (batch-index acknowledgements on) acknowledge what they receive but a share ``--hole-ratio``
(holes). After ``--before`` seconds both consumers are closed in a and at once subscribed in b, with the
producers still going (no quiet period); ``--after`` seconds later the producers stop and b's consumers drain
the subscription, acknowledging everything.

The mechanisms, each on its own topic and subscription (created in both regions before any traffic, as PIP-33
needs): ``geosync`` (a plain subscription, synced by the lab's agents), ``builtin`` (Pulsar's replicated
subscriptions, PIP-33: ``replicate_subscription_state_enabled``, a ``pip33-`` name the agents leave alone)
and ``none`` (an ``unsynced-`` name the agents leave alone: b delivers everything again, the control for
Pulsar's own Key_Shared dispatch).

Counted per run:

* **order in b**: a message delivered in b for the first time there after a later message of the same key
  and producer had been delivered in b (issue 45's wording of case 6);
* **order**: the same over first deliveries anywhere (the chaos checker's rule, invariant 6 per key and
  origin: decision 0016);
* **duplicates**: deliveries in b of messages a's consumers acknowledged;
* **lost**: a message whose send was confirmed and that no consumer was ever given.

Without ``--lab`` a two-region lab is booted in a temporary directory and stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pulsar
import record
from failover import paced
from rich.console import Console
from rich.table import Table

from geosync_adapters.admin import AdminClient
from geosync_core import topology as topo
from geosync_lab import failover, labs

console = Console(width=170)

MODES = {"geosync": "GeoSync", "builtin": "PIP-33", "none": "no sync"}
PREFIX = {"geosync": "keyorder-", "builtin": failover.BUILTIN_PREFIX, "none": "unsynced-"}
"""Subscription names: the lab's agents sync ``keyorder-*`` and leave ``pip33-*`` and ``unsynced-*`` alone
(``labs.UNSYNCED_PATTERNS``)."""
EXAMPLES = 5


@dataclass(frozen=True)
class Shape:
    partitions: int = 4
    keys: int = 50
    rate: float = 50.0
    """Messages a second each region's producer publishes."""
    before_s: float = 20.0
    after_s: float = 15.0
    hole_ratio: float = 0.02
    key_based: bool = False
    """Producers batch by key (``BatchingType.KeyBased``) instead of Pulsar's default batching."""
    warm_up_s: float = 6.0
    drain_quiet_s: float = 6.0


@dataclass
class Delivery:
    at: float
    region: str
    consumer: int
    uid: str
    msg_id: str
    redelivery: int


@dataclass
class Run:
    mode: str
    topic: str
    sub: str
    sent: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    """uid -> (producer, key, sequence number), for every send the broker confirmed."""
    failed_sends: int = 0
    deliveries: list[Delivery] = field(default_factory=list)
    acked_in_a: set[str] = field(default_factory=set)
    moved_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self, d: Delivery) -> None:
        with self.lock:
            self.deliveries.append(d)


@dataclass
class Outcome:
    mode: str
    topic: str
    published: int
    failed_sends: int
    acked_in_a: int
    delivered_in_b: int
    duplicates: int
    lost: int
    order_in_b: int
    order_anywhere: int
    examples: list[str]
    deliveries: list[list[object]] = field(default_factory=list, repr=False)
    """Every message given, in order: seconds from the move, region, consumer, producer, key, sequence number,
    message id, redelivery count (``--json``: for finding where an order broke)."""

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "deliveries"}


def _parse(data: bytes) -> tuple[str, str, int] | None:
    try:
        body = json.loads(data)
        return str(body["p"]), str(body["k"]), int(body["s"])
    except (ValueError, KeyError, TypeError):
        return None


def _uid(producer: str, seq: int) -> str:
    return f"{producer}#{seq}"


def order_violations(
    run: Run, deliveries: list[Delivery], *, label: str, examples: list[str] | None = None
) -> int:
    """First deliveries among ``deliveries`` (in the order given) of a message after a later one of the same
    producer and key: what a Key_Shared consumer must never see (per key and origin, decision 0016)."""
    seen: set[str] = set()
    last: dict[tuple[str, str], int] = {}
    found = 0
    for d in deliveries:
        if d.uid in seen or d.uid not in run.sent:
            continue
        seen.add(d.uid)
        producer, key, n = run.sent[d.uid]
        before = last.get((producer, key), -1)
        if n < before:
            found += 1
            if examples is not None and len(examples) < EXAMPLES:
                examples.append(
                    f"{label}: key {key} of {producer}: #{n} ({d.msg_id}, {d.region}, consumer {d.consumer}, "
                    f"{d.at - run.moved_at:+.2f} s from the move) after #{before}"
                )
        last[(producer, key)] = max(n, before)
    return found


def judge(run: Run) -> Outcome:
    in_b = [d for d in run.deliveries if d.region == "b"]
    examples: list[str] = []
    anywhere = order_violations(run, run.deliveries, label="anywhere", examples=examples)
    b_only = order_violations(run, in_b, label="in b", examples=examples)
    given = {d.uid for d in run.deliveries}
    return Outcome(
        mode=run.mode,
        topic=run.topic,
        published=len(run.sent),
        failed_sends=run.failed_sends,
        acked_in_a=len(run.acked_in_a),
        delivered_in_b=len(in_b),
        duplicates=sum(1 for d in in_b if d.uid in run.acked_in_a),
        lost=len(set(run.sent) - given),
        order_in_b=b_only,
        order_anywhere=anywhere,
        examples=examples,
        deliveries=[
            [
                round(d.at - run.moved_at, 3),
                d.region,
                d.consumer,
                *run.sent.get(d.uid, ("?", "?", -1)),
                d.msg_id,
                d.redelivery,
            ]
            for d in run.deliveries
        ],
    )


class Producer(threading.Thread):
    """One region's batching producer of keyed messages, paced, until ``stop``."""

    def __init__(
        self, run: Run, client: pulsar.Client, region: str, shape: Shape, stop: threading.Event
    ) -> None:
        super().__init__(name=f"key-order-producer-{region}", daemon=True)
        self.run_, self.region, self.shape, self.stop = run, region, shape, stop
        batching = pulsar.BatchingType.KeyBased if shape.key_based else pulsar.BatchingType.Default
        self.producer = client.create_producer(
            run.topic,
            batching_enabled=True,
            batching_type=batching,
            batching_max_messages=20,
            batching_max_publish_delay_ms=20,
            block_if_queue_full=True,
        )
        self.name_ = f"{region}-p"

    def run(self) -> None:
        rng = random.Random()
        for seq in paced(self.shape.rate, self.stop):
            key = f"k{rng.randrange(self.shape.keys)}"
            body = json.dumps({"p": self.name_, "s": seq, "k": key}).encode()
            self.producer.send_async(body, self._callback(seq, key), partition_key=key)
        self.producer.flush()
        self.producer.close()

    def _callback(self, seq: int, key: str) -> Any:
        def sent(result: Any, _msg_id: Any) -> None:
            with self.run_.lock:
                if result == pulsar.Result.Ok:
                    self.run_.sent[_uid(self.name_, seq)] = (self.name_, key, seq)
                else:
                    self.run_.failed_sends += 1

        return sent


class Receiver(threading.Thread):
    """One Key_Shared consumer's receive loop: records every message given, acknowledges all but holes."""

    def __init__(
        self, run: Run, consumer: Any, region: str, n: int, *, hole_ratio: float, stop: threading.Event
    ) -> None:
        super().__init__(name=f"key-order-consumer-{region}-{n}", daemon=True)
        self.run_, self.consumer, self.region, self.n = run, consumer, region, n
        self.hole_ratio, self.stop = hole_ratio, stop
        self.last_at = time.monotonic()

    def run(self) -> None:
        rng = random.Random()
        while not self.stop.is_set():
            try:
                msg = self.consumer.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            self.last_at = time.monotonic()
            parsed = _parse(msg.data())
            if parsed is None:
                self.consumer.acknowledge(msg)
                continue
            producer, _key, seq = parsed
            uid = _uid(producer, seq)
            self.run_.delivered(
                Delivery(
                    self.last_at, self.region, self.n, uid, str(msg.message_id()), msg.redelivery_count()
                )
            )
            if self.hole_ratio and rng.random() < self.hole_ratio:
                continue  # never acknowledged here: a hole
            self.consumer.acknowledge(msg)
            if self.region == "a":
                with self.run_.lock:
                    self.run_.acked_in_a.add(uid)


def _subscribe(client: pulsar.Client, run: Run, builtin: bool) -> Any:
    return client.subscribe(
        run.topic,
        run.sub,
        consumer_type=pulsar.ConsumerType.KeyShared,
        initial_position=pulsar.InitialPosition.Earliest,
        replicate_subscription_state_enabled=builtin,
        batch_index_ack_enabled=True,
    )


def _consume(
    clients: dict[str, pulsar.Client],
    region: str,
    run: Run,
    builtin: bool,
    *,
    hole_ratio: float,
    stop: threading.Event,
) -> tuple[list[Any], list[Receiver]]:
    """Two Key_Shared consumers of the run's subscription in ``region``, and their receive loops (not
    started yet)."""
    consumers = [_subscribe(clients[region], run, builtin) for _ in range(2)]
    receivers = [
        Receiver(run, c, region, n, hole_ratio=hole_ratio, stop=stop) for n, c in enumerate(consumers)
    ]
    return consumers, receivers


def _partitioned(topology: topo.Topology, topic: str, partitions: int) -> None:
    """The partitioned topic in a, and its metadata in b (created there too if geo-replication has not)."""
    admin_a, admin_b = (AdminClient(topology.region(r).admin_url) for r in ("a", "b"))
    admin_a.create_partitioned_topic(topic, partitions)
    deadline = time.monotonic() + 10
    while admin_b.partitioned_metadata(topic) != partitions and time.monotonic() < deadline:
        time.sleep(0.5)
    if admin_b.partitioned_metadata(topic) != partitions:
        admin_b.create_partitioned_topic(topic, partitions)


def one_run(topology: topo.Topology, mode: str, shape: Shape) -> Outcome:
    suffix = uuid.uuid4().hex[:8]
    run = Run(
        mode=mode, topic=f"persistent://geo/ab/key-order-{mode}-{suffix}", sub=f"{PREFIX[mode]}{suffix}"
    )
    builtin = mode == "builtin"
    _partitioned(topology, run.topic, shape.partitions)
    clients = {r: pulsar.Client(topology.region(r).service_url) for r in ("a", "b")}
    producing, receiving = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    try:
        for c in clients.values():
            _subscribe(c, run, builtin).close()
        time.sleep(shape.warm_up_s)  # agents discover the subscription; PIP-33's snapshots start
        consumers, receivers = _consume(
            clients, "a", run, builtin, hole_ratio=shape.hole_ratio, stop=receiving
        )
        producers = [Producer(run, clients[r], r, shape, producing) for r in ("a", "b")]
        threads = [*receivers, *producers]
        for th in threads:
            th.start()
        time.sleep(shape.before_s)
        # The move, with traffic going on and no quiet period: a's receive loops stop, a's consumers close
        # (their grouped acknowledgements go out), b's subscribe at once.
        receiving.set()
        for th in receivers:
            th.join(timeout=10)
        for c in consumers:
            c.close()
        run.moved_at = time.monotonic()
        receiving = threading.Event()
        consumers, receivers = _consume(clients, "b", run, builtin, hole_ratio=0.0, stop=receiving)
        threads = [*receivers, *producers]
        for th in receivers:
            th.start()
        time.sleep(shape.after_s)
        producing.set()
        for th in producers:
            th.join(timeout=30)
        while time.monotonic() - max(r.last_at for r in receivers) < shape.drain_quiet_s:
            time.sleep(0.5)
        receiving.set()
        for th in receivers:
            th.join(timeout=10)
        time.sleep(0.5)  # the last grouped acknowledgements go out
        for c in consumers:
            c.close()
    finally:
        producing.set()
        receiving.set()
        for c in clients.values():
            try:
                c.close()
            except pulsar.PulsarException as e:
                console.print(f"closing a client: {e}")
    outcome = judge(run)
    console.print(
        f"[{MODES[mode]}] {run.topic}: published {outcome.published} ({outcome.failed_sends} failed), "
        f"acked in a {outcome.acked_in_a}, delivered in b {outcome.delivered_in_b}: "
        f"{outcome.duplicates} duplicates, "
        f"{outcome.lost} lost, order violations {outcome.order_in_b} in b, {outcome.order_anywhere} anywhere"
    )
    for line in outcome.examples:
        console.print("   " + line)
    return outcome


def runs(topology: topo.Topology, modes: list[str], n: int, shape: Shape) -> Iterator[Outcome]:
    """``n`` runs of each mode, the modes taking turns (a slow minute of the machine spread over all)."""
    for _ in range(n):
        for mode in modes:
            yield one_run(topology, mode, shape)


def _spread(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


def summary(outcomes: list[Outcome], modes: list[str]) -> Table:
    table = Table(
        "mechanism",
        "runs",
        "published",
        "acked in a",
        "delivered in b",
        "duplicates",
        "lost",
        "order violations in b",
        "order violations anywhere",
    )
    for mode in modes:
        mine = [o for o in outcomes if o.mode == mode]
        table.add_row(
            MODES[mode],
            str(len(mine)),
            _spread([o.published for o in mine]),
            _spread([o.acked_in_a for o in mine]),
            _spread([o.delivered_in_b for o in mine]),
            _spread([o.duplicates for o in mine]),
            _spread([o.lost for o in mine]),
            _spread([o.order_in_b for o in mine]),
            _spread([o.order_anywhere for o in mine]),
        )
    return table


def key_order_record(outcomes: list[Outcome], modes: list[str], shape: Shape) -> dict[str, Any]:
    def cell(mode: str) -> str:
        mine = [o for o in outcomes if o.mode == mode]
        if not mine:
            return "-"
        return (
            f"order violations {_spread([o.order_in_b for o in mine])} in {len(mine)} runs; "
            f"{sum(o.lost for o in mine)} lost; "
            f"duplicates median {statistics.median(o.duplicates for o in mine):.0f}"
        )

    none = f"; no sync: {cell('none')}" if "none" in modes else ""
    row: dict[str, Any] = record.make(
        f"Key_Shared order in a live failover (issue 45 case 6): {shape.partitions} partitions, "
        f"{shape.keys} keys, batched producers in a and b, 2 consumers moved a -> b under traffic",
        cell("geosync"),
        cell("builtin") + none,
        figures={"shape": shape.__dict__, "runs": [o.as_dict() for o in outcomes]},
    )
    row["columns"] = [
        "mechanism",
        "run",
        "published",
        "acked in a",
        "delivered in b",
        "duplicates",
        "lost",
        "order violations in b",
        "anywhere",
    ]
    number: dict[str, int] = {}
    row["rows"] = []
    for o in sorted(outcomes, key=lambda o: modes.index(o.mode)):
        number[o.mode] = number.get(o.mode, 0) + 1
        row["rows"].append(
            [
                MODES[o.mode],
                number[o.mode],
                o.published,
                o.acked_in_a,
                o.delivered_in_b,
                o.duplicates,
                o.lost,
                o.order_in_b,
                o.order_anywhere,
            ]
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=pathlib.Path, help="use this running lab instead of booting one")
    parser.add_argument("--runs", type=int, default=3, help="runs per mechanism")
    parser.add_argument("--modes", default="geosync,builtin,none", help="of " + ", ".join(MODES))
    parser.add_argument("--partitions", type=int, default=Shape.partitions)
    parser.add_argument("--keys", type=int, default=Shape.keys)
    parser.add_argument("--rate", type=float, default=Shape.rate, help="messages/s per region's producer")
    parser.add_argument("--before", type=float, default=Shape.before_s, help="seconds consumed in a")
    parser.add_argument(
        "--after", type=float, default=Shape.after_s, help="seconds of traffic after the move"
    )
    parser.add_argument("--hole-ratio", type=float, default=Shape.hole_ratio, help="share never acked in a")
    parser.add_argument(
        "--key-based-batching", action="store_true", help="producers batch by key (BatchingType.KeyBased)"
    )
    parser.add_argument("--json", type=pathlib.Path, help="every run's figures and examples as JSON here")
    record.add_argument(parser)
    args = parser.parse_args()
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"--modes: unknown {', '.join(unknown)} (of {', '.join(MODES)})")
    shape = Shape(
        partitions=args.partitions,
        keys=args.keys,
        rate=args.rate,
        before_s=args.before,
        after_s=args.after,
        hole_ratio=args.hole_ratio,
        key_based=args.key_based_batching,
    )
    with labs.given_or_booted(args.lab, ["a", "b"], report=console.print) as lab_dir:
        topology = labs.load(lab_dir)
        console.print(f"Pulsar {topology.pulsar_version}; {shape}")
        outcomes = list(runs(topology, modes, args.runs, shape))
    console.print(summary(outcomes, modes))
    console.print(
        "order violations: a message given for the first time (in b; anywhere) after a later message of the "
        "same key and producer; duplicates: deliveries in b of messages a's consumers acknowledged; lost: "
        "confirmed sends no consumer was given"
    )
    if args.json:
        args.json.write_text(
            json.dumps([o.as_dict() | {"deliveries": o.deliveries} for o in outcomes]) + "\n"
        )
    record.write(args.record, key_order_record(outcomes, modes, shape))


if __name__ == "__main__":
    main()
