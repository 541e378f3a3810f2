"""The agent's effects, and the one place that carries them out.

The runtime decides (with the core's pure functions) and describes what must happen as effect values; the
``Effector`` performs them through the ports, in parallel where they are independent (a bounded pool, one
admin client per worker thread), and answers with outcome values. It never touches the runtime's state:
the runtime folds outcomes back in on its own thread, so nothing the runtime owns is written concurrently.

The shell: it may read the clock (``clock``, for when a send completed) and uses threads (the pool's).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar

from geosync_adapters import adminhttp, messaging
from geosync_agent import calls
from geosync_agent.core.effects import (
    PLANNED_FROM_REFUSED,
    SHADOW_PREFIX,
    AdminChange,
    AdminMove,
    AdminMoved,
    Created,
    CreateSubscription,
    CursorReset,
    CursorWritten,
    Effect,
    Learned,
    NotWritten,
    Outcome,
    PluginAck,
    Publish,
    ResetCursor,
    Unloaded,
    UnloadTopic,
)
from geosync_agent.core.subscriptions import SubKey
from geosync_agent.ports import Admin, Messaging, Producer
from geosync_agent.tailing import Tail
from geosync_core import pluginapi, pluginwrites
from geosync_core.capabilities import Capability
from geosync_core.positions import Position

log = logging.getLogger("geosync.agent")
__all__ = [
    "CREATES_PER_READ",
    "CREATOR",
    "PLANNED_FROM_REFUSED",
    "PLUGIN_ACK_BATCH",
    "SHADOW_PREFIX",
    "AdminChange",
    "AdminMove",
    "AdminMoved",
    "CreateSubscription",
    "Created",
    "CursorReset",
    "CursorWritten",
    "Effect",
    "Effector",
    "Learned",
    "NotWritten",
    "Outcome",
    "ParallelChange",
    "PluginAck",
    "Publish",
    "ResetCursor",
    "SubKey",
    "UnloadTopic",
    "Unloaded",
    "app_consumers",
]
"""The effect and outcome values are the core's (``geosync_agent.core.effects``), named here too: the
rest of the shell speaks of them as ``effects.X``."""
T = TypeVar("T")
R = TypeVar("R")
CREATOR = "geosync-creator"
"""The consumer that creates a subscription (subscribes at the earliest message and closes at once)."""
PLUGIN_ACK_BATCH = 200
"""Subscriptions per plugin acknowledgement call."""
CREATES_PER_READ = 25
"""Subscriptions of one topic created on one pool worker after one read of the topic's stats (more are
created side by side in groups of this many)."""


def app_consumers(sub: dict[str, Any]) -> int:
    """Application consumers of a subscription in ``topic_stats`` (the agents' own ``geosync-*`` excluded)."""
    return sum(
        1 for c in sub.get("consumers") or [] if not str(c.get("consumerName", "")).startswith("geosync-")
    )


ParallelChange = AdminMove | ResetCursor | UnloadTopic | tuple[CreateSubscription, ...]
"""What ``perform`` sends side by side: one admin change, or the subscriptions of one topic to create."""


class Effector:
    """Performs effects and the agent's bulk reads through the ports (see the module docstring)."""

    def __init__(
        self,
        *,
        admin_factory: Callable[[], Admin],
        messaging: Messaging,
        pool: Executor,
        on_sent: Callable[[bool, float], None] = lambda ok, at: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._admin_factory = admin_factory
        self._local = threading.local()
        self.messaging = messaging
        self.pool = pool
        self.on_sent = on_sent
        """Called on the client's thread when a send completed (True) or failed, and when (``clock``)."""
        self.clock = clock
        """Monotonic seconds (the simulator's virtual ones under simulation)."""
        self.producers: dict[str, Producer] = {}

    def call(self, call: calls.Call[T]) -> T:
        """Make one outside call (``geosync_agent.calls``) on the calling thread, the loop's or a pool
        worker's, and return its answer; its errors are the adapter's, raised as they are."""
        return call.run(self._admin())

    def open_reader(self, tail: Tail) -> None:
        """Open ``tail``'s reader (``Tail.open``: its errors are the messaging adapter's)."""
        tail.open(self.messaging)

    def broker_answers(self, service_url: str) -> bool:
        """Whether the broker at ``service_url`` accepts a connection."""
        return self.messaging.broker_answers(service_url)

    def _admin(self) -> Admin:
        """The calling thread's admin client (the sync loop's or a pool worker's)."""
        client: Admin | None = getattr(self._local, "client", None)
        if client is None:
            client = self._admin_factory()
            self._local.client = client
        return client

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``fn`` over ``items`` on the pool, results in order (reads that are independent per item)."""
        if len(items) <= 1:
            return [fn(i) for i in items]
        return list(self.pool.map(fn, items))

    def perform(self, effects: Iterable[Effect]) -> list[Outcome]:
        """Carry out ``effects``: sends in order, plugin writes batched, admin changes in parallel."""
        plugin: list[PluginAck] = []
        parallel: list[ParallelChange] = []
        creates: dict[str, list[CreateSubscription]] = {}
        for effect in effects:
            if isinstance(effect, Publish):
                self._publish(effect)
            elif isinstance(effect, PluginAck):
                plugin.append(effect)
            elif isinstance(effect, CreateSubscription):
                creates.setdefault(effect.key[0], []).append(effect)
            else:
                parallel.append(effect)
        for same_topic in creates.values():
            # Each group reads its topic's stats once (~140 KB with 100 subscriptions): a region whose
            # consumers subscribed 10,000 times as their traffic started had them read once per creation.
            parallel += [
                tuple(same_topic[i : i + CREATES_PER_READ])
                for i in range(0, len(same_topic), CREATES_PER_READ)
            ]
        outcomes = self.start_plugin_writes(plugin)()
        for result in self.map(self._admin_change, parallel):
            outcomes.extend(result)
        return outcomes

    def start_plugin_writes(self, writes: Sequence[PluginAck]) -> Callable[[], list[Outcome]]:
        """Send ``writes`` on the pool without waiting: the call returned waits for their outcomes (the loop
        goes on with its next round's reads meanwhile; ``perform`` calls it at once). Each batch names other
        subscriptions (one write per subscription a round), so batches go out side by side: the broker works
        on one while a worker's client parses the answer to another."""
        futures = [
            self.pool.submit(self._plugin_acks, list(writes[start : start + PLUGIN_ACK_BATCH]))
            for start in range(0, len(writes), PLUGIN_ACK_BATCH)
        ]
        return lambda: [outcome for future in futures for outcome in future.result()]

    def close(self) -> None:
        for producer in self.producers.values():
            producer.close()
        self.producers.clear()

    # -- the calls -------------------------------------------------------------------------------------

    def _publish(self, effect: Publish) -> None:
        producer = self.producers.get(effect.topic)
        if producer is None:
            producer = self.messaging.producer(effect.topic)
            self.producers[effect.topic] = producer
        producer.send_async(
            effect.data, self._sent, properties=effect.properties, replication_clusters=effect.replicate_to
        )

    def _sent(self, ok: bool) -> None:
        self.on_sent(ok, self.clock())

    def _plugin_acks(self, batch: list[PluginAck]) -> list[Outcome]:
        try:
            results = self._admin().plugin_write([_item(a) for a in batch])
        except (adminhttp.AdminNotFound, adminhttp.AdminForbidden) as e:
            log.info("no cursor writes through the broker plugin (%s); using the admin API", e)
            return [
                Learned(Capability.PLUGIN_CURSOR_WRITES, False),
                *(NotWritten(a.key, fallback=True, reason="no plugin writes") for a in batch),
            ]
        except (adminhttp.AdminError, pluginapi.PluginApiError) as e:
            log.warning("acknowledging through the broker plugin failed, will retry: %s", e)
            return [NotWritten(a.key, fallback=False, reason=str(e)) for a in batch]
        out: list[Outcome] = [Learned(Capability.PLUGIN_CURSOR_WRITES, True)]
        if any(a.batches for a in batch):
            acks_off = any(r.status is pluginapi.Status.BATCH_ACKS_OFF for r in results)
            out.append(Learned(Capability.BATCH_ACKS, not acks_off))
        for ack, result in zip(batch, results, strict=True):
            if result.status is pluginapi.Status.OK and result.cursor is not None and result.stale:
                out.append(CursorWritten(ack.key, cursor=result.cursor, moved=False, holes=0, stale=True))
            elif result.status is pluginapi.Status.OK and result.cursor is not None:
                out.append(
                    CursorWritten(
                        ack.key,
                        cursor=result.cursor,
                        moved=ack.mark_delete is not None,
                        holes=len(ack.positions),
                        batch_indexes=sum(len(acks.indexes()) for _, acks in ack.batches),
                    )
                )
            elif (
                result.status is pluginapi.Status.BAD_REQUEST
                and ack.planned_from is not None
                and "planned_from" in (result.error or "")
            ):
                # A broker with an older plugin than the feed's (a rolling upgrade): sent without it again.
                log.warning("the broker plugin refuses planned_from for %s %s: %s", *ack.key, result.error)
                out.append(NotWritten(ack.key, fallback=False, reason=PLANNED_FROM_REFUSED))
            elif result.status in (pluginapi.Status.BAD_REQUEST, pluginapi.Status.BATCH_ACKS_OFF):
                # Refused as written: plan again (without batch indexes once the brokers turned them off).
                log.warning(
                    "plugin refused acks for %s %s: %s", ack.key[0], ack.key[1], result.error or result
                )
                out.append(NotWritten(ack.key, fallback=False, reason=f"refused: {result.status.value}"))
            else:
                out.append(NotWritten(ack.key, fallback=True, reason=result.status.value))
        return out

    def _admin_change(self, effect: ParallelChange) -> list[Outcome]:
        if isinstance(effect, tuple):  # subscriptions of one topic (``perform`` groups them)
            return self._create(*effect)
        if isinstance(effect, UnloadTopic):
            return [self._unload(effect)]
        if isinstance(effect, ResetCursor):
            return [self._reset(effect)]
        try:
            return self._admin_move(effect)
        except (adminhttp.AdminError, messaging.MessagingUnavailable) as e:
            return [AdminMoved(effect.key, effect.counter, None, False, 0, 0, effect.consumers, error=str(e))]

    def _create(self, *effects: CreateSubscription) -> list[Outcome]:
        """Create the subscriptions (all of one topic) at the earliest message, each unless it exists (a
        consumer subscribing with that initial position: see ``Messaging.subscribe_at_earliest`` for why not
        the admin API). The topic's stats are read once for all of them."""
        topic = effects[0].key[0]
        try:
            subscriptions = self._admin().topic_stats(topic).get("subscriptions") or {}
        except adminhttp.AdminNotFound:
            return [Created(e.key, created=False, topic_missing=True) for e in effects]
        except adminhttp.AdminError as e:
            log.warning("cannot create %d subscription(s) on %s, will retry: %s", len(effects), topic, e)
            return [Created(e.key, created=False, topic_missing=True) for e in effects]
        out: list[Outcome] = []
        for effect in effects:
            name = effect.key[1]
            if name in subscriptions:
                out.append(Created(effect.key, created=False, topic_missing=False))
                continue
            try:
                self.messaging.subscribe_at_earliest(topic, name, name=CREATOR)
            except messaging.TopicMissing:
                out.append(Created(effect.key, created=False, topic_missing=True))
                continue
            except messaging.MessagingUnavailable as e:
                log.warning("cannot create %s on %s, will retry: %s", name, topic, e)
                out.append(Created(effect.key, created=False, topic_missing=True))
                continue
            out.append(Created(effect.key, created=True, topic_missing=False))
        return out

    def _unload(self, effect: UnloadTopic) -> Outcome:
        try:
            self._admin().unload_topic(effect.topic)
        except adminhttp.AdminError as e:
            return Unloaded(effect.topic, error=str(e)[:200])
        return Unloaded(effect.topic)

    def _reset(self, effect: ResetCursor) -> Outcome:
        topic, name = effect.key
        md = effect.mark_delete
        try:
            self._admin().reset_cursor(topic, name, mark_delete=None if md is None else (md.ledger, md.entry))
        except adminhttp.AdminError as e:
            log.warning("cannot rewind %s on %s, will retry: %s", name, topic, e)
            return CursorReset(effect.key, md, error=str(e)[:200])
        return CursorReset(effect.key, md)

    def _admin_move(self, effect: AdminMove) -> list[Outcome]:
        topic, name = effect.key
        moved_to: Position | None = None
        busy = False
        created: list[Outcome] = []
        if effect.create_first:
            created += self._create(CreateSubscription(effect.key))
        if effect.move is not None:
            try:
                self._admin().expire_messages(
                    topic,
                    name,
                    ledger=effect.move.ledger,
                    entry=effect.move.entry,
                    partition=effect.partition,
                )
                moved_to = effect.move
            except adminhttp.AdminConflict:
                busy = True
        if not effect.holes:
            return [*created, AdminMoved(effect.key, effect.counter, moved_to, busy, 0, 0, effect.consumers)]
        consumers = effect.consumers
        if consumers == 0:
            # Discovery may be seconds old: check right before a shadow consumer would join, and that the
            # subscription still exists (a consumer would create it).
            subs = self._admin().topic_stats(topic).get("subscriptions") or {}
            if name not in subs:
                return [*created, _gone(effect, moved_to, busy)]
            consumers = app_consumers(subs[name])
        if consumers > 0:
            # A shadow consumer would join Shared/Key_Shared dispatch or Failover election: hold back.
            return [AdminMoved(effect.key, effect.counter, moved_to, busy, 0, len(effect.holes), consumers)]
        out: list[Outcome] = []
        if effect.skip_by_ids:
            try:
                self._admin().skip_by_message_ids(topic, name, [(p.ledger, p.entry) for p in effect.holes])
                return [
                    Learned(Capability.SKIP_BY_IDS, True),
                    AdminMoved(effect.key, effect.counter, moved_to, busy, len(effect.holes), 0, consumers),
                ]
            except (adminhttp.AdminNotFound, adminhttp.AdminNotAllowed):
                # A 404 is also what a broker with PIP-423 answers for a subscription that is gone: that is
                # this subscription's outcome, not the region's capability (issue 45, case 1).
                if name not in (self._admin().topic_stats(topic).get("subscriptions") or {}):
                    return [_gone(effect, moved_to, busy)]
                log.info("no skipByMessageIds on this broker (PIP-423): holes go through a shadow consumer")
                out.append(Learned(Capability.SKIP_BY_IDS, False))
        self.messaging.shadow_ack(
            topic, name, partition=effect.partition, positions=list(effect.holes), name=effect.shadow_name
        )
        out.append(AdminMoved(effect.key, effect.counter, moved_to, busy, len(effect.holes), 0, consumers))
        return out


def _gone(effect: AdminMove, moved_to: Position | None, busy: bool) -> AdminMoved:
    """The outcome for a subscription that no longer exists here: its holes are not applied, and nothing
    creates it again (a subscription deleted on purpose stays deleted; discovery drops it)."""
    topic, name = effect.key
    return AdminMoved(
        effect.key,
        effect.counter,
        moved_to,
        busy,
        0,
        len(effect.holes),
        0,
        error=f"subscription {name!r} no longer exists on {topic}: holes not applied, nothing created",
        gone=True,
    )


def _item(ack: PluginAck) -> pluginwrites.AckItem:
    return pluginwrites.AckItem(
        topic=ack.key[0],
        subscription=ack.key[1],
        mark_delete=ack.mark_delete,
        positions=ack.positions,
        batches=tuple(
            pluginwrites.BatchAck(position, acks.size, frozenset(acks.indexes()))
            for position, acks in ack.batches
        ),
        planned_from=ack.planned_from,
    )
