"""The agent's runtime: one process, one loop, talking only to its own region.

Every ``poll_interval_s`` (``feed_interval_s`` with the broker plugin's acknowledgement feed, and at once
when a control message arrives) the loop does bounded work in a fixed order, so each step sees a consistent
picture and nothing runs concurrently with anything else that touches the same state:

1. discover (every ``discover_interval_s``): synced namespaces, their topic partitions, durable
   subscriptions and whether application consumers are connected;
2. index: drain every partition's reader queue into its ``OriginIndex`` (readers' listener threads only
   ``put``);
3. receive: drain the control topic, verify and de-duplicate envelopes, merge claims per subscription;
4. observe and publish: read cursors (the plugin's feed of just-acknowledged subscriptions where the
   broker loads GeoSync's interceptor, ``internalStats`` polls otherwise and as a slower safety net),
   translate each subscription's acknowledgements
   to origin coordinates and publish them (with everything received, so any live region carries the
   history) when they changed, and everything again every ``resync_interval_s``;
5. apply: plan each subscription's cursor change from the merged claims and carry it out: with the
   plugin's cursor writes, every subscription's mark-delete and holes in one call; otherwise mark-delete
   with ``expireMessages`` and holes with ``skipByMessageIds`` where the broker has it, else a shadow
   consumer's individual acks, only while no application consumer is connected.

Invariants (the core proves the planning; tests against the lab prove the whole): a cursor only moves
forward; only entries whose origin some region acknowledged are acknowledged; applying again changes
nothing; unsigned, altered, replayed or malformed control messages change nothing and are counted.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import queue
import random
import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pulsar

from geosync_adapters import admin as adm
from geosync_adapters import messaging
from geosync_agent import snapshotting
from geosync_agent.config import AgentConfig
from geosync_agent.recent import Recent
from geosync_agent.tailing import OriginResolver, Tail
from geosync_core import envelopes, markers, syncing
from geosync_core.origins import OriginAcks
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

log = logging.getLogger("geosync.agent")
PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<n>\d+)$")
INTERNAL_CURSORS = ("pulsar.repl.", "pulsar.dedup", "geosync-")
MAX_IDLE_POLL_S = 2.0
UNCONSUMED_POLL_S = 5.0
ACTIVE_WINDOW_S = 10.0
"""After new messages, a topic's cursors are polled every round for this long before backing off."""
ACK_BATCH = 200
"""Subscriptions per plugin acknowledgement call."""
STATES_PER_ENVELOPE = 64
"""Subscription states per control message (a round's states for one namespace are batched)."""
FEED_SAFETY_POLL_S = 30.0
"""With the plugin's feed, an idle topic's cursors are still polled this often (admin operations)."""
ACTIVE_FEED_S = 2.0
"""After the feed reported acknowledgements, rounds run every feed_interval_s for this long."""
ROUND_GAP_S = 0.02
"""Least pause between rounds, so a burst of control messages is taken in one round."""


@dataclass
class Subscription:
    topic: str
    name: str
    cursor: AckState | None = None
    consumers: int = 0
    exists: bool = True
    published: OriginAcks | None = None
    received: OriginAcks = field(default_factory=lambda: OriginAcks.of({}))
    announced: bool = False
    """Some other region has this subscription (so it must exist here too, even before any ack)."""
    received_from: dict[str, float] = field(default_factory=dict)
    translated: AckState | None = None
    """The cursor last translated and published (publishing is skipped while it is unchanged)."""
    planned: tuple[AckState | None, int, int] | None = None
    """(cursor, index version, claims count) the last plan was made from: replanning is skipped until one
    of them changes or a mark-delete move is still pending."""
    pending_mark_delete: tuple[Position, float] | None = None
    pending_holes: int = 0
    kind: str = ""
    """The subscription type the broker last reported with consumers attached ("" until seen)."""
    key_shared: bool = False
    """Seen with Key_Shared consumers here: claims keep per-key order (see syncing.key_ordered)."""
    last_applied_at: float = 0.0
    behind_since: float | None = None
    """Wall-clock time since which some remote acknowledgement waits to be applied here (None: in step)."""


@dataclass(frozen=True)
class Discovered:
    """One discovery pass: synced namespaces (with their replication clusters), topic partitions, and per
    topic the wanted durable subscriptions with their number of application consumers."""

    namespaces: dict[str, frozenset[str]]
    topics: tuple[str, ...]
    subscriptions: dict[str, dict[str, tuple[int, str]]]
    """topic -> subscription -> (application consumers, subscription type as the broker reports it)"""


def _app_consumers(sub: dict[str, Any]) -> int:
    return sum(
        1 for c in sub.get("consumers") or [] if not str(c.get("consumerName", "")).startswith("geosync-")
    )


