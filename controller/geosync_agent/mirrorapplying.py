"""Other regions' policy events applied to this region's store, compare-and-set, last writer wins.

Each event read from the topic is checked (``core.receive``), judged against the store's current bytes
(``core.judge``) and carried out: written, parked while it cannot apply here (PIP-321, a namespace taken away
from the region, a parent missing), or held while it would destroy this region's data
(``geosync_agent.mirrorholds``). Parked and held records are looked at again at every recheck.

One of the mirror's parts (see ``mirrorlocal``): the time comes from the shell's ``wall_ms``, and the event
reader's thread is the shell's (``mirroring``), which hands each message over with when it was read.
"""

from __future__ import annotations

import logging
from typing import Any

import pulsar

from geosync_adapters import zookeeper as zk
from geosync_agent import mirrorholds, watching
from geosync_agent.core import mirror as core
from geosync_agent.mirrorlocal import LocalMirror, SessionLost
from geosync_core import clocks, envelopes, policies
from geosync_core.policies import Record

log = logging.getLogger("geosync.mirror")

_MAX_ATTEMPTS = 5


class ApplyingMirror(LocalMirror):
    """A policy mirror that also applies other regions' events."""

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
        taken_ms = self.wall_ms()
        read_ms = taken_ms if read_ms is None else read_ms
        outcome = self._apply(received.record, bootstrap=bootstrap)
        if outcome == "applied" and opened.sent_at_ms >= self._started_ms and opened.region != self.region:
            self.timings["transit_ms"].add(read_ms - opened.sent_at_ms)
            self.timings["queued_ms"].add(taken_ms - read_ms)
            self.timings["apply_ms"].add(self.wall_ms() - taken_ms)

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
        self.cp.clock = clocks.receive(self._clock(), event.stamp, now_ms=self.wall_ms())
        self._dirty = True
        self._count("applied")

    def _hold(self, event: Record, replica: policies.Replica) -> None:
        """Take a destroying change as the policy, not yet written here (``mirrorholds``)."""
        with self._lock:
            self.cp.replica = dict(replica)
            self.cp.parked[event.path] = event
            self.holds[event.path] = "not yet checked"
        self.cp.clock = clocks.receive(self._clock(), event.stamp, now_ms=self.wall_ms())
        self._dirty = True

    def _release(self, path: str) -> str:
        """Apply the change held for ``path`` if the region now holds nothing it would destroy."""
        event = self.cp.parked[path]
        store = self._need_store()
        try:
            node = store.read(path, watch=True)
            if self._brokers is None:  # each call that ends is progress for the liveness watchdog
                self._brokers = watching.beating(self.config.admin_client(timeout=10.0), self._beat)
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

    def _beat(self) -> None:
        self.progress()  # the one set now (the composition root sets it after construction)

    def _own_topics(self, namespace: str) -> frozenset[str]:
        """GeoSync's own topics in ``tenant/namespace``, which never hold a deletion."""
        events = self.config.mirror_events_topic.split("://", 1)[-1]
        own = {self.config.control_topic}
        if events.rsplit("/", 1)[0] == namespace:
            own.add(events.rsplit("/", 1)[-1])
        return frozenset(own)

    def _found(self, path: str, node: zk.Node) -> None:
        held = self.cp.replica.get(path)
        self._scan({path: held} if held else {}, {path: node})
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
            now_ms=self.wall_ms(),
            ttl_ms=int(self.config.mirror_tombstone_ttl_s * 1000),
            keep=self.cp.parked,
        )
        if gone:
            with self._lock:
                self.cp.replica = replica
            self._dirty = True
            self._count("tombstones_collected", len(gone))
