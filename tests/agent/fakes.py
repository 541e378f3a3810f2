"""In-memory stand-ins for the agent's ports: a region's admin API, plugin and brokers, as far as the agent's
unit tests need them. They keep what they were asked so tests can check the calls; the real behaviour is
proven against the lab (integration_tests)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from geosync_adapters import admin as adm
from geosync_adapters import adminhttp, signing
from geosync_adapters.messaging import Received, TopicMissing
from geosync_agent import discovering
from geosync_agent import effects as fx
from geosync_agent.config import AgentConfig
from geosync_agent.core import publishing
from geosync_agent.runtime import Agent, Now
from geosync_core import pluginapi, pluginwrites
from geosync_core.batches import BatchAcks
from geosync_core.indexing import OriginRun
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from geosync_sim.harness import InlineExecutor  # runs effects on the round's thread

KEYS = signing.in_memory(("a", "b", "c"))
"""Each test region's signing key, and one keyring that lists them all."""
KEYRING = KEYS["a"].keyring


@dataclass
class FakeRegion:
    """One region's admin API and plugin endpoints over in-memory cursors."""

    name: str
    namespaces: dict[str, list[str]]
    topics: dict[str, list[Position]] = field(default_factory=dict)
    cursors: dict[tuple[str, str], AckState] = field(default_factory=dict)
    consumers: dict[tuple[str, str], int] = field(default_factory=dict)
    replication: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """topic -> remote region -> its replicator as topic stats show it (``replication``)."""
    plugin: bool = True
    skip_by_ids: bool = False
    batch_acks: bool = True
    origin_runs: dict[str, list[OriginRun]] = field(default_factory=dict)
    """What the interceptor's origin index answers per topic (empty: it records nothing)."""
    feed: list[pluginapi.CursorReport] = field(default_factory=list)
    fed: dict[tuple[str, str], None] = field(default_factory=dict)
    """Subscriptions the feed has named (in order): a read from the start names them again."""
    feed_error: adminhttp.AdminError | None = None
    """Raised by the feed while set (the broker down or refusing)."""
    headers: dict[tuple[str, Position], adm.EntryHeaders] = field(default_factory=dict)
    """What entry_headers answers per (topic, entry); local and not batched when absent."""
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    stats_reads: list[str] = field(default_factory=list)
    """Topics whose stats were read, in order."""
    missing: set[str] = field(default_factory=set)
    """Topics that do not exist (auto topic creation off): readers on them fail until ``create_topic``."""
    bundles: dict[str, list[str]] = field(default_factory=dict)
    """Broker id -> the bundles it owns (``tenant/ns/0xLO_0xHI``), for sidecars; the keys: active brokers."""
    not_loaded: set[str] = field(default_factory=set)
    """Topics the plugin's cursor writes answer ``not_loaded`` for and its topic lists leave out (moved to
    another broker)."""
    owner_dead: set[str] = field(default_factory=set)
    retained: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """Namespace -> its retention policy (None: none, the brokers' defaults, 0: no retention); default:
    an hour, any size."""
    writing_to: dict[str, int] = field(default_factory=dict)
    """The ledger a topic writes to, as internal stats show it (default: its last entry's ledger)."""
    """Topics whose admin calls are redirected to an owner that does not answer (it died)."""

    # discovery
    def tenants(self) -> list[str]:
        return sorted({ns.split("/")[0] for ns in self.namespaces})

    def namespaces_of(self, tenant: str) -> list[str]:
        return [ns for ns in self.namespaces if ns.startswith(tenant + "/")]

    def replication_clusters(self, namespace: str) -> list[str]:
        if namespace not in self.namespaces:
            raise adminhttp.AdminNotFound(namespace)
        return self.namespaces[namespace]

    def retention(self, namespace: str) -> dict[str, Any] | None:
        if namespace not in self.namespaces:
            raise adminhttp.AdminNotFound(namespace)
        return self.retained.get(namespace, {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1})

    def topic_list(self, namespace: str) -> list[str]:
        return [t for t in self.topics if publishing.namespace_of(t) == namespace]

    def topic_stats(self, topic: str, **_: Any) -> dict[str, Any]:
        self.stats_reads.append(topic)
        return self._stats(topic)

    def _stats(self, topic: str) -> dict[str, Any]:
        if topic not in self.topics:
            raise adminhttp.AdminNotFound(f"404 topic {topic} not found")
        subs = {
            name: {
                "type": "Shared",
                "consumers": [{"consumerName": f"app-{i}"} for i in range(self.consumers.get((t, name), 0))],
            }
            for (t, name) in self.cursors
            if t == topic
        }
        return {"subscriptions": subs, "replication": dict(self.replication.get(topic, {}))}

    def internal_stats(self, topic: str, **_: Any) -> dict[str, Any]:
        self.calls.append(("internal_stats", topic))
        if topic in self.owner_dead:
            raise adminhttp.OwnerUnreachable(f"GET {topic}/internalStats: redirected to a dead owner")
        log = self.topics.get(topic) or [Position(0, 0)]
        return {
            "cursors": {
                name: {
                    "markDeletePosition": str(c.mark_delete),
                    "individuallyDeletedMessages": str(c.ranges),
                }
                for (t, name), c in self.cursors.items()
                if t == topic
            },
            # Every ledger the topic holds, oldest first, the one it writes to last (as Pulsar lists them).
            "ledgers": [
                {"ledgerId": ledger}
                for ledger in sorted({p.ledger for p in log} | {self.writing_to.get(topic, log[-1].ledger)})
            ],
        }

    def reload(self, topic: str) -> None:
        """The topic is unloaded and loaded again: it writes to a new ledger, and (Pulsar 4.0.8) its cursors
        forget the batch indexes of partly acknowledged entries."""
        log = self.topics.get(topic) or [Position(0, 0)]
        self.writing_to[topic] = self.writing_to.get(topic, log[-1].ledger) + 100
        for key, cursor in self.cursors.items():
            if key[0] == topic:
                self.cursors[key] = AckState.of(cursor.mark_delete, cursor.ranges)

    def unload_topic(self, topic: str) -> None:
        self.calls.append(("unload", topic))
        if topic not in self.topics:
            raise adminhttp.AdminNotFound(f"404 topic {topic} not found")
        self.reload(topic)

    def create_topic(self, topic: str) -> bool:
        self.calls.append(("create_topic", topic))
        if topic not in self.missing:
            return False
        self.missing.discard(topic)
        return True

    def create_subscription(self, topic: str, subscription: str, *, at: tuple[int, int] = (-1, -1)) -> bool:
        self.calls.append(("create", topic, subscription))
        if (topic, subscription) in self.cursors:
            return False
        first = self.topics[topic][0]
        self.cursors[(topic, subscription)] = AckState.of(Position(first.ledger, first.entry - 1))
        return True

    def expire_messages(
        self, topic: str, subscription: str, *, ledger: int, entry: int, partition: int = -1
    ) -> None:
        self.calls.append(("expire", topic, subscription, Position(ledger, entry)))
        key = (topic, subscription)
        self.cursors[key] = self.cursors[key].ack_cumulative(Position(ledger, entry))

    def reset_cursor(self, topic: str, subscription: str, *, mark_delete: tuple[int, int] | None) -> None:
        self.calls.append(("reset", topic, subscription, mark_delete))
        if mark_delete is None:
            first = self.topics[topic][0]
            mark_delete = (first.ledger, first.entry - 1)
        self.cursors[(topic, subscription)] = AckState.of(Position(*mark_delete))

    def skip_by_message_ids(self, topic: str, subscription: str, positions: list[tuple[int, int]]) -> None:
        if not self.skip_by_ids:
            raise adminhttp.AdminNotFound("no skipByMessageIds")
        self.acknowledge(topic, subscription, [Position(*p) for p in positions])

    def acknowledge(self, topic: str, subscription: str, positions: list[Position]) -> None:
        self.calls.append(("ack", topic, subscription, tuple(positions)))
        key = (topic, subscription)
        self.cursors[key] = self.cursors[key].ack(*positions)

    def entry_headers(self, topic: str, *, ledger: int, entry: int) -> adm.EntryHeaders:
        self.calls.append(("entry_headers", topic, Position(ledger, entry)))
        return self.headers.get((topic, Position(ledger, entry)), adm.EntryHeaders(None, {}, None))

    def runtime_configuration(self) -> dict[str, Any]:
        return {"entryFilterNames": "[geosync]"}

    # bundle ownership (sidecar agents)
    def active_brokers(self, cluster: str) -> list[str]:
        return sorted(self.bundles)

    def owned_bundles(self, cluster: str, broker: str) -> dict[str, Any]:
        self.calls.append(("owned_bundles", broker))
        return {b: {"is_active": True} for b in self.bundles.get(broker, [])}

    def lookup_topic(self, topic: str) -> dict[str, Any]:
        self.calls.append(("lookup", topic))
        return {"httpUrl": "http://other:8080", "brokerUrl": "pulsar://other:6650"}

    # plugin
    def _need_plugin(self) -> None:
        if not self.plugin:
            raise adminhttp.AdminNotFound("no GeoSync plugin")

    def plugin_origins(self, topic: str, *, start: tuple[int, int] | None = None) -> list[OriginRun]:
        self._need_plugin()
        self.calls.append(("plugin_origins", topic, start))
        runs = self.origin_runs.get(topic, [])
        if start is None:
            return list(runs)
        return [r for r in runs if Position(r.ledger, r.first + r.count - 1) >= Position(*start)]

    def plugin_topics(self, namespace: str) -> dict[str, dict[str, Any]]:
        """As the plugin lists them: the namespace's topics this broker has loaded, as their stats show."""
        self._need_plugin()
        self.calls.append(("plugin_topics", namespace))
        return {t: self._stats(t) for t in self.topic_list(namespace) if t not in self.not_loaded}

    def plugin_feed(self, *, since: int, epoch: str = "", acked: bool = True) -> pluginapi.Feed:
        self._need_plugin()
        if self.feed_error is not None:
            raise self.feed_error
        changed, self.feed = self.feed, []
        self.fed.update(dict.fromkeys((r.topic, r.subscription) for r in changed))
        if since == 0:
            # As the plugin: from the start, every subscription acknowledged so far, as its cursor is now.
            changed = [self.report(*key) for key in self.fed]
        return pluginapi.Feed("epoch-1", since + len(changed), tuple(changed))

    def plugin_write(self, items: list[pluginwrites.AckItem]) -> list[pluginwrites.AckResult]:
        self._need_plugin()
        out = []
        for item in items:
            key = (item.topic, item.subscription)
            mark = None if item.mark_delete is None else str(item.mark_delete)
            if item.topic in self.not_loaded:
                out.append(pluginwrites.AckResult(pluginapi.Status.NOT_LOADED, *key))
                continue
            self.calls.append(("plugin_ack", *key, mark, tuple(str(p) for p in item.positions)))
            if item.batches and not self.batch_acks:
                out.append(pluginwrites.AckResult(pluginapi.Status.BATCH_ACKS_OFF, *key))
                continue
            cursor = self.cursors[key]
            if item.mark_delete is not None:
                cursor = cursor.ack_cumulative(item.mark_delete)
            cursor = cursor.ack(*item.positions).ack_batches(
                [(b.position, BatchAcks.of(b.size, b.acked)) for b in item.batches]
            )
            self.calls.extend(("batch_ack", *key, b.position, tuple(sorted(b.acked))) for b in item.batches)
            self.cursors[key] = cursor
            out.append(pluginwrites.AckResult(pluginapi.Status.OK, *key, cursor=self.report(*key)))
        return out

    def report(self, topic: str, subscription: str) -> pluginapi.CursorReport:
        """The subscription's cursor as the plugin reports it (unacknowledged indexes of partial batches)."""
        cursor = self.cursors[(topic, subscription)]
        return pluginapi.CursorReport(
            topic,
            subscription,
            cursor.mark_delete,
            str(cursor.ranges),
            tuple(
                pluginapi.BatchState(p, tuple(i for i in range(acks.size) if i not in acks.indexes()))
                for p, acks in cursor.batches
            ),
        )

    def consumer_acks(self, topic: str, subscription: str, positions: list[Position]) -> None:
        """An application consumer acknowledges: the cursor moves and the plugin's feed reports it."""
        self.acknowledge(topic, subscription, positions)
        self.feed.append(self.report(topic, subscription))

    def consumer_acks_indexes(
        self, topic: str, subscription: str, position: Position, size: int, *indexes: int
    ) -> None:
        """An application consumer acknowledges messages of a batch (batch-index acknowledgements on)."""
        key = (topic, subscription)
        self.cursors[key] = self.cursors[key].ack_indexes(position, size, indexes)
        self.feed.append(self.report(topic, subscription))


