"""The policy mirror's state and what it reads of its own region: scope, the store walk, the clusters, the
checkpoint.

``LocalMirror`` holds what the mirror shows between terms (counters, the current term, a
``core.mirroring.Term`` with its checkpoint and holds, timings) and reads the region's ZooKeeper for the
term: the in-scope nodes (``Walk``), the clusters registered (``ReadClusters``), the checkpoint (through
``mirrorstate``).
``geosync_agent.mirrorapplying`` carries out the rest of the term's effects, and ``geosync_agent.mirroring``
runs the leadership terms and the loop around both; see its docstring for the whole.

One of the mirror's parts, with ``mirrorapplying``, ``mirrorstate``, ``mirrorholds`` and the pure
``geosync_agent.core.mirroring`` (decision 0001): it reads no clock, draws no random number and starts no
thread. The shell (``mirroring``, built by the composition root) gives it the wall clock (``wall_ms``: read
each time an event is fed to the term, which stamps, numbers and times with it) and fresh ids (``new_id``: the
mirror's identifier, the checkpoint parts' generations).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from geosync_adapters import zookeeper as zk
from geosync_agent import mirrorholds
from geosync_agent.config import AgentConfig
from geosync_agent.core import mirrorevents as ev
from geosync_agent.core.mirror import Checkpoint
from geosync_agent.core.mirroring import Term
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


def settings_of(config: AgentConfig) -> ev.Settings:
    """The mirror's settings as its term (``core.mirroring``) takes them."""
    return ev.Settings(
        region=config.region,
        scope=ev.Scope(tuple(config.mirror_tenants), tuple(config.mirror_exclude_tenants)),
        recheck_ms=int(config.mirror_recheck_interval_s * 1000),
        tombstone_ttl_ms=int(config.mirror_tombstone_ttl_s * 1000),
    )


def node_of(node: zk.Node | None) -> ev.Node | None:
    return None if node is None else ev.Node(node.value, node.version, node.mtime_ms)


