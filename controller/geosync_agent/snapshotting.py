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

Markers read are checked like control messages: signed by their sender region's key, written for the topic
partition they are read from (a genuine marker copied into another topic is refused as misplaced), and, from
other regions, not seen before: a replay guard per topic partition and sender (``guards``; kept in the
agent's checkpoint) refuses a marker copied back into its own topic. This region's own markers skip the
guard: re-reading them after a restart is how its snapshots are found again, and they name facts of that
topic only.

State stays bounded however long the agent runs: each topic partition caches at most ``max_cached``
completed snapshots (``SnapshotCache.thinned``: recent ones dense, older ones sparse), and ``retain`` drops
the state of topics the runtime no longer tracks (deleted, or moved out of snapshot mode).

Everything snapshot mode does is here: the runtime hands it markers read, cursors observed and the time, and
carries out the effects it returns (``Publish`` for markers, ``AdminMove`` for updates from other regions).
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from geosync_agent.effects import AdminMove, Publish
from geosync_core import envelopes, markers, snapshots
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

log = logging.getLogger("geosync.agent.snapshots")
ENTRY_FILTER = "geosync"
MAX_CACHED = 16
"""Completed snapshots cached per topic partition by default (recent ones dense, older ones sparse)."""


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


Outgoing = list[tuple[markers.Marker, list[str] | None]]
"""Markers to write into a topic, each with the regions to replicate it to (None: the namespace's)."""


@dataclass(frozen=True, slots=True)
class MarkerWork:
    """What one marker read in the local log asks for: effects to carry out, or a refusal to count."""

    effects: tuple[AdminMove | Publish, ...] = ()
    rejected: envelopes.Rejected | None = None
    update_for: str | None = None
    """The subscription an applied update concerns (the runtime tracks it)."""


class Snapshotting:
    """The snapshot-mode duties of one agent; the runtime calls it from its single loop."""

    def __init__(
        self,
        *,
        region: str,
        keys: envelopes.Keys,
        namespaces: Sequence[str],
        interval_s: float,
        timeout_s: float,
        first_seq: int,
        new_id: Callable[[], str],
        max_cached: int = MAX_CACHED,
    ) -> None:
        self.region = region
        self.new_id = new_id
        """A fresh snapshot id (drawn from the agent's ``rng``: this module draws no random number)."""
        self.keys = keys
        self.namespaces = tuple(namespaces)
        self.interval_s = interval_s
        self.timeout_ms = int(timeout_s * 1000)
        self.topics: dict[str, TopicSnapshots] = {}
        self.guards: dict[str, envelopes.ReplayGuard] = {}
        """Per topic partition, the markers admitted from other regions (replays are refused)."""
        self.seq = first_seq
        self.max_cached = max_cached
        self.covered: dict[str, bool] = {}
        """``covers``'s answers per topic (it is asked for every subscription every round)."""

    def covers(self, topic: str) -> bool:
        """Whether ``topic`` is in a snapshot-mode namespace."""
        known = self.covered.get(topic)
        if known is None:
            rest = topic.split("://", 1)[-1]
            namespace = "/".join(rest.split("/")[:2])
            known = self.covered[topic] = any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces)
        return known

    def retain(self, tracked: Iterable[str]) -> list[str]:
        """Forget every topic not in ``tracked`` (its cache, builder, counters); the topics forgotten."""
        keep = set(tracked)
        gone = sorted(t for t in self.topics if t not in keep)
        for topic in gone:
            del self.topics[topic]
        for topic in [t for t in self.guards if t not in keep]:
            del self.guards[topic]
        self.covered = {t: c for t, c in self.covered.items() if t in keep}
        return gone

    def seal(self, marker: markers.Marker, *, topic: str, now_ms: int) -> tuple[dict[str, str], bytes]:
        self.seq += 1
        return markers.encode_marker(self.keys.signer, marker, topic=topic, seq=self.seq, sent_at_ms=now_ms)

    def publishing(self, topic: str, outgoing: Outgoing, *, now_ms: int) -> list[Publish]:
        """The effects that write ``outgoing`` markers into ``topic``."""
        out = []
        for marker, replicate_to in outgoing:
            properties, data = self.seal(marker, topic=topic, now_ms=now_ms)
            counter = f"markers_sent_{markers.kind_of(marker)}"
            out.append(Publish(topic, data, counter, properties=properties, replicate_to=replicate_to))
        return out

    # -- the runtime's calls -------------------------------------------------------------------------

    def on_read(
        self,
        topic: str,
        partition: int,
        position: Position,
        properties: dict[str, str],
        data: bytes,
        *,
        markers_allowed: bool,
        subscription_state: Callable[[str], tuple[bool, AckState | None]],
        now_ms: int,
    ) -> MarkerWork:
        """A marker read in the local log of ``topic``; ``subscription_state(name)`` tells whether the
        subscription an update names exists here and its cursor (None if not read yet)."""
        opened = markers.open_marker(self.keys.keyring, properties, data, topic=topic)
        if isinstance(opened, envelopes.Rejected):
            return MarkerWork(rejected=opened)
        envelope, marker = opened
        if envelope.region != self.region:
            guard, admitted = self.guards.get(topic, envelopes.ReplayGuard()).admit(envelope)
            if isinstance(admitted, envelopes.Rejected):
                return MarkerWork(rejected=admitted)
            self.guards[topic] = guard
        if isinstance(marker, markers.Update):
            if marker.region == self.region:
                return MarkerWork()
            target = dict(marker.positions).get(self.region)
            exists, cursor = subscription_state(marker.subscription)
            if target is None or (cursor is not None and target <= cursor.mark_delete):
                return MarkerWork(update_for=marker.subscription)
            move = AdminMove(
                key=(topic, marker.subscription),
                partition=partition,
                move=target,
                holes=(),
                skip_by_ids=False,
                consumers=0,
                shadow_name="",
                create_first=not exists,
                counter="snapshot_updates_applied",
            )
            return MarkerWork(effects=(move,), update_for=marker.subscription)
        if not markers_allowed:
            return MarkerWork()
        outgoing = self.on_marker(topic, position, marker, now_ms=now_ms)
        return MarkerWork(effects=tuple(self.publishing(topic, outgoing, now_ms=now_ms)))

    def round(
        self,
        tails: Iterable[tuple[str, int]],
        namespaces: dict[str, frozenset[str]],
        *,
        now_s: float,
        now_ms: int,
    ) -> list[Publish]:
        """Start the snapshots that are due: ``tails`` are (topic, index version) of the topics covered."""
        out: list[Publish] = []
        for topic, version in tails:
            rest = topic.split("://", 1)[-1]
            regions = namespaces.get("/".join(rest.split("/")[:2]), frozenset())
            due = self.due(topic, version=version, regions=regions, now=now_s)
            out.extend(self.publishing(topic, due, now_ms=now_ms))
        return out

    def on_subscription(
        self, topic: str, subscription: str, cursor: AckState, log: Sequence[Position], last: Position | None
    ) -> markers.Update | None:
        """The update to publish for a local subscription whose cursor is ``cursor``; ``log`` lists the
        local entries above its mark-delete (markers excluded), ``last`` the last entry read.

        Marker entries are acknowledged only when a consumer's dispatcher passes them, so the mark-delete
        can stay below a snapshot although every message before it was acknowledged: what counts is the
        first unacknowledged *message*; everything below it is consumed."""
        first_open = next((p for p in log if p not in cursor), None)
        if first_open is None:
            consumed = last if last is not None else cursor.mark_delete
        else:
            consumed = Position(first_open.ledger, first_open.entry - 1)
        return self.on_cursor(topic, subscription, max(consumed, cursor.mark_delete))

    # -- source side ---------------------------------------------------------------------------------

    def due(self, topic: str, *, version: int, regions: frozenset[str], now: float) -> Outgoing:
        """Start a snapshot of ``topic`` if it is time; returns what to publish (marker, replicate-to)."""
        state = self.topics.setdefault(topic, TopicSnapshots())
        out: Outgoing = []
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
            self.new_id(), source=self.region, remotes=remotes, now_ms=now_ms
        )
        state.last_started_version = version
        state.next_start = now + self.interval_s
        return [(e, None) for e in effects if isinstance(e, markers.SnapshotRequest)]

    def on_marker(self, topic: str, position: Position, marker: markers.Marker, *, now_ms: int) -> Outgoing:
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
                now_ms=now_ms,
                timeout_ms=self.timeout_ms,
            )
            state.builder = builder
            out: Outgoing = []
            for effect in effects:
                if isinstance(effect, markers.SnapshotRequest):
                    out.append((effect, None))
                elif isinstance(effect, markers.Snapshot):
                    state.cache = state.cache.add(effect).thinned(self.max_cached)
                    state.completed += 1
                    state.last_completed_version = state.last_started_version
                    out.append((effect, [self.region]))  # local only: found again after a restart
                elif isinstance(effect, snapshots.Aborted):
                    state.aborted += 1
            return out
        if isinstance(marker, markers.Snapshot) and marker.region == self.region:
            state.cache = state.cache.add(marker).thinned(self.max_cached)
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

    def status(self) -> dict[str, Any]:
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
