"""The policy mirror of one region: PIP-136 done outside Pulsar, through the region's own ZooKeeper.

Pulsar's own synchronizer cannot run where the configuration store is the local store (every ZooKeeper
standalone, the lab), sees no direct ZooKeeper writes and keeps no tombstones; the rules that replace it
are in ``geosync_core.policies``. This module is their runtime:

* **Leadership.** Every agent of a region may run a ``Mirror``; one leads, by a kazoo ``Lock`` on the
  region's own ZooKeeper (``{mirror_root}/leader``). A standby takes over once the leader's session
  expires (``mirror_session_timeout_s``). Every store write of the leader is fenced by its lock node in
  the same ZooKeeper transaction, so a leader that lost its session cannot write any more.
* **One loop.** ZooKeeper watch callbacks (kazoo's thread), session state changes and the event-topic
  reader (own thread) only put items on one queue; a single thread takes them in order and does all the
  work, so the replica, the clock and the store are only touched there. When a watch fires the loop
  reads the node's *current* bytes (re-arming the watch) and reports them with ``local_change``.
* **Events.** A local change becomes a signed envelope (kind ``policy-event``, payload
  ``policies.event_to_payload``) published on ``mirror_events_topic``, one topic in a namespace
  replicated to every region (the lab's ``geo/abc``): one topic for all tenants keeps a region's events in
  the order it made them (tenant before its namespaces, namespaces before the tenant's deletion), and
  needs no per-tenant replication set-up before the first tenant exists. Every region reads the topic
  with a reader; remote events are checked (``allowedclusters.reject_event_regions``), applied with
  compare-and-set, and kept in the replica only once the store write succeeded. A rejected or
  not-yet-applicable event (parent missing, children left) is parked and re-checked every
  ``mirror_recheck_interval_s``; ``snapshot()`` lists what is parked.
* **Nothing lost.** The replica, clock, replay guard, sequence number, the newest stamp received from
  each region and the reader's position are checkpointed in ``{mirror_root}/state`` (compressed JSON,
  written with compare-and-set and the fence; over ``mirror_checkpoint_part_bytes`` it is cut into parts
  behind a pointer, ``geosync_agent.mirrorstate``). A new leadership term (start, standby take-over,
  session expiry) loads it, reads the topic from the checkpointed position, and scans the store
  (``scan_store``) for what changed while nobody watched. Without a checkpoint it first drains the topic
  from the beginning (applying history; a node the store already holds is dated by its mtime, as the scan
  would), then scans. A session expiry ends the term; the next one starts from the store and the
  checkpoint, so no change made meanwhile is lost.
* **Bounded.** Tombstones that every peer region is past, and older than ``mirror_tombstone_ttl_s``, are
  collected at each recheck (``policies.collect_tombstones`` says why that resurrects nothing), so the
  checkpoint holds the live policies plus the deletions of the last days, not every deletion ever made.

ZooKeeper authentication (``zookeeper_auth_file``): the mirror's session authenticates with digest
credentials, its own nodes under ``mirror_root`` (lock, checkpoint) are created with, and at each term's
start set to, an ACL that lets no other client write or delete them, so nobody but the agent's identity can
fence the leader off, forge its checkpoint or take its lock. Policy nodes it creates stay world-open, as
Pulsar's own are where ZooKeeper has no authentication (brokers must keep managing them).

Scope: only ``/admin/policies/{tenant}`` and ``/admin/policies/{tenant}/{ns}`` of tenants matching
``mirror_tenants`` and not ``mirror_exclude_tenants`` (by default ``public`` and ``pulsar``, which every
cluster creates for itself). Events outside the scope are counted and ignored.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pulsar

from geosync_adapters import zookeeper as zk
from geosync_agent import mirrorholds
from geosync_agent.config import AgentConfig
from geosync_agent.core import mirror as core
from geosync_agent.core.mirror import EVENT_KIND, Checkpoint, decode_checkpoint, encode_checkpoint
from geosync_agent.mirrorstate import StateNodes
from geosync_agent.recent import Recent
from geosync_core import allowedclusters, clocks, envelopes, policies
from geosync_core.errors import TemporaryError
from geosync_core.policies import Record

log = logging.getLogger("geosync.mirror")

POLICIES_ROOT = "/admin/policies"
CLUSTERS_ROOT = "/admin/clusters"
_MAX_ATTEMPTS = 5
_QUEUE_HIGH_WATER = 10_000


class SessionLost(TemporaryError):
    """The ZooKeeper session (and with it leadership and every watch) is gone: start a new term."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Mirror:
    """The policy mirror of ``config.region``. ``start()`` runs it on its own threads; ``stop()`` ends it."""

    def __init__(self, config: AgentConfig, keys: envelopes.Keys) -> None:
        if not config.zookeeper:
            raise ValueError("the policy mirror needs the region's zookeeper (setting 'zookeeper')")
        self.config = config
        self.keys = keys
        self.region = config.region
        self.identifier = f"{config.region}-{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._lock = threading.Lock()
        self.counters: Counter[str] = Counter()
        self.leader = False
        self.terms = 0
        self.last_error = ""
        # Term state, touched only by the mirror thread.
        self.cp = Checkpoint()
        self.registered: allowedclusters.Registered = {}
        self._store: zk.Store | None = None
        self._fence: tuple[str, int] | None = None
        self._producer: Any = None
        self._dirty = False
        self._state_node: zk.Node | None = None
        self._state_nodes: StateNodes | None = None
        self._have_checkpoint = False
        self._started_ms = _now_ms()
        # Destroying changes held (``mirrorholds``): path -> why. Each is parked and is the replica's record.
        self.holds: dict[str, str] = {}
        self._brokers: mirrorholds.Listing | None = None  # the region's admin API, made when first needed
        # Recent remote events: ms from the sender's publish to our read, and from our read to applied.
        self.timings = {"transit_ms": Recent(), "queued_ms": Recent(), "apply_ms": Recent()}
        self.progress: Callable[[], None] = lambda: None
        """Told whenever the mirror's thread gets on (the liveness watchdog's heartbeat)."""

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Run on a thread of its own (tests and the mirror benchmark; the agent's composition root runs
        ``run`` as its supervised ``policy-mirror`` task instead)."""
        self._thread = threading.Thread(target=self.run, name=f"policy-mirror-{self.region}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stop.set()
        self._queue.put(("stop", None))
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def snapshot(self) -> dict[str, Any]:
        """Status for people and tests: leadership, counters, replica size, what is parked and why."""
        with self._lock:
            return {
                "region": self.region,
                "identifier": self.identifier,
                "leader": self.leader,
                "terms": self.terms,
                "records": len(self.cp.replica),
                "tombstones": sum(1 for r in self.cp.replica.values() if r.value is None),
                "parked": sorted(self.cp.parked),
                "held": dict(sorted(self.holds.items())),
                "clock": None if self.cp.clock is None else clocks.encode(self.cp.clock),
                "queue": self._queue.qsize(),
                "counters": dict(self.counters),
                "last_error": self.last_error,
                "timings": {name: recent.percentiles() for name, recent in self.timings.items()},
            }

    def replica(self) -> dict[str, Record]:
        with self._lock:
            return dict(self.cp.replica)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    def run(self) -> None:
        """Leadership terms until ``stop()``: the task body."""
        delay = 0.5
        while not self._stop.is_set():
            try:
                self._term()
                delay = 0.5
            except (TemporaryError, pulsar.PulsarException) as e:
                self.last_error = f"{type(e).__name__}: {e}"
                log.warning("policy mirror %s: term ended: %s", self.region, self.last_error)
                self._count("terms_failed")
            except Exception as e:  # keep the mirror alive; the next term re-reads everything
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("policy mirror %s: term failed", self.region)
                self._count("terms_failed")
            self.progress()
            self._stop.wait(delay)
            delay = min(delay * 2, 5.0)

    # -- one leadership term -----------------------------------------------------------------------

    def _term(self) -> None:
        self._queue = queue.Queue()
        q = self._queue
        store = zk.Store(
            self.config.zookeeper,
            session_timeout_s=self.config.mirror_session_timeout_s,
            notify=lambda fired: q.put(("zk", fired)),
            auth=self.config.zookeeper_auth(),
        )
        store.on_state(lambda state: q.put(("state", state)))
        client: pulsar.Client | None = None
        lock: Any = None
        reader_stop = threading.Event()
        reader_thread: threading.Thread | None = None
        try:
            store.start()
            root = self.config.mirror_root.rstrip("/")
            store.ensure_path(root)
            if secured := store.secure(root):
                log.info(
                    "policy mirror %s: %d node(s) under %s given the agent's ACL", self.region, secured, root
                )
            lock = store.lock(f"{root}/leader", self.identifier)
            while not self._stop.is_set() and not store.try_acquire(lock, timeout_s=1.0):
                self.progress()
                self._check_state_items()
            if self._stop.is_set():
                return
            self._store = store
            self._fence = (f"{lock.path}/{lock.node}", 0)
            self._state_nodes = StateNodes(
                store, root, budget=self.config.mirror_checkpoint_part_bytes, fence=self._fence
            )
            self.terms += 1
            log.info("policy mirror %s: leading (%s)", self.region, self.identifier)
            client = pulsar.Client(
                self.config.service_url,
                operation_timeout_seconds=15,
                logger=logging.getLogger("geosync.pulsar-client"),
                **self.config.pulsar_options(),
            )
            self._load_checkpoint()
            self._producer = client.create_producer(
                self.config.mirror_events_topic,
                batching_enabled=False,
                send_timeout_millis=15_000,
                block_if_queue_full=True,
            )
            start = pulsar.MessageId.earliest
            if self.cp.reader is not None:
                start = pulsar.MessageId.deserialize(self.cp.reader)
            reader = client.create_reader(self.config.mirror_events_topic, start)
            self._refresh_registered()
            if not self._have_checkpoint:
                self._drain(reader)
            self._rescan()
            with self._lock:
                self.leader = True
            reader_thread = threading.Thread(
                target=self._read_events,
                args=(reader, reader_stop),
                name=f"policy-mirror-reader-{self.region}",
                daemon=True,
            )
            reader_thread.start()
            self._loop()
        finally:
            with self._lock:
                self.leader = False
            reader_stop.set()
            if reader_thread is not None:
                reader_thread.join(timeout=5)
            if self._store is not None and store.connected:
                with contextlib.suppress(Exception):
                    self._save_checkpoint()
            self._producer = None
            self._store = None
            self._fence = None
            self._state_nodes = None
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
            if lock is not None:
                with contextlib.suppress(Exception):
                    lock.release()
            store.stop()

    def _check_state_items(self) -> None:
        """While waiting for the lock: a lost session ends the term (the lock contender is gone too)."""
        with contextlib.suppress(queue.Empty):
            while True:
                kind, item = self._queue.get_nowait()
                if kind == "state" and item == "LOST":
                    raise SessionLost("zookeeper session lost while waiting for leadership")

    def _read_events(self, reader: Any, stop: threading.Event) -> None:
        # Own thread, not a client callback: blocking here (back-pressure) is fine.
        q = self._queue
        while not stop.is_set():
            if q.qsize() > _QUEUE_HIGH_WATER:
                time.sleep(0.05)
                continue
            try:
                msg = reader.read_next(timeout_millis=200)
            except pulsar.Timeout:
                continue
            except Exception as e:  # the loop notices a dead reader through this item
                q.put(("reader-failed", e))
                return
            q.put(("event", (msg, _now_ms())))

    def _loop(self) -> None:
        interval = self.config.mirror_recheck_interval_s
        next_recheck = time.monotonic() + interval
        while not self._stop.is_set():
            self.progress()
            timeout = max(0.0, next_recheck - time.monotonic())
            try:
                kind, item = self._queue.get(timeout=timeout)
            except queue.Empty:
                kind, item = "tick", None
            if kind == "zk":
                self._on_fired(item)
            elif kind == "event":
                msg, read_ms = item
                self._on_message(msg, read_ms=read_ms)
            elif kind == "state":
                if item == "LOST":
                    raise SessionLost("zookeeper session lost: leadership and watches are gone")
                if item == "CONNECTED":
                    self._rescan()  # watches may have been missed while suspended
            elif kind == "reader-failed":
                raise TemporaryError(f"event reader failed: {item}")
            if time.monotonic() >= next_recheck:
                self._refresh_registered()
                self._recheck_parked()
                self._collect_tombstones()
                if self._dirty:
                    self._save_checkpoint()
                next_recheck = time.monotonic() + interval

    # -- scope, store walk ------------------------------------------------------------------------

    def in_scope(self, path: str) -> bool:
        if not policies.classify(path).mirrored:
            return False
        tenant = path[len(POLICIES_ROOT) + 1 :].split("/", 1)[0]
        return any(fnmatch.fnmatchcase(tenant, p) for p in self.config.mirror_tenants) and not any(
            fnmatch.fnmatchcase(tenant, p) for p in self.config.mirror_exclude_tenants
        )

    def _tenant_in_scope(self, tenant: str) -> bool:
        return self.in_scope(f"{POLICIES_ROOT}/{tenant}")

    def _walk(self) -> dict[str, zk.Node]:
        """Every in-scope node now in the store, with watches armed on all of them and their parents."""
        store = self._need_store()
        found: dict[str, zk.Node] = {}
        for tenant in store.children(POLICIES_ROOT, watch=True):
            if not self._tenant_in_scope(tenant):
                continue
            tpath = f"{POLICIES_ROOT}/{tenant}"
            node = store.read(tpath, watch=True)
            if node is not None:
                found[tpath] = node
            for ns in store.children(tpath, watch=True):
                npath = f"{tpath}/{ns}"
                if self.in_scope(npath) and (child := store.read(npath, watch=True)) is not None:
                    found[npath] = child
        return found

    def _need_store(self) -> zk.Store:
        if self._store is None:
            raise SessionLost("no zookeeper session")
        return self._store

    def _refresh_registered(self) -> None:
        store = self._need_store()
        registered: dict[str, frozenset[str]] = {}
        for name in store.children(CLUSTERS_ROOT):
            node = store.read(f"{CLUSTERS_ROOT}/{name}")
            peers: frozenset[str] = frozenset()
            if node is not None:
                found = policies.read_names(node.value, "peerClusterNames")
                peers = found if isinstance(found, frozenset) else frozenset()
            registered[name] = peers
        self.registered = registered

    # -- local changes -----------------------------------------------------------------------------

    def _on_fired(self, fired: zk.Fired) -> None:
        if fired.kind == "children":
            self._on_children(fired.path)
        elif self.in_scope(fired.path):
            self._observe(fired.path)

    def _on_children(self, path: str) -> None:
        store = self._need_store()
        names = store.children(path, watch=True)
        if path == POLICIES_ROOT:
            paths = [f"{path}/{n}" for n in names if self._tenant_in_scope(n)]
        else:
            paths = [f"{path}/{n}" for n in names]
        gone = [p for p, r in self.cp.replica.items() if p.startswith(path + "/") and r.value is not None]
        for p in sorted(set(paths) | set(gone)):
            if self.in_scope(p) and p.count("/") <= path.count("/") + 1:
                self._observe(p)
                if path == POLICIES_ROOT:
                    self._on_children(p)

    def _observe(self, path: str, node: zk.Node | None = None, *, reread: bool = True) -> None:
        """Report the store's current bytes at ``path`` (read now, re-arming the watch) if they changed."""
        if reread:
            node = self._need_store().read(path, watch=True)
        value = None if node is None else node.value
        replica, event, counter = core.found_locally(
            self.cp, path, value, held=path in self.holds, tick=self._tick
        )
        self._count(counter)
        if replica is None or event is None:
            return
        self._publish(event)
        with self._lock:
            self.cp.replica = dict(replica)
        self._dirty = True

    def _tick(self) -> clocks.Hlc:
        self.cp.clock, stamp = clocks.tick(self._clock(), now_ms=_now_ms())
        return stamp

    def _clock(self) -> clocks.Hlc:
        if self.cp.clock is None:
            self.cp.clock = clocks.start(self.region)
        return self.cp.clock

    def _publish(self, event: Record) -> None:
        seq = max(self.cp.seq + 1, _now_ms() * 1000)
        envelope = envelopes.Envelope(
            kind=EVENT_KIND,
            region=self.region,
            seq=seq,
            sent_at_ms=_now_ms(),
            payload=policies.event_to_payload(event),
        )
        if self._producer is None:
            raise TemporaryError("no producer for the policy event topic")
        self._producer.send(envelopes.seal(self.keys.signer, envelope))
        self.cp.seq = seq
        self._count("published")

    def _rescan(self) -> None:
        """Report what changed in the store while no watch covered it (``scan_store``, mtime-dated)."""
        found = {p: n for p, n in self._walk().items() if p not in self.holds}
        scoped = {p: r for p, r in self.cp.replica.items() if self.in_scope(p) and p not in self.holds}
        replica, clock, events = policies.scan_store(
            scoped,
            self._clock(),
            found={p: (n.value, n.mtime_ms) for p, n in found.items()},
            now_ms=_now_ms(),
        )
        for event in events:
            self._publish(event)
        with self._lock:
            self.cp.replica = {**self.cp.replica, **replica}
        self.cp.clock = clock
        if events:
            self._dirty = True
            self._count("scan_changes", len(events))

    # -- remote events -----------------------------------------------------------------------------

    def _drain(self, reader: Any) -> None:
        """No checkpoint: apply the topic's history before scanning, so the scan finds only our changes."""
        drained = 0
        while reader.has_message_available():
            try:
                msg = reader.read_next(timeout_millis=5000)
            except pulsar.Timeout:
                break
            self._on_message(msg, bootstrap=True)
            drained += 1
            self.progress()
        self._count("drained", drained)
        self._dirty = True

    def _on_message(self, msg: Any, *, bootstrap: bool = False, read_ms: int | None = None) -> None:
        """One event from the topic; ``read_ms``: when the reader thread got it (for the timings)."""
        opened = envelopes.open_envelope(self.keys.keyring, msg.data())
        self.cp.reader = msg.message_id().serialize()
        self._dirty = True
        received = core.receive(self.cp, opened, in_scope=self.in_scope)
        if isinstance(received, core.Dropped):
            self._count(received.counter)
            return
        assert isinstance(opened, envelopes.Envelope)
        taken_ms = _now_ms()
        read_ms = taken_ms if read_ms is None else read_ms
        outcome = self._apply(received.record, bootstrap=bootstrap)
        if outcome == "applied" and opened.sent_at_ms >= self._started_ms and opened.region != self.region:
            self.timings["transit_ms"].add(read_ms - opened.sent_at_ms)
            self.timings["queued_ms"].add(taken_ms - read_ms)
            self.timings["apply_ms"].add(_now_ms() - taken_ms)

    def _apply(self, event: Record, *, bootstrap: bool = False) -> str:
        """Fold ``event`` into the replica and the store (compare-and-set); the outcome, for counting."""
        store = self._need_store()
        for _attempt in range(_MAX_ATTEMPTS):
            node = store.read(event.path, watch=True)
            current = None if node is None else node.value
            verdict = core.judge(
                self.cp,
                event,
                current=current,
                held=event.path in self.holds,
                local_region=self.region,
                registered=self.registered,
            )
            if isinstance(verdict, core.Ignore):
                self._unpark_if_beaten(event)
                self._count(verdict.decision.value)
                return str(verdict.decision.value)
            if isinstance(verdict, core.Refuse):
                self._park(event, verdict.reason)
                return "parked"
            if isinstance(verdict, core.ReportFirst):
                # A change found while bootstrapping is dated by mtime, like a scan.
                if bootstrap and node is not None:
                    self._found(event.path, node)
                else:
                    self._observe(event.path, node, reread=False)
                continue
            if isinstance(verdict, core.Hold):
                self._hold(event, verdict.replica)
                return self._release(event.path)
            if current != event.value:
                try:
                    store.write(event.path, event.value, expected=node, fence=self._fence, public=True)
                except zk.ZkFenced as e:
                    raise SessionLost(f"no longer the leader: {e}") from e
                except zk.ZkStale:
                    self._count("cas_conflicts")
                    continue
                except (zk.ZkNoParent, zk.ZkNotEmpty) as e:
                    self._park(event, str(e))
                    return "parked"
            self._applied(event, verdict.replica)
            return "applied"
        self._park(event, f"store kept changing ({_MAX_ATTEMPTS} attempts)")
        return "parked"

    def _applied(self, event: Record, replica: policies.Replica) -> None:
        with self._lock:
            self.cp.replica = dict(replica)
            self.cp.parked.pop(event.path, None)
            self.holds.pop(event.path, None)
        self.cp.clock = clocks.receive(self._clock(), event.stamp, now_ms=_now_ms())
        self._dirty = True
        self._count("applied")

    def _hold(self, event: Record, replica: policies.Replica) -> None:
        """Take a destroying change as the policy, not yet written here (``mirrorholds``)."""
        with self._lock:
            self.cp.replica = dict(replica)
            self.cp.parked[event.path] = event
            self.holds[event.path] = "not yet checked"
        self.cp.clock = clocks.receive(self._clock(), event.stamp, now_ms=_now_ms())
        self._dirty = True

    def _release(self, path: str) -> str:
        """Apply the change held for ``path`` if the region now holds nothing it would destroy."""
        event = self.cp.parked[path]
        store = self._need_store()
        try:
            node = store.read(path, watch=True)
            if self._brokers is None:
                self._brokers = self.config.admin_client(timeout=10.0)
            mirrorholds.apply_destroying(
                store, event, node, fence=self._fence, brokers=self._brokers, own=self._own_topics
            )
        except mirrorholds.Held as e:
            if self.holds.get(path) != e.reason:
                log.warning("policy mirror %s: holding %s: %s", self.region, path, e.reason)
                self._count("held")
            with self._lock:
                self.holds[path] = e.reason
            return "held"
        except zk.ZkFenced as e:
            raise SessionLost(f"no longer the leader: {e}") from e
        except zk.ZkError as e:  # changed meanwhile, or unreachable: look again at the next recheck
            with self._lock:
                self.holds[path] = f"not applied yet: {e}"
            return "held"
        with self._lock:
            self.cp.parked.pop(path, None)
            self.holds.pop(path, None)
        log.info("policy mirror %s: applied the held %s", self.region, path)
        self._dirty = True
        self._count("held_applied")
        return "applied"

    def _own_topics(self, namespace: str) -> frozenset[str]:
        """GeoSync's own topics in ``tenant/namespace``, which never hold a deletion."""
        events = self.config.mirror_events_topic.split("://", 1)[-1]
        own = {self.config.control_topic}
        if events.rsplit("/", 1)[0] == namespace:
            own.add(events.rsplit("/", 1)[-1])
        return frozenset(own)

    def _found(self, path: str, node: zk.Node) -> None:
        held = self.cp.replica.get(path)
        replica, clock, events = policies.scan_store(
            {path: held} if held else {},
            self._clock(),
            found={path: (node.value, node.mtime_ms)},
            now_ms=_now_ms(),
        )
        for event in events:
            self._publish(event)
        with self._lock:
            self.cp.replica = {**self.cp.replica, **replica}
        self.cp.clock = clock
        self._dirty = True

    def _park(self, event: Record, reason: str) -> None:
        if event.path in self.holds:  # the held deletion stays the one to apply (mirrorholds)
            log.warning(
                "policy mirror %s: %s refused while its deletion is held: %s", self.region, event.path, reason
            )
            self._count("refused_while_held")
            return
        held = self.cp.parked.get(event.path)
        if held is None or policies.merge({event.path: held}, {event.path: event})[event.path] == event:
            with self._lock:
                self.cp.parked[event.path] = event
            self._dirty = True
        log.info("policy mirror %s: parked %s: %s", self.region, event.path, reason)
        self._count("parked")

    def _unpark_if_beaten(self, event: Record) -> None:
        parked = self.cp.parked.get(event.path)
        if parked is not None and parked == event and event.path not in self.holds:
            with self._lock:
                self.cp.parked.pop(event.path, None)
            self._dirty = True

    def _recheck_parked(self) -> None:
        for path, event in sorted(self.cp.parked.items()):
            if path in self.holds:
                self._release(path)
            else:
                self._apply(event)

    def _collect_tombstones(self) -> None:
        """Forget the tombstones every peer region is past (``policies.collect_tombstones``)."""
        peers = (set(self.registered) | set(self.cp.seen)) - {self.region}
        replica, gone = policies.collect_tombstones(
            self.cp.replica,
            seen=self.cp.seen,
            peers=peers,
            now_ms=_now_ms(),
            ttl_ms=int(self.config.mirror_tombstone_ttl_s * 1000),
            keep=self.cp.parked,
        )
        if gone:
            with self._lock:
                self.cp.replica = replica
            self._dirty = True
            self._count("tombstones_collected", len(gone))

    # -- checkpoint --------------------------------------------------------------------------------

    def _need_state_nodes(self) -> StateNodes:
        if self._state_nodes is None:
            raise SessionLost("not leading: no checkpoint nodes")
        return self._state_nodes

    def _load_checkpoint(self) -> None:
        node, data = self._need_state_nodes().read()
        cp = decode_checkpoint(data) if data is not None else None
        if data is not None and cp is None:
            log.warning("policy mirror %s: checkpoint unreadable, starting afresh", self.region)
        self._state_node = node  # an unreadable one is overwritten at the next save
        self._have_checkpoint = cp is not None
        self.cp = cp or Checkpoint()
        with self._lock:
            self.holds = dict.fromkeys(self.cp.held(), "not yet checked")
        if self.cp.clock is not None and self.cp.clock.region != self.region:
            self.cp.clock = None
        self._clock()

    def _save_checkpoint(self) -> None:
        nodes = self._need_state_nodes()
        data = encode_checkpoint(self.cp)
        try:
            self._state_node = nodes.write(data, expected=self._state_node)
        except zk.ZkStale:
            # Someone else wrote our checkpoint: another leader. Stop this term.
            raise SessionLost("the mirror checkpoint changed under us: another leader") from None
        except zk.ZkFenced as e:
            raise SessionLost(f"no longer the leader: {e}") from e
        self._dirty = False
        self._count("checkpoints")
