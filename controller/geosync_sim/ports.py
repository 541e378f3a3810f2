"""The agent's ports (``geosync_agent.ports``: ``Admin``, ``Messaging``, ``Producer``, ``Reader``) over one
simulated region, so the real ``Agent`` runs unchanged against the world.

Why a port and not the fakes of the unit tests: these answer from the world's ground truth (entries, cursors,
consumers) and report every cursor change the agent causes to the checker, with its cause. Where the real
adapter's behaviour matters to the no-loss question it is followed, not idealised: a consumer subscribing
to a missing subscription creates it at its initial position (``ConsumerConfigurationData
.subscriptionInitialPosition``, Latest by default; the shadow consumer of ``geosync_adapters.messaging`` sets
Earliest since a1d4002, ``shadow_latest=True`` models the adapter before it); a missing subscription answers
404 to ``expireMessages`` and ``skipByMessageIds`` (``PersistentTopicsBase``: "Subscription not found").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from geosync_adapters import admin as adm
from geosync_adapters import adminhttp
from geosync_adapters.messaging import Received, TopicMissing
from geosync_core import pluginapi, pluginwrites
from geosync_core.indexing import OriginRun
from geosync_core.markers import PROPERTY as MARKER_PROPERTY
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range, RangeSet
from geosync_sim.world import STAMP, Entry, Region, SimReaderState, Subscription, Topic, World

PLUGIN_WRITE_VERSION = pluginwrites.WRITE_VERSION
"""The write items the simulated plugins take (``pluginapi.Feed.write_version``; 1: an older plugin, which
refuses ``planned_from``). Read at each call: a test sets it to run older plugins."""
FEED_WRITE_VERSION: int | None = None
"""What the feed says they take (None: ``PLUGIN_WRITE_VERSION``); another value stands for a region whose
brokers run both versions (an upgrade: the feed read from a newer broker than a write reaches)."""


def ack_state(t: Topic, s: Subscription) -> AckState:
    """The cursor as its broker prints it: each run of consecutive deleted entries one range (the same set
    as a range per entry, sorted and joined, at a range per run), kept on the cursor until it changes: the
    agent polls every cursor of a topic, mostly as it was."""
    c = s.cursor
    key = (t.ledger, c.md, frozenset(c.acked))
    if c.printed is not None and c.printed[0] == key:
        return c.printed[1]
    ranges = []
    first = last = -2
    for e in sorted(c.acked):
        if e != last + 1:
            if first >= 0:
                ranges.append(Range(t.position(first - 1), t.position(last)))
            first = e
        last = e
    if first >= 0:
        ranges.append(Range(t.position(first - 1), t.position(last)))
    made = AckState.of(t.position(c.md), RangeSet.of(ranges))
    c.printed = (key, made)
    return made


def report(t: Topic, s: Subscription) -> pluginapi.CursorReport:
    state = ack_state(t, s)
    batches = tuple(
        pluginapi.BatchState(t.position(e), tuple(i for i in range(len(t.entries[e].msgs)) if i not in part))
        for e, part in sorted(s.cursor.partial.items())
    )
    return pluginapi.CursorReport(t.name, s.name, state.mark_delete, str(state.ranges), batches)


def acked_block(t: Topic, sub: str, pairs: set[tuple[int, int]]) -> pluginapi.AckedSet:
    """What consumers acknowledged since the last read, as the plugin's ``acked`` block: whole entries as
    ranges, partly acknowledged batches with their indexes not acknowledged (in this read's acks)."""
    indexes: dict[int, set[int]] = {}
    for e, i in pairs:
        indexes.setdefault(e, set()).add(i)
    whole = [e for e, got in indexes.items() if len(got) >= len(t.entries[e].msgs)]
    batches = tuple(
        pluginapi.BatchState(t.position(e), tuple(i for i in range(len(t.entries[e].msgs)) if i not in got))
        for e, got in sorted(indexes.items())
        if e not in whole
    )
    ranges = RangeSet.of(Range.single(t.position(e)) for e in whole)
    return pluginapi.AckedSet(t.name, sub, ranges, None, batches)


class SimAdmin:
    """The region's admin REST API and the GeoSync plugin's endpoints."""

    def __init__(self, world: World, region: str) -> None:
        self.world = world
        self.r: Region = world.regions[region]
        self.calls: list[str] = []
        self.tamper: Callable[[list[pluginwrites.AckItem]], list[pluginwrites.AckItem]] | None = None
        """Rewrites the agent's cursor writes before the broker sees them: a broken agent, for the checker's
        own tests (the simulation must be able to fail)."""

    def _topic(self, topic: str) -> Topic:
        t = self.r.topics.get(topic)
        if t is None:
            raise adminhttp.AdminNotFound(f"404 topic {topic} not found")
        return t

    def _sub(self, topic: str, sub: str) -> Subscription:
        s = self.r.subs.get((topic, sub))
        if s is None:
            self.world.trace(
                f"{self.r.name}: {topic.rsplit('/', 1)[-1]}/{sub} admin call on a missing subscription"
            )
            raise adminhttp.AdminNotFound(f"404 Subscription not found: {topic}/{sub}")
        return s

    # discovery
    def tenants(self) -> list[str]:
        return [self.world.namespace.split("/")[0]]

    def namespaces(self, tenant: str) -> list[str]:
        return [self.world.namespace]

    def replication_clusters(self, namespace: str) -> list[str]:
        return list(self.world.regions)

    def retention(self, namespace: str) -> dict[str, Any] | None:
        return {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}

    def topics(self, namespace: str) -> list[str]:
        return [t for t in self.r.topics if t != self.world.control]

    def create_topic(self, topic: str) -> bool:
        return False

    def _stats(self, topic: str) -> dict[str, Any]:
        self._topic(topic)
        subs = {
            name: {
                "type": s.kind if s.dispatched else "None",
                "isDurable": True,
                "consumers": [{"consumerName": f"app-{i}"} for i in range(s.consumers)],
            }
            for (t, name), s in self.r.subs.items()
            if t == topic
        }
        return {"subscriptions": subs, "replication": {}}

    def topic_stats(self, topic: str, **_: Any) -> dict[str, Any]:
        return self._stats(topic)

    def internal_stats(self, topic: str, **_: Any) -> dict[str, Any]:
        t = self._topic(topic)
        cursors = {}
        for (name_t, name), s in self.r.subs.items():
            if name_t == topic:
                state = ack_state(t, s)
                cursors[name] = {
                    "markDeletePosition": str(state.mark_delete),
                    "individuallyDeletedMessages": str(state.ranges),
                }
        return {
            "cursors": cursors,
            "ledgers": [{"ledgerId": t.ledger}],
            "lastConfirmedEntry": str(t.position(t.last)),
        }

    def unload_topic(self, topic: str) -> None:
        self._topic(topic)

    def create_subscription(self, topic: str, subscription: str, *, at: tuple[int, int] = (-1, -1)) -> bool:
        self.calls.append("create_subscription")
        t = self._topic(topic)
        kind = "Shared"
        created = self.world.create_subscription(
            self.r.name, topic, subscription, kind, latest=False, cause="agent:create"
        )
        if created and at != (-1, -1):
            s = self.r.subs[(topic, subscription)]
            self.world.acked(self.r.name, topic, subscription, s.cursor.ack_through(t, at[1]), "agent:create")
        return created

    def expire_messages(
        self, topic: str, subscription: str, *, ledger: int, entry: int, partition: int = -1
    ) -> None:
        self.calls.append("expire_messages")
        t = self._topic(topic)
        s = self._sub(topic, subscription)
        if ledger == t.ledger:
            self.world.acked(self.r.name, topic, subscription, s.cursor.ack_through(t, entry), "agent:expire")

    def skip_by_message_ids(self, topic: str, subscription: str, positions: list[tuple[int, int]]) -> None:
        self.calls.append("skip_by_message_ids")
        if not self.r.skip_by_ids:
            raise adminhttp.AdminNotFound("404 Not Found")
        t = self._topic(topic)
        s = self._sub(topic, subscription)
        newly = [p for lg, e in positions if lg == t.ledger for p in s.cursor.ack_entry(t, e)]
        self.world.acked(self.r.name, topic, subscription, newly, "agent:skip")

    def reset_cursor(self, topic: str, subscription: str, *, mark_delete: tuple[int, int] | None) -> None:
        self.calls.append("reset_cursor")
        self._sub(topic, subscription)
        md = -1 if mark_delete is None else mark_delete[1]
        self.world.reset_cursor(self.r.name, topic, subscription, md, "agent:reset")

    def entry_headers(self, topic: str, *, ledger: int, entry: int) -> adm.EntryHeaders:
        t = self._topic(topic)
        if ledger != t.ledger or not 0 <= entry <= t.last:
            raise adminhttp.AdminNotFound(f"404 no entry {ledger}:{entry}")
        e = t.entries[entry]
        # The entry's own properties: an unbatched message's as its application set them, then the
        # replicator's stamp on a copy, which the headers' JSON object keeps (the last of two of a name;
        # ``integration_tests/test_forged_stamps.py`` shows it on the lab).
        props = dict(e.msgs[0].props) if e.msgs and not e.batched else {}
        if e.replicated_from is not None:
            props[STAMP] = str(e.source)
        return adm.EntryHeaders(e.replicated_from, props, len(e.msgs) if e.batched else None)

    def runtime_configuration(self) -> dict[str, Any]:
        return {"entryFilterNames": "[geosync]"} if self.r.plugin else {}

    def active_brokers(self, cluster: str) -> list[str]:
        return [f"{self.r.name}-broker:8080"]

    def owned_bundles(self, cluster: str, broker: str) -> dict[str, Any]:
        return {f"{self.world.namespace}/0x00000000_0xffffffff": {"is_active": True}}

    def lookup_topic(self, topic: str) -> dict[str, Any]:
        return {
            "httpUrl": f"http://{self.r.name}-broker:8080",
            "brokerUrl": f"pulsar://{self.r.name}-broker:6650",
        }

    # the plugin
    def _need_plugin(self, *, write: bool = False) -> None:
        """404 where the plugin is not loaded; 403 where it refuses this agent (``Region.refusing``:
        ``GeoSyncInterceptor.acks`` with ``geosyncAllowCursorWrites`` off, ``PluginAccess.role`` for a role
        that is neither a superuser nor in ``geosyncAdminRoles``)."""
        if not self.r.plugin:
            raise adminhttp.AdminNotFound("404 no GeoSync plugin")
        if self.r.refusing == "all" or (write and self.r.refusing == "writes"):
            raise adminhttp.AdminForbidden(f"403 the GeoSync plugin refuses this agent ({self.r.refusing})")

    def plugin_origins(self, topic: str, *, start: tuple[int, int] | None = None) -> list[OriginRun]:
        self._need_plugin()
        t = self._topic(topic)
        first = 0 if start is None or start[0] != t.ledger else max(0, start[1])
        return [
            OriginRun(t.ledger, e.eid, 1, e.origin, None if e.replicated_from is None else e.source)
            for e in t.entries[first:]
        ]

    def plugin_topics(self, namespace: str) -> dict[str, dict[str, Any]]:
        self._need_plugin()
        return {t: self._stats(t) for t in self.topics(namespace)}

    def plugin_feed(self, *, since: int, epoch: str = "", acked: bool = True) -> pluginapi.Feed:
        self._need_plugin()
        changed = list(dict.fromkeys(self.r.feed)) if since else list(dict.fromkeys(k for k in self.r.subs))
        self.r.feed.clear()
        reports = tuple(
            report(self.r.topics[t], self.r.subs[(t, s)]) for t, s in changed if (t, s) in self.r.subs
        )
        self.r.feed_seq += len(reports) + 1
        blocks = (
            tuple(acked_block(t, s, got) for t, s, got in self.r.acked_gone)  # topics deleted since
            + tuple(
                acked_block(self.r.topics[t], s, got)
                for (t, s), got in self.r.acked.items()
                if t in self.r.topics
            )
            if acked
            else None  # handed over all the same, not read (``Feed.from_wire(acked=False)``)
        )
        self.r.acked.clear()
        self.r.acked_gone.clear()
        return pluginapi.Feed(
            f"{self.r.name}-epoch-{self.r.life}-{self.r.loads}",
            self.r.feed_seq,
            reports,
            blocks,
            write_version=PLUGIN_WRITE_VERSION if FEED_WRITE_VERSION is None else FEED_WRITE_VERSION,
        )

    def plugin_write(self, items: list[pluginwrites.AckItem]) -> list[pluginwrites.AckResult]:
        self.calls.append("plugin_write")  # made, answered or refused
        self._need_plugin(write=True)
        if self.tamper is not None:
            items = self.tamper(items)
        out = []
        for item in items:
            key = (item.topic, item.subscription)
            t = self.r.topics.get(item.topic)
            s = self.r.subs.get(key)
            if t is None or s is None:
                self.world.trace(
                    f"{self.r.name}: {item.topic.rsplit('/', 1)[-1]}/{item.subscription} no_subscription"
                )
                out.append(pluginwrites.AckResult(pluginapi.Status.NO_SUBSCRIPTION, *key))
                continue
            if item.planned_from is not None and PLUGIN_WRITE_VERSION < 2:
                error = "unknown field 'planned_from'"  # an older plugin (PluginApi.parseItem)
                name = f"{item.topic.rsplit('/', 1)[-1]}/{item.subscription}"
                self.world.trace(f"{self.r.name}: {name} {error}")
                out.append(pluginwrites.AckResult(pluginapi.Status.BAD_REQUEST, *key, error=error))
                continue
            if item.planned_from is not None and item.stale_on(at := ack_state(t, s).mark_delete):
                # CursorDesk.acknowledge: planned over a cursor moved back since; nothing applied.
                self.world.trace(
                    f"{self.r.name}: {item.topic.rsplit('/', 1)[-1]}/{item.subscription} write planned from "
                    f"{item.planned_from} is stale at {at}: not applied"
                )
                out.append(pluginwrites.AckResult(pluginapi.Status.OK, *key, cursor=report(t, s), stale=True))
                continue
            newly = []
            if item.mark_delete is not None and item.mark_delete.ledger == t.ledger:
                newly += s.cursor.ack_through(t, item.mark_delete.entry)
            for p in item.positions:
                if p.ledger == t.ledger:
                    newly += s.cursor.ack_entry(t, p.entry)
            for b in item.batches:
                if b.position.ledger == t.ledger and 0 <= b.position.entry <= t.last:
                    if len(t.entries[b.position.entry].msgs) != b.size:
                        out.append(pluginwrites.AckResult(pluginapi.Status.BAD_REQUEST, *key, error="size"))
                        break
                    for i in sorted(b.acked):
                        newly += s.cursor.ack_index(t, b.position.entry, i)
            else:
                self.world.acked(self.r.name, item.topic, item.subscription, newly, "agent:plugin")
                out.append(
                    pluginwrites.AckResult(
                        pluginapi.Status.OK, *key, cursor=report(t, s), acknowledged=len(newly)
                    )
                )
                continue
            self.world.acked(self.r.name, item.topic, item.subscription, newly, "agent:plugin")
        return out


class SimProducer:
    def __init__(self, world: World, region: str, topic: str, closed: Callable[[], bool]) -> None:
        self.world, self.region, self.topic, self.closed = world, region, topic, closed

    def send_async(
        self,
        data: bytes,
        callback: Callable[[bool], None],
        *,
        properties: dict[str, str] | None = None,
        replication_clusters: list[str] | None = None,
    ) -> None:
        if self.closed():
            callback(False)
            return
        self.world.publish(self.region, self.topic, (), batched=False, data=data)
        callback(True)

    def close(self) -> None:
        pass


class SimReader:
    def __init__(self, state: SimReaderState) -> None:
        self.state = state

    def close(self) -> None:
        self.state.open = False

    def connected(self) -> bool:
        return self.state.open


def partition_of(topic: str) -> int:
    """The partition a topic's name says (``...-partition-N``), -1 for a topic that is not a partition."""
    base, _, n = topic.rpartition("-partition-")
    return int(n) if base and n.isdigit() else -1


def received(t: Topic, e: Entry) -> list[Received]:
    """The messages of entry ``e`` as a reader receives them, one by one."""
    if not e.msgs:  # a control envelope
        at = t.position(e.eid)
        return [Received(t.name, at, -1, -1, e.data, "", e.publish_ms, {}, f"{e.origin}-ctl")]
    out = []
    # What every message of the entry shares, made once for it.
    position, partition, publish_ms = t.position(e.eid), partition_of(t.name), e.publish_ms
    batch_size = len(e.msgs) if e.batched else None
    stamp = str(e.source) if e.replicated_from is not None and not e.batched else None
    for i, m in enumerate(e.msgs):
        props = dict(m.props)  # what its application set, first
        if stamp is not None:
            # The replicator adds its stamp after the application's properties; a client keeps the first of
            # two of a name, so a stamp the application set is the one it shows (issue 45, case 3).
            props.setdefault(STAMP, stamp)
        out.append(
            Received(
                topic=t.name,
                position=position,
                partition=partition,
                batch_index=i if e.batched else -1,
                # A data message's payload is read only if it carries the marker property (``tailing``).
                data=m.data if MARKER_PROPERTY in props else b"",
                key=m.key,
                publish_ms=publish_ms,
                properties=props,
                producer=m.producer,
                batch_size=batch_size,
            )
        )
    return out


class SimMessaging:
    """The region's brokers over the binary protocol, for one life of an agent (a crash closes it)."""

    def __init__(self, world: World, region: str, *, shadow_latest: bool = False) -> None:
        self.world = world
        self.r = world.regions[region]
        self.shadow_latest = shadow_latest
        self.readers: list[SimReaderState] = []
        self.dead = False
        self.shadow_creations = 0

    def reader(
        self, topic: str, on_message: Callable[[Received], None], *, start: Position | None = None
    ) -> SimReader:
        t = self.r.topics.get(topic)
        if t is None:
            raise TopicMissing(f"{topic} does not exist")
        first = 0 if start is None or start.ledger != t.ledger else max(0, start.entry)

        def deliver(e: Entry, topic_: Topic) -> None:
            for m in received(topic_, e):
                on_message(m)

        state = SimReaderState(topic, deliver, first)
        self.readers.append(state)
        self.r.readers.append(state)
        self.world.unpumped = True
        return SimReader(state)

    def broker_answers(self, service_url: str) -> bool:
        return True

    def producer(self, topic: str) -> SimProducer:
        return SimProducer(self.world, self.r.name, topic, lambda: self.dead)

    def subscribe_at_earliest(self, topic: str, subscription: str, *, name: str) -> None:
        if topic not in self.r.topics:
            raise TopicMissing(f"{topic} does not exist")
        self.world.create_subscription(
            self.r.name, topic, subscription, "Shared", latest=False, cause="agent:create"
        )

    def shadow_ack(
        self, topic: str, subscription: str, *, partition: int, positions: list[Position], name: str
    ) -> None:
        t = self.r.topics.get(topic)
        if t is None:
            raise TopicMissing(f"{topic} does not exist (and auto topic creation is off)")
        if (topic, subscription) not in self.r.subs:
            # The idle consumer subscribes with its initial position: at Latest the subscription comes back
            # with everything acknowledged.
            self.shadow_creations += 1
            latest = self.shadow_latest
            cause = "agent:shadow-latest" if latest else "agent:create"
            self.world.create_subscription(
                self.r.name, topic, subscription, "Shared", latest=latest, cause=cause
            )
        s = self.r.subs[(topic, subscription)]
        newly = [p for pos in positions if pos.ledger == t.ledger for p in s.cursor.ack_entry(t, pos.entry)]
        self.r.feed.append((topic, subscription))  # the plugin's messageAcked sees the shadow's acks too
        self.world.acked(self.r.name, topic, subscription, newly, "agent:shadow")

    def close(self) -> None:
        self.dead = True
        for state in self.readers:
            state.open = False
