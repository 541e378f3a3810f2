"""The agent's ports: everything it needs from the outside, as the protocols its adapters implement.

The runtime and the effector see only these. ``geosync_adapters.admin.AdminClient`` implements ``Admin``
(admin REST API plus the broker plugin's endpoints), ``geosync_adapters.messaging.Messaging`` implements
``Messaging`` (readers, producers, the shadow consumer). Unit tests implement them with fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from geosync_adapters.admin import EntryHeaders
from geosync_adapters.messaging import Received
from geosync_core import pluginapi
from geosync_core.indexing import OriginRun
from geosync_core.positions import Position


class Admin(Protocol):
    """The region's admin API (one instance per thread: the adapter keeps an HTTP session)."""

    def tenants(self) -> list[str]: ...
    def namespaces(self, tenant: str) -> list[str]: ...
    def replication_clusters(self, namespace: str) -> list[str]: ...
    def topics(self, namespace: str) -> list[str]: ...
    def create_topic(self, topic: str) -> bool: ...
    def topic_stats(self, topic: str, **kw: Any) -> dict[str, Any]: ...
    def internal_stats(self, topic: str, **kw: Any) -> dict[str, Any]: ...
    def create_subscription(
        self, topic: str, subscription: str, *, at: tuple[int, int] = (-1, -1)
    ) -> bool: ...
    def expire_messages(
        self, topic: str, subscription: str, *, ledger: int, entry: int, partition: int = -1
    ) -> None: ...
    def skip_by_message_ids(
        self, topic: str, subscription: str, positions: list[tuple[int, int]]
    ) -> None: ...
    def reset_cursor(self, topic: str, subscription: str, *, mark_delete: tuple[int, int] | None) -> None: ...
    def entry_headers(self, topic: str, *, ledger: int, entry: int) -> EntryHeaders: ...
    def runtime_configuration(self) -> dict[str, Any]: ...
    def active_brokers(self, cluster: str) -> list[str]: ...
    def owned_bundles(self, cluster: str, broker: str) -> dict[str, Any]: ...
    def lookup_topic(self, topic: str) -> dict[str, Any]: ...
    def plugin_origins(self, topic: str, *, start: tuple[int, int] | None = None) -> list[OriginRun]: ...
    def plugin_feed(self, *, since: int) -> pluginapi.Feed: ...
    def plugin_write(self, items: list[pluginapi.AckItem]) -> list[pluginapi.AckResult]: ...


class Producer(Protocol):
    def send_async(
        self,
        data: bytes,
        callback: Callable[[bool], None],
        *,
        properties: dict[str, str] | None = None,
        replication_clusters: list[str] | None = None,
    ) -> None: ...
    def close(self) -> None: ...


class Reader(Protocol):
    def close(self) -> None: ...

    def connected(self) -> bool:
        """Whether the reader has a broker connection now (False while its client retries one)."""
        ...


class Messaging(Protocol):
    """The region's brokers over the binary protocol."""

    def reader(
        self, topic: str, on_message: Callable[[Received], None], *, start: Position | None = None
    ) -> Reader:
        """Read ``topic`` from its earliest retained message, or from entry ``start`` (included);
        ``on_message`` runs on the client's thread."""
        ...

    def broker_answers(self, service_url: str) -> bool:
        """Whether the broker at ``service_url`` accepts a connection now (a quick probe, not a session)."""
        ...

    def producer(self, topic: str) -> Producer: ...

    def subscribe_at_earliest(self, topic: str, subscription: str, *, name: str) -> None:
        """Create durable ``subscription`` at the earliest message, as a consumer named ``name`` subscribing
        with that initial position (atomic, unlike the admin API's create-then-reset)."""
        ...

    def shadow_ack(
        self, topic: str, subscription: str, *, partition: int, positions: list[Position], name: str
    ) -> None:
        """Acknowledge ``positions`` individually as a short-lived consumer of ``subscription``."""
        ...

    def close(self) -> None: ...
