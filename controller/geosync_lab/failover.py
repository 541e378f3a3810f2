"""A consumer failing over between two lab regions, measured: the demo and the benchmarks' workload.

One run publishes in the source region, lets a consumer there receive part of the stream and acknowledge
part of what it received (cumulatively, or individually with holes), stops it, waits ``settle_s`` for
sync, then connects a consumer on the same subscription in the target region and receives everything it
is given. Lost = published but acknowledged nowhere and never delivered in the target; duplicates =
acknowledged in the source and delivered again in the target.

Three modes run on the same regions: ``geosync`` (a plain subscription, synced by the agents in exact
mode), ``snapshot`` (the same in the lab's ``geo/snap-*`` namespaces, synced by the agents in snapshot
mode), and ``builtin`` (Pulsar's replicated subscriptions, PIP-33: ``replicate_subscription_state_enabled``;
the lab's agents leave subscriptions named ``pip33-*`` alone).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pulsar

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminError
from geosync_core import topology as topo

BUILTIN_PREFIX = "pip33-"


@dataclass
class Outcome:
    mode: str
    published: int
    acked_in_source: int
    delivered_in_target: int
    duplicates: int
    lost: int
    settle_s: float
    synced_after_s: float | None
    batching: bool = True
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _backlog(admin: AdminClient, topic: str, sub: str) -> int | None:
    try:
        subs = admin.topic_stats(topic).get("subscriptions") or {}
    except AdminError:
        return None
    return int(subs[sub]["msgBacklog"]) if sub in subs else None


def run(
    topology: topo.Topology,
    *,
    mode: str,
    source: str = "a",
    target: str = "b",
    namespace: str = "geo/ab",
    messages: int = 200,
    receive: int = 150,
    hole_ratio: float = 0.1,
    cumulative: bool = False,
    settle_s: float = 2.0,
    warmup_s: float = 6.0,
    seed: int = 7,
    batching: bool = True,
    report: Callable[[str], None] = lambda _m: None,
) -> Outcome:
    """Run one failover and count what the target region delivers.

    ``batching`` (the default, as in Pulsar's Java client) publishes with the client's batching settings and
    acknowledges with batch-index acknowledgements; off, one message per entry. With batching, ``msgBacklog``
    counts entries, not messages, so ``synced_after_s`` is only measured without it."""
    suffix = uuid.uuid4().hex[:8]
    if mode == "snapshot":
        # The same workload in the snapshot-mode twin of the namespace (geo/ab -> geo/snap-ab).
        namespace = namespace.replace("geo/", "geo/snap-", 1)
    topic = f"persistent://{namespace}/failover-{suffix}"
    sub = f"{BUILTIN_PREFIX if mode == 'builtin' else 'orders-'}{suffix}"
    builtin = mode == "builtin"
    ctype = pulsar.ConsumerType.Exclusive if cumulative else pulsar.ConsumerType.Shared
    src, dst = topology.region(source), topology.region(target)
    rng = random.Random(seed)
    with messaging.client(src.service_url) as c_src, messaging.client(dst.service_url) as c_dst:
        # The subscription exists in both regions before any traffic, as with any replicated subscription.
        for c in (c_src, c_dst):
            c.subscribe(
                topic,
                sub,
                consumer_type=ctype,
                initial_position=pulsar.InitialPosition.Earliest,
                replicate_subscription_state_enabled=builtin,
            ).close()
        # Subscriptions live long before a failover; give agents (and PIP-33 snapshots) the same warm-up.
        time.sleep(warmup_s)
        payloads = [f"msg-{i:05d}" for i in range(messages)]
        if batching:
            # Batching on, as Java clients do by default (the Python client's default is off).
            producer = c_src.create_producer(topic, batching_enabled=True)
            for p in payloads:
                producer.send_async(p.encode(), None)
            producer.flush()
        else:
            producer = c_src.create_producer(topic, batching_enabled=False)
            for p in payloads:
                producer.send(p.encode())
        producer.close()
        report(f"[{mode}] published {messages} messages in region {source} on {topic}")
        consumer = c_src.subscribe(
            topic,
            sub,
            consumer_type=ctype,
            initial_position=pulsar.InitialPosition.Earliest,
            replicate_subscription_state_enabled=builtin,
            batch_index_ack_enabled=batching,
        )
        received = [consumer.receive(timeout_millis=30000) for _ in range(receive)]
        acked: set[str] = set()
        if cumulative:
            consumer.acknowledge_cumulative(received[-1])
            acked = {m.data().decode() for m in received}
        else:
            for m in received:
                if rng.random() >= hole_ratio:
                    consumer.acknowledge(m)
                    acked.add(m.data().decode())
        time.sleep(0.3)  # flush grouped acknowledgements
        consumer.close()
        report(
            f"[{mode}] consumer in {source} received {receive}, acknowledged {len(acked)} "
            f"({receive - len(acked)} holes, {messages - receive} unread); failing over to {target}"
        )
        expected_backlog = messages - len(acked)
        dst_admin = AdminClient(dst.admin_url)
        started = time.monotonic()
        synced_after: float | None = None
        while time.monotonic() - started < settle_s:
            if not batching and _backlog(dst_admin, topic, sub) == expected_backlog:
                synced_after = time.monotonic() - started
                break
            time.sleep(0.05)
        delivered: list[str] = []
        consumer = c_dst.subscribe(
            topic,
            sub,
            consumer_type=ctype,
            initial_position=pulsar.InitialPosition.Earliest,
            replicate_subscription_state_enabled=builtin,
        )
        while True:
            try:
                m = consumer.receive(timeout_millis=3000)
            except pulsar.Timeout:
                break
            delivered.append(m.data().decode())
            consumer.acknowledge(m)
        consumer.close()
    delivered_set = set(delivered)
    duplicates = len([d for d in delivered if d in acked])
    lost = len(set(payloads) - acked - delivered_set)
    outcome = Outcome(
        mode=mode,
        published=messages,
        acked_in_source=len(acked),
        delivered_in_target=len(delivered),
        duplicates=duplicates,
        lost=lost,
        settle_s=settle_s,
        synced_after_s=synced_after,
        batching=batching,
    )
    report(f"[{mode}] consumer in {target} got {len(delivered)}: {duplicates} duplicates, {lost} lost")
    return outcome