@dataclass
class Stats:
    """Counters the metrics endpoint and the benchmarks read."""

    counters: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def inc(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counters[name] += n


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.key = config.key()
        self.admin = config.admin_client(timeout=5.0)
        self.client: pulsar.Client | None = None
        self.resolver = OriginResolver(local=config.region, lookup=self._lookup_origin)
        self.tails: dict[str, Tail] = {}
        self.subs: dict[tuple[str, str], Subscription] = {}
        self.namespaces: dict[str, frozenset[str]] = {}
        self.producers: dict[str, Any] = {}
        self.control_readers: dict[str, Tail] = {}
        # One guard per control topic: a sender's sequence numbers are shared by all its control topics,
        # and each topic only preserves the order of its own messages.
        self.guards: dict[str, envelopes.ReplayGuard] = {}
        self.seq = time.time_ns() // 1000  # strictly increasing across restarts
        self.stats = Stats()
        self.snapshotting = snapshotting.Snapshotting(
            region=config.region,
            key=self.key,
            interval_s=config.snapshot_interval_s,
            timeout_s=config.snapshot_timeout_s,
        )
        self.filter_ok: bool | None = None
        self.plugin_index: bool | None = None
        self.plugin_runs: dict[str, list[tuple[int, int, int, str]]] = {}
        self.marker_producers: dict[str, Any] = {}
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="admin")
        self._thread_admin = threading.local()
        self.stop_event = threading.Event()
        self.skip_by_ids_supported: bool | None = None
        self.discovery_admin = config.admin_client(timeout=10.0)
        self._discovery_lock = threading.Lock()
        self._discovered: Discovered | None = None
        self._rediscover = threading.Event()
        # Each topic is republished in full every resync_interval_s, at its own (random) phase, so the
        # resync of many subscriptions is spread over the interval instead of one burst for all.
        self.topic_resync_at: dict[str, float] = {}
        # Cursor polling backs off on idle topics (up to MAX_IDLE_POLL_S) and is immediate on active ones.
        self.topic_next_poll: dict[str, float] = {}
        self.topic_poll_interval: dict[str, float] = {}
        self.topic_active_until: dict[str, float] = {}
        self.ready = False
        self.round_seconds: list[float] = []
        self.started_ms = int(time.time() * 1000)
        self.transit_ms = Recent()
        """Recent control messages' time from sending (by the peer) to receipt here, for /state."""
        self.wake = threading.Event()
        # The broker plugin's acknowledgement feed and cursor writes (None: not tried yet).
        self.feed_ok: bool | None = None if config.plugin_cursors else False
        self.feed_epoch = ""
        self.feed_seq = 0
        self.feed_busy_until = 0.0
        self.plugin_acks_ok: bool | None = None if config.plugin_cursors else False
        self.outgoing: dict[str, list[envelopes.AckStateMessage]] = {}
        """States to publish at the end of the round, per namespace."""

    # -- lifecycle ---------------------------------------------------------------------------------

    def run(self) -> None:
        log.info("agent for region %s starting (admin %s)", self.config.region, self.config.admin_url)
        self.connect()
        discovery = threading.Thread(target=self.discovery_loop, name="discovery", daemon=True)
        discovery.start()
        try:
            while not self.stop_event.is_set():
                started = time.monotonic()
                try:
                    self.step()
                except (adm.AdminError, pulsar.PulsarException, messaging.MessagingUnavailable) as e:
                    self.stats.inc("loop_errors")
                    log.warning("round failed, retrying: %s", e)
                    self.stop_event.wait(1.0)
                elapsed = time.monotonic() - started
                self.round_seconds.append(elapsed)
                del self.round_seconds[:-200]
                # The feed's short interval only while consumers acknowledge: an idle agent wakes less often.
                busy = self.feed_ok and time.monotonic() < self.feed_busy_until
                interval = self.config.feed_interval_s if busy else self.config.poll_interval_s
                self.stop_event.wait(ROUND_GAP_S)
                # A control message ends the wait: remote acknowledgements are applied as they arrive.
                self.wake.wait(max(0.0, interval - elapsed - ROUND_GAP_S))
                self.wake.clear()
        finally:
            self._rediscover.set()
            discovery.join(timeout=15)
            self.close()

    def connect(self) -> pulsar.Client:
        """Create the agent's Pulsar client (token and CA bundle from the config)."""
        if self.client is None:
            self.client = pulsar.Client(
                self.config.service_url,
                operation_timeout_seconds=10,
                logger=logging.getLogger("geosync.pulsar-client"),
                **self.config.pulsar_options(),
            )
        return self.client

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        for tail in [*self.tails.values(), *self.control_readers.values()]:
            tail.close()
        for producer in [*self.producers.values(), *self.marker_producers.values()]:
            with contextlib.suppress(pulsar.PulsarException):
                producer.flush()
                producer.close()
        if self.client is not None:
            with contextlib.suppress(pulsar.PulsarException):
                self.client.close()
            self.client = None

    def step(self) -> None:
        now = time.monotonic()
        self.adopt()
        self.index()
        self.receive()
        self.observe_and_publish(now=now)
        self.apply()
        self.snapshot_round()
        self.ready = True

    # -- 1. discover -------------------------------------------------------------------------------

    def _synced_namespaces(self, admin: adm.AdminClient) -> dict[str, frozenset[str]]:
        out: dict[str, frozenset[str]] = {}
        if self.config.namespaces:
            names = list(self.config.namespaces)
        else:
            names = [ns for t in admin.tenants() if t not in ("pulsar",) for ns in admin.namespaces(t)]
        for ns in names:
            try:
                clusters = frozenset(admin.replication_clusters(ns))
            except adm.AdminNotFound:
                continue
            if self.config.region in clusters and len(clusters) > 1:
                out[ns] = clusters
        return out

    def _wanted(self, topic: str, subscription: str) -> bool:
        match = PARTITION.match(topic)
        base = match["base"] if match else topic
        name = f"{base}/{subscription}"
        included = any(fnmatch.fnmatchcase(name, p) for p in self.config.include)
        return included and not any(fnmatch.fnmatchcase(name, p) for p in self.config.exclude)

    def scan(self) -> Discovered:
        """List synced namespaces, their topic partitions and wanted durable subscriptions (admin calls only;
        runs on the discovery thread with its own admin client)."""
        admin = self.discovery_admin
        namespaces = self._synced_namespaces(admin)
        topics: list[str] = []
        subscriptions: dict[str, dict[str, tuple[int, str]]] = {}
        for ns in namespaces:
            for topic in admin.topics(ns):
                if not topic.startswith("persistent://") or topic.split("/")[-1] == self.config.control_topic:
                    continue
                topics.append(topic)
                try:
                    stats = admin.topic_stats(topic)
                except adm.AdminNotFound:
                    continue
                subscriptions[topic] = {
                    name: (_app_consumers(sub), str(sub.get("type") or ""))
                    for name, sub in (stats.get("subscriptions") or {}).items()
                    if sub.get("isDurable", True)
                    and not name.startswith(INTERNAL_CURSORS)
                    and self._wanted(topic, name)
                }
        return Discovered(namespaces=namespaces, topics=tuple(topics), subscriptions=subscriptions)

    def discovery_loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                found = self.scan()
                with self._discovery_lock:
                    self._discovered = found
            except (adm.AdminError, OSError) as e:
                self.stats.inc("discovery_errors")
                log.warning("discovery failed, retrying: %s", e)
            self._rediscover.wait(self.config.discover_interval_s)
            self._rediscover.clear()

    def adopt(self) -> None:
        """Take the latest discovery: open readers for new topics and control topics, track subscriptions."""
        with self._discovery_lock:
            found, self._discovered = self._discovered, None
        if found is None:
            return
        assert self.client is not None
        self.namespaces = found.namespaces
        for ns in self.namespaces:
            control = f"persistent://{ns}/{self.config.control_topic}"
            if control not in self.control_readers:
                tail = Tail(control, -1, wake=self.wake)
                tail.open(self.client)
                self.control_readers[control] = tail
                self.producers[ns] = self.client.create_producer(control, batching_enabled=False)
        for topic in found.topics:
            if topic not in self.tails:
                match = PARTITION.match(topic)
                tail = Tail(topic, int(match["n"]) if match else -1)
                tail.open(self.client)
                self.tails[topic] = tail
        for topic, present in found.subscriptions.items():
            for name, (consumers, kind) in present.items():
                state = self.subs.setdefault((topic, name), Subscription(topic, name))
                state.exists = True
                state.consumers = consumers
                if kind and kind != "None":  # sticky: an idle subscription reports no type
                    state.kind = kind
                    state.key_shared = state.key_shared or kind == "Key_Shared"
            for (t, name), state in self.subs.items():
                if t == topic and name not in present:
                    state.exists = False

    # -- 2. index ----------------------------------------------------------------------------------

    def index(self) -> None:
        for topic, tail in self.tails.items():
            candidates = self.namespaces.get(_namespace(topic), frozenset())
            if tail.drain(self.resolver, candidates) and not self.feed_ok:
                # New messages: consumers will acknowledge soon, so watch these cursors closely a while.
                now = time.monotonic()
                self.topic_active_until[topic] = now + ACTIVE_WINDOW_S
                self.topic_poll_interval[topic] = self.config.poll_interval_s
                self.topic_next_poll[topic] = min(self.topic_next_poll.get(topic, 0.0), now)
            if tail.markers:
                found, tail.markers = tail.markers, []
                for position, properties, data in found:
                    self._on_marker(tail, position, properties, data)

    # -- snapshot mode ---------------------------------------------------------------------------------

    def snapshot_mode(self, topic: str) -> bool:
        ns = _namespace(topic)
        return any(fnmatch.fnmatchcase(ns, p) for p in self.config.snapshot_namespaces)

    def _markers_allowed(self) -> bool:
        """Markers may be injected only where the entry filter hides them from applications (checked once)."""
        if self.filter_ok is None:
            try:
                snapshotting.check_entry_filter(
                    self.admin.get("/admin/v2/brokers/configuration/runtime") or {}
                )
                self.filter_ok = True
            except snapshotting.FilterMissing as e:
                self.filter_ok = False
                self.stats.inc("snapshot_mode_refused")
                log.error("refusing snapshot mode for %s: %s", ", ".join(self.config.snapshot_namespaces), e)
        return self.filter_ok

    def _on_marker(self, tail: Tail, position: Position, properties: dict[str, str], data: bytes) -> None:
        if not self.snapshot_mode(tail.topic):
            self.stats.inc("markers_ignored")
            return
        marker = markers.decode_marker(self.key, properties, data)
        if isinstance(marker, envelopes.Rejected):
            self._reject(marker)
            return
        if isinstance(marker, markers.Update):
            if marker.region != self.config.region:
                self._apply_update(tail, marker)
            return
        if not self._markers_allowed():
            return
        self._publish_markers(tail, self.snapshotting.on_marker(tail.topic, position, marker))

    def _publish_markers(self, tail: Tail, outgoing: list[tuple[markers.Marker, list[str] | None]]) -> None:
        assert self.client is not None
        for marker, replicate_to in outgoing:
            producer = self.marker_producers.get(tail.topic)
            if producer is None:
                producer = self.client.create_producer(tail.topic, batching_enabled=False)
                self.marker_producers[tail.topic] = producer
            properties, data = self.snapshotting.seal(marker)
            kwargs: dict[str, Any] = {"properties": properties}
            if replicate_to is not None:
                kwargs["replication_clusters"] = replicate_to
            producer.send_async(data, self._sent, **kwargs)
            self.stats.inc(f"markers_sent_{markers.kind_of(marker)}")

    def snapshot_round(self) -> None:
        if not self.config.snapshot_namespaces:
            return
        now = time.time()
        for topic, tail in self.tails.items():
            if not self.snapshot_mode(topic) or not self._markers_allowed():
                continue
            regions = self.namespaces.get(_namespace(topic), frozenset())
            self._publish_markers(
                tail, self.snapshotting.due(topic, version=tail.version, regions=regions, now=now)
            )

    def _apply_update(self, tail: Tail, update: markers.Update) -> None:
        """Another region's subscription passed a snapshot: move ours forward to the matching position."""
        target = dict(update.positions).get(self.config.region)
        if target is None:
            return
        state = self.subs.setdefault(
            (tail.topic, update.subscription), Subscription(tail.topic, update.subscription)
        )
        if not state.exists and self._admin().create_subscription(tail.topic, update.subscription):
            self.stats.inc("subscriptions_created")
            state.cursor = None
        state.exists = True
        if state.cursor is not None and target <= state.cursor.mark_delete:
            return
        try:
            self._admin().expire_messages(
                tail.topic,
                update.subscription,
                ledger=target.ledger,
                entry=target.entry,
                partition=tail.partition,
            )
            self.stats.inc("snapshot_updates_applied")
        except adm.AdminConflict:
            self.stats.inc("expire_busy")

    def _origin_from_plugin(self, topic: str, local: Position) -> str | None:
        """The broker interceptor's record of where ``local`` came from: one call covers a whole stretch of
        the topic, where the fallback costs one admin call per entry. None if it has no record."""
        for attempt in range(2):
            for ledger, first, count, origin in self.plugin_runs.get(topic, ()):
                if ledger == local.ledger and first <= local.entry < first + count:
                    self.stats.inc("origin_plugin_hits")
                    return origin
            if attempt:
                break
            try:
                self.plugin_runs[topic] = self._admin().plugin_origins(
                    topic, start=(local.ledger, local.entry)
                )
                self.plugin_index = True
            except adm.AdminNotFound:
                if self.plugin_index is None:
                    log.info(
                        "no GeoSync broker interceptor in this region: origins come from per-entry lookups"
                    )
                    self.plugin_index = False
                return None
            except adm.AdminError as e:
                log.warning("interceptor origin index unavailable: %s", e)
                return None
        return None

    def _lookup_origin(self, topic: str, local: Position) -> str | None:
        if self.plugin_index is not False:
            region = self._origin_from_plugin(topic, local)
            if region is not None:
                return region
        self.stats.inc("origin_lookups")
        try:
            return self.admin.replicated_from(topic, ledger=local.ledger, entry=local.entry)
        except adm.AdminError as e:
            log.warning("cannot read the origin of %s %s: %s", topic, local, e)
            return None

    # -- 3. receive --------------------------------------------------------------------------------

    def receive(self) -> None:
        for topic, tail in self.control_readers.items():
            while True:
                try:
                    msg = tail.inbox.get_nowait()
                except queue.Empty:
                    break
                self.handle_control(msg.data(), topic=topic)

    def handle_control(self, data: bytes, *, topic: str) -> None:
        opened = envelopes.open_envelope(self.key, data)
        if isinstance(opened, envelopes.Rejected):
            self._reject(opened)
            return
        if opened.region == self.config.region:
            return  # our own message, replicated back to us through the local log
        if opened.sent_at_ms >= self.started_ms:  # not history re-read from the control topic
            self.transit_ms.add(int(time.time() * 1000) - opened.sent_at_ms)
        self.guards[topic], admitted = self.guards.get(topic, envelopes.ReplayGuard()).admit(opened)
        if isinstance(admitted, envelopes.Rejected):
            self._reject(admitted)
            return
        decoded = envelopes.decode_ack_states(admitted)
        if isinstance(decoded, envelopes.Rejected):
            self._reject(decoded)
            return
        for message in decoded:
            self._take_claims(message)

    def _take_claims(self, message: envelopes.AckStateMessage) -> None:
        if not self._wanted(message.topic, message.subscription):
            return
        state = self.subs.setdefault(
            (message.topic, message.subscription),
            Subscription(message.topic, message.subscription, exists=False),
        )
        merged = state.received.merge(message.acks)
        state.received_from[message.region] = time.time()
        state.announced = True
        if merged != state.received:
            state.received = merged
            self.stats.inc("claims_received")
            if not self.plugin_acks_ok:
                # Plugin writes answer the cursor's state; admin calls need a fresh read to plan from.
                self.topic_next_poll[message.topic] = 0.0

    def _reject(self, rejected: envelopes.Rejected) -> None:
        self.stats.inc(f"control_rejected_{rejected.reason.value}")
        log.warning("control message rejected: %s", rejected.reason.value)

    # -- 4. observe and publish ------------------------------------------------------------------

    def observe_and_publish(self, *, now: float) -> None:
        by_topic: dict[str, list[Subscription]] = {}
        for state in self.subs.values():
            if state.exists:
                by_topic.setdefault(state.topic, []).append(state)
        period = self.config.resync_interval_s
        resync = {
            t
            for t in by_topic
            if now >= self.topic_resync_at.setdefault(t, now + random.uniform(0.0, period))
        }
        for topic in resync:
            self.topic_resync_at[topic] = now + period
        for topic, cursors in self._read_feed(by_topic).items():
            self._observe(topic, by_topic[topic], cursors, force=False, now=now, polled=False)
        due = [t for t in by_topic if t in resync or now >= self.topic_next_poll.get(t, 0.0)]
        for topic, internal in zip(due, self.pool.map(self._internal_stats, due), strict=True):
            if internal is None:
                continue
            self.stats.inc("cursor_polls")
            cursors = {
                name: (str(raw["markDeletePosition"]), str(raw.get("individuallyDeletedMessages") or "[]"))
                for name, raw in (internal.get("cursors") or {}).items()
            }
            self._observe(topic, by_topic[topic], cursors, force=topic in resync, now=now, polled=True)
        self._flush_states()

    def _read_feed(self, by_topic: dict[str, list[Subscription]]) -> dict[str, dict[str, tuple[str, str]]]:
        """Cursor states of the tracked subscriptions consumers acknowledged on since the last read, from
        the broker plugin's feed (empty where the plugin is absent: polling then does all the work)."""
        if self.feed_ok is False:
            return {}
        try:
            epoch, seq, changed = self._admin().plugin_cursors(since=self.feed_seq)
        except (adm.AdminNotFound, adm.AdminForbidden) as e:
            self.feed_ok = False
            log.info("no acknowledgement feed from the broker plugin (%s); polling cursors instead", e)
            return {}
        except adm.AdminError as e:
            self.stats.inc("feed_errors")
            log.warning("acknowledgement feed failed, polling meanwhile: %s", e)
            return {}
        if epoch != self.feed_epoch:
            # The broker (re)started: what was acknowledged before it is only known to a poll.
            self.feed_epoch = epoch
            self.topic_next_poll.clear()
        self.feed_ok = True
        self.feed_seq = seq
        self.stats.inc("feed_reads")
        if changed:
            self.feed_busy_until = time.monotonic() + ACTIVE_FEED_S
        out: dict[str, dict[str, tuple[str, str]]] = {}
        for item in changed:
            topic = str(item.get("topic", ""))
            if topic in by_topic:
                out.setdefault(topic, {})[str(item.get("subscription", ""))] = (
                    str(item.get("mark_delete")),
                    str(item.get("individually_deleted") or "[]"),
                )
        return out

    def _observe(
        self,
        topic: str,
        states: list[Subscription],
        cursors: dict[str, tuple[str, str]],
        *,
        force: bool,
        now: float,
        polled: bool,
    ) -> None:
        """Take ``topic``'s cursors (name -> (mark-delete, individually deleted ranges)) and publish what
        changed; after a poll, schedule the next one."""
        changed = False
        moved: list[Subscription] = []
        for state in states:
            raw = cursors.get(state.name)
            if raw is None:
                continue
            cursor = AckState.parse(*raw)
            if cursor != state.cursor:
                changed = True
                moved.append(state)
            state.cursor = cursor
        if any(not s.kind for s in moved):
            # Claims can never be taken back, so learn the subscription type (Key_Shared claims keep
            # per-key order) before the first claim, while the consumer that acknowledged is still there.
            self._learn_kinds(topic, states)
        # A poll publishes every state it read (a resync forces it); the feed only the states it moved.
        for state in states if polled else moved:
            if state.cursor is not None:
                self._publish(state, force=force)
        tail = self.tails.get(topic)
        if tail is not None and all(s.cursor is not None for s in states):
            tail.forget_keys_up_to(min(s.cursor.mark_delete for s in states if s.cursor is not None))
        if not polled:
            return
        if self.feed_ok:
            # The feed reports consumers' acknowledgements; polls only catch what else moves cursors
            # (admin operations, a broker restart), so they back off regardless of traffic.
            busy = any(s.pending_mark_delete for s in states)
        else:
            busy = changed or now < self.topic_active_until.get(topic, 0.0)
            busy = busy or any(s.pending_mark_delete for s in states)
        if busy:
            interval = self.config.poll_interval_s
        else:
            # Without consumers (at the last discovery) only admin operations move cursors: poll rarely.
            # With the feed, polls only catch admin operations and restarts: rarer still.
            cap = MAX_IDLE_POLL_S if any(s.consumers for s in states) else UNCONSUMED_POLL_S
            cap = FEED_SAFETY_POLL_S if self.feed_ok else cap
            interval = min(cap, 2 * self.topic_poll_interval.get(topic, self.config.poll_interval_s))
        self.topic_poll_interval[topic] = interval
        # due half a round early, so a topic with the base interval is polled every round
        self.topic_next_poll[topic] = now + interval - self.config.poll_interval_s / 2

    def _learn_kinds(self, topic: str, states: list[Subscription]) -> None:
        try:
            subs = self._admin().topic_stats(topic).get("subscriptions") or {}
        except adm.AdminNotFound:
            return
        for state in states:
            kind = str((subs.get(state.name) or {}).get("type") or "")
            if kind and kind != "None":
                state.kind = kind
                state.key_shared = state.key_shared or kind == "Key_Shared"

    def _internal_stats(self, topic: str) -> dict[str, Any] | None:
        try:
            return self._admin().internal_stats(topic)
        except adm.AdminNotFound:
            return None

    def _admin(self) -> adm.AdminClient:
        """An admin client for the calling thread (the sync loop or one of the pool's workers)."""
        client: adm.AdminClient | None = getattr(self._thread_admin, "client", None)
        if client is None:
            client = self.config.admin_client(timeout=5.0)
            self._thread_admin.client = client
        return client

    def _publish(self, state: Subscription, *, force: bool) -> None:
        tail = self.tails.get(state.topic)
        if tail is None or state.cursor is None:
            return
        if self.snapshot_mode(state.topic):
            # Marker entries are acknowledged only when a consumer's dispatcher passes them, so the cursor's
            # mark-delete can stay below a snapshot although every message before it was acknowledged.
            # What counts is the first unacknowledged *message*: everything below it is consumed.
            cursor = state.cursor
            first_open = next((p for p in tail.positions_above(cursor.mark_delete) if p not in cursor), None)
            if first_open is None:
                consumed = tail.last if tail.last is not None else cursor.mark_delete
            else:
                consumed = Position(first_open.ledger, first_open.entry - 1)
            update = self.snapshotting.on_cursor(state.topic, state.name, max(consumed, cursor.mark_delete))
            if update is not None and self._markers_allowed():
                self._publish_markers(tail, [(update, None)])
            return
        if state.cursor == state.translated and state.published is not None and not force:
            return
        cursor = state.cursor
        if state.key_shared:
            cursor = syncing.key_ordered(cursor, tail.positions_above(cursor.mark_delete), tail.keys.get)
        translated = syncing.to_origin_acks(tail.index, cursor)
        own = translated.acks if isinstance(translated, syncing.Translation) else OriginAcks.of({})
        # Claims only grow: what was published stays claimed, so nothing depends on keeping old index runs.
        known = state.received if state.published is None else state.received.merge(state.published)
        claims = own.merge(known)
        state.translated = state.cursor
        if not force and state.published is not None and claims == known:
            # Nothing beyond what others told us (typically: our cursor just caught up with their claims).
            # Echoing it would only cost every region a message; the periodic resync still gossips it.
            state.published = claims
            return
        namespace = _namespace(state.topic)
        if namespace not in self.producers:
            return
        self.outgoing.setdefault(namespace, []).append(
            envelopes.AckStateMessage(state.topic, state.name, self.config.region, claims)
        )
        state.published = claims

    def _flush_states(self) -> None:
        """Send the round's states: per namespace, one signed envelope for up to STATES_PER_ENVELOPE."""
        outgoing, self.outgoing = self.outgoing, {}
        for namespace, states in outgoing.items():
            producer = self.producers[namespace]
            for start in range(0, len(states), STATES_PER_ENVELOPE):
                batch = states[start : start + STATES_PER_ENVELOPE]
                self.seq += 1
                envelope = envelopes.Envelope(
                    kind=envelopes.ACK_STATES,
                    region=self.config.region,
                    seq=self.seq,
                    sent_at_ms=int(time.time() * 1000),
                    payload=envelopes.encode_ack_states(batch, region=self.config.region),
                )
                producer.send_async(envelopes.seal(self.key, envelope), self._sent)
                self.stats.inc("states_published", len(batch))
                self.stats.inc("envelopes_published")

    def _sent(self, result: Any, _msg_id: Any) -> None:
        # On the client's thread: only count. A lost state goes out again at the next change or resync.
        if result != pulsar.Result.Ok:
            self.stats.inc("publish_errors")

    # -- 5. apply ----------------------------------------------------------------------------------

    def apply(self) -> None:
        work: list[tuple[Subscription, Tail, syncing.ApplyPlan]] = []
        for state in list(self.subs.values()):
            if not state.announced or self.snapshot_mode(state.topic):
                continue
            tail = self.tails.get(state.topic)
            if tail is None:
                continue
            if not state.exists:
                self._create(state)
                continue
            if state.cursor is None:
                continue
            basis = (state.cursor, tail.version, state.received.count())
            if basis == state.planned and state.pending_mark_delete is None:
                continue
            state.planned = basis
            plan = syncing.plan_apply(
                tail.index,
                state.cursor,
                remote=state.received,
                log=tail.positions_above(state.cursor.mark_delete),
            )
            if plan.is_empty:
                state.pending_holes = 0
                state.pending_mark_delete = None
                state.behind_since = None
                continue
            if state.behind_since is None:
                state.behind_since = time.time()
            work.append((state, tail, plan))
        if work and self.plugin_acks_ok is not False:
            work = self._apply_by_plugin(work)
        # Admin calls for different subscriptions go out in parallel (bounded by the pool's size).
        for failure in self.pool.map(self._carry_out_safely, work):
            if failure is not None:
                self.stats.inc("apply_errors")
                log.warning("applying failed, will retry: %s", failure)

    def _apply_by_plugin(
        self, work: list[tuple[Subscription, Tail, syncing.ApplyPlan]]
    ) -> list[tuple[Subscription, Tail, syncing.ApplyPlan]]:
        """Carry out the plans through the broker plugin's cursor writes, a batch per call; return those
        it could not take (topic owned by another broker, plugin absent or writes off) for the admin API."""
        leftover: list[tuple[Subscription, Tail, syncing.ApplyPlan]] = []
        for start in range(0, len(work), ACK_BATCH):
            batch = work[start : start + ACK_BATCH]
            # plan_apply puts every individual ack above the new mark-delete (a core invariant, tested).
            items = [
                {
                    "topic": state.topic,
                    "subscription": state.name,
                    "mark_delete": None if plan.new_mark_delete is None else str(plan.new_mark_delete),
                    "positions": [str(p) for p in plan.individual_acks],
                }
                for state, _tail, plan in batch
            ]
            try:
                results = self._admin().plugin_acks(items)
            except (adm.AdminNotFound, adm.AdminForbidden) as e:
                self.plugin_acks_ok = False
                log.info("no cursor writes through the broker plugin (%s); using the admin API", e)
                return leftover + work[start:]
            except adm.AdminError as e:
                self.stats.inc("apply_errors")
                log.warning("acknowledging through the broker plugin failed, will retry: %s", e)
                for state, _tail, _plan in work[start:]:
                    state.planned = None
                return leftover
            self.plugin_acks_ok = True
            for (state, tail, plan), result in zip(batch, results, strict=True):
                status = result.get("status")
                if status != "ok":
                    if status == "bad_request":
                        self.stats.inc("apply_errors")
                        log.warning("plugin refused acks for %s %s: %s", state.topic, state.name, result)
                    else:
                        leftover.append((state, tail, plan))
                    continue
                state.cursor = AckState.parse(str(result["mark_delete"]), str(result["individually_deleted"]))
                state.pending_mark_delete = None
                state.pending_holes = 0
                state.last_applied_at = time.time()
                self.stats.inc("plugin_acks")
                if plan.new_mark_delete is not None:
                    self.stats.inc("mark_delete_moves")
                self.stats.inc("holes_acked", len(plan.individual_acks))
        return leftover

    def _carry_out_safely(self, item: tuple[Subscription, Tail, syncing.ApplyPlan]) -> Exception | None:
        try:
            self._carry_out(*item)
        except (adm.AdminError, pulsar.PulsarException) as e:
            item[0].planned = None  # plan again next round
            return e
        return None

    def _create(self, state: Subscription) -> None:
        try:
            created = self.admin.create_subscription(state.topic, state.name)
        except adm.AdminNotFound:
            return  # the topic does not exist here yet; replication will create it
        if created:
            self.stats.inc("subscriptions_created")
            log.info("created subscription %s on %s at the earliest message", state.name, state.topic)
        state.exists = True
        self._rediscover.set()

    def _carry_out(self, state: Subscription, tail: Tail, plan: syncing.ApplyPlan) -> None:
        now = time.monotonic()
        target = plan.new_mark_delete
        if target is not None:
            pending = state.pending_mark_delete
            in_flight = (
                pending is not None
                and state.cursor is not None
                and state.cursor.mark_delete < pending[0]
                and now - pending[1] < 2.0
            )
            # One move in flight per subscription, and at most one per min_apply_interval_s: every
            # expireMessages costs the broker a read, and under load fewer, larger moves sync sooner.
            recent = pending is not None and now - pending[1] < self.config.min_apply_interval_s
            if (
                not in_flight
                and not recent
                and (pending is None or pending[0] != target or now - pending[1] > 2.0)
            ):
                try:
                    self._admin().expire_messages(
                        state.topic,
                        state.name,
                        ledger=target.ledger,
                        entry=target.entry,
                        partition=tail.partition,
                    )
                    state.pending_mark_delete = (target, now)
                    state.last_applied_at = time.time()
                    self.stats.inc("mark_delete_moves")
                except adm.AdminConflict:
                    self.stats.inc("expire_busy")
        holes = list(plan.individual_acks)  # all above the new mark-delete (plan_apply's invariant)
        if not holes:
            state.pending_holes = 0
            return
        if state.consumers == 0:
            # Discovery may be a few seconds old: check right before a shadow consumer would join.
            subs = self._admin().topic_stats(state.topic).get("subscriptions") or {}
            state.consumers = _app_consumers(subs.get(state.name) or {})
        if state.consumers > 0:
            # A shadow consumer would join Shared/Key_Shared dispatch or Failover election: hold back.
            state.pending_holes = len(holes)
            return
        self._ack_holes(state, tail, holes)
        state.pending_holes = 0
        state.last_applied_at = time.time()

    def _ack_holes(self, state: Subscription, tail: Tail, holes: list[Position]) -> None:
        if self.skip_by_ids_supported is not False:
            try:
                self._admin().skip_by_message_ids(
                    state.topic, state.name, [(p.ledger, p.entry) for p in holes]
                )
                self.skip_by_ids_supported = True
                self.stats.inc("holes_acked", len(holes))
                return
            except (adm.AdminNotFound, adm.AdminNotAllowed):
                self.skip_by_ids_supported = False
                log.info(
                    "broker has no skipByMessageIds (PIP-423); acknowledging holes with a shadow consumer"
                )
        assert self.client is not None
        consumer = self.client.subscribe(
            state.topic,
            state.name,
            consumer_type=pulsar.ConsumerType.Shared,
            receiver_queue_size=0,
            consumer_name=f"geosync-shadow-{self.config.region}",
        )
        try:
            for p in holes:
                consumer.acknowledge(pulsar.MessageId(tail.partition, p.ledger, p.entry, -1))
        finally:
            consumer.close()
        self.stats.inc("holes_acked", len(holes))

    # -- introspection -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "region": self.config.region,
            "ready": self.ready,
            "namespaces": sorted(self.namespaces),
            "topics": len(self.tails),
            "subscriptions": len(self.subs),
            "index_runs": sum(len(t.index) for t in self.tails.values()),
            "bytes_read": sum(t.bytes_read for t in self.tails.values()),
            "messages_read": sum(t.messages_read for t in self.tails.values()),
            "counters": dict(self.stats.counters),
            "round_seconds_p50": sorted(self.round_seconds)[len(self.round_seconds) // 2]
            if self.round_seconds
            else 0,
            "round_seconds_max": max(self.round_seconds, default=0),
            "control_transit_ms": self.transit_ms.percentiles(),
            "guard": {t: dict(g.highest) for t, g in self.guards.items()},
            "snapshots": self.snapshotting.snapshot(),
            "synced": [
                {
                    "topic": s.topic,
                    "subscription": s.name,
                    "mark_delete": None if s.cursor is None else str(s.cursor.mark_delete),
                    "pending_holes": s.pending_holes,
                    "behind_since": s.behind_since,
                    "last_applied_at": s.last_applied_at or None,
                    "received_from": dict(s.received_from),
                    "consumers": s.consumers,
                }
                for s in list(self.subs.values())
                if s.exists
            ],
        }


def _namespace(topic: str) -> str:
    rest = topic.split("://", 1)[-1]
    tenant, ns = rest.split("/")[:2]
    return f"{tenant}/{ns}"
