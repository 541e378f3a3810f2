"""Snapshot mode (PIP-33 from outside the broker) for namespaces whose brokers do not stamp origin positions.

Per topic partition of a snapshot-mode namespace, this region's agent:

* starts a snapshot every ``snapshot_interval_s`` when new data arrived since the last one and none is in
  flight: a signed request marker written into the topic (replicated to every region of the namespace);
* answers other regions' requests it reads in its own log with a response marker naming where the request
  landed, replicated back to the requesting region only;
* feeds responses to its own requests into the builder (``geosync_core.snapshots``); a complete snapshot is
  written as a local-only marker, so a restarted agent finds its snapshots again by re-reading the topic;
* when a subscription's mark-delete passes a cached snapshot, publishes an update on the control topic;
  other regions move that subscription's mark-delete forward to their position with ``expireMessages``.

Markers are ordinary messages, so they would reach applications: the broker plugins' entry filter hides them
from every subscription but the agents' (``geosync-*``). Without that filter the agent refuses to inject
markers into the namespace and says how to enable it.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from geosync_core import markers, snapshots
from geosync_core.positions import Position

log = logging.getLogger("geosync.agent.snapshots")
ENTRY_FILTER = "geosync"


@dataclass
class TopicSnapshots:
    """Snapshot state of one topic partition in this region."""

    builder: snapshots.Builder | None = None
    cache: snapshots.SnapshotCache = field(default_factory=snapshots.SnapshotCache)
    last_started_version: int = -1
    last_completed_version: int = -1
    next_start: float = 0.0
    completed: int = 0
    aborted: int = 0
    responded: int = 0
    sent: dict[str, Position] = field(default_factory=dict)
    """Per subscription, the local position of the last snapshot an update was published for."""


class FilterMissing(Exception):
    """The region's brokers do not load the GeoSync entry filter, so markers would reach applications."""


def check_entry_filter(runtime_config: dict[str, Any]) -> None:
    names = str(runtime_config.get("entryFilterNames", ""))
    if ENTRY_FILTER not in names.strip("[]").replace(" ", "").split(","):
        raise FilterMissing(
            "snapshot mode writes marker messages into data topics, and this region's brokers do not load "
            f"the GeoSync entry filter that hides them from applications (entryFilterNames={names}). Enable "
            f"it in broker.conf: entryFilterNames={ENTRY_FILTER}, entryFiltersDirectory=<dir with the "
            "GeoSync NAR> (built from interceptors/), then restart the brokers; or use exact mode."
        )


class Snapshotting:
    """The snapshot-mode duties of one agent; the runtime calls it from its single loop."""

    def __init__(self, *, region: str, key: bytes, interval_s: float, timeout_s: float) -> None:
        self.region = region
        self.key = key
        self.interval_s = interval_s
        self.timeout_ms = int(timeout_s * 1000)
        self.topics: dict[str, TopicSnapshots] = {}
        self.seq = time.time_ns() // 1000

    def seal(self, marker: markers.Marker) -> tuple[dict[str, str], bytes]:
        self.seq += 1
        return markers.encode_marker(self.key, marker, seq=self.seq, sent_at_ms=int(time.time() * 1000))

    # -- source side ---------------------------------------------------------------------------------

    def due(self, topic: str, *, version: int, regions: frozenset[str], now: float) -> list[Any]:
        """Start a snapshot of ``topic`` if it is time; returns what to publish (marker, replicate-to)."""
        state = self.topics.setdefault(topic, TopicSnapshots())
        out: list[Any] = []
        now_ms = int(now * 1000)
        if state.builder is not None:
            expired = snapshots.expire(state.builder, now_ms=now_ms, timeout_ms=self.timeout_ms)
            if expired is None:
                return out
            state.builder = None
            state.aborted += 1
            log.info("%s: %s", topic, expired[1][0])
        remotes = regions - {self.region}
        # New data since the last *completed* snapshot: an aborted attempt (a region was down) is retried,
        # so messages produced during an outage get covered once every region answers again.
        if not remotes or now < state.next_start or version == state.last_completed_version:
            return out
        state.builder, effects = snapshots.start(
            uuid.uuid4().hex, source=self.region, remotes=remotes, now_ms=now_ms
        )
        state.last_started_version = version
        state.next_start = now + self.interval_s
        return [(e, None) for e in effects]

    def on_marker(self, topic: str, position: Position, marker: markers.Marker) -> list[Any]:
        """A marker read in this region's own log of ``topic`` at ``position``."""
        state = self.topics.setdefault(topic, TopicSnapshots())
        if isinstance(marker, markers.SnapshotRequest):
            if marker.source_region == self.region:
                return []
            state.responded += 1
            response = snapshots.respond(marker, region=self.region, at=position)
            return [(response, [marker.source_region])]
        if isinstance(marker, markers.SnapshotResponse):
            if marker.source_region != self.region or state.builder is None:
                return []
            builder, effects = snapshots.on_response(
                state.builder,
                marker,
                local=position,
                now_ms=int(time.time() * 1000),
                timeout_ms=self.timeout_ms,
            )
            state.builder = builder
            out: list[Any] = []
            for effect in effects:
                if isinstance(effect, markers.SnapshotRequest):
                    out.append((effect, None))
                elif isinstance(effect, markers.Snapshot):
                    state.cache = state.cache.add(effect)
                    state.completed += 1
                    state.last_completed_version = state.last_started_version
                    out.append((effect, [self.region]))  # local only: found again after a restart
                elif isinstance(effect, snapshots.Aborted):
                    state.aborted += 1
            return out
        if isinstance(marker, markers.Snapshot) and marker.region == self.region:
            state.cache = state.cache.add(marker)
        return []

    def on_cursor(self, topic: str, subscription: str, mark_delete: Position) -> markers.Update | None:
        """The update to publish when ``subscription``'s mark-delete passed a snapshot it was not given."""
        state = self.topics.get(topic)
        if state is None:
            return None
        snap = state.cache.latest_at_or_below(mark_delete)
        if snap is None or state.sent.get(subscription) == snap.local_position:
            return None
        state.sent[subscription] = snap.local_position
        return markers.Update(subscription=subscription, region=self.region, positions=snap.positions)

    def forget_below(self, topic: str, floor: Position) -> None:
        state = self.topics.get(topic)
        if state is not None:
            state.cache = state.cache.without_below(floor)

    def snapshot(self) -> dict[str, Any]:
        return {
            "topics": len(self.topics),
            "completed": sum(t.completed for t in self.topics.values()),
            "aborted": sum(t.aborted for t in self.topics.values()),
            "responded": sum(t.responded for t in self.topics.values()),
            "cached": sum(len(t.cache) for t in self.topics.values()),
            "in_flight": sum(1 for t in self.topics.values() if t.builder is not None),
            "latest": {
                topic: [
                    {"local": str(s.local_position), "positions": {r: str(p) for r, p in s.positions}}
                    for s in t.cache.snapshots[-3:]
                ]
                for topic, t in self.topics.items()
                if len(t.cache)
            },
            "completed_by_topic": {topic: t.completed for topic, t in self.topics.items() if t.completed},
        }
