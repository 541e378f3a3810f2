"""The simulated brokers: regions with topics, geo-replication, subscriptions and the applications' consumers.

Why: the agent's promises (no loss, no re-delivery after a failover beyond what the design allows) depend on
what Pulsar does with cursors and replicated entries. This module models the parts the agent relies on, on
virtual time and one ``random.Random``: nothing here reads a clock, sleeps or starts a thread, so a seed
replays a run exactly.

What it models, and the Pulsar class each rule follows:

* a topic per region is one ledger of entries; an entry is one message or a batch of messages with keys,
  producer names and per-producer sequence numbers (``ManagedLedgerImpl``: entry ids grow by one);
* geo-replication: only entries published in a region are replicated out of it, in order per (source,
  destination, topic), each after a drawn delay (``GeoPersistentReplicator.replicateEntries`` discards an
  entry whose ``isReplicated()`` is set and sends the rest in cursor order). The copy is stamped with its
  source position ``__MSG_PROP_REPL_SOURCE_POSITION = "L:E"`` in the entry's metadata
  (``GeoReplicationProducerImpl``): an unbatched message's client sees it among its properties, the messages
  of a batch do not (their own single-message properties replace the entry's);
* a subscription's cursor is a mark-delete position, the individually deleted entries above it and the
  acknowledged indexes of partly acknowledged batches (``ManagedCursorImpl``: ``markDeletePosition``,
  ``individualDeletedMessages``, ``batchDeletedIndexes``); an entry whose last index is acknowledged is
  deleted whole, and the mark-delete advances over every deleted entry that follows it (``ManagedCursorImpl
  .asyncDelete``);
* a consumer connecting to a subscription is dispatched from the mark-delete on, skipping what is deleted
  (``ManagedCursorImpl.rewind`` on a new consumer, ``PersistentDispatcherMultipleConsumers``); Key_Shared
  keeps per-key order within a region because a key's entries are dispatched in log order;
* admin operations: clear-backlog moves the mark-delete to the last entry (``ManagedCursorImpl
  .asyncClearBacklog``), skip moves it over n undeleted entries (``asyncSkipEntries`` with
  ``IndividualDeletedEntries.Exclude``), reset-cursor sets it and forgets the holes (``asyncResetCursor``, via
  ``PersistentSubscription.resetCursor``), TTL expiry marks deleted every entry published before the TTL
  (``PersistentMessageExpiryMonitor``), expire-messages by position moves forward only; a subscription created
  at Latest starts at the last entry, at Earliest before the first (``ManagedLedgerImpl.openCursor`` with
  ``InitialPosition``);
* control topics are topics like the others: the agents' signed envelopes are replicated with delays, and a
  fault can deliver one twice or replay an old one;
* a region wiped and rebuilt under its name (``wipe``, then ``rebuilt``): its topics, cursors and plugin
  state are gone, and its new topics' ledger ids start over, colliding with the old ones (the metadata store
  hands ledger ids out from sequential nodes under ``/ledgers/idgen``, ``PulsarLedgerIdGenerator``: a fresh
  store counts from the start again; ``ManagedLedgerImpl`` numbers a new ledger's entries from 0), so the new
  life's messages have the origin coordinates of the old life's. Entries the old life had replicated stay in
  the peers' logs; copies still in flight when it was wiped land there as drawn, but before the region is
  back (a send that reached the peer's broker is persisted there whatever becomes of the sender, and a
  rebuild takes minutes where a copy is in flight for a second or so). What peers replicate to the wiped
  region while it is down is sent once it is back (``PersistentReplicator.readEntries`` rewinds the
  replicator's cursor when its producer connects, and the cursor moves only on the remote broker's
  receipt); what the old life had received is not sent again. The checker names the new life's messages
  apart (``c~1``); agents see only the region's name, as they would;
* readers stalled (``stall_readers``): a region's readers of data topics are dispatched nothing for a while
  and then catch up, while its control topic is read (a data topic's bundle unloaded or moved, its broker
  slow: a reader is dispatched only by the broker owning its topic,
  ``PersistentDispatcherSingleActiveConsumer`` on a non-durable cursor); an agent then learns from control
  messages before it has read its data topics.

* a broker killed (``reload``): the region's topics are loaded again by another broker, whose cursors start
  from what was persisted: ``ManagedCursorImpl`` writes a cursor's mark-delete and deleted ranges to its
  ledger at most once a second (``managedLedgerDefaultMarkDeleteRateLimit``), so a killed broker loses the
  acknowledgements of its last second or so (a reset or a creation is written at once); and Pulsar 4.0.8
  keeps no batch indexes of partly acknowledged entries across a load (docs/limits.md), so those messages
  are dispatched again; the plugin's feed is the new broker's (another epoch). One agent per
  region stands for the sidecars: the killed broker's dies with it, and the new owner's takes over.

* a topic deleted and created again (``delete_topic``, ``create_topic``): an operator deletes it by force
  (``PersistentTopic.deleteForcefully`` closes its producers, consumers and replicators and deletes its
  cursors and managed ledger), in one region or in each; it comes back empty with a ledger id new in the
  region (its metadata store's counter only grows, ``PulsarLedgerIdGenerator``). Auto topic creation is off:
  no reader, shadow consumer or replicator creates it meanwhile (``TopicMissing``, the adapter's error for
  ``TopicNotFound``), copies sent to it wait (dropped if their own topic was deleted too: its replicator is
  closed), and the applications subscribe again once it exists. What its consumers acknowledged that the
  plugin's feed had not handed over is handed over at its next read (``AckFeed`` keeps its records by topic
  name, and nothing removes them on a deletion).

A partitioned topic is its partitions' topics (``schedules.partitions_of``); the plugin's 403 is ``ports``'.
Not modelled: ledger rollover, several brokers sharing a region's bundles (one owner at a time), hostile
producers, retention (nothing is trimmed), Key_Shared hash ranges across several consumers (one consumer per
region stands for the application), auto topic creation.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from geosync_sim.logs import WALL0, Cursor, Entry, Ident, Msg, Subscription, Topic, lived

STAMP = "__MSG_PROP_REPL_SOURCE_POSITION"
PERSIST_S = 1.0
"""A cursor is written to its ledger at most this often (``managedLedgerDefaultMarkDeleteRateLimit``)."""
CONTROL_SUFFIX = "/geosync-control"


@dataclass
class Region:
    name: str
    index: int
    plugin: bool = True
    refusing: str = ""
    """Where the plugin is loaded, what it answers 403 to: "" nothing, "writes" cursor writes
    (``geosyncAllowCursorWrites`` off), "all" every endpoint (the agent's role is not allowed)."""
    skip_by_ids: bool = False
    topics: dict[str, Topic] = field(default_factory=dict)
    subs: dict[tuple[str, str], Subscription] = field(default_factory=dict)
    feed: list[tuple[str, str]] = field(default_factory=list)
    """(topic, subscription) each time a consumer acknowledged (the plugin's ``AckFeed``)."""
    acked: dict[tuple[str, str], set[tuple[int, int]]] = field(default_factory=dict)
    """(entry, index) pairs consumers acknowledged since the plugin's feed was last read (its ``acked``)."""
    acked_gone: list[tuple[Topic, str, set[tuple[int, int]]]] = field(default_factory=list)
    """The same for topics deleted since (topic, subscription, pairs): the plugin's ``AckFeed`` keys its
    records by topic name and nothing removes them on a deletion, so the next read hands them over."""
    feed_seq: int = 0
    readers: list[SimReaderState] = field(default_factory=list)
    produced: int = 0
    life: int = 0
    """How many times the region was wiped and rebuilt."""
    born: float = 0.0
    """When (virtual seconds) its current life began."""
    down_until: float = -1.0
    """Wiped and not rebuilt yet before this time: nothing is published in it or delivered to it."""
    stalled_until: float = -1.0
    loads: int = 0
    """How many times its topics were loaded by another broker (``reload``)."""
    ledgers: int = 10
    """The next ledger id its metadata store hands out (``PulsarLedgerIdGenerator``)."""
    """Its readers of data topics are dispatched nothing before this time."""

    def down(self, now: float) -> bool:
        return now < self.down_until


@dataclass
class SimReaderState:
    topic: str
    on_message: Callable[[Entry, Topic], None]
    next_eid: int
    open: bool = True


CONSUMER_ACKS = frozenset({"consumer", "agent:shadow"})
"""Causes of acknowledgements a consumer sent (the agent's shadow consumer is one): the plugin records
them."""


AckHook = Callable[..., None]
"""(time, region, topic, subscription, identities newly acknowledged, cause)."""


class World:
    """Regions on virtual time, with their replication links and event queue."""

    def __init__(
        self,
        rng: random.Random,
        regions: list[str],
        *,
        namespace: str,
        delay: tuple[float, float] = (0.05, 0.6),
    ) -> None:
        self.rng = rng
        self.now = 0.0
        self.namespace = namespace
        self.control = f"persistent://{namespace}{CONTROL_SUFFIX}"
        self.regions = {name: Region(name, i) for i, name in enumerate(regions)}
        self.delay = delay
        self.spike_until = 0.0
        self._queue: list[tuple[float, int, str, str, Entry]] = []
        self._n = 0
        self._link_last: dict[tuple[str, str, str], float] = {}
        self.on_acked: AckHook = lambda *_, **__: None
        self.on_rewind: Callable[..., None] = lambda *_, **__: None
        self.on_created: Callable[[float, str, str, str], None] = lambda *_: None
        self.on_topic_created: Callable[[str, str], None] = lambda *_: None
        """(region, topic): a deleted topic exists again (the applications subscribe to it again)."""
        self.on_topic_deleted: Callable[[str, str, dict[str, list[Ident]]], None] = lambda *_: None
        """(region, topic, subscription -> messages): a topic deleted, with what its consumers acknowledged
        that the plugin's feed had not handed over yet (``Region.acked``; never read where no feed is)."""
        self._recreations: list[tuple[float, str, str]] = []
        """(when, region, topic): deleted topics to create again, in time order."""
        self._held: dict[tuple[str, str], list[Entry]] = {}
        """Copies replicated to a deleted topic, sent once it exists again (in order)."""
        self.trace: Callable[[str], None] = lambda _line: None
        self.unpumped = True
        """Some open reader may have entries to be dispatched (``pump_readers`` looks at every reader only
        then: an entry appended, a reader opened, a stalled reader waiting)."""
        for region in self.regions.values():
            self._add_topic(region, self.control)

    # -- topics and replication ---------------------------------------------------------------------

    def _add_topic(self, region: Region, topic: str) -> Topic:
        # Ledger ids collide between regions, as in a fresh lab (each region's BookKeeper counts from the
        # same start): the agent must tell origins apart by more than the ledger id.
        t = region.topics[topic] = Topic(topic, region.ledgers)
        region.ledgers += 1
        return t

    def add_topic(self, topic: str) -> None:
        for region in self.regions.values():
            self._add_topic(region, topic)

    def publish(
        self, region: str, topic: str, msgs: tuple[Msg, ...], *, batched: bool, data: bytes = b""
    ) -> Entry | None:
        r = self.regions[region]
        t = r.topics.get(topic)
        if t is None:
            return None  # deleted: its producers have no topic to send to until it exists again
        eid = len(t.entries)
        entry = Entry(
            eid,
            region,
            t.position(eid),
            msgs,
            batched and len(msgs) > 1,
            self.now,
            data=data,
            life=r.life,
            published=self.now,
        )
        t.entries.append(entry)
        self.unpumped = True
        for dst in self.regions:
            if dst != region:
                self._replicate(region, dst, topic, entry)
        return entry

    def _replicate(self, src: str, dst: str, topic: str, entry: Entry, *, extra: float = 0.0) -> None:
        low, high = self.delay
        delay = low + (high - low) * self.rng.random() + extra
        if self.now < self.spike_until:
            delay += 3.0 * self.rng.random()
        # One replicator per (topic, destination) sends in cursor order: a copy never overtakes an older one.
        link = (src, dst, topic)
        due = max(self.now + delay, self._link_last.get(link, 0.0))
        self._link_last[link] = due
        self._n += 1
        heapq.heappush(self._queue, (due, self._n, dst, topic, entry))

    def replay_control(self, dst: str, rng: random.Random) -> None:
        """Deliver an old control envelope published elsewhere to ``dst`` again (a replay)."""
        old = [
            e
            for r in self.regions.values()
            if r.name != dst
            for e in r.topics[self.control].entries
            if e.replicated_from is None
        ]
        if old:
            entry = rng.choice(old)
            self._n += 1
            heapq.heappush(self._queue, (self.now, self._n, dst, self.control, entry))

    def advance(self, until: float) -> None:
        """Deliver every replicated entry due by ``until``, and create again the deleted topics due."""
        while True:
            next_copy = self._queue[0][0] if self._queue else math.inf
            if self._recreations and self._recreations[0][0] <= min(next_copy, until):
                at, region, name = self._recreations.pop(0)
                self.now = max(self.now, at)
                self.create_topic(region, name)
                continue
            if next_copy > until:
                break
            due, _, dst, topic, entry = heapq.heappop(self._queue)
            if self.regions[dst].down(due):
                # Wiped: the replicator sends it again once the region is back (in order: ``_n`` grows).
                self._n += 1
                heapq.heappush(self._queue, (self.regions[dst].down_until, self._n, dst, topic, entry))
                continue
            self.now = max(self.now, due)
            t = self.regions[dst].topics.get(topic)
            if t is None:
                # Deleted there: the replicator's producer waits for it (auto-creation off) and sends it again
                # once it exists, unless the topic it replicates was deleted too (its replicator closed).
                if self._replicating(entry, topic):
                    self._held.setdefault((dst, topic), []).append(entry)
                continue
            eid = len(t.entries)
            t.entries.append(
                Entry(
                    eid,
                    entry.origin,
                    entry.source,
                    entry.msgs,
                    entry.batched,
                    self.now,
                    replicated_from=entry.origin,
                    data=entry.data,
                    life=entry.life,
                    published=entry.published,
                )
            )
            self.unpumped = True
        self.now = max(self.now, until)

    def pump_readers(self) -> None:
        if not self.unpumped:
            return
        self.unpumped = False
        for region in self.regions.values():
            for reader in region.readers:
                if not reader.open:
                    continue
                if reader.topic != self.control and self.now < region.stalled_until:
                    stalled = region.topics.get(reader.topic)
                    if stalled is not None and reader.next_eid < len(stalled.entries):
                        self.unpumped = True  # dispatched once the stall ends
                    continue
                t = region.topics[reader.topic]
                while reader.open and reader.next_eid < len(t.entries):
                    e = t.entries[reader.next_eid]
                    reader.next_eid += 1
                    reader.on_message(e, t)

    def wipe(self, region: str, down: float) -> None:
        """``region`` is wiped (brokers, bookies, metadata store): every topic, cursor and plugin record gone;
        it is rebuilt ``down`` seconds later (``rebuilt``). Copies of its entries in flight land as drawn,
        copies sent to it meanwhile wait for it (see the module docstring)."""
        r = self.regions[region]
        for topic, sub in list(r.subs):
            self.delete_subscription(region, topic, sub)
        for reader in r.readers:
            reader.open = False
        names = [*r.topics, *(t for (dst, t) in self._held if dst == region)]
        r.topics, r.readers, r.feed, r.acked, r.feed_seq, r.ledgers = {}, [], [], {}, 0, 10
        r.acked_gone = []
        r.down_until = self.now + down
        self._queue = [
            (min(due, self.now + down / 2) if entry.origin == region else due, n, dst, topic, entry)
            for due, n, dst, topic, entry in self._queue
        ]
        heapq.heapify(self._queue)
        for topic in names:  # the same order: the new ledger ids are the old ones
            self._add_topic(r, topic)
            for entry in self._held.pop((region, topic), []):  # sent once the region is back
                self._n += 1
                heapq.heappush(self._queue, (self.now, self._n, region, topic, entry))
        self.trace(f"{region}: wiped, rebuilt in {down:.2f}s (ledger ids start over)")

    def rebuilt(self, region: str) -> None:
        """``region``'s new life begins: its brokers serve empty topics again."""
        r = self.regions[region]
        r.life += 1
        r.born = self.now
        r.down_until = -1.0
        self.trace(f"{region}: rebuilt (life {r.life})")

    def delete_topic(self, region: str, topic: str, *, back_in: float) -> None:
        """An operator deletes ``topic`` in ``region`` by force (``PersistentTopic.deleteForcefully``: its
        producers, consumers, readers and replicators are closed, its cursors and managed ledger deleted);
        ``back_in`` seconds later it is created again, empty, with a new ledger (``create_topic``). What
        peers replicate to it meanwhile waits for it; copies of its entries already sent land as drawn."""
        r = self.regions[region]
        if topic not in r.topics or r.down(self.now):
            return
        for t, sub in list(r.subs):
            if t == topic:
                self.delete_subscription(region, t, sub)
        for reader in r.readers:
            if reader.topic == topic:
                reader.open = False
        r.feed = [k for k in r.feed if k[0] != topic]
        # What consumers acknowledged before the deletion and the plugin has not handed over yet stays in its
        # feed (``AckFeed`` has no hook for a deleted topic) and goes out with the next read.
        gone = r.topics[topic]
        pending = {sub: got for (t, sub), got in r.acked.items() if t == topic}
        r.acked_gone.extend((gone, sub, got) for sub, got in pending.items())
        told = {sub: self.idents(gone, sorted(got)) for sub, got in pending.items()}
        self.on_topic_deleted(region, topic, told)
        r.acked = {k: v for k, v in r.acked.items() if k[0] != topic}
        del r.topics[topic]
        self._recreations.append((self.now + back_in, region, topic))
        self._recreations.sort()
        self.trace(f"{region}: {topic.rsplit('/', 1)[-1]} deleted, created again in {back_in:.2f}s")

    def _replicating(self, entry: Entry, topic: str) -> bool:
        """Whether the topic ``entry`` was published to still exists in its origin (its replicator runs)."""
        origin = self.regions[entry.origin]
        t = origin.topics.get(topic)
        return t is not None and t.ledger == entry.source.ledger and origin.life == entry.life

    def create_topic(self, region: str, topic: str) -> None:
        """``topic`` exists again in ``region``: its first ledger's id is new there (the metadata store's
        counter only grows, ``PulsarLedgerIdGenerator``), its entries start at 0 (``ManagedLedgerImpl``), and
        the copies held for it are sent in order."""
        r = self.regions[region]
        if topic in r.topics:
            return
        t = self._add_topic(r, topic)
        for entry in self._held.pop((region, topic), []):
            if not self._replicating(entry, topic):
                continue
            self._n += 1
            heapq.heappush(self._queue, (self.now, self._n, region, topic, entry))
        self.trace(f"{region}: {topic.rsplit('/', 1)[-1]} created again (ledger {t.ledger})")
        self.on_topic_created(region, topic)

    def stall_readers(self, region: str, seconds: float) -> None:
        self.regions[region].stalled_until = self.now + seconds

    def reload(self, region: str) -> None:
        """The region's topics are loaded by another broker (see the module docstring): the batch indexes of
        partly acknowledged entries are forgotten, and the plugin's feed starts another epoch."""
        r = self.regions[region]
        r.loads += 1
        r.feed, r.acked, r.acked_gone = [], {}, []
        forgotten = 0
        for (topic, sub), s in r.subs.items():
            t = r.topics[topic]
            loaded = s.persisted.copy() if s.persisted is not None else s.cursor.copy()
            loaded.partial.clear()
            back = [
                e.ident(i)
                for e in t.entries
                for i in range(len(e.msgs))
                if s.cursor.has(e.eid, i) and not loaded.has(e.eid, i)
            ]
            s.cursor, s.persisted, s.persisted_at = loaded, loaded.copy(), self.now
            forgotten += len(back)
            if back:
                self.on_rewind(self.now, region, topic, sub, "broker:reload", idents=back)
        self.trace(
            f"{region}: topics loaded by another broker (load {r.loads}), {forgotten} acknowledgements lost"
        )

    # -- cursors ------------------------------------------------------------------------------------

    def idents(self, topic: Topic, pairs: list[tuple[int, int]]) -> list[Ident]:
        return [topic.entries[e].ident(i) for e, i in pairs]

    def acked(self, region: str, topic: str, sub: str, pairs: list[tuple[int, int]], cause: str) -> None:
        if pairs and cause in CONSUMER_ACKS:  # what the plugin's messageAcked sees (decision 0015)
            self.regions[region].acked.setdefault((topic, sub), set()).update(pairs)
        if pairs:
            s = self.regions[region].subs.get((topic, sub))
            if s is not None and self.now - s.persisted_at >= PERSIST_S:
                s.persisted, s.persisted_at = s.cursor.copy(), self.now
            t = self.regions[region].topics[topic]
            self.on_acked(self.now, region, topic, sub, idents=self.idents(t, pairs), cause=cause)

    def create_subscription(
        self, region: str, topic: str, sub: str, kind: str, *, latest: bool, cause: str
    ) -> bool:
        r = self.regions[region]
        if (topic, sub) in r.subs:
            return False
        t = r.topics[topic]
        s = r.subs[(topic, sub)] = Subscription(
            sub, kind, Cursor(), persisted=Cursor(), persisted_at=self.now
        )
        if latest:
            # At Latest the cursor starts at the last entry: everything before counts as deleted.
            self.acked(region, topic, sub, s.cursor.ack_through(t, t.last), cause)
        s.next_read = s.cursor.md + 1
        self.on_created(self.now, region, topic, sub)
        where = "Latest" if latest else "Earliest"
        self.trace(f"{region}: {topic.rsplit('/', 1)[-1]}/{sub} created at {where} ({cause})")
        return True

    def delete_subscription(self, region: str, topic: str, sub: str) -> None:
        if self.regions[region].subs.pop((topic, sub), None) is not None:
            self.on_rewind(self.now, region, topic, sub, "deleted", idents=[])
            self.trace(f"{region}: {topic.rsplit('/', 1)[-1]}/{sub} deleted")

    def clear_backlog(self, region: str, topic: str, sub: str) -> None:
        s = self.regions[region].subs.get((topic, sub))
        if s is not None:
            t = self.regions[region].topics[topic]
            self.acked(region, topic, sub, s.cursor.ack_through(t, t.last), "admin:clear-backlog")

    def skip(self, region: str, topic: str, sub: str, n: int) -> None:
        s = self.regions[region].subs.get((topic, sub))
        if s is None:
            return
        t = self.regions[region].topics[topic]
        e, left = s.cursor.md, n
        while left > 0 and e < t.last:
            e += 1
            if not s.cursor.entry_done(e):
                left -= 1
        self.acked(region, topic, sub, s.cursor.ack_through(t, e), "admin:skip")

    def expire_ttl(self, region: str, topic: str, sub: str, ttl: float) -> None:
        s = self.regions[region].subs.get((topic, sub))
        if s is None:
            return
        t = self.regions[region].topics[topic]
        e = -1
        while e + 1 <= t.last and t.entries[e + 1].at <= self.now - ttl:
            e += 1
        self.acked(region, topic, sub, s.cursor.ack_through(t, e), "admin:ttl")

    def reset_cursor(self, region: str, topic: str, sub: str, md: int, cause: str) -> None:
        r = self.regions[region]
        s = r.subs.get((topic, sub))
        if s is None:
            return
        before = s.cursor
        t = r.topics[topic]
        after = Cursor()
        newly = after.ack_through(t, md)
        if any(not before.has(e, i) for e, i in newly):
            self.acked(region, topic, sub, [(e, i) for e, i in newly if not before.has(e, i)], cause)
        back = [
            e.ident(i)
            for e in t.entries
            for i in range(len(e.msgs))
            if before.has(e.eid, i) and not after.has(e.eid, i)
        ]
        short = topic.rsplit("/", 1)[-1]
        self.trace(f"{region}: {short}/{sub} reset to {md} by {cause}: {len(back)} messages unacknowledged")
        if back:
            self.on_rewind(self.now, region, topic, sub, cause, idents=back)
        s.cursor = after
        s.persisted, s.persisted_at = after.copy(), self.now
        s.next_read = after.md + 1


__all__ = [
    "STAMP",
    "WALL0",
    "Cursor",
    "Entry",
    "Ident",
    "Msg",
    "Region",
    "SimReaderState",
    "Subscription",
    "Topic",
    "World",
    "lived",
]
