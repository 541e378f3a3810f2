"""The policy mirror of one region: PIP-136 done outside Pulsar, through the region's own ZooKeeper.

Pulsar's own synchronizer cannot run where the configuration store is the local store (every ZooKeeper
standalone, the lab), sees no direct ZooKeeper writes and keeps no tombstones; the rules that replace it
are in ``geosync_core.policies``. Everything the mirror decides is its leadership term,
``geosync_agent.core.mirroring`` (a state machine: events in, effects out; its rules in ``core.mirror``);
around it, three rooms: this module (the shell: leadership terms and the loop), ``mirrorapplying`` (the
term's effects carried out, each answer fed back) and ``mirrorlocal`` (its state, the store walk, the
clusters, the checkpoint read). The simulator runs the same term (``geosync_sim.policies``). Together:

* **Leadership.** Every agent of a region may run a ``Mirror``; one leads, by a kazoo ``Lock`` on the
  region's own ZooKeeper (``{mirror_root}/leader``). A standby takes over once the leader's session
  expires (``mirror_session_timeout_s``). Every store write of the leader is fenced by its lock node in
  the same ZooKeeper transaction, so a leader that lost its session cannot write any more.
* **One loop.** ZooKeeper watch callbacks (kazoo's thread), session state changes and the event-topic
  reader (a task of the term, started through ``spawn``) only put items on one queue; a single thread takes
  them in order and feeds each to the term (``Fired``, ``Received``, ``Reconnected``, then a ``Tick``), so
  the replica, the clock and the store are only touched there. When a watch fires the term reads the node's
  *current* bytes (``ReadNode``, re-arming the watch) and publishes them if they changed.
* **Events.** A local change becomes a signed envelope (kind ``policy-event``, payload
  ``policies.event_to_payload``) published on ``mirror_events_topic``, one topic in a namespace
  replicated to every region (the lab's ``geo/abc``): one topic for all tenants keeps a region's events in
  the order it made them (tenant before its namespaces, namespaces before the tenant's deletion), and
  needs no per-tenant replication set-up before the first tenant exists. Every region reads the topic
  with a reader; remote events are checked (``allowedclusters.reject_event_regions``), applied with
  compare-and-set, and kept in the replica only once the store write succeeded. A rejected or
  not-yet-applicable event (parent missing, children left) is parked and re-checked every
  ``mirror_recheck_interval_s``; ``snapshot()`` lists what is parked. A deletion that would destroy this
  region's data (a namespace that still holds topics here) is held instead (``mirrorholds``).
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

The mirror's shell (decision 0001): this module holds the ZooKeeper session and its watches, the event
topic's client, producer and reader, the queue and the loop's recheck schedule (the monotonic clock). Its
parts (``mirrorlocal``, ``mirrorapplying``, ``mirrorstate``, ``mirrorholds``, ``core.mirror``) read no clock,
draw no random number and start no thread: ``Mirror`` gives them the wall clock and fresh ids, and starts the
term's reader (and, run on its own, itself) through ``spawn``. Under the agent the composition root gives all
three (``supervising``: the ``policy-mirror`` task and its ``policy-mirror-reader``); a ``Mirror`` made
without them (the tests, the benchmarks) uses this module's ``wall_ms``, ``new_id`` and ``own_thread``.

Scope: only ``/admin/policies/{tenant}`` and ``/admin/policies/{tenant}/{ns}`` of tenants matching
``mirror_tenants`` and not ``mirror_exclude_tenants`` (by default ``public`` and ``pulsar``, which every
cluster creates for itself). Events outside the scope are counted and ignored.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pulsar

from geosync_adapters import zookeeper as zk
from geosync_agent import mirrorholds
from geosync_agent.config import AgentConfig
from geosync_agent.core import mirrorevents as ev
from geosync_agent.core.mirror import encode_checkpoint
from geosync_agent.mirrorapplying import ApplyingMirror
from geosync_agent.mirrorlocal import SessionLost
from geosync_core import envelopes
from geosync_core.errors import TemporaryError

log = logging.getLogger("geosync.mirror")

_QUEUE_HIGH_WATER = 10_000

Spawn = Callable[[str, Callable[[], None]], threading.Thread]
"""Starts ``body`` as the task ``name`` and returns its thread (``Supervisor.scoped``, ``own_thread``)."""


def wall_ms() -> int:
    """The wall clock in milliseconds."""
    return time.time_ns() // 1_000_000


def new_id() -> str:
    """A fresh, unique hex id."""
    return uuid.uuid4().hex


def own_thread(name: str, body: Callable[[], None]) -> threading.Thread:
    """A thread named ``name`` running ``body``: how a mirror run outside the agent starts its tasks."""
    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread


class Mirror(ApplyingMirror):
    """The policy mirror of ``config.region``. ``start()`` runs it on its own threads; ``stop()`` ends it."""

    def __init__(
        self,
        config: AgentConfig,
        keys: envelopes.Keys,
        *,
        wall_ms: Callable[[], int] = wall_ms,
        new_id: Callable[[], str] = new_id,
        spawn: Spawn = own_thread,
        brokers: mirrorholds.Listing | None = None,
    ) -> None:
        super().__init__(config, keys, wall_ms=wall_ms, new_id=new_id, brokers=brokers)
        self.spawn = spawn
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._reader_thread: threading.Thread | None = None
        self._reader_stop = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Run as a task of its own (tests and the mirror benchmark; the agent's composition root runs
        ``run`` as its supervised ``policy-mirror`` task instead)."""
        self._thread = self.spawn(f"policy-mirror-{self.region}", self.run)

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stop.set()
        self._queue.put(("stop", None))
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

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
        before = self.term
        self._interrupted = False
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
            self.lead_on(store, fence=(f"{lock.path}/{lock.node}", 0))
            self.terms += 1
            log.info("policy mirror %s: leading (%s)", self.region, self.identifier)
            client = pulsar.Client(
                self.config.service_url,
                operation_timeout_seconds=15,
                logger=logging.getLogger("geosync.pulsar-client"),
                **self.config.pulsar_options(),
            )
            self._client = client
            self._reader_stop = reader_stop
            data = self._load_checkpoint()
            self._producer = client.create_producer(
                self.config.mirror_events_topic,
                batching_enabled=False,
                send_timeout_millis=15_000,
                block_if_queue_full=True,
            )
            self._begin(data)  # the reader opened, the topic drained (no checkpoint), the store walked: Lead
            self._loop()
        finally:
            with self._lock:
                self.leader = False
            reader_stop.set()
            if self._reader_thread is not None:
                self._reader_thread.join(timeout=5)
            if (
                self._store is not None
                and store.connected
                and self.term is not before
                and not self._interrupted
            ):
                with contextlib.suppress(Exception):
                    self._save_checkpoint(encode_checkpoint(self.term.cp))
            self._producer = None
            self._reader = None
            self._reader_thread = None
            self._client = None
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

    def _open_reader(self, position: bytes | None) -> None:
        start = pulsar.MessageId.earliest if position is None else pulsar.MessageId.deserialize(position)
        self._reader = self._client.create_reader(self.config.mirror_events_topic, start)

    def _lead(self) -> None:
        with self._lock:
            self.leader = True
        reader, stop = self._reader, self._reader_stop
        self._reader_thread = self.spawn(
            f"policy-mirror-reader-{self.region}", lambda: self._read_events(reader, stop)
        )

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
            q.put(("event", (msg, self.wall_ms())))

    def _loop(self) -> None:
        """Each item of the queue fed to the term, and a ``Tick`` after each (the term rechecks when due)."""
        interval = self.config.mirror_recheck_interval_s
        while not self._stop.is_set():
            self.progress()
            try:
                kind, item = self._queue.get(timeout=interval)
            except queue.Empty:
                kind, item = "tick", None
            if kind == "zk":
                self.feed(ev.Fired(item.path, children=item.kind == "children"))
            elif kind == "event":
                msg, read_ms = item
                self.receive(msg, read_ms=read_ms)
            elif kind == "state":
                if item == "LOST":
                    raise SessionLost("zookeeper session lost: leadership and watches are gone")
                if item == "CONNECTED":
                    self.feed(ev.Reconnected())  # watches may have been missed while suspended
            elif kind == "reader-failed":
                raise TemporaryError(f"event reader failed: {item}")
            self.feed(ev.Tick())
