"""The policy mirror's state and its local side: scope, the store walk, and local changes published.

``LocalMirror`` holds what a leadership term works on (the checkpoint, the store, the fence, counters) and
turns changes found in the region's own store into policy events (``geosync_agent.core.mirror`` decides
which). ``geosync_agent.mirrorapplying`` adds other regions' events applied here, and
``geosync_agent.mirroring`` the leadership terms and the loop around both; see its docstring for the whole.

One of the mirror's parts, with ``mirrorapplying``, ``mirrorstate``, ``mirrorholds`` and the pure
``geosync_agent.core.mirror`` (decision 0001): it reads no clock, draws no random number and starts no thread.
The shell (``mirroring``, built by the composition root) gives it the wall clock (``wall_ms``: the hybrid
logical clock's physical input, the events' sequence numbers and send times, tombstones' ages, the timings)
and fresh ids (``new_id``: the mirror's identifier, the checkpoint parts' generations). The clock is read
where the time is used, not once per loop item, because one item (a store walk) may publish many changes and
each is stamped when found; a fixed clock makes every stamp, sequence number and id a replay can check.
"""

from __future__ import annotations

import fnmatch
import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

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


class SessionLost(TemporaryError):
    """The ZooKeeper session (and with it leadership and every watch) is gone: start a new term."""


class LocalMirror:
    """A region's policy mirror: its state, and its store's changes published."""

    def __init__(
        self,
        config: AgentConfig,
        keys: envelopes.Keys,
        *,
        wall_ms: Callable[[], int],
        new_id: Callable[[], str],
    ) -> None:
        """``wall_ms``: the wall clock in milliseconds; ``new_id``: a fresh, unique hex id (the shell's)."""
        if not config.zookeeper:
            raise ValueError("the policy mirror needs the region's zookeeper (setting 'zookeeper')")
        self.config = config
        self.keys = keys
        self.region = config.region
        self.wall_ms = wall_ms
        self.new_id = new_id
        self.identifier = f"{config.region}-{new_id()[:8]}"
        self._stop = threading.Event()
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
        self._started_ms = wall_ms()
        # Destroying changes held (``mirrorholds``): path -> why. Each is parked and is the replica's record.
        self.holds: dict[str, str] = {}
        self._brokers: mirrorholds.Listing | None = None  # the region's admin API, made when first needed
        # Recent remote events: ms from the sender's publish to our read, and from our read to applied.
        self.timings = {"transit_ms": Recent(), "queued_ms": Recent(), "apply_ms": Recent()}
        self.progress: Callable[[], None] = lambda: None
        """Told whenever the mirror's thread gets on (the liveness watchdog's heartbeat)."""

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
        self.cp.clock, stamp = clocks.tick(self._clock(), now_ms=self.wall_ms())
        return stamp

    def _clock(self) -> clocks.Hlc:
        if self.cp.clock is None:
            self.cp.clock = clocks.start(self.region)
        return self.cp.clock

    def _publish(self, event: Record) -> None:
        now = self.wall_ms()
        seq = max(self.cp.seq + 1, now * 1000)
        envelope = envelopes.Envelope(
            kind=EVENT_KIND,
            region=self.region,
            seq=seq,
            sent_at_ms=now,
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
        if changes := self._scan(scoped, found):
            self._count("scan_changes", changes)

    def _scan(self, held: policies.Replica, found: dict[str, zk.Node]) -> int:
        """Publish what ``found`` in the store differs from the ``held`` records, dated by mtime as
        ``policies.scan_store`` says; how many changes it published."""
        replica, clock, events = policies.scan_store(
            held,
            self._clock(),
            found={p: (n.value, n.mtime_ms) for p, n in found.items()},
            now_ms=self.wall_ms(),
        )
        for event in events:
            self._publish(event)
        with self._lock:
            self.cp.replica = {**self.cp.replica, **replica}
        self.cp.clock = clock
        if events:
            self._dirty = True
        return len(events)

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