class AdminView:
    """The ``Admin`` port over a FakeRegion (the port names ``namespaces`` and ``topics`` differently)."""

    def __init__(self, region: FakeRegion) -> None:
        self.region = region

    def __getattr__(self, name: str) -> Any:
        return getattr(self.region, name)

    def namespaces(self, tenant: str) -> list[str]:
        return self.region.namespaces_of(tenant)

    def topics(self, namespace: str) -> list[str]:
        return self.region.topic_list(namespace)


@dataclass
class FakeProducer:
    topic: str
    sent: list[tuple[bytes, dict[str, str] | None, list[str] | None]] = field(default_factory=list)

    def send_async(
        self,
        data: bytes,
        callback: Callable[[bool], None],
        *,
        properties: dict[str, str] | None = None,
        replication_clusters: list[str] | None = None,
    ) -> None:
        self.sent.append((data, properties, replication_clusters))
        callback(True)

    def close(self) -> None:
        pass


class FakeMessaging:
    def __init__(self, region: FakeRegion) -> None:
        self.region = region
        self.listeners: dict[str, Callable[[Received], None]] = {}
        self.producers: dict[str, FakeProducer] = {}
        self.shadow: list[tuple[str, str, tuple[Position, ...]]] = []
        self.control_positions: dict[str, int] = {}
        self.starts: dict[str, Position | None] = {}
        """Where each topic's last reader was opened (None: the earliest message)."""
        self.opened: dict[str, int] = {}
        """How many readers each topic had opened."""
        self.disconnected: set[str] = set()
        """Topics whose readers have lost their broker."""
        self.dead: set[str] = set()
        """Service URLs of brokers that accept no connection."""
        self.probes: list[str] = []
        """The brokers probed, in order."""

    def reader(
        self, topic: str, on_message: Callable[[Received], None], *, start: Position | None = None
    ) -> FakeReader:
        self.starts[topic] = start
        if topic in self.region.missing:
            raise TopicMissing(f"{topic} does not exist")
        self.listeners[topic] = on_message
        self.opened[topic] = self.opened.get(topic, 0) + 1
        self.disconnected.discard(topic)  # a new reader connects
        return FakeReader(self, topic)

    def broker_answers(self, service_url: str) -> bool:
        self.probes.append(service_url)
        return service_url not in self.dead

    def producer(self, topic: str) -> FakeProducer:
        return self.producers.setdefault(topic, FakeProducer(topic))

    def subscribe_at_earliest(self, topic: str, subscription: str, *, name: str) -> None:
        if topic in self.region.missing:
            raise TopicMissing(f"{topic} does not exist")
        self.region.create_subscription(topic, subscription)

    def shadow_ack(
        self, topic: str, subscription: str, *, partition: int, positions: list[Position], name: str
    ) -> None:
        self.shadow.append((topic, subscription, tuple(positions)))
        self.region.acknowledge(topic, subscription, positions)

    def deliver(self, topic: str, message: Received) -> None:
        if topic.endswith("/geosync-control"):
            # A control topic is one log: its reader sees positions in delivery order, whatever tests pass.
            n = self.control_positions[topic] = self.control_positions.get(topic, -1) + 1
            message = replace(message, position=Position(77, n))
        self.listeners[topic](message)

    def close(self) -> None:
        pass