class LocalMirror:
    """A region's policy mirror: its state, and what it reads of its own store."""

    def __init__(
        self,
        config: AgentConfig,
        keys: envelopes.Keys,
        *,
        wall_ms: Callable[[], int],
        new_id: Callable[[], str],
        brokers: mirrorholds.Listing | None = None,
    ) -> None:
        """``wall_ms``: the wall clock in milliseconds; ``new_id``: a fresh, unique hex id (the shell's);
        ``brokers``: what the region's brokers list (``mirrorholds``), else its admin API, made when first
        needed."""
        if not config.zookeeper:
            raise ValueError("the policy mirror needs the region's zookeeper (setting 'zookeeper')")
        self.config = config
        self.keys = keys
        self.region = config.region
        self.settings = settings_of(config)
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
        self.term = Term(self.settings, counters=self.counters)
        """The current (or last) leadership term: its checkpoint, holds and the clusters it read."""
        self._store: zk.Store | None = None
        self._fence: tuple[str, int] | None = None
        self._producer: Any = None
        self._reader: Any = None
        self._interrupted = False
        """An effect of this term failed: its state is not saved at the term's end."""
        self._state_node: zk.Node | None = None
        self._state_nodes: StateNodes | None = None
        self._started_ms = wall_ms()
        self.brokers = brokers
        # Recent remote events: ms from the sender's publish to our read, and from our read to applied.
        self.timings = {"transit_ms": Recent(), "queued_ms": Recent(), "apply_ms": Recent()}
        self.progress: Callable[[], None] = lambda: None
        """Told whenever the mirror's thread gets on (the liveness watchdog's heartbeat)."""

    @property
    def interrupted(self) -> bool:
        """An effect of this term failed: its state is not saved at the term's end."""
        return self._interrupted

    @property
    def cp(self) -> Checkpoint:
        return self.term.cp

    @property
    def holds(self) -> dict[str, str]:
        return self.term.holds

    @property
    def registered(self) -> allowedclusters.Registered:
        return self.term.registered

    def snapshot(self) -> dict[str, Any]:
        """Status for people and tests: leadership, counters, replica size, what is parked and why."""
        with self._lock:
            cp = self.term.cp
            return {
                "region": self.region,
                "identifier": self.identifier,
                "leader": self.leader,
                "terms": self.terms,
                "records": len(cp.replica),
                "tombstones": sum(1 for r in cp.replica.values() if r.value is None),
                "parked": sorted(cp.parked),
                "held": dict(sorted(self.term.holds.items())),
                "clock": None if cp.clock is None else clocks.encode(cp.clock),
                "queue": self._queue.qsize(),
                "counters": dict(self.counters),
                "last_error": self.last_error,
                "timings": {name: recent.percentiles() for name, recent in self.timings.items()},
            }

    def replica(self) -> dict[str, Record]:
        with self._lock:
            return dict(self.term.cp.replica)

    def lead_on(self, store: zk.Store, *, fence: tuple[str, int] | None, producer: Any = None) -> None:
        """Lead on ``store`` (the region's ZooKeeper): every write of the term fenced by ``fence`` (the
        leadership's lock node and its version), the checkpoint in its nodes under ``mirror_root``;
        ``producer``: the event topic's, where it is made already."""
        self._store = store
        self._fence = fence
        self._state_nodes = StateNodes(
            store,
            self.config.mirror_root.rstrip("/"),
            budget=self.config.mirror_checkpoint_part_bytes,
            fence=fence,
            new_id=self.new_id,
        )
        self._producer = producer

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    def in_scope(self, path: str) -> bool:
        return self.settings.scope(path)

    # -- reads for the term -----------------------------------------------------------------------

    def _need_store(self) -> zk.Store:
        if self._store is None:
            raise SessionLost("no zookeeper session")
        return self._store

    def _walk(self, scope: ev.Scope) -> dict[str, ev.Node]:
        """Every in-scope node now in the store, with watches armed on all of them and their parents."""
        store = self._need_store()
        found: dict[str, ev.Node] = {}
        for tenant in store.children(POLICIES_ROOT, watch=True):
            if not scope.tenant(tenant):
                continue
            tpath = f"{POLICIES_ROOT}/{tenant}"
            if (node := node_of(store.read(tpath, watch=True))) is not None:
                found[tpath] = node
            for ns in store.children(tpath, watch=True):
                npath = f"{tpath}/{ns}"
                if scope(npath) and (child := node_of(store.read(npath, watch=True))) is not None:
                    found[npath] = child
        return found

    def _clusters(self) -> dict[str, frozenset[str]]:
        store = self._need_store()
        registered: dict[str, frozenset[str]] = {}
        for name in store.children(CLUSTERS_ROOT):
            node = store.read(f"{CLUSTERS_ROOT}/{name}")
            peers: frozenset[str] = frozenset()
            if node is not None:
                found = policies.read_names(node.value, "peerClusterNames")
                peers = found if isinstance(found, frozenset) else frozenset()
            registered[name] = peers
        return registered

    # -- checkpoint --------------------------------------------------------------------------------

    def _need_state_nodes(self) -> StateNodes:
        if self._state_nodes is None:
            raise SessionLost("not leading: no checkpoint nodes")
        return self._state_nodes

    def _load_checkpoint(self) -> bytes | None:
        """The checkpoint's bytes as the last term saved them (``None``: none); the node is kept for the next
        save's compare-and-set (an unreadable one is overwritten then)."""
        node, data = self._need_state_nodes().read()
        self._state_node = node
        return data

    def _save_checkpoint(self, data: bytes) -> None:
        nodes = self._need_state_nodes()
        try:
            self._state_node = nodes.write(data, expected=self._state_node)
        except zk.ZkStale:
            # Someone else wrote our checkpoint: another leader. Stop this term.
            raise SessionLost("the mirror checkpoint changed under us: another leader") from None
        except zk.ZkFenced as e:
            raise SessionLost(f"no longer the leader: {e}") from e
