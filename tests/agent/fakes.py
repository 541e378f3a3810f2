"""In-memory stand-ins for the agent's ports: a region's admin API, plugin and brokers, as far as the agent's
unit tests need them. They keep what they were asked so tests can check the calls; the real behaviour is
proven against the lab (integration_tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from geosync_adapters import admin as adm
from geosync_adapters.messaging import Received
from geosync_agent import discovering
from geosync_agent import effects as fx
from geosync_agent.config import AgentConfig
from geosync_agent.runtime import Agent, Now
from geosync_core.indexing import OriginRun
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

KEY = b"k" * 32


class InlineExecutor(Executor):
    """Runs submitted work at once on the caller's thread (deterministic tests)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:
            future.set_exception(e)
        return future


@dataclass
class FakeRegion:
    """One region's admin API and plugin endpoints over in-memory cursors."""

    name: str
    namespaces: dict[str, list[str]]
    topics: dict[str, list[Position]] = field(default_factory=dict)
    cursors: dict[tuple[str, str], AckState] = field(default_factory=dict)
    consumers: dict[tuple[str, str], int] = field(default_factory=dict)
    plugin: bool = True
    skip_by_ids: bool = False
    feed: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    # discovery
    def tenants(self) -> list[str]:
        return sorted({ns.split("/")[0] for ns in self.namespaces})

    def namespaces_of(self, tenant: str) -> list[str]:
        return [ns for ns in self.namespaces if ns.startswith(tenant + "/")]

    def replication_clusters(self, namespace: str) -> list[str]:
        if namespace not in self.namespaces:
            raise adm.AdminNotFound(namespace)
        return self.namespaces[namespace]

    def topic_list(self, namespace: str) -> list[str]:
        return [t for t in self.topics if discovering.namespace_of(t) == namespace]

    def topic_stats(self, topic: str, **_: Any) -> dict[str, Any]:
        subs = {
            name: {
                "type": "Shared",
                "consumers": [{"consumerName": f"app-{i}"} for i in range(self.consumers.get((t, name), 0))],
            }
            for (t, name) in self.cursors
            if t == topic
        }
        return {"subscriptions": subs}

    def internal_stats(self, topic: str, **_: Any) -> dict[str, Any]:
        self.calls.append(("internal_stats", topic))
        return {
            "cursors": {
                name: {
                    "markDeletePosition": str(c.mark_delete),
                    "individuallyDeletedMessages": str(c.ranges),
                }
                for (t, name), c in self.cursors.items()
                if t == topic
            }
        }

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

    def skip_by_message_ids(self, topic: str, subscription: str, positions: list[tuple[int, int]]) -> None:
        if not self.skip_by_ids:
            raise adm.AdminNotFound("no skipByMessageIds")
        self.acknowledge(topic, subscription, [Position(*p) for p in positions])

    def acknowledge(self, topic: str, subscription: str, positions: list[Position]) -> None:
        self.calls.append(("ack", topic, subscription, tuple(positions)))
        key = (topic, subscription)
        self.cursors[key] = self.cursors[key].ack(*positions)

    def replicated_from(self, topic: str, *, ledger: int, entry: int) -> str | None:
        self.calls.append(("replicated_from", topic, Position(ledger, entry)))
        return None

    def runtime_configuration(self) -> dict[str, Any]:
        return {"entryFilterNames": "[geosync]"}

    # plugin
    def _need_plugin(self) -> None:
        if not self.plugin:
            raise adm.AdminNotFound("no GeoSync plugin")

    def plugin_origins(self, topic: str, *, start: tuple[int, int] | None = None) -> list[OriginRun]:
        self._need_plugin()
        return []

    def plugin_cursors(self, *, since: int) -> tuple[str, int, list[dict[str, str]]]:
        self._need_plugin()
        changed, self.feed = self.feed, []
        return "epoch-1", since + len(changed), changed

    def plugin_acks(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self._need_plugin()
        out = []
        for item in items:
            key = (item["topic"], item["subscription"])
            self.calls.append(("plugin_ack", *key, item["mark_delete"], tuple(item["positions"])))
            cursor = self.cursors[key]
            if item["mark_delete"]:
                cursor = cursor.ack_cumulative(Position.parse(item["mark_delete"]))
            cursor = cursor.ack(*(Position.parse(p) for p in item["positions"]))
            self.cursors[key] = cursor
            out.append(
                {
                    "status": "ok",
                    "mark_delete": str(cursor.mark_delete),
                    "individually_deleted": str(cursor.ranges),
                }
            )
        return out

    def consumer_acks(self, topic: str, subscription: str, positions: list[Position]) -> None:
        """An application consumer acknowledges: the cursor moves and the plugin's feed reports it."""
        self.acknowledge(topic, subscription, positions)
        cursor = self.cursors[(topic, subscription)]
        self.feed.append(
            {
                "topic": topic,
                "subscription": subscription,
                "mark_delete": str(cursor.mark_delete),
                "individually_deleted": str(cursor.ranges),
            }
        )


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

    def reader(self, topic: str, on_message: Callable[[Received], None]) -> Any:
        self.listeners[topic] = on_message
        return self

    def producer(self, topic: str) -> FakeProducer:
        return self.producers.setdefault(topic, FakeProducer(topic))

    def shadow_ack(
        self, topic: str, subscription: str, *, partition: int, positions: list[Position], name: str
    ) -> None:
        self.shadow.append((topic, subscription, tuple(positions)))
        self.region.acknowledge(topic, subscription, positions)

    def deliver(self, topic: str, message: Received) -> None:
        self.listeners[topic](message)

    def close(self) -> None:
        pass


def message(
    topic: str,
    position: Position,
    *,
    data: bytes = b"m",
    properties: dict[str, str] | None = None,
    producer: str = "app",
) -> Received:
    return Received(
        topic=topic,
        position=position,
        partition=-1,
        batch_index=-1,
        data=data,
        key="",
        publish_ms=0,
        properties=properties or {},
        producer=producer,
    )


@dataclass
class Harness:
    """One region's agent over fakes; ``step`` runs discovery and one round at a given time."""

    region: FakeRegion
    config: AgentConfig
    messaging: FakeMessaging
    agent: Agent
    clock: float = 1000.0

    @classmethod
    def build(cls, region: FakeRegion, **settings: Any) -> Harness:
        config = AgentConfig(
            region=region.name, admin_url="http://fake", service_url="pulsar://fake", **settings
        )
        msgs = FakeMessaging(region)
        effector = fx.Effector(admin_factory=lambda: AdminView(region), messaging=msgs, pool=InlineExecutor())
        agent = Agent(
            config,
            key=KEY,
            effector=effector,
            messaging=msgs,
            discovered=discovering.Latest(),
            rediscover=threading.Event(),
            wake=threading.Event(),
            first_seq=1,
        )
        effector.on_sent = agent.on_sent
        return cls(region, config, msgs, agent)

    def discover(self) -> None:
        self.agent.discovered.put(discovering.scan(AdminView(self.region), self.config))

    def step(self, seconds: float = 1.0) -> None:
        self.clock += seconds
        self.agent.round(Now(self.clock, self.clock))

    def sent_on(self, topic: str) -> list[bytes]:
        producer = self.messaging.producers.get(topic)
        return [] if producer is None else [data for data, _, _ in producer.sent]