@dataclass
class FakeReader:
    messaging: FakeMessaging
    topic: str
    closed: bool = False

    def connected(self) -> bool:
        return not self.closed and self.topic not in self.messaging.disconnected

    def close(self) -> None:
        self.closed = True


def message(
    topic: str,
    position: Position,
    *,
    data: bytes = b"m",
    properties: dict[str, str] | None = None,
    producer: str = "app",
    batch_index: int = -1,
    key: str = "",
    batch_size: int | None = None,
) -> Received:
    return Received(
        topic=topic,
        position=position,
        partition=-1,
        batch_index=batch_index,
        data=data,
        key=key,
        publish_ms=0,
        properties=properties or {},
        producer=producer,
        batch_size=batch_size,
    )


class LatePhase(random.Random):
    """Every topic's first resync as late in the period as it can be: tests decide when resyncs happen
    (a random phase made echo-suppression checks fail whenever it drew an early resync)."""

    def random(self) -> float:
        return 0.999


@dataclass
class Harness:
    """One region's agent over fakes; ``step`` runs discovery and one round at a given time."""

    region: FakeRegion
    config: AgentConfig
    messaging: FakeMessaging
    agent: Agent
    clock: float = 1000.0
    metered: bool = False
    """Rounds carry the machine's meters (``runtime.read_now``'s, the clock's from ``clock`` on): plans,
    publishes and checkpoints are timed as in production. Without (the default), no work costs anything."""

    @classmethod
    def build(cls, region: FakeRegion, **settings: Any) -> Harness:
        """``keys=``: the agent's signer and keyring (default: its region's test key, ``KEYS``)."""
        keys = settings.pop("keys", None) or KEYS[region.name]
        incarnation = settings.pop("incarnation", None)
        config = AgentConfig(
            region=region.name, admin_url="http://fake", service_url="pulsar://fake", **settings
        )
        msgs = FakeMessaging(region)
        effector = fx.Effector(admin_factory=lambda: AdminView(region), messaging=msgs, pool=InlineExecutor())
        agent = Agent(
            config,
            keys=keys,
            effector=effector,
            messaging=msgs,
            discovered=discovering.Latest(),
            rediscover=threading.Event(),
            wake=threading.Event(),
            first_seq=1,
            rng=LatePhase(),
            incarnation=incarnation,
        )
        effector.on_sent = agent.on_sent
        return cls(region, config, msgs, agent)

    def discover(self) -> None:
        owns = None if self.agent.ownership is None else self.agent.ownership.owns
        admin = AdminView(self.region)
        views = (
            discovering.PluginTopics(admin, clock=lambda: self.clock) if self.config.plugin_cursors else None
        )
        self.agent.discovered.put(
            discovering.scan(admin, self.config, now=self.clock, owns=owns, views=views)
        )

    def step(self, seconds: float = 1.0) -> None:
        self.clock += seconds
        self.agent.round(self.now())

    def now(self) -> Now:
        """The harness's time (see ``metered``)."""
        if not self.metered:
            return Now(self.clock, self.clock)
        began = time.monotonic() - self.clock
        return Now(self.clock, self.clock, cpu=time.thread_time, clock=lambda: time.monotonic() - began)

    def sent_on(self, topic: str) -> list[bytes]:
        producer = self.messaging.producers.get(topic)
        return [] if producer is None else [data for data, _, _ in producer.sent]
